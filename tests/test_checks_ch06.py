"""Exercise 6's checks: right answers pass, ready-made ones earn nothing, the library and the grader agree."""

import math

import pytest
import torch
import torch.nn.functional as F
from check_contract import contract_tests, library_agrees
from torch import nn

import lmbook.multihead
from lmbook.grading.checks import CheckFailed, case_inputs
from lmbook.grading.verdict import case_problem
from lmbook.tasks.ch06 import CHECKS, check

BY_TASK = {c.task: c for c in CHECKS}
CPU = torch.device("cpu")
NEG_INF = float("-inf")


# Right answers, written differently from the references (index arithmetic, per-head loops, -inf biases).
def split_heads(x, n_head):
    B, n, d = x.shape
    d_head = d // n_head
    index = torch.arange(d, device=x.device).view(n_head, d_head)  # head i's features, as a (h, d_head) table
    return x[:, :, index].permute(0, 2, 1, 3)


def merge_heads(x):
    B, h, n, d_head = x.shape
    out = x.new_empty(B, n, h * d_head)
    for i in range(h):
        out[:, :, i * d_head:(i + 1) * d_head] = x[:, i]
    return out


def multihead_attention(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                        key_padding_mask, causal):
    B, n_q, d = query.shape
    n_k, d_head = key.shape[1], d // n_head
    W_q, W_k, W_v = in_proj_weight.split(d)
    b_q, b_k, b_v = in_proj_bias.split(d)
    q = split_heads(query @ W_q.T + b_q, n_head)
    k = split_heads(key @ W_k.T + b_k, n_head)
    v = split_heads(value @ W_v.T + b_v, n_head)
    bias = torch.zeros(B, 1, n_q, n_k, dtype=q.dtype, device=q.device)
    bias = bias.masked_fill(key_padding_mask[:, None, None, :], NEG_INF)
    if causal:
        bias = bias.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).triu(1), NEG_INF)
    A = torch.softmax(torch.matmul(q, k.transpose(2, 3)) / math.sqrt(d_head) + bias, dim=3)
    return merge_heads(A @ v) @ out_proj_weight.T + out_proj_bias, A


RIGHT = {"split_heads": split_heads, "merge_heads": merge_heads, "multihead_attention": multihead_attention}

(test_every_task_has_a_right_answer_here,
 test_a_correct_but_different_answer_passes_in_jupyter_and_in_the_grader,
 test_a_correct_answer_passes_on_a_gpu_too) = contract_tests(CHECKS, RIGHT)


def _lib_mha(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
             key_padding_mask, causal):
    """The chapter's module, holding the case's weights (its key_mask is True at real tokens)."""
    layer = lmbook.multihead.MultiHeadAttention(query.shape[-1], n_head).to(query.dtype)
    with torch.no_grad():
        layer.in_proj.weight.copy_(in_proj_weight)
        layer.in_proj.bias.copy_(in_proj_bias)
        layer.out_proj.weight.copy_(out_proj_weight)
        layer.out_proj.bias.copy_(out_proj_bias)
    # the module projects one context into both keys and values: it answers only where key = value
    if torch.equal(key, value):
        return layer(query, key, key_mask=~key_padding_mask, causal=causal)
    return None


def test_the_book_library_agrees_with_the_grader():
    """The chapter's lmbook code and the exercise's references are two implementations: they must agree."""
    for task, ours in (("split_heads", lmbook.multihead.split_heads), ("merge_heads", lmbook.multihead.merge_heads),
                       ("multihead_attention", _lib_mha)):
        c = BY_TASK[task]
        assert library_agrees(c, ours) >= len(c.cases) + len(c.hidden_cases) - 1, task


