"""lmbook.causal_lm (chapter 5's small causal self-attention LM) and lmbook.agreement."""

from __future__ import annotations

import math

import pytest
import torch

from lmbook.agreement import accuracy_by_distance, agrees, verb_sites
from lmbook.causal_lm import CausalLM, LMConfig, random_blocks, stream_log_probs, stream_loss, train_lm
from lmbook.corpus import load_corpus, toy_english


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


def test_longer_than_the_block_is_refused():
    with pytest.raises(ValueError, match="block_size"):
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
