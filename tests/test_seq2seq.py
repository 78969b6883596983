"""lmbook.seq2seq and its training loop (lmbook.seq2seq_train) checked against independent computations:
torch's own loss, unrolled steps, lmbook.decoding."""

from __future__ import annotations

import itertools
import time

import pytest
import torch
import torch.nn.functional as F

from lmbook.attention import attend
from lmbook.decoding import beam_search, greedy_decode
from lmbook.metrics import exact_match, scores_by_length
from lmbook.seq2seq import (
    BOS,
    EOS,
    PAD,
    SCORES,
    AttentionDecoder,
    Seq2Seq,
    masked_cross_entropy,
    translate,
)
from lmbook.seq2seq_train import encode_pairs, fit, length_bucketed_batches
from lmbook.translation import sample_pairs, to_batch, vocabularies

SRC_V, TGT_V = 11, 9
CONFIGS = [dict(attention=None), dict(attention=None, feed_context=True, bidirectional=True)] + [
    dict(attention=s, bidirectional=True) for s in SCORES]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The models are tiny: one thread is faster, and steady when the CPU is shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _model(seed=0, **kw) -> Seq2Seq:
    torch.manual_seed(seed)
    return Seq2Seq(SRC_V, TGT_V, d_emb=6, d_hid=8, **kw).eval()


