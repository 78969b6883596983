"""Exercise 5's checks: right answers pass, ready-made ones earn nothing, the library and the grader agree."""

import math

import pytest
import torch
import torch.nn.functional as F
from check_contract import contract_tests, library_agrees
from torch import nn

import lmbook.multihead
import lmbook.self_attention
from lmbook.grading.checks import CheckFailed, case_inputs
from lmbook.tasks.ch05 import CHECKS, check

BY_TASK = {c.task: c for c in CHECKS}
CPU = torch.device("cpu")
NEG_INF = float("-inf")


# Right answers, written differently from the references (einsum, per-sequence loops, an additive mask).
def qkv_projections(X, W_q, b_q, W_k, b_k, W_v, b_v):
    W = torch.cat([W_q, W_k, W_v])  # one packed (2 d_k + d_v, d) matrix, as nn.MultiheadAttention keeps it
    b = torch.cat([b_q, b_k, b_v])
    out = torch.einsum("bnd,od->bno", X, W) + b
    return tuple(out.split([W_q.shape[0], W_k.shape[0], W_v.shape[0]], dim=-1))


def masked_attention(Q, K, V, key_mask, causal):
    B, n, d_k = Q.shape
    outs, weights = [], []
    for b in range(B):  # one sequence at a time, with an additive mask of 0 and -inf
        bias = torch.zeros(n, n, dtype=Q.dtype, device=Q.device)
        bias[:, ~key_mask[b]] = NEG_INF
        if causal:
            bias = bias + torch.full((n, n), NEG_INF, dtype=Q.dtype, device=Q.device).triu(1)
        a = torch.softmax(torch.einsum("id,jd->ij", Q[b], K[b]) * d_k ** -0.5 + bias, dim=1)
        outs.append(a @ V[b])
        weights.append(a)
    return torch.stack(outs), torch.stack(weights)


RIGHT = {"qkv_projections": qkv_projections, "masked_attention": masked_attention}

(test_every_task_has_a_right_answer_here,
 test_a_correct_but_different_answer_passes_in_jupyter_and_in_the_grader,
 test_a_correct_answer_passes_on_a_gpu_too) = contract_tests(CHECKS, RIGHT)


def _lib_attention(Q, K, V, key_mask, causal):
    mask = key_mask[:, None, :]
    if causal:
        mask = mask & lmbook.self_attention.causal_mask(Q.shape[1], device=Q.device)
    return lmbook.self_attention.scaled_dot_product_attention(Q, K, V, mask)


def _lib_qkv(X, W_q, b_q, W_k, b_k, W_v, b_v):
    return tuple(F.linear(X, W, b) for W, b in ((W_q, b_q), (W_k, b_k), (W_v, b_v)))


@pytest.mark.parametrize(("task", "ours"), [("masked_attention", _lib_attention), ("qkv_projections", _lib_qkv)])
def test_the_book_library_agrees_with_the_grader(task, ours):
    """The chapter's lmbook code and the exercise's references are two implementations: they must agree."""
    assert library_agrees(BY_TASK[task], ours) == len(BY_TASK[task].cases) + len(BY_TASK[task].hidden_cases)


def _torch_sdpa(Q, K, V, key_mask, causal):
    n = Q.shape[1]
    mask = key_mask[:, None, :] & (torch.ones(n, n, dtype=torch.bool).tril() if causal else True)
    eye = torch.eye(n, dtype=Q.dtype).expand(Q.shape[0], n, n)
    return (F.scaled_dot_product_attention(Q, K, V, attn_mask=mask),
            F.scaled_dot_product_attention(Q, K, eye, attn_mask=mask))


def _torch_mha(Q, K, V, key_mask, causal):
    mha = nn.MultiheadAttention(Q.shape[-1], 1, bias=False, batch_first=True)
    return mha(Q, K, V, key_padding_mask=~key_mask)


def _lib_sdpa_direct(Q, K, V, key_mask, causal):
    return lmbook.self_attention.scaled_dot_product_attention(Q, K, V, key_mask[:, None, :])


def _lib_layer(X, W_q, b_q, W_k, b_k, W_v, b_v):
    layer = lmbook.self_attention.SelfAttention(X.shape[-1], W_q.shape[0], W_v.shape[0])
    return layer.W_q(X) + b_q, layer.W_k(X) + b_k, layer.W_v(X) + b_v


def _manual_linear(X, W_q, b_q, W_k, b_k, W_v, b_v):
    return tuple(F.linear(X, W, b) for W, b in ((W_q, b_q), (W_k, b_k), (W_v, b_v)))


def _mh_split(X, W_q, b_q, W_k, b_k, W_v, b_v):
    lmbook.multihead.split_heads(X, 1)
    return X @ W_q.T + b_q, X @ W_k.T + b_k, X @ W_v.T + b_v


@pytest.mark.parametrize(("task", "answer"), [
    ("masked_attention", _torch_sdpa),
    ("masked_attention", _torch_mha),
    ("masked_attention", _lib_sdpa_direct),
    ("masked_attention", _lib_attention),
    ("qkv_projections", _lib_layer),
    ("qkv_projections", _manual_linear),
    ("qkv_projections", _mh_split),
])
def test_a_ready_made_implementation_gets_no_credit(task, answer):
    with pytest.raises(CheckFailed, match="not graded"):
        check(task, answer)


def test_a_wrong_stage_is_named_weights_first():
    def bad_values(Q, K, V, key_mask, causal):
        Y, A = masked_attention(Q, K, V, key_mask, causal)
        return Y + 0.1, A
    with pytest.raises(CheckFailed, match="output: "):
        check("masked_attention", bad_values)

    def bad_weights(Q, K, V, key_mask, causal):
        Y, A = masked_attention(Q, K, V, key_mask, causal)
        return Y + 0.1, A * 1.01
    with pytest.raises(CheckFailed, match="weights: "):
        check("masked_attention", bad_weights)


def test_an_answer_that_changes_its_input_in_place_is_told_so():
    def scales_q_in_place(Q, K, V, key_mask, causal):
        Q /= math.sqrt(Q.shape[-1])
        return masked_attention(Q * math.sqrt(Q.shape[-1]), K, V, key_mask, causal)
    with pytest.raises(CheckFailed, match="in place"):
        check("masked_attention", scales_q_in_place)


def test_the_mask_conventions_of_the_statement():
    """key_mask True = real token; the causal part allows j <= i; every row has at least key 0."""
    c = BY_TASK["masked_attention"]
    for i, case in enumerate([*c.cases, *c.hidden_cases]):
        (Q, K, V, key_mask, causal), _ = case_inputs(case, 0, i, CPU)
        assert key_mask[:, 0].all()
        assert (key_mask[:, :-1] | ~key_mask[:, 1:]).all(), "padding comes at the end"
        Y, A = c.reference(Q, K, V, key_mask, causal)
        assert torch.isfinite(Y).all() and torch.isfinite(A).all()
        assert (A[~key_mask[:, None, :].expand_as(A)] == 0).all()
        if causal:
            assert (A.triu(1) == 0).all()