def test_the_reference_is_torch_multihead_attention_module():
    """Equal to nn.MultiheadAttention(batch_first=True) loaded with the case's weights, per-head weights too."""
    c = BY_TASK["multihead_attention"]
    for i, case in enumerate([*c.cases, *c.hidden_cases]):
        (q, k, v, w_in, b_in, w_out, b_out, n_head, pad, causal), _ = case_inputs(case, 0, i, CPU)
        mha = nn.MultiheadAttention(q.shape[-1], n_head, batch_first=True).to(q.dtype).eval()
        with torch.no_grad():
            mha.in_proj_weight.copy_(w_in)
            mha.in_proj_bias.copy_(b_in)
            mha.out_proj.weight.copy_(w_out)
            mha.out_proj.bias.copy_(b_out)
            future = torch.ones(q.shape[1], k.shape[1], dtype=torch.bool).triu(1) if causal else None
            got = mha(q, k, v, key_padding_mask=pad, attn_mask=future, need_weights=True,
                      average_attn_weights=False)
        assert case_problem(c, case, got, (q, k, v, w_in, b_in, w_out, b_out, n_head, pad, causal), {}) is None


def _torch_module(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                  key_padding_mask, causal):
    mha = nn.MultiheadAttention(query.shape[-1], n_head, batch_first=True)
    return mha(query, key, value, key_padding_mask=key_padding_mask, average_attn_weights=False)


def _torch_functional(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                      key_padding_mask, causal):
    out, w = F.multi_head_attention_forward(query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1),
                                            query.shape[-1], n_head, in_proj_weight, in_proj_bias, None, None,
                                            False, 0.0, out_proj_weight, out_proj_bias, training=False,
                                            key_padding_mask=key_padding_mask, average_attn_weights=False)
    return out.transpose(0, 1), w


def _sdpa_heads(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                key_padding_mask, causal):
    q, k, v = (split_heads(x @ w.T + b, n_head) for x, w, b in
               zip((query, key, value), in_proj_weight.chunk(3), in_proj_bias.chunk(3), strict=True))
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=~key_padding_mask[:, None, None, :], is_causal=causal)
    return merge_heads(y) @ out_proj_weight.T + out_proj_bias, None


def _lib_split(x, n_head):
    return lmbook.multihead.split_heads(x, n_head)


def _lib_merge_held(x, merge=lmbook.multihead.merge_heads):
    return merge(x)


@pytest.mark.parametrize(("task", "answer"), [
    ("multihead_attention", _torch_module),
    ("multihead_attention", _torch_functional),
    ("multihead_attention", _sdpa_heads),
    ("multihead_attention", _lib_mha),
    ("split_heads", lmbook.multihead.split_heads),
    ("split_heads", _lib_split),
    ("merge_heads", _lib_merge_held),
])
def test_a_ready_made_implementation_gets_no_credit(task, answer):
    with pytest.raises(CheckFailed, match="not graded"):
        check(task, answer)


def test_the_mask_convention_of_the_statement():
    """key_padding_mask True = padding, at the end; key 0 is always real; causal only when n_q = n_k."""
    c = BY_TASK["multihead_attention"]
    for i, case in enumerate([*c.cases, *c.hidden_cases]):
        (q, k, v, w_in, b_in, w_out, b_out, n_head, pad, causal), _ = case_inputs(case, 0, i, CPU)
        assert pad.dtype == torch.bool and not pad[:, 0].any()
        assert (~pad[:, :-1] | pad[:, 1:]).all(), "padding comes at the end"
        assert not causal or q.shape[1] == k.shape[1]
        Y, A = c.reference(q, k, v, w_in, b_in, w_out, b_out, n_head, pad, causal)
        assert torch.isfinite(Y).all() and A.shape == (q.shape[0], n_head, q.shape[1], k.shape[1])
        assert (A[pad[:, None, None, :].expand_as(A)] == 0).all()
        if causal:
            assert (A.triu(1) == 0).all()


def test_a_wrong_stage_is_named_weights_first():
    def bad_output(*args):
        Y, A = multihead_attention(*args)
        return Y + 0.1, A
    with pytest.raises(CheckFailed, match="output: "):
        check("multihead_attention", bad_output)
