"""Exercise 4's checks: right answers pass, known wrong ones fail with their misconception named."""

import pytest
import torch
import torch.nn.functional as F
from check_contract import contract_tests, library_agrees
from test_checks_ch02 import gru_cell  # exercise 2's right answer, used by the decoder step
from torch import nn

import lmbook.attention
import lmbook.seq2seq
from lmbook.grading.checks import CheckFailed, case_inputs
from lmbook.grading.verdict import case_problem
from lmbook.tasks.ch04 import CHECKS, check
from lmbook.tasks.common import load_weights

BY_TASK = {c.task: c for c in CHECKS}
CPU = torch.device("cpu")
NEG_INF = float("-inf")


# Right answers, written differently from the references (bmm, per-row loops, F.linear, one-hot products).
def dot_scores(s, H, mask):
    e = torch.bmm(H, s.unsqueeze(-1)).squeeze(-1)
    return torch.where(mask, e, torch.full_like(e, NEG_INF))


def multiplicative_scores(s, H, mask, W):
    rows = [H[b] @ (W.T @ s[b]) for b in range(H.shape[0])]  # h_jᵀ (Wᵀ s) = sᵀ W h_j
    return torch.stack(rows).masked_fill(mask.logical_not(), NEG_INF)


def additive_scores(s, H, mask, W1, W2, v):
    rows = [torch.tanh(F.linear(H[b], W1) + F.linear(s[b], W2)) @ v for b in range(H.shape[0])]
    return torch.where(mask, torch.stack(rows), NEG_INF)


def attend(scores, H, mask):
    alpha = torch.zeros_like(scores)
    context = H.new_zeros(H.shape[0], H.shape[2])
    for b in range(scores.shape[0]):  # one sequence at a time, keeping only its real positions
        real = mask[b]
        p = torch.exp(scores[b][real] - scores[b][real].max())
        p = p / p.sum()
        alpha[b, real] = p
        context[b] = p @ H[b][real]
    return context, alpha


def bahdanau_step(y_prev, s_prev, H, mask, E, W1, W2, v, W_ih, W_hh, b_ih, b_hh, W_o, b_o):
    context, alpha = attend(additive_scores(s_prev, H, mask, W1, W2, v), H, mask)
    emb = F.one_hot(y_prev, E.shape[0]).to(E.dtype) @ E
    s = gru_cell(torch.cat([emb, context], dim=1), s_prev, W_ih, W_hh, b_ih, b_hh)
    d_h = H.shape[2]
    logits = context @ W_o[:, :d_h].T + s @ W_o[:, d_h:].T + b_o  # W_o [c; s] as two blocks
    return logits, s, alpha


RIGHT = {"dot_scores": dot_scores, "multiplicative_scores": multiplicative_scores,
         "additive_scores": additive_scores, "attend": attend, "bahdanau_step": bahdanau_step}


(test_every_task_has_a_right_answer_here,
 test_a_correct_but_different_answer_passes_in_jupyter_and_in_the_grader,
 test_a_correct_answer_passes_on_a_gpu_too) = contract_tests(CHECKS, RIGHT)


def _lib_multiplicative(s, H, mask, W):
    score = load_weights(lmbook.attention.MultiplicativeScore(*W.shape), {"W": W})
    return score(s, H).masked_fill(~mask, NEG_INF)


def _lib_additive(s, H, mask, W1, W2, v):
    score = load_weights(lmbook.attention.AdditiveScore(s.shape[1], H.shape[2], v.shape[0]),
                         {"W1.weight": W1, "W2.weight": W2, "v.weight": v[None]})
    return score(s, H).masked_fill(~mask, NEG_INF)


def _lib_step(y_prev, s_prev, H, mask, E, W1, W2, v, W_ih, W_hh, b_ih, b_hh, W_o, b_o):
    if s_prev.shape[1] != H.shape[2]:
        return None  # the book's decoder has d_s = d_h
    dec = lmbook.seq2seq.AttentionDecoder(E.shape[0], E.shape[1], H.shape[2], score="additive", d_att=v.shape[0])
    load_weights(dec, {"E.weight": E, "score_fn.W1.weight": W1, "score_fn.W2.weight": W2,
                       "score_fn.v.weight": v[None], "cell.weight_ih": W_ih, "cell.weight_hh": W_hh,
                       "cell.bias_ih": b_ih, "cell.bias_hh": b_hh, "W_y.weight": W_o, "W_y.bias": b_o})
    return dec.step(y_prev, s_prev, H, mask)


