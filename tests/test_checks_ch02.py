"""Exercise 2's checks: right answers pass, known wrong ones fail with their misconception named."""

import pytest
import torch
import torch.nn.functional as F
from check_contract import contract_tests, library_agrees
from torch import nn

import lmbook.decoding
import lmbook.rnn
from lmbook.grading.checks import CheckFailed
from lmbook.tasks.ch02 import CHECKS, check
from lmbook.tasks.common import load_weights

BY_TASK = {c.task: c for c in CHECKS}
CPU = torch.device("cpu")


# Right answers, written differently from the references (per-row loops, einsum, explicit gate slices).
def rnn_cell(x, h, W_x, W_h, b):
    return torch.tanh(torch.einsum("hd,bd->bh", W_x, x) + torch.einsum("hk,bk->bh", W_h, h) + b)


def rnn_forward(x, lengths, h0, W_x, W_h, b):
    B, T, _ = x.shape
    outputs, last = torch.zeros(B, T, h0.shape[1], dtype=x.dtype), []
    for i in range(B):  # one sequence at a time, only over its real steps
        h = h0[i:i + 1]
        for t in range(int(lengths[i])):
            h = rnn_cell(x[i:i + 1, t], h, W_x, W_h, b)
            outputs[i, t] = h[0]
        last.append(h[0])
    return outputs, torch.stack(last)


def lstm_cell(x, h, c, W_ih, W_hh, b_ih, b_hh):
    H = h.shape[1]
    z = x @ W_ih.T + h @ W_hh.T + b_ih + b_hh
    i, f, g, o = (z[:, k * H:(k + 1) * H] for k in range(4))
    c_new = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c_new.tanh(), c_new


def gru_cell(x, h, W_ih, W_hh, b_ih, b_hh):
    H = h.shape[1]
    gi, gh = F.linear(x, W_ih, b_ih), F.linear(h, W_hh, b_hh)
    r = torch.sigmoid(gi[:, :H] + gh[:, :H])
    z = torch.sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
    n = torch.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
    return n + z * (h - n)


def clip_grad_norm(grads, max_norm):
    total = torch.cat([g.flatten() for g in grads]).norm()
    if total > max_norm:
        return tuple(g * (max_norm / (total + 1e-6)) for g in grads), total
    return tuple(grads), total


def classify(states, mask, W, b, how):
    rows = []
    for s, m in zip(states, mask, strict=True):
        n = int(m.sum())
        rows.append({"last": s[n - 1], "mean": s[:n].sum(0) / n, "max": s[:n].max(0).values}[how])
    return F.linear(torch.stack(rows), W, b)


def filter_probs(logits, temperature=1.0, top_k=None, top_p=None):
    probs = []
    for row in logits / temperature:
        sorted_z, order = row.sort(descending=True)
        keep = len(row)
        if top_k is not None:  # every token tied with the k-th largest logit is kept
            keep = int((sorted_z >= sorted_z[min(top_k, len(row)) - 1]).sum())
        p = torch.softmax(sorted_z[:keep], 0)
        if top_p is not None:  # ... and every token tied with the one that reaches top_p
            n = min(int((p.cumsum(0) < top_p).sum()) + 1, keep)
            keep = int((p >= p[n - 1]).sum())
        out = torch.zeros_like(row)
        out[order[:keep]] = torch.softmax(sorted_z[:keep], 0)
        probs.append(out)
    return torch.stack(probs)


def sample(logits, n, temperature=1.0, top_k=None, top_p=None):
    # inverse-CDF sampling, not torch.multinomial
    cdf = filter_probs(logits, temperature, top_k, top_p).cumsum(-1)
    u = torch.rand(logits.shape[0], n, dtype=cdf.dtype, device=cdf.device)
    return torch.searchsorted(cdf, u * cdf[:, -1:]).clamp(max=logits.shape[1] - 1)


RIGHT = {"rnn_cell": rnn_cell, "rnn_forward": rnn_forward, "lstm_cell": lstm_cell, "gru_cell": gru_cell,
         "clip_grad_norm": clip_grad_norm, "classify": classify, "filter_probs": filter_probs, "sample": sample}


(test_every_task_has_a_right_answer_here,
 test_a_correct_but_different_answer_passes_in_jupyter_and_in_the_grader,
 test_a_correct_answer_passes_on_a_gpu_too) = contract_tests(CHECKS, RIGHT)