def _batch(seed=0, lengths=(5, 3, 1, 4)):
    """A padded source batch: random real tokens (ids >= 3), <eos> last, <pad> after."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    x = torch.full((len(lengths), int(lengths.max())), PAD)
    for i, n in enumerate(lengths.tolist()):
        x[i, : n - 1] = torch.randint(3, SRC_V, (n - 1,), generator=g)
        x[i, n - 1] = EOS
    return x, lengths


def _targets(seed=0, lengths=(4, 6, 2, 3)):
    g = torch.Generator().manual_seed(seed + 100)
    y = torch.full((len(lengths), max(lengths) + 1), PAD)
    for i, n in enumerate(lengths):
        y[i, 0] = BOS
        y[i, 1:n] = torch.randint(3, TGT_V, (n - 1,), generator=g)
        y[i, n] = EOS
    return y


def test_masked_cross_entropy_matches_torch_ignore_index():
    g = torch.Generator().manual_seed(0)
    y = _targets()[:, 1:]  # (4, 6) with padding
    logits = torch.randn(*y.shape, TGT_V, generator=g)
    expected = F.cross_entropy(logits.reshape(-1, TGT_V), y.reshape(-1), ignore_index=PAD)
    assert torch.allclose(masked_cross_entropy(logits, y), expected, atol=1e-6)


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_model_loss_is_teacher_forced_cross_entropy(cfg):
    model = _model(**cfg)
    x, lengths = _batch()
    y = _targets()
    logits = model(x, lengths, y[:, :-1])
    expected = F.cross_entropy(logits.reshape(-1, TGT_V), y[:, 1:].reshape(-1), ignore_index=PAD)
    assert torch.allclose(model.loss(x, lengths, y), expected, atol=1e-6)


@pytest.mark.parametrize("score", SCORES)
def test_attention_step_weights_sum_to_one_and_skip_padding(score):
    model = _model(attention=score, bidirectional=True)
    x, lengths = _batch()
    enc = model.encode(x, lengths)
    s = torch.randn(len(x), 8)
    logits, s_new, alpha = model.decoder.step(torch.tensor([3, 4, 5, 6]), s, enc.H, enc.mask)
    assert logits.shape == (4, TGT_V) and s_new.shape == (4, 8) and alpha.shape == x.shape
    assert torch.allclose(alpha.sum(-1), torch.ones(4), atol=1e-6)
    assert (alpha[~enc.mask] == 0).all()
    assert (alpha[enc.mask] > 0).all()


@pytest.mark.parametrize("score", SCORES)
def test_attention_step_is_the_bahdanau_equations(score):
    """Recompute one step from the equations with lmbook.attention's score modules (no precomputed keys)."""
    model = _model(attention=score, bidirectional=True)
    dec: AttentionDecoder = model.decoder
    x, lengths = _batch(1)
    enc = model.encode(x, lengths)
    s_prev, y_prev = torch.randn(4, 8), torch.tensor([3, 7, 1, 2])
    e = dec.score_fn(s_prev, enc.H)  # e_tj = score(s_{t-1}, h_j), straight from lmbook.attention
    c, alpha = attend(e, enc.H, enc.mask)
    s = dec.cell(torch.cat([dec.E(y_prev), c], -1), s_prev)
    logits = torch.cat([c, s], -1) @ dec.W_y.weight.T + dec.W_y.bias
    got = dec.step(y_prev, s_prev, enc.H, enc.mask)
    for a, b in zip(got, (logits, s, alpha), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    # the precomputed keys of the teacher-forcing loop give the same scores
    assert torch.allclose(dec.scores(s_prev, enc.H, dec.keys(enc.H)), e, atol=1e-6)


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_forward_equals_unrolled_steps(cfg):
    model = _model(**cfg)
    x, lengths = _batch()
    y_in = _targets()[:, :-1]
    enc = model.encode(x, lengths)
    s = model.decoder.initial_state(enc)
    steps = []
    for t in range(y_in.shape[1]):
        logits, s, _ = model.step(y_in[:, t], s, enc)
        steps.append(logits)
    assert torch.allclose(model(x, lengths, y_in), torch.stack(steps, 1), atol=1e-5)


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_outputs_do_not_depend_on_padding(cfg):
    model = _model(**cfg)
    x, lengths = _batch()
    y_in = _targets()[:, :-1]
    garbage = x.clone()
    garbage[x == PAD] = 5  # fill the padding with a real word
    wider = torch.cat([x, torch.full((len(x), 3), PAD)], 1)  # and pad further
    ref = model(x, lengths, y_in)
    assert torch.allclose(model(garbage, lengths, y_in), ref, atol=1e-6)
    assert torch.allclose(model(wider, lengths, y_in), ref, atol=1e-6)
    # each sentence alone, with no padding at all, gives the same logits
    for i, n in enumerate(lengths.tolist()):
        alone = model(x[i : i + 1, :n], lengths[i : i + 1], y_in[i : i + 1])
        assert torch.allclose(alone, ref[i : i + 1], atol=1e-5)


def test_bidirectional_context_is_last_forward_and_first_backward_state():
    model = _model(attention="additive", bidirectional=True)
    x, lengths = _batch()
    enc = model.encode(x, lengths)
    for i, n in enumerate(lengths.tolist()):
        H_alone, _ = model.encoder.rnn(model.encoder.E(x[i : i + 1, :n]))
        half = H_alone.shape[-1] // 2
        assert torch.allclose(enc.H[i, :n], H_alone[0], atol=1e-6)
        assert torch.allclose(enc.c[i], torch.cat([H_alone[0, -1, :half], H_alone[0, 0, half:]]), atol=1e-6)
        assert (enc.H[i, n:] == 0).all()


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_greedy_batched_equals_step_fn_and_argmax_unrolling(cfg):
    model = _model(seed=3, **cfg)
    x, lengths = _batch(2)
    batched = model.greedy(x, lengths, max_len=7)
    for i, n in enumerate(lengths.tolist()):
        src = x[i, :n].tolist()
        assert batched[i] == greedy_decode(model.step_fn(src), BOS, EOS, 7)
        # by hand: feed the argmax back in
        enc = model.encode(x[i : i + 1, :n], lengths[i : i + 1])
        s, y, out = model.decoder.initial_state(enc), torch.tensor([BOS]), []
        with torch.no_grad():
            while len(out) < 7 and (not out or out[-1] != EOS):
                logits, s, _ = model.step(y, s, enc)
                y = logits.argmax(-1)
                out.append(int(y))
        assert batched[i] == out


@pytest.mark.parametrize("cfg", CONFIGS[::2], ids=str)
def test_step_fn_and_sequence_logprob_agree_with_teacher_forcing(cfg):
    model = _model(seed=4, **cfg)
    x, lengths = _batch(3)
    y = _targets(3)
    total = model.sequence_logprob(x, lengths, y)
    for i, n in enumerate(lengths.tolist()):
        fn = model.step_fn(x[i, :n].tolist())
        tokens = y[i][y[i] != PAD].tolist()  # bos ... eos
        by_steps = sum(float(fn(tokens[:t])[tokens[t]]) for t in range(1, len(tokens)))
        assert by_steps == pytest.approx(float(total[i]), abs=1e-4)
        # asking again in another order returns the cached values unchanged
        assert torch.equal(fn(tokens[:2]), fn(tokens[:2]))


def test_beam_search_finds_the_best_sequence_on_a_tiny_model():
    """With a beam as wide as all candidates, beam search must return the brute-force best (raw sum)."""
    model = _model(seed=5, attention="dot", bidirectional=True)
    src = [3, 4, 5, EOS]
    fn = model.step_fn(src)
    V, L = TGT_V, 3
    best, best_score = None, float("-inf")
    for n in range(1, L + 1):
        for seq in itertools.product(range(V), repeat=n):
            if EOS in seq[:-1] or (n < L and seq[-1] != EOS):
                continue  # eos only at the end; shorter hypotheses must end in eos
            score = sum(float(fn([BOS, *seq[:t]])[seq[t]]) for t in range(n))
            if score > best_score:
                best, best_score = list(seq), score
    hyps = beam_search(fn, BOS, EOS, beam_size=V**L, max_len=L, length_penalty=0.0)
    assert hyps[0][0] == best
    assert hyps[0][1] == pytest.approx(best_score, abs=1e-5)


def test_length_bucketed_batches_cover_every_example_once_per_epoch():
    lengths = torch.randint(1, 30, (203,))
    it = length_bucketed_batches(lengths, batch_size=16, generator=torch.Generator().manual_seed(0), pool=4)
    seen = []
    while len(seen) < 203:
        seen += next(it).tolist()
    assert sorted(seen) == list(range(203))


def test_a_tiny_attention_model_learns_a_handful_of_pairs():
    src_vocab, tgt_vocab = vocabularies()
    pairs = sample_pairs(8, seed=1, max_len=7)
    data = encode_pairs(pairs, src_vocab, tgt_vocab)
    torch.manual_seed(0)
    model = Seq2Seq(len(src_vocab), len(tgt_vocab), d_emb=16, d_hid=32, attention="additive", bidirectional=True)
    log = fit(model, data, data, steps=150, batch_size=8, lr=1e-2, eval_every=50)
    assert log.loss[-1] < 0.05 and log.val_steps == [50, 100, 150] and len(log.val_loss) == 3
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    assert exact_match(translate(model, sources, src_vocab, tgt_vocab), refs) == 1.0
    assert exact_match(translate(model, sources[:3], src_vocab, tgt_vocab, beam_size=3), refs[:3]) == 1.0


def test_fit_counts_the_cpu_time_of_training_steps_only():
    # chapter 8 compares step costs in CPU time, which a busy machine cannot inflate by making it wait; the
    # evaluations between steps must stay out of it, as they stay out of the wall-clock seconds
    src_vocab, tgt_vocab = vocabularies()
    data = encode_pairs(sample_pairs(8, seed=1, max_len=7), src_vocab, tgt_vocab)

    def busy_metric(model) -> float:  # 0.3 s of CPU per evaluation, three evaluations
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
        return 0.0

    torch.manual_seed(0)
    model = Seq2Seq(len(src_vocab), len(tgt_vocab), d_emb=8, d_hid=16)
    log = fit(model, data, data, steps=30, batch_size=8, eval_every=10, metric=busy_metric)
    assert 0 < log.cpu_seconds < 0.9, f"{log.cpu_seconds:.2f} s of CPU: the evaluations' 0.9 s are counted in it"


def test_translate_and_scores_by_length():
    src_vocab, tgt_vocab = vocabularies()
    model = Seq2Seq(len(src_vocab), len(tgt_vocab), d_emb=4, d_hid=8)
    pairs = sample_pairs(3, seed=0, max_len=8)
    out = translate(model, [s for s, _ in pairs], src_vocab, tgt_vocab, max_len=5)
    assert all(len(o) <= 5 and "<eos>" not in o for o in out)
    x, _ = to_batch([s for s, _ in pairs], src_vocab)
    assert x.shape[0] == 3
    hyps = [["a", "b"], ["a"], ["c", "d", "e", "f"]]
    refs = [["a", "b"], ["b"], ["c", "d", "e", "f"]]
    r = scores_by_length(hyps, refs, [2, 3, 9], [(1, 3), (4, 10)])
    assert r["exact"] == [0.5, 1.0] and r["n"] == [2, 1] and r["bleu"][1] == pytest.approx(100.0)