@pytest.mark.parametrize(("task", "ours"), [
    ("dot_scores", lambda s, H, mask: lmbook.attention.dot_scores(s, H).masked_fill(~mask, NEG_INF)),
    ("multiplicative_scores", _lib_multiplicative),
    ("additive_scores", _lib_additive),
    ("attend", lmbook.attention.attend),
    ("bahdanau_step", _lib_step),
])
def test_the_book_library_agrees_with_the_grader(task, ours):
    """The chapter's lmbook code and the exercise's references are two implementations: they must agree."""
    assert library_agrees(BY_TASK[task], ours) >= 2


@pytest.mark.parametrize(("task", "answer"), [
    ("dot_scores", lambda s, H, mask: lmbook.attention.dot_scores(s, H).masked_fill(~mask, NEG_INF)),
    ("multiplicative_scores", lambda s, H, mask, W: F.bilinear(
        s[:, None].expand(-1, H.shape[1], -1), H, W[None]).squeeze(-1).masked_fill(~mask, NEG_INF)),
    ("additive_scores", _lib_additive),
    ("attend", lmbook.attention.attend),
    ("attend", lambda scores, H, mask: (F.scaled_dot_product_attention(
        scores[:, None], torch.eye(scores.shape[1]).expand(scores.shape[0], -1, -1), H, attn_mask=mask[:, None],
        scale=1.0)[:, 0], None)),
    ("bahdanau_step", _lib_step),
])
def test_a_ready_made_implementation_gets_no_credit(task, answer):
    with pytest.raises(CheckFailed, match="not graded"):
        check(task, answer)


def test_a_decoder_step_built_on_torch_gru_gets_no_credit():
    def step(y_prev, s_prev, H, mask, E, W1, W2, v, W_ih, W_hh, b_ih, b_hh, W_o, b_o):
        context, alpha = attend(additive_scores(s_prev, H, mask, W1, W2, v), H, mask)
        s = torch.gru_cell(torch.cat([E[y_prev], context], 1), s_prev, W_ih, W_hh, b_ih, b_hh)
        return F.linear(torch.cat([context, s], 1), W_o, b_o), s, alpha

    def step_module(*args):
        cell = nn.GRUCell(args[8].shape[1], args[1].shape[1])
        return step(*args), cell

    for answer in (step, step_module):
        with pytest.raises(CheckFailed, match="not graded"):
            check("bahdanau_step", answer)


def test_a_large_negative_number_instead_of_minus_inf_is_explained():
    def big(s, H, mask):
        return dot_scores(s, H, mask).nan_to_num(neginf=-1e30)
    with pytest.raises(CheckFailed, match=r"exactly -inf"):
        check("dot_scores", big)


def test_inf_at_a_real_position_is_reported():
    def broken(s, H, mask):
        e = dot_scores(s, H, mask)
        e[:, 0] = float("inf")
        return e
    with pytest.raises(CheckFailed, match="is a real position"):
        check("dot_scores", broken)


def test_a_step_mistake_names_the_first_stage_that_differs():
    def bad_gru(y_prev, s_prev, H, mask, E, W1, W2, v, W_ih, W_hh, b_ih, b_hh, W_o, b_o):
        logits, s, alpha = bahdanau_step(y_prev, s_prev, H, mask, E, W1, W2, v, W_ih, W_hh, b_ih, b_hh, W_o, b_o)
        return logits, s + 0.1, alpha
    with pytest.raises(CheckFailed, match="s_t: values differ"):
        check("bahdanau_step", bad_gru)


def test_the_right_answers_also_run_in_float64():
    c = BY_TASK["bahdanau_step"]
    args, kwargs = case_inputs(c.cases[0], 0, 0, CPU)
    args = tuple(a.double() if a.is_floating_point() else a for a in args)
    assert case_problem(c, c.cases[0], bahdanau_step(*args), args, kwargs) is None
