"""Exercise 6 (multi-head attention) as students write it: wrong answers with the mistake they have, and right ones
written differently from the reference (see test_students.py)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from check_contract import Student

from lmbook.tasks.ch06 import MERGE_HEADS, MULTIHEAD_ATTENTION, SPLIT_HEADS

INF = float("-inf")


def _has(check, start: str) -> str:
    """The misconception of ``check``'s Mutant that begins with ``start`` (word for word)."""
    (text,) = {m.misconception for m in check.mutants if m.misconception.startswith(start)}
    return text


# ----------------------------------------------------------------------------- split_heads

def split_reshape_straight(x, n_head):
    B, n, d = x.shape
    return x.reshape(B, n_head, n, d // n_head)


def split_step_slices(x, n_head):  # x[..., i::n_head] takes every n_head-th feature
    return torch.stack([x[..., i::n_head] for i in range(n_head)], dim=1)


def split_forgot_transpose(x, n_head):
    B, n, d = x.shape
    return x.view(B, n, n_head, d // n_head)


def split_head_size(x, n_head):  # -1 is the number of heads here, n_head the size of each
    B, n, d = x.shape
    return x.view(B, n, -1, n_head).transpose(1, 2)


def split_chunk_positions(x, n_head):  # chunks the positions, not the features
    return torch.stack(x.chunk(n_head, dim=1), dim=1)


def split_transpose_last(x, n_head):
    B, n, d = x.shape
    return x.view(B, n, n_head, d // n_head).transpose(2, 3)


def split_float32(x, n_head):  # float64 inputs come back in float32
    B, n, d = x.shape
    return x.float().view(B, n, n_head, d // n_head).transpose(1, 2)


def split_right_slices(x, n_head):
    d_head = x.shape[-1] // n_head
    return torch.stack([x[:, :, i * d_head:(i + 1) * d_head] for i in range(n_head)], dim=1)


def split_right_chunk(x, n_head):
    return torch.stack(x.chunk(n_head, dim=-1), dim=1)


def split_right_permute(x, n_head):
    B, n, d = x.shape
    return x.reshape(B, n, n_head, -1).permute(0, 2, 1, 3).contiguous()


def split_right_unflatten(x, n_head):
    return x.unflatten(-1, (n_head, -1)).transpose(1, 2)


# ----------------------------------------------------------------------------- merge_heads

def merge_reshape_straight(x):
    B, h, n, d_head = x.shape
    return x.reshape(B, n, h * d_head)


def merge_permute_wrong(x):
    B, h, n, d_head = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, n, -1)


def merge_transpose_only(x):
    return x.transpose(1, 2).contiguous()


def merge_mean(x):
    return x.mean(dim=1)


def merge_sum(x):
    return x.sum(dim=1)


def merge_view_after_transpose(x):  # a transposed tensor is not contiguous: .view raises
    B, h, n, d_head = x.shape
    return x.transpose(1, 2).view(B, n, h * d_head)


def merge_cat_positions(x):  # the heads one after the other along the positions
    return torch.cat(x.unbind(1), dim=1)


def merge_float32(x):
    B, h, n, d_head = x.shape
    return x.transpose(1, 2).reshape(B, n, h * d_head).to(torch.float32)


def merge_right_cat(x):
    return torch.cat(x.unbind(1), dim=-1)


def merge_right_loop(x):
    return torch.cat([x[:, i] for i in range(x.shape[1])], dim=-1)


def merge_right_contiguous_view(x):
    B, h, n, d_head = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(B, n, -1)


def merge_right_einsum(x):
    B, h, n, d_head = x.shape
    return torch.einsum("bhnd->bnhd", x).reshape(B, n, h * d_head)


# ----------------------------------------------------------------------------- multihead_attention

def _heads(x, n_head):
    B, n, d = x.shape
    return x.view(B, n, n_head, d // n_head).transpose(1, 2)


def _merge(y):
    B, h, n, d_head = y.shape
    return y.transpose(1, 2).reshape(B, n, h * d_head)


def _attend(q, k, v, key_padding_mask, causal, scale):
    scores = q @ k.transpose(-2, -1) / scale
    blocked = key_padding_mask[:, None, None, :]
    if causal:
        n = q.shape[2]
        blocked = blocked | torch.triu(torch.ones(n, n, dtype=torch.bool, device=q.device), diagonal=1)
    A = torch.softmax(scores.masked_fill(blocked, INF), dim=-1)
    return A @ v, A


def _project(query, key, value, W, b):
    W_q, W_k, W_v = W.chunk(3)
    b_q, b_k, b_v = b.chunk(3)
    return query @ W_q.T + b_q, key @ W_k.T + b_k, value @ W_v.T + b_v


def mha_no_scale(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                 key_padding_mask, causal):
    q, k, v = (_heads(t, n_head) for t in _project(query, key, value, in_proj_weight, in_proj_bias))
    scores = torch.einsum("bhid,bhjd->bhij", q, k)
    blocked = key_padding_mask[:, None, None, :]
    if causal:
        blocked = blocked | torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).triu(1)
    A = scores.masked_fill(blocked, INF).softmax(-1)
    return _merge(torch.einsum("bhij,bhjd->bhid", A, v)) @ out_proj_weight.T + out_proj_bias, A


def mha_sqrt_d(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
               key_padding_mask, causal):
    q, k, v = (_heads(t, n_head) for t in _project(query, key, value, in_proj_weight, in_proj_bias))
    y, A = _attend(q, k, v, key_padding_mask, causal, math.sqrt(query.shape[-1]))  # d, not d_head
    return _merge(y) @ out_proj_weight.T + out_proj_bias, A


def mha_mask_true_is_real(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                          key_padding_mask, causal):  # exercise 5's habit: True = may attend
    q, k, v = (_heads(t, n_head) for t in _project(query, key, value, in_proj_weight, in_proj_bias))
    y, A = _attend(q, k, v, ~key_padding_mask, causal, math.sqrt(q.shape[-1]))
    return _merge(y) @ out_proj_weight.T + out_proj_bias, A


def mha_kv_swapped(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                   key_padding_mask, causal):
    W_q, W_v, W_k = in_proj_weight.chunk(3)
    b_q, b_v, b_k = in_proj_bias.chunk(3)
    q = _heads(F.linear(query, W_q, b_q), n_head)
    k = _heads(F.linear(key, W_k, b_k), n_head)
    v = _heads(F.linear(value, W_v, b_v), n_head)
    y, A = _attend(q, k, v, key_padding_mask, causal, math.sqrt(q.shape[-1]))
    return F.linear(_merge(y), out_proj_weight, out_proj_bias), A


def mha_no_out_proj(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                    key_padding_mask, causal):
    q, k, v = (_heads(t, n_head) for t in _project(query, key, value, in_proj_weight, in_proj_bias))
    y, A = _attend(q, k, v, key_padding_mask, causal, math.sqrt(q.shape[-1]))
    return _merge(y), A


def mha_averaged_weights(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                         key_padding_mask, causal):  # what nn.MultiheadAttention returns by default
    q, k, v = (_heads(t, n_head) for t in _project(query, key, value, in_proj_weight, in_proj_bias))
    y, A = _attend(q, k, v, key_padding_mask, causal, math.sqrt(q.shape[-1]))
    return _merge(y) @ out_proj_weight.T + out_proj_bias, A.mean(dim=1)


def mha_reshape_straight(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                         key_padding_mask, causal):
    B, n_q, d = query.shape
    q, k, v = _project(query, key, value, in_proj_weight, in_proj_bias)
    q, k, v = (t.reshape(B, n_head, t.shape[1], d // n_head) for t in (q, k, v))
    y, A = _attend(q, k, v, key_padding_mask, causal, math.sqrt(d // n_head))
    return y.reshape(B, n_q, d) @ out_proj_weight.T + out_proj_bias, A


def mha_merge_straight(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                       key_padding_mask, causal):
    B, n_q, d = query.shape
    q, k, v = (_heads(t, n_head) for t in _project(query, key, value, in_proj_weight, in_proj_bias))
    y, A = _attend(q, k, v, key_padding_mask, causal, math.sqrt(q.shape[-1]))
    return y.reshape(B, n_q, d) @ out_proj_weight.T + out_proj_bias, A


def mha_loop_strided_heads(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
                           n_head, key_padding_mask, causal):  # head i = features i, i + n_head, ...; put back so
    q, k, v = _project(query, key, value, in_proj_weight, in_proj_bias)
    outs, weights = [], []
    for i in range(n_head):
        y, A = _attend(q[..., i::n_head].unsqueeze(1), k[..., i::n_head].unsqueeze(1),
                       v[..., i::n_head].unsqueeze(1), key_padding_mask, causal, math.sqrt(q.shape[-1] // n_head))
        outs.append(y[:, 0])
        weights.append(A[:, 0])
    y = torch.stack(outs, dim=-1).flatten(2)  # feature f of head i back at f * n_head + i
    return y @ out_proj_weight.T + out_proj_bias, torch.stack(weights, dim=1)


def mha_loop_strided_cat(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
                         n_head, key_padding_mask, causal):  # strided heads, then concatenated as blocks
    q, k, v = _project(query, key, value, in_proj_weight, in_proj_bias)
    outs, weights = [], []
    for i in range(n_head):
        y, A = _attend(q[..., i::n_head].unsqueeze(1), k[..., i::n_head].unsqueeze(1),
                       v[..., i::n_head].unsqueeze(1), key_padding_mask, causal, math.sqrt(q.shape[-1] // n_head))
        outs.append(y[:, 0])
        weights.append(A[:, 0])
    return torch.cat(outs, dim=-1) @ out_proj_weight.T + out_proj_bias, torch.stack(weights, dim=1)


def mha_ignores_causal(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                       key_padding_mask, causal):
    q, k, v = (_heads(t, n_head) for t in _project(query, key, value, in_proj_weight, in_proj_bias))
    y, A = _attend(q, k, v, key_padding_mask, False, math.sqrt(q.shape[-1]))
    return _merge(y) @ out_proj_weight.T + out_proj_bias, A


def mha_query_everywhere(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                         key_padding_mask, causal):  # "self-attention": keys and values from the query too
    q, k, v = (_heads(t, n_head) for t in _project(query, query, query, in_proj_weight, in_proj_bias))
    y, A = _attend(q, k, v, key_padding_mask, causal, math.sqrt(q.shape[-1]))
    return _merge(y) @ out_proj_weight.T + out_proj_bias, A


def mha_float32(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                key_padding_mask, causal):
    q, k, v = (_heads(t.float(), n_head) for t in _project(query, key, value, in_proj_weight, in_proj_bias))
    y, A = _attend(q, k, v, key_padding_mask, causal, math.sqrt(q.shape[-1]))
    return _merge(y) @ out_proj_weight.T.float() + out_proj_bias.float(), A


def mha_softmax_over_queries(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
                             n_head, key_padding_mask, causal):
    q, k, v = (_heads(t, n_head) for t in _project(query, key, value, in_proj_weight, in_proj_bias))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    blocked = key_padding_mask[:, None, None, :]
    if causal:
        blocked = blocked | torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).triu(1)
    A = torch.softmax(scores.masked_fill(blocked, INF), dim=-2)
    return _merge(A @ v) @ out_proj_weight.T + out_proj_bias, A


def mha_right_loop(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                   key_padding_mask, causal):  # one head at a time, with an additive mask of 0 and -inf
    d = query.shape[-1]
    d_head = d // n_head
    q, k, v = _project(query, key, value, in_proj_weight, in_proj_bias)
    bias = torch.zeros(key_padding_mask.shape, dtype=q.dtype, device=q.device).masked_fill(key_padding_mask, INF)
    bias = bias[:, None, :]
    if causal:
        n = query.shape[1]
        bias = bias + torch.full((n, n), INF, dtype=q.dtype, device=q.device).triu(1)
    outs, weights = [], []
    for i in range(n_head):
        cols = slice(i * d_head, (i + 1) * d_head)
        A = torch.softmax(torch.bmm(q[..., cols], k[..., cols].transpose(1, 2)) * d_head ** -0.5 + bias, dim=-1)
        outs.append(torch.bmm(A, v[..., cols]))
        weights.append(A)
    return F.linear(torch.cat(outs, dim=-1), out_proj_weight, out_proj_bias), torch.stack(weights, dim=1)


def mha_softmax_no_grad(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                        key_padding_mask, causal):  # "the weights are probabilities, not parameters"
    B, n_q, d = query.shape
    q, k, v = (t.view(B, t.shape[1], n_head, -1).transpose(1, 2)
               for t in _project(query, key, value, in_proj_weight, in_proj_bias))
    scores = (q @ k.transpose(-1, -2) / math.sqrt(d // n_head)).masked_fill(key_padding_mask[:, None, None, :], INF)
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).triu(1), INF)
    with torch.no_grad():
        A = scores.softmax(-1)
    return F.linear((A @ v).transpose(1, 2).reshape(B, n_q, d), out_proj_weight, out_proj_bias), A


def mha_right_einsum(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                     key_padding_mask, causal):
    B, n_q, d = query.shape
    W = in_proj_weight.view(3, n_head, d // n_head, d)  # (q/k/v, head, d_head, d)
    b = in_proj_bias.view(3, n_head, d // n_head)
    q = torch.einsum("bnd,hed->bhne", query, W[0]) + b[0][None, :, None, :]
    k = torch.einsum("bnd,hed->bhne", key, W[1]) + b[1][None, :, None, :]
    v = torch.einsum("bnd,hed->bhne", value, W[2]) + b[2][None, :, None, :]
    scores = torch.einsum("bhie,bhje->bhij", q, k) / math.sqrt(d // n_head)
    ok = ~key_padding_mask[:, None, None, :]
    if causal:
        ok = ok & torch.tril(torch.ones(n_q, key.shape[1], dtype=torch.bool, device=query.device))
    A = torch.softmax(torch.where(ok, scores, torch.tensor(INF, dtype=scores.dtype, device=scores.device)), -1)
    heads = torch.einsum("bhij,bhje->bihe", A, v).reshape(B, n_q, d)
    return heads @ out_proj_weight.T + out_proj_bias, A


def mha_right_minus_1e9(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                        key_padding_mask, causal):  # -1e9 instead of -inf, flattened (B * h) batches
    B, n_q, d = query.shape
    n_k, d_head = key.shape[1], d // n_head
    q, k, v = (F.linear(x, w, b) for x, w, b in zip((query, key, value), in_proj_weight.split(d),
                                                     in_proj_bias.split(d), strict=True))
    q, k, v = (t.reshape(B, -1, n_head, d_head).transpose(1, 2).reshape(B * n_head, -1, d_head) for t in (q, k, v))
    scores = torch.bmm(q / math.sqrt(d_head), k.transpose(1, 2)).view(B, n_head, n_q, n_k)
    scores = scores.masked_fill(key_padding_mask.view(B, 1, 1, n_k), -1e9)
    if causal:
        scores = scores.masked_fill(torch.arange(n_k, device=q.device) > torch.arange(n_q, device=q.device)[:, None],
                                    -1e9)
    A = scores.softmax(dim=-1)
    y = torch.bmm(A.view(B * n_head, n_q, n_k), v).view(B, n_head, n_q, d_head).transpose(1, 2).reshape(B, n_q, d)
    return F.linear(y, out_proj_weight, out_proj_bias), A

# ----------------------------------------------------------------------------- the kinds of issue 31

def split_float32_inside(x, n_head):  # a round trip through float32: float64 values lose their last digits
    B, n, d = x.shape
    return x.float().view(B, n, n_head, d // n_head).transpose(1, 2).to(x.dtype)


def split_half_round_trip(x, n_head):
    B, n, d = x.shape
    return x.to(torch.float32).reshape(B, n, n_head, -1).permute(0, 2, 1, 3).double() if x.dtype == torch.float64 \
        else x.reshape(B, n, n_head, -1).permute(0, 2, 1, 3)


def split_squeezed(x, n_head):  # .squeeze() drops a batch of one, a length of one, one head
    B, n, d = x.shape
    return x.view(B, n, n_head, d // n_head).transpose(1, 2).squeeze()


def split_view_raises(x, n_head):  # view with the head size and the number of heads multiplied wrongly
    B, n, d = x.shape
    return x.view(B, n, n_head, d).transpose(1, 2)


def split_unsqueeze_in_place(x, n_head):  # unsqueeze_ reshapes the caller's tensor
    B, n, d = x.shape
    x.unsqueeze_(2)
    return x.view(B, n, n_head, d // n_head).transpose(1, 2)


def split_heads_last(x, n_head):  # (B, n_head, d_head, n): the positions last
    B, n, d = x.shape
    return x.view(B, n, n_head, d // n_head).permute(0, 2, 3, 1)


def split_reversed_heads(x, n_head):  # head 0 takes the last block of features
    B, n, d = x.shape
    return x.view(B, n, n_head, d // n_head).flip(2).transpose(1, 2)


def merge_float32_inside(x):
    B, h, n, d_head = x.shape
    return x.float().transpose(1, 2).reshape(B, n, h * d_head).to(x.dtype)


def merge_via_numpy(x):  # through numpy's float32 (a habit from another course)
    B, h, n, d_head = x.shape
    return torch.from_numpy(x.transpose(1, 2).reshape(B, n, h * d_head).cpu().numpy().astype("float32")).to(
        dtype=x.dtype, device=x.device)


def merge_squeezed(x):
    B, h, n, d_head = x.shape
    return x.transpose(1, 2).reshape(B, n, h * d_head).squeeze(0)


def merge_transposes_in_place(x):  # transpose_ on the caller's tensor: its shape changes under its feet
    B, h, n, d_head = x.shape
    return x.transpose_(1, 2).reshape(B, n, h * d_head)


def merge_flatten_view(x):  # flatten(2), then view: the same as reshaping without the transpose
    B, h, n, d_head = x.shape
    return x.flatten(2).view(B, n, h * d_head)


def merge_view_raises_helper(x):
    return _merge_view(x)


def _merge_view(y):
    B, h, n, d_head = y.shape
    return y.permute(0, 2, 1, 3).view(B, n, -1)  # not contiguous: view raises


def merge_reversed_heads(x):  # the heads side by side, the last one first
    B, h, n, d_head = x.shape
    return x.flip(1).transpose(1, 2).reshape(B, n, h * d_head)


def merge_positions_reversed(x):
    B, h, n, d_head = x.shape
    return x.transpose(1, 2).reshape(B, n, h * d_head).flip(1)


def _mha(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head, key_padding_mask,
         causal, *, dtype=None, scale=None, fill=INF):
    cast = (lambda t: t.to(dtype)) if dtype is not None else (lambda t: t)
    q, k, v = (_heads(cast(t), n_head) for t in _project(query, key, value, cast(in_proj_weight), cast(in_proj_bias)))
    scores = q @ k.transpose(-2, -1) / (scale or math.sqrt(q.shape[-1]))
    blocked = key_padding_mask[:, None, None, :]
    if causal:
        blocked = blocked | torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).triu(1)
    A = torch.softmax(scores.masked_fill(blocked, fill), dim=-1)
    return _merge(A @ v) @ cast(out_proj_weight).T + cast(out_proj_bias), A


def mha_float32_inside(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                       key_padding_mask, causal):  # float32 inside, the inputs' dtype outside
    y, A = _mha(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                key_padding_mask, causal, dtype=torch.float32)
    return y.to(query.dtype), A.to(query.dtype)


def mha_softmax_float32(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                        key_padding_mask, causal):
    q, k, v = (_heads(t, n_head) for t in _project(query, key, value, in_proj_weight, in_proj_bias))
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).float()
    A = torch.softmax(scores.masked_fill(key_padding_mask[:, None, None, :] | (
        torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).triu(1) if causal else False), INF),
        -1).to(query.dtype)
    return _merge(A @ v) @ out_proj_weight.T + out_proj_bias, A


def mha_list(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
             key_padding_mask, causal):
    return list(_mha(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                     key_padding_mask, causal))


def mha_list_literal(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                     key_padding_mask, causal):
    y, A = _mha(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                key_padding_mask, causal)
    return [y, A]


def mha_squeeze_heads(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                      key_padding_mask, causal):  # .squeeze() on the weights "for one head": breaks B=1, n_q=1
    y, A = _mha(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                key_padding_mask, causal)
    return y, A.squeeze() if n_head == 1 else A


def mha_squeeze_mask(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                     key_padding_mask, causal):  # the mask squeezed: a batch of one loses its batch dimension
    q, k, v = (_heads(t, n_head) for t in _project(query, key, value, in_proj_weight, in_proj_bias))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    blocked = key_padding_mask.squeeze()[..., None, None, :] if key_padding_mask.shape[0] > 1 else \
        key_padding_mask.squeeze()[None, :, None]
    if causal:
        blocked = blocked | torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).triu(1)
    A = torch.softmax(scores.masked_fill(blocked, INF), -1)
    return _merge(A @ v) @ out_proj_weight.T + out_proj_bias, A


def mha_pads_in_place(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                      key_padding_mask, causal):  # zeroes the caller's padded keys "to be safe"
    key[key_padding_mask] = 0.0
    return _mha(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                key_padding_mask, causal)


def mha_flips_mask_in_place(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                            key_padding_mask, causal):  # logical_not_() turns the caller's mask into "may attend"
    allowed = key_padding_mask.logical_not_()
    return _mha(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head, ~allowed,
                causal)


def mha_minus_1e4(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                  key_padding_mask, causal):  # -1e4 for the mask: large scores beat it
    return _mha(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                key_padding_mask, causal, fill=-30.0)


def mha_manual_softmax(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                       key_padding_mask, causal):  # exp without the maximum: overflows for large scores
    q, k, v = (_heads(t, n_head) for t in _project(query, key, value, in_proj_weight, in_proj_bias))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    blocked = key_padding_mask[:, None, None, :]
    if causal:
        blocked = blocked | torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).triu(1)
    e = torch.exp(scores).masked_fill(blocked, 0.0)
    A = e / e.sum(-1, keepdim=True)
    return _merge(A @ v) @ out_proj_weight.T + out_proj_bias, A


def mha_blocked_wrong_axis(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                           key_padding_mask, causal):  # (B, 1, n_k, 1): over the queries; raises if n_q != n_k
    q, k, v = (_heads(t, n_head) for t in _project(query, key, value, in_proj_weight, in_proj_bias))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    blocked = key_padding_mask[:, None, :, None]
    if causal:
        blocked = blocked | torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).triu(1)
    A = torch.softmax(scores.masked_fill(blocked, INF), -1)
    return _merge(A @ v) @ out_proj_weight.T + out_proj_bias, A


def mha_chunk_wrong_dim(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                        key_padding_mask, causal):  # chunk(3, dim=1) cuts the columns: (3d, d/3), then raises
    W_q, W_k, W_v = in_proj_weight.chunk(3, dim=1)
    b_q, b_k, b_v = in_proj_bias.chunk(3)
    q = _heads(query @ W_q.T + b_q, n_head)
    k = _heads(key @ W_k.T + b_k, n_head)
    v = _heads(value @ W_v.T + b_v, n_head)
    y, A = _attend(q, k, v, key_padding_mask, causal, math.sqrt(q.shape[-1]))
    return _merge(y) @ out_proj_weight.T + out_proj_bias, A


def mha_softmax_all_axes(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                         key_padding_mask, causal):  # softmax over the heads: NaN where a column is all -inf
    q, k, v = (_heads(t, n_head) for t in _project(query, key, value, in_proj_weight, in_proj_bias))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    blocked = key_padding_mask[:, None, None, :]
    if causal:
        blocked = blocked | torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).triu(1)
    A = torch.softmax(scores.masked_fill(blocked, INF), dim=1)
    return _merge(A @ v) @ out_proj_weight.T + out_proj_bias, A


def mha_out_bias_twice(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                       key_padding_mask, causal):  # adds out_proj_bias twice: only the output is wrong
    y, A = _mha(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                key_padding_mask, causal)
    return y + out_proj_bias, A


def mha_value_bias_dropped(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                           key_padding_mask, causal):  # b_v left out: the weights are right, the output is not
    b = in_proj_bias.clone()
    b[2 * query.shape[-1]:] = 0
    return _mha(query, key, value, in_proj_weight, b, out_proj_weight, out_proj_bias, n_head, key_padding_mask, causal)


WRONG = {
    "split_heads": [
        Student(split_reshape_straight, _has(SPLIT_HEADS, "reshaped (B, n, d) straight")),
        Student(split_step_slices, _has(SPLIT_HEADS, "split the features interleaved")),
        Student(split_forgot_transpose, _has(SPLIT_HEADS, "returned (B, n, n_head, d_head)")),
        Student(split_head_size, _has(SPLIT_HEADS, "used n_head as the size of a head")),
        Student(split_chunk_positions, None),
        Student(split_transpose_last, None),
        Student(split_float32, None),
        Student(split_float32_inside, None, note="float32 round trip"),
        Student(split_half_round_trip, None, note="float32 round trip, then .double()"),
        Student(split_squeezed, None, note=".squeeze() drops sizes of 1"),
        Student(split_view_raises, None, note="view raises inside the student's code"),
        Student(split_unsqueeze_in_place, None, note="unsqueeze_ on the caller's x"),
        Student(split_heads_last, None, note="(B, n_head, d_head, n)"),
        Student(split_reversed_heads, None, note="heads in reverse order"),
    ],
    "merge_heads": [
        Student(merge_reshape_straight, _has(MERGE_HEADS, "reshaped (B, n_head, n, d_head) to (B, n, d)")),
        Student(merge_permute_wrong, _has(MERGE_HEADS, "interleaved the heads' features")),
        Student(merge_transpose_only, _has(MERGE_HEADS, "returned (B, n, n_head, d_head)")),
        Student(merge_mean, _has(MERGE_HEADS, "averaged the heads")),
        Student(merge_sum, None),
        Student(merge_view_after_transpose, None),
        Student(merge_cat_positions, None),
        Student(merge_float32, None),
        Student(merge_float32_inside, None, note="float32 round trip"),
        Student(merge_via_numpy, None, note="through numpy's float32"),
        Student(merge_squeezed, None, note=".squeeze(0) drops a batch of one"),
        Student(merge_transposes_in_place, None, note="transpose_ on the caller's tensor"),
        Student(merge_flatten_view, _has(MERGE_HEADS, "reshaped (B, n_head, n, d_head) to (B, n, d)"),
                note="flatten then view: the straight reshape"),
        Student(merge_view_raises_helper, None, note="a helper's .view raises"),
        Student(merge_reversed_heads, None, note="the heads in reverse order"),
        Student(merge_positions_reversed, None, note="the positions in reverse order"),
    ],
    "multihead_attention": [
        Student(mha_softmax_no_grad, None, note="right values; the softmax under torch.no_grad()"),
        Student(mha_no_scale, _has(MULTIHEAD_ATTENTION, "left out the 1/sqrt(d_head)")),
        Student(mha_sqrt_d, _has(MULTIHEAD_ATTENTION, "divided the scores by sqrt(d)")),
        Student(mha_mask_true_is_real, _has(MULTIHEAD_ATTENTION, "inverted the padding mask")),
        Student(mha_kv_swapped, _has(MULTIHEAD_ATTENTION, "swapped K and V")),
        Student(mha_no_out_proj, _has(MULTIHEAD_ATTENTION, "left out the output projection")),
        Student(mha_averaged_weights, _has(MULTIHEAD_ATTENTION, "averaged the weights over the heads")),
        Student(mha_reshape_straight, _has(MULTIHEAD_ATTENTION, "reshaped (B, n, d) straight")),
        Student(mha_merge_straight, _has(MULTIHEAD_ATTENTION, "merged the heads without transposing back")),
        Student(mha_loop_strided_heads, _has(MULTIHEAD_ATTENTION, "split the features into heads interleaved")),
        Student(mha_loop_strided_cat, None),
        Student(mha_ignores_causal, _has(MULTIHEAD_ATTENTION, "left out the causal mask")),
        Student(mha_query_everywhere, None),
        Student(mha_float32, None),
        Student(mha_softmax_over_queries, None),
        Student(mha_float32_inside, None, note="float32 inside"),
        Student(mha_softmax_float32, None, note="the softmax in float32"),
        Student(mha_list, None, note="a list, not a tuple"),
        Student(mha_list_literal, None, note="[y, A], not a tuple"),
        Student(mha_squeeze_heads, None, note=".squeeze() on one head's weights"),
        Student(mha_squeeze_mask, None, note="the mask squeezed"),
        Student(mha_pads_in_place, None, note="zeroes the caller's padded keys"),
        Student(mha_flips_mask_in_place, None, note="logical_not_() on the caller's mask"),
        Student(mha_minus_1e4, None, note="a finite fill that large scores beat"),
        Student(mha_manual_softmax, None, note="exp without the maximum"),
        Student(mha_blocked_wrong_axis, None, note="the mask broadcast over the queries"),
        Student(mha_chunk_wrong_dim, None, note="chunk along the columns raises"),
        Student(mha_softmax_all_axes, None, note="softmax over the heads"),
        Student(mha_out_bias_twice, None, note="out_proj_bias added twice"),
        Student(mha_value_bias_dropped, None, note="b_v left out"),
    ],
}

RIGHT = {
    "split_heads": [split_right_slices, split_right_chunk, split_right_permute, split_right_unflatten],
    "merge_heads": [merge_right_cat, merge_right_loop, merge_right_contiguous_view, merge_right_einsum],
    "multihead_attention": [mha_right_loop, mha_right_einsum, mha_right_minus_1e9],
}


# ============================================================================= thinking questions
# The count / predict questions (lmbook.tasks.questions.ch06), as students answer them.

from lmbook.tasks.questions.ch06 import MHA_PARAMETERS, WRONG_RESHAPE, WRONG_SCALE  # noqa: E402

# ----------------------------------------------------------------------------- mha_parameters


def params_full_size_heads(d, h, bias):
    per_head = 3 * d * d + (3 * d if bias else 0)  # every head has its own W_q, W_k, W_v
    return h * per_head + d * d + (d if bias else 0)


def params_no_out_proj(d, h, bias):
    return 3 * d * d + (3 * d if bias else 0)


def params_no_bias(d, h, bias):
    return 4 * d * d


def params_divided_by_h(d, h, bias):
    return (4 * d * d + (4 * d if bias else 0)) // h


def params_small_out_proj(d, h, bias):
    d_head = d // h
    weights = 3 * d * d + d_head * d  # W_o sized for one head
    return weights + ((3 * d + d_head) if bias else 0)


def params_no_out_bias(d, h, bias):
    return 4 * d * d + (3 * d if bias else 0)


def params_bias_per_head(d, h, bias):
    return 4 * d * d + (4 * d * h if bias else 0)


def params_right_per_head(d, h, bias):
    d_head = d // h
    total = 0
    for _ in range(h):
        total += 3 * (d * d_head + (d_head if bias else 0))  # this head's W_q, W_k, W_v and biases
    return total + d * d + (d if bias else 0)  # W_o


def params_right_torch(d, h, bias):  # count torch's own layer
    return sum(p.numel() for p in torch.nn.MultiheadAttention(d, h, bias=bias).parameters())


def params_right_matrices(d, h, bias):
    shapes = [(3 * d, d), (d, d)] + ([(3 * d,), (d,)] if bias else [])  # in_proj, out_proj
    return sum(math.prod(s) for s in shapes)


# ----------------------------------------------------------------------------- wrong_scale_variance


def scale_no_change(d, h):
    return 1.0


def scale_times_h(d, h):
    return float(h)


def scale_std(d, h):
    return 1 / math.sqrt(h)


def scale_forgot_division(d, h):
    return d / h


def scale_divided_by_sqrt(d, h):
    return (d / h) / math.sqrt(d)


def scale_std_inverted(d, h):
    return math.sqrt(d) / math.sqrt(d // h)


def scale_h_over_d(d, h):
    return h / d


def scale_right_ratio(d, h):
    return (d // h) / d


def scale_right_one_over_h(d, h):
    return 1 / h


def scale_right_squares(d, h):
    return (d / h) * (1 / math.sqrt(d)) ** 2


# ----------------------------------------------------------------------------- wrong_reshape_pairs


def pairs_no_change(n, h):
    return n * n


def pairs_one_block(n, h):
    return (n // h) ** 2


def pairs_diagonal(n, h):
    return n


def pairs_lost(n, h):
    return n * n - n * n // h


def pairs_n_times_h(n, h):
    return n * h


def pairs_n_over_h(n, h):
    return n // h


def pairs_blocks_halved(n, h):  # the blocks right, then each pair counted once, as if attention were symmetric
    return h * (n // h) ** 2 / 2


def pairs_right_formula(n, h):
    return n * n // h


def pairs_right_blocks(n, h):
    return sum((n // h) ** 2 for _ in range(h))


def pairs_right_experiment(n, h):  # the chapter's experiment: perturb each input, see which outputs move
    B, d = 1, 2 * h
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, n, d, generator=g, dtype=torch.float64)

    def attend(x):
        q = x.reshape(B, h, n, d // h)  # the split without the transpose
        a = torch.softmax(q @ q.transpose(-2, -1) / math.sqrt(d // h), dim=-1)
        return (a @ q).reshape(B, n, d)

    base = attend(x)
    count = 0
    for j in range(n):
        x2 = x.clone()
        x2[:, j] += 1.0
        count += int(((attend(x2) - base).abs().amax(-1) > 1e-9).sum())
    return count


WRONG.update({
    "mha_parameters": [
        Student(params_full_size_heads, _has(MHA_PARAMETERS, "gave every head full-size")),
        Student(params_no_out_proj, _has(MHA_PARAMETERS, "left out the output projection")),
        Student(params_no_bias, _has(MHA_PARAMETERS, "left out the biases")),
        Student(params_divided_by_h, _has(MHA_PARAMETERS, "divided by h")),
        Student(params_small_out_proj, _has(MHA_PARAMETERS, "gave W_o one head's size")),
        Student(params_no_out_bias, _has(MHA_PARAMETERS, "left out W_o's bias")),
        Student(params_bias_per_head, None),
    ],
    "wrong_scale_variance": [
        Student(scale_no_change, _has(WRONG_SCALE, "predicted no change")),
        Student(scale_times_h, _has(WRONG_SCALE, "turned the ratio upside down")),
        Student(scale_std, _has(WRONG_SCALE, "gave the standard deviation")),
        Student(scale_forgot_division, _has(WRONG_SCALE, "left out the division")),
        Student(scale_divided_by_sqrt, _has(WRONG_SCALE, "divided the variance by sqrt(d)")),
        Student(scale_std_inverted, None),
        Student(scale_h_over_d, None),
    ],
    "wrong_reshape_pairs": [
        Student(pairs_no_change, _has(WRONG_RESHAPE, "predicted that nothing changes")),
        Student(pairs_one_block, _has(WRONG_RESHAPE, "counted one block")),
        Student(pairs_diagonal, _has(WRONG_RESHAPE, "let each output depend on its own input")),
        Student(pairs_lost, _has(WRONG_RESHAPE, "counted the pairs that are lost")),
        Student(pairs_n_times_h, None),
        Student(pairs_n_over_h, None),
        Student(pairs_blocks_halved, None, note="h (n/h)² / 2: equals n when n/h = 2"),
    ],
})

RIGHT.update({
    "mha_parameters": [params_right_per_head, params_right_torch, params_right_matrices],
    "wrong_scale_variance": [scale_right_ratio, scale_right_one_over_h, scale_right_squares],
    "wrong_reshape_pairs": [pairs_right_formula, pairs_right_blocks, pairs_right_experiment],
})
