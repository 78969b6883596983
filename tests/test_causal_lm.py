"""lmbook.causal_lm (chapter 5's small causal self-attention LM, chapter 7's position schemes) and lmbook.agreement."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lmbook.agreement import accuracy_by_distance, agrees, verb_sites
from lmbook.causal_lm import (
    POSITIONS,
    CausalLM,
    LMConfig,
    random_blocks,
    stream_log_probs,
    stream_loss,
    train_lm,
    window_log_probs,
)
from lmbook.corpus import load_corpus, sentence_windows, toy_english
from lmbook.multihead import MultiHeadAttention, merge_heads, split_heads
from lmbook.positions import alibi_bias, rope
from lmbook.self_attention import scaled_dot_product_attention


def _model(V=11, block=8, n_head=1, seed=0):
    torch.manual_seed(seed)
    return CausalLM(LMConfig(V, block_size=block, d_model=16, n_layer=2, d_ff=32, n_head=n_head))


def test_shapes_and_weights():
    m = _model()
    logits, weights = m(torch.randint(0, 11, (3, 6)), return_weights=True)
    assert logits.shape == (3, 6, 11)
    assert len(weights) == 2 and weights[0].shape == (3, 6, 6)
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(3, 6))
    assert torch.all(weights[1].triu(1) == 0)  # no weight on the future


@pytest.mark.parametrize("n_head", [1, 2])
def test_changing_a_future_token_leaves_earlier_predictions_unchanged(n_head):
    m = _model(n_head=n_head).eval()
    ids = torch.randint(0, 11, (2, 8))
    changed = ids.clone()
    changed[:, 5] = (changed[:, 5] + 1) % 11
    a, b = m(ids), m(changed)
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_learned_positions_refuse_a_sequence_longer_than_their_table():
    with pytest.raises(ValueError, match="longer than the 4 learned positions"):
        _model(block=4)(torch.zeros(1, 5, dtype=torch.long))


def test_stream_log_probs_predicts_every_word_once_with_enough_context():
    m = _model(block=8)
    ids = torch.randint(0, 11, (29,))
    logp = stream_log_probs(m, ids, context=4)
    assert logp.shape == (28, 11)
    # the prediction of word 12 comes from the window starting at 4 (12 - 4 = 8 words of history... at least 4)
    window = m(ids[4:12][None])[0].log_softmax(-1)
    torch.testing.assert_close(logp[4 + 4 : 4 + 8], window[4:8])
    # a text shorter than one block is read in one window
    short = ids[:6]
    torch.testing.assert_close(stream_log_probs(m, short), m(short[None, :-1])[0].log_softmax(-1))


def test_random_blocks_are_shifted_by_one():
    ids = torch.arange(100)
    x, y = random_blocks(ids, 4, 10, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 10)
    assert torch.equal(y, x + 1)


def test_training_learns_a_deterministic_cycle():
    ids = torch.arange(2000) % 7  # every next word is determined by the previous one
    m = _model(V=7, block=8)
    log = train_lm(m, ids, ids[:200], steps=150, batch_size=16, lr=1e-2, eval_every=50, warmup=10)
    assert log.loss[-1] < 0.2 * log.loss[0]
    assert math.exp(stream_loss(m, ids[:200])) < 1.2


def test_agreement_sites_on_a_hand_written_text():
    vocab = toy_english().vocab
    text = ". the dog near the red cats sleeps . some cats run . the bird sees a cat ."
    ids = torch.tensor(vocab.encode(text))
    sites = verb_sites(ids, vocab)
    words = text.split()
    assert [words[p] for p in sites.pos.tolist()] == ["sleeps", "run", "sees"]
    assert sites.dist.tolist() == [5, 1, 1]
    assert [vocab.itos[w] for w in sites.wrong.tolist()] == ["sleep", "runs", "see"]
    # a "model" that always prefers the singular agrees with the singular verbs only
    logp = torch.zeros(3, len(vocab))
    logp[:, [vocab.stoi[v] for v in ("sleeps", "runs", "sees")]] = 1.0
    assert agrees(logp, sites).tolist() == [True, False, True]
    acc, counts = accuracy_by_distance(agrees(logp, sites), sites, [(1, 1), (5, 5)])
    assert acc == [0.5, 1.0] and counts == [2, 1]


def test_every_verb_of_the_corpus_has_a_subject_at_a_possible_distance():
    corpus = load_corpus(n_train=100, n_val=100, n_test=3000)
    sites = verb_sites(corpus.test, corpus.vocab)
    assert len(sites.pos) > 200
    assert not ((sites.dist == 2) | (sites.dist == 3)).any()


# ----------------------------------------------------------------------------- several heads (chapter 6)


def test_one_head_builds_chapter_5s_parameters_in_chapter_5s_order():
    names = [name for name, _ in _model().named_parameters()]
    block = ["ln_1.weight", "ln_1.bias", "attn.W_q.weight", "attn.W_k.weight", "attn.W_v.weight", "proj.weight",
             "proj.bias", "ln_2.weight", "ln_2.bias", "ffn.0.weight", "ffn.0.bias", "ffn.2.weight", "ffn.2.bias"]
    assert names == ["wte.weight", "wpe.weight", *[f"blocks.{i}.{p}" for i in range(2) for p in block],
                     "ln_f.weight", "ln_f.bias", "head.weight"]
    assert LMConfig(11).n_head == 1


def test_one_head_and_several_heads_have_the_same_number_of_parameters():
    counts = {h: sum(p.numel() for p in _model(n_head=h).parameters()) for h in (1, 2, 4, 8)}
    assert len(set(counts.values())) == 1, counts
    names = [name for name, _ in _model(n_head=4).blocks[0].named_parameters()]
    assert "attn.in_proj.weight" in names and "attn.in_proj.bias" not in names and "attn.out_proj.bias" in names


def test_multihead_weights_have_one_map_per_head():
    m = _model(n_head=4)
    logits, weights = m(torch.randint(0, 11, (3, 6)), return_weights=True)
    assert logits.shape == (3, 6, 11)
    assert len(weights) == 2 and all(w.shape == (3, 4, 6, 6) for w in weights)
    torch.testing.assert_close(weights[1].sum(-1), torch.ones(3, 4, 6))
    assert torch.all(weights[0].triu(1) == 0)  # no head puts weight on the future
    assert not torch.allclose(weights[0][:, 0], weights[0][:, 1])  # the heads differ


def test_heads_must_divide_the_width():
    with pytest.raises(ValueError, match="divisible"):
        _model(n_head=3)


def test_multihead_model_trains():
    ids = torch.arange(2000) % 7
    m = _model(V=7, n_head=4)
    train_lm(m, ids, steps=150, batch_size=16, lr=1e-2, warmup=10)
    assert math.exp(stream_loss(m, ids[:200])) < 1.2


# ----------------------------------------------------------------------------- chapter 7: position schemes

def _positional(positions, block=8, n_layer=2, seed=0):
    torch.manual_seed(seed)
    return CausalLM(LMConfig(11, block_size=block, d_model=16, n_layer=n_layer, d_ff=32, n_head=2,
                             positions=positions)).eval()


@pytest.mark.parametrize("positions", [p for p in POSITIONS if p != "learned"])
def test_schemes_without_a_table_read_sequences_longer_than_the_training_length(positions):
    m = _positional(positions, block=4)
    logits = m(torch.randint(0, 11, (2, 13)))
    assert logits.shape == (2, 13, 11) and torch.isfinite(logits).all()


@pytest.mark.parametrize("positions", POSITIONS)
def test_every_scheme_keeps_the_model_causal(positions):
    m = _positional(positions)
    ids = torch.randint(0, 11, (2, 8))
    changed = ids.clone()
    changed[:, 6] = (changed[:, 6] + 1) % 11
    torch.testing.assert_close(m(ids)[:, :6], m(changed)[:, :6])


@pytest.mark.parametrize("positions, sees_order", [("none", False), ("learned", True), ("sinusoidal", True),
                                                   ("relative", True), ("alibi", True), ("rope", True)])
def test_one_layer_without_positions_cannot_tell_the_order_of_the_words_before(positions, sees_order):
    m = _positional(positions, n_layer=1)
    with torch.no_grad():  # so that the relative table is not all zeros (its initial value)
        for p in m.parameters():
            if p.dim() == 2 and p.shape[1] == 2:
                p.normal_()
    ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
    shuffled = torch.tensor([[7, 5, 3, 6, 4, 8]])  # the same last word, the words before it in another order
    last, last_shuffled = m(ids)[0, -1], m(shuffled)[0, -1]
    expected = "a changed" if sees_order else "the same"
    assert torch.allclose(last, last_shuffled, atol=1e-5) != sees_order, \
        f"{positions}: {expected} last prediction expected when the words before the last are shuffled"


def test_a_float_mask_is_added_to_the_scores_as_torchs_attention_does():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g) for _ in range(3))
    bias = torch.randn(3, 5, 5, generator=g).masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
    y, _ = scaled_dot_product_attention(q, k, v, bias)
    torch.testing.assert_close(y, F.scaled_dot_product_attention(q, k, v, attn_mask=bias))


def test_rope_attention_equals_rotating_q_and_k_then_torchs_attention():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, rope=True).eval()
    x = torch.randn(2, 6, 8)
    y, _ = mha(x, causal=True)
    q, k, v = (split_heads(t, 2) for t in mha.in_proj(x).chunk(3, dim=-1))
    ref = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
    torch.testing.assert_close(y, mha.out_proj(merge_heads(ref)))


def test_alibi_model_scores_are_the_alibi_bias_plus_the_dot_products():
    m = _positional("alibi", n_layer=1)
    ids = torch.randint(0, 11, (1, 5))
    _, (weights,) = m(ids, return_weights=True)
    block = m.blocks[0]
    x = block.ln_1(m.wte(ids))
    q, k, _ = (split_heads(t, 2) for t in block.attn.in_proj(x).chunk(3, dim=-1))
    scores = q @ k.transpose(-2, -1) / math.sqrt(8) + alibi_bias(2, 5).float()
    expected = torch.softmax(scores.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf")), -1)
    torch.testing.assert_close(weights, expected)


def test_rope_needs_several_heads_and_unknown_schemes_are_refused():
    with pytest.raises(ValueError, match="n_head > 1"):
        LMConfig(11, positions="rope", n_head=1)
    with pytest.raises(ValueError, match="positions must be one of"):
        LMConfig(11, positions="absolute")


def test_training_on_whole_rows_takes_each_row_as_one_sequence():
    rows = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]).repeat(20, 1)
    m = _positional("learned", block=4)
    log = train_lm(m.train(), rows, steps=150, batch_size=8, lr=1e-2, seed=0, warmup=10)
    assert log.loss[-1] < 0.7, f"final loss {log.loss[-1]:.2f}: the second word is ambiguous, the rest fixed"


def test_window_log_probs_reads_each_window_whole():
    m = _positional("alibi", block=4)
    windows = torch.randint(0, 11, (3, 10))
    logp = window_log_probs(m, windows, batch_size=2)
    assert logp.shape == (3, 9)
    expected = torch.log_softmax(m(windows[:, :-1]), -1).gather(2, windows[:, 1:, None])[..., 0]
    torch.testing.assert_close(logp, expected)


def test_sentence_windows_start_at_a_full_stop_and_give_the_floor_at_every_position():
    corpus = load_corpus(n_train=2000, n_val=100, n_test=3000)
    windows = sentence_windows(corpus.test, 20, count=30, seed=1)
    assert windows.shape == (30, 20) and (windows[:, 0] == 0).all()
    w = windows[0]
    start = next(s for s in range(len(corpus.test) - 20) if torch.equal(corpus.test[s:s + 20], w))
    # after a ".", the true model's conditionals do not depend on the text before it
    whole = corpus.hmm.token_log_probs(corpus.test[: start + 20].numpy())[start + 1:]
    alone = corpus.hmm.token_log_probs(w.numpy())[1:]
    assert np.allclose(whole, alone)
    with pytest.raises(ValueError, match="sentence starts"):
        sentence_windows(corpus.test, 20, count=10_000)