@pytest.mark.parametrize(("task", "ours"), [
    ("rnn_cell", lambda x, h, W_x, W_h, b: _cell(lmbook.rnn.RNNCell, W_x, W_h, b)(x, h)),
    ("lstm_cell", lambda x, h, c, *w: _cell(lmbook.rnn.LSTMCell, *w)(x, (h, c))),
    ("gru_cell", lambda x, h, *w: _cell(lmbook.rnn.GRUCell, *w)(x, h)),
    ("classify", lambda states, mask, W, b, how: F.linear(lmbook.rnn.pool(states, mask, how), W, b)),
    ("filter_probs", lambda logits, temperature=1.0, top_k=None, top_p=None: torch.softmax(
        lmbook.decoding.filter_logits(logits, temperature, top_k, top_p), -1)),
])
def test_the_book_library_agrees_with_the_grader(task, ours):
    """The chapter's lmbook code and the exercise's references are two implementations: they must agree."""
    assert library_agrees(BY_TASK[task], ours) == len(BY_TASK[task].cases) + len(BY_TASK[task].hidden_cases)


def _cell(cls, W_ih, W_hh, b_ih, b_hh=None):
    b_hh = torch.zeros_like(b_ih) if b_hh is None else b_hh
    return load_weights(cls(W_ih.shape[1], W_hh.shape[1]),
                        {"weight_ih": W_ih, "weight_hh": W_hh, "bias_ih": b_ih, "bias_hh": b_hh})


@pytest.mark.parametrize(("task", "answer"), [
    ("lstm_cell", lambda x, h, c, W_ih, W_hh, b_ih, b_hh: nn.LSTMCell(x.shape[1], h.shape[1])(x, (h, c))),
    ("gru_cell", lambda x, h, W_ih, W_hh, b_ih, b_hh: torch.gru_cell(x, h, W_ih, W_hh, b_ih, b_hh)),
    ("clip_grad_norm", lambda grads, max_norm: nn.utils.clip_grad_norm_(grads, max_norm)),
    ("classify", lambda states, mask, W, b, how: F.linear(lmbook.rnn.pool(states, mask, how), W, b)),
    ("filter_probs", lambda logits, **kw: torch.softmax(lmbook.decoding.filter_logits(logits, **kw), -1)),
])
def test_a_ready_made_implementation_gets_no_credit(task, answer):
    with pytest.raises(CheckFailed, match="not graded"):
        check(task, answer)


def test_rnn_forward_built_on_torch_rnn_gets_no_credit():
    def rnn_forward(x, lengths, h0, W_x, W_h, b):
        return nn.RNN(x.shape[2], h0.shape[1], batch_first=True)(x, h0[None])
    with pytest.raises(CheckFailed, match="not graded"):
        check("rnn_forward", rnn_forward)


def test_sampling_is_seeded_so_a_run_is_reproducible(capsys):
    draws = []

    def recording(logits, n, **kw):
        out = sample(logits, n, **kw)
        draws.append(out)
        return out

    for _ in range(2):
        check("sample", recording, seed=3)
    assert torch.equal(draws[0], draws[2]) and torch.equal(draws[1], draws[3])


def test_a_slightly_wrong_temperature_is_detected_statistically():
    def too_hot(logits, n, temperature=1.0, top_k=None, top_p=None):
        return sample(logits, n, temperature * 1.15, top_k, top_p)
    # hidden: the feedback says the case failed its test, and no more (the draws could carry the inputs)
    with pytest.raises(CheckFailed, match="returned a result that fails this case's test"):
        check("sample", too_hot, hidden=True, seed=0)


def test_drawing_a_removed_token_is_named():
    def leaky(logits, n, temperature=1.0, top_k=None, top_p=None):
        out = sample(logits, n, temperature, top_k, top_p)
        out[:, 0] = (filter_probs(logits, temperature, top_k, top_p) == 0).float().argmax(-1)
        return out
    with pytest.raises(CheckFailed, match="top-k/top-p removes it"):
        check("sample", leaky)


def test_the_wrong_number_of_draws_is_a_shape_error():
    with pytest.raises(CheckFailed, match=r"expected \(2, 4000\)"):
        check("sample", lambda logits, n, **kw: sample(logits, n // 2, **kw))


def test_clipping_mistakes_name_the_part_that_differs():
    with pytest.raises(CheckFailed, match="total_norm"):
        check("clip_grad_norm", lambda grads, max_norm: (clip_grad_norm(grads, max_norm)[0], 0.0))
