"""Exercise 5 (self-attention) as students write it: wrong answers with the mistake they have, and right ones
written differently from the reference (see test_students.py)."""

from __future__ import annotations

import math

import numpy as np
import torch
from check_contract import Student

from lmbook.tasks.ch05 import MASKED_ATTENTION, QKV

INF = float("-inf")


def _has(check, start: str) -> str:
    """The misconception of ``check``'s Mutant that begins with ``start`` (word for word)."""
    (text,) = {m.misconception for m in check.mutants if m.misconception.startswith(start)}
    return text


# ----------------------------------------------------------------------------- qkv_projections

def qkv_no_transpose(X, W_q, b_q, W_k, b_k, W_v, b_v):
    return X @ W_q + b_q, X @ W_k + b_k, X @ W_v + b_v


def qkv_no_bias(X, W_q, b_q, W_k, b_k, W_v, b_v):
    return torch.matmul(X, W_q.T), torch.matmul(X, W_k.T), torch.matmul(X, W_v.T)


def qkv_order(X, W_q, b_q, W_k, b_k, W_v, b_v):
    q = X @ W_q.T + b_q
    k = X @ W_k.T + b_k
    v = X @ W_v.T + b_v
    return q, v, k


def qkv_one_matrix(X, W_q, b_q, W_k, b_k, W_v, b_v):
    proj = X @ W_q.T + b_q  # "it's self-attention, so they're the same"
    return proj, proj, proj


def qkv_prescaled(X, W_q, b_q, W_k, b_k, W_v, b_v):
    d_k = W_q.shape[0]
    return (X @ W_q.T + b_q) / math.sqrt(d_k), X @ W_k.T + b_k, X @ W_v.T + b_v


def qkv_bias_first(X, W_q, b_q, W_k, b_k, W_v, b_v):  # adds the bias to the input, before the product
    return (X + b_q) @ W_q.T, (X + b_k) @ W_k.T, (X + b_v) @ W_v.T


def qkv_float32(X, W_q, b_q, W_k, b_k, W_v, b_v):  # float64 inputs come back in float32
    X = X.float()
    return X @ W_q.T.float() + b_q.float(), X @ W_k.T.float() + b_k.float(), X @ W_v.T.float() + b_v.float()


def qkv_transposes_in_place(X, W_q, b_q, W_k, b_k, W_v, b_v):  # .t_() transposes the caller's weights
    return X @ W_q.t_() + b_q, X @ W_k.t_() + b_k, X @ W_v.t_() + b_v


def qkv_values_in_numpy(X, W_q, b_q, W_k, b_k, W_v, b_v):
    # V through NumPy, with the .detach() that torch's error message suggests: right values, no gradient
    V = np.einsum("bnd,vd->bnv", X.detach().cpu().numpy(), W_v.detach().cpu().numpy())
    return X @ W_q.T + b_q, X @ W_k.T + b_k, torch.from_numpy(V).to(X.device) + b_v


def qkv_right_matmul_other_side(X, W_q, b_q, W_k, b_k, W_v, b_v):
    return tuple((W @ X.transpose(1, 2)).transpose(1, 2) + b for W, b in ((W_q, b_q), (W_k, b_k), (W_v, b_v)))


def qkv_right_einsum(X, W_q, b_q, W_k, b_k, W_v, b_v):
    return (torch.einsum("bnd,kd->bnk", X, W_q) + b_q, torch.einsum("bnd,kd->bnk", X, W_k) + b_k,
            torch.einsum("bnd,kd->bnk", X, W_v) + b_v)


def qkv_right_addmm(X, W_q, b_q, W_k, b_k, W_v, b_v):
    B, n, d = X.shape
    flat = X.reshape(B * n, d)
    return tuple(torch.addmm(b, flat, W.T).reshape(B, n, -1) for W, b in ((W_q, b_q), (W_k, b_k), (W_v, b_v)))


# ----------------------------------------------------------------------------- masked_attention

def _causal(n, device):
    return torch.tril(torch.ones(n, n, device=device)).bool()


def att_no_scale(Q, K, V, key_mask, causal):
    scores = Q @ K.transpose(-2, -1)
    allowed = key_mask.unsqueeze(1)
    if causal:
        allowed = allowed & _causal(Q.shape[1], Q.device)
    A = torch.softmax(scores.masked_fill(~allowed, INF), dim=-1)
    return A @ V, A


def att_by_d(Q, K, V, key_mask, causal):
    scores = torch.bmm(Q, K.transpose(1, 2)) / Q.shape[-1]
    allowed = key_mask[:, None, :].expand(-1, Q.shape[1], -1)
    if causal:
        allowed = allowed & _causal(Q.shape[1], Q.device)
    A = torch.softmax(scores.masked_fill(allowed == 0, INF), dim=-1)
    return torch.bmm(A, V), A


def att_softmax_dim1(Q, K, V, key_mask, causal):
    scores = Q @ K.transpose(1, 2) / math.sqrt(K.shape[2])
    allowed = key_mask.unsqueeze(1)
    if causal:
        allowed = allowed & _causal(Q.shape[1], Q.device)
    A = scores.masked_fill(~allowed, INF).softmax(dim=1)
    return A @ V, A


def att_mask_after(Q, K, V, key_mask, causal):
    A = torch.softmax(Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1]), dim=-1)
    A = A * key_mask.unsqueeze(1)
    if causal:
        A = A * _causal(Q.shape[1], Q.device)
    return A @ V, A


def att_mask_after_renormalised(Q, K, V, key_mask, causal):  # right in exact arithmetic; 0/0 for large scores
    A = torch.softmax(Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1]), dim=-1)
    A = A * key_mask.unsqueeze(1)
    if causal:
        A = A * _causal(Q.shape[1], Q.device)
    A = A / A.sum(-1, keepdim=True)
    return A @ V, A


def att_triu_as_allowed(Q, K, V, key_mask, causal):  # triu(…, 1) is the future, used as "may attend"
    n = Q.shape[1]
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    scores = scores.masked_fill(~key_mask.bool().unsqueeze(1), INF)
    if causal:
        scores = scores.masked_fill(torch.triu(torch.ones(n, n, device=Q.device), diagonal=1) == 0, INF)
    A = torch.softmax(scores, dim=-1)
    return A @ V, A


def att_leak_one(Q, K, V, key_mask, causal):
    n = Q.shape[1]
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    allowed = key_mask.unsqueeze(1)
    if causal:
        allowed = allowed & torch.tril(torch.ones(n, n, device=Q.device), diagonal=1).bool()
    A = torch.softmax(scores.masked_fill(~allowed, INF), dim=-1)
    return A @ V, A


def att_rows_masked(Q, K, V, key_mask, causal):
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    scores = scores.masked_fill(~key_mask.unsqueeze(-1), INF)  # (B, n, 1): broadcasts over the keys
    if causal:
        scores = scores.masked_fill(~_causal(Q.shape[1], Q.device), INF)
    A = torch.softmax(scores, dim=-1)
    return A @ V, A


def att_causal_only(Q, K, V, key_mask, causal):  # forgets the padding mask
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    if causal:
        scores = scores.masked_fill(~_causal(Q.shape[1], Q.device), INF)
    A = torch.softmax(scores, dim=-1)
    return A @ V, A


def att_batch_as_dk(Q, K, V, key_mask, causal):  # Q.size(0) is the batch size, not d_k
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.size(0))
    allowed = key_mask.unsqueeze(1)
    if causal:
        allowed = allowed & _causal(Q.shape[1], Q.device)
    A = torch.softmax(scores.masked_fill(~allowed, INF), dim=-1)
    return A @ V, A


def att_scales_q_in_place(Q, K, V, key_mask, causal):
    Q /= math.sqrt(Q.shape[-1])
    allowed = key_mask.unsqueeze(1)
    if causal:
        allowed = allowed & _causal(Q.shape[1], Q.device)
    A = torch.softmax((Q @ K.transpose(1, 2)).masked_fill(~allowed, INF), dim=-1)
    return A @ V, A


def att_exp(Q, K, V, key_mask, causal):
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    allowed = key_mask.unsqueeze(1)
    if causal:
        allowed = allowed & _causal(Q.shape[1], Q.device)
    e = torch.exp(scores) * allowed
    A = e / e.sum(-1, keepdim=True)
    return A @ V, A


def att_weights_detached(Q, K, V, key_mask, causal):  # "A is only returned to be plotted": detached
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    n = Q.shape[1]
    allowed = key_mask[:, None, :] & (torch.ones(n, n, dtype=torch.bool, device=Q.device).tril() if causal else True)
    A = scores.masked_fill(~allowed, float("-inf")).softmax(-1).detach()
    return A @ V, A


def att_right_minus_1e9(Q, K, V, key_mask, causal):
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    scores = scores.masked_fill(~key_mask[:, None, :], -1e9)
    if causal:
        n = Q.shape[1]
        future = torch.arange(n, device=Q.device)[None, :] > torch.arange(n, device=Q.device)[:, None]
        scores = scores.masked_fill(future, -1e9)
    A = scores.softmax(-1)
    return A @ V, A


def att_right_where(Q, K, V, key_mask, causal):
    n = Q.shape[1]
    scores = torch.einsum("bik,bjk->bij", Q, K) / Q.shape[-1] ** 0.5
    ok = key_mask[:, None, :] & (_causal(n, Q.device) if causal else torch.ones(n, n, dtype=torch.bool,
                                                                                   device=Q.device))
    A = torch.softmax(torch.where(ok, scores, torch.tensor(INF, dtype=scores.dtype, device=scores.device)), -1)
    return torch.einsum("bij,bjv->biv", A, V), A


def att_right_rows(Q, K, V, key_mask, causal):  # one query at a time, over the keys it may see
    B, n, _ = Q.shape
    A = Q.new_zeros(B, n, n)
    for b in range(B):
        for i in range(n):
            keys = key_mask[b].clone()
            if causal:
                keys[i + 1:] = False
            s = K[b][keys] @ Q[b, i] / math.sqrt(Q.shape[-1])
            A[b, i, keys] = torch.softmax(s, dim=0)
    return A @ V, A

# ----------------------------------------------------------------------------- the kinds of issue 31
# (tolerances that hide mistakes, contracts, inputs that expose a mistake, messages that must not mislead)

def qkv_float32_inside(X, W_q, b_q, W_k, b_k, W_v, b_v):  # computes in float32, hands back the inputs' dtype
    return tuple((X.float() @ W.float().T + b.float()).to(X.dtype) for W, b in ((W_q, b_q), (W_k, b_k), (W_v, b_v)))


def qkv_float32_weights(X, W_q, b_q, W_k, b_k, W_v, b_v):  # float32 weights, float64 result: float32's digits
    return tuple(X @ W.float().double().T + b.float().double() for W, b in ((W_q, b_q), (W_k, b_k), (W_v, b_v)))


def qkv_list(X, W_q, b_q, W_k, b_k, W_v, b_v):  # a list where the statement asks for a tuple
    return [X @ W_q.T + b_q, X @ W_k.T + b_k, X @ W_v.T + b_v]


def qkv_list_comprehension(X, W_q, b_q, W_k, b_k, W_v, b_v):
    return [X @ W.T + b for W, b in ((W_q, b_q), (W_k, b_k), (W_v, b_v))]


def qkv_squeezed(X, W_q, b_q, W_k, b_k, W_v, b_v):  # .squeeze() drops the batch of one, or the length of one
    return tuple((X @ W.T + b).squeeze() for W, b in ((W_q, b_q), (W_k, b_k), (W_v, b_v)))


def qkv_transpose_q_only(X, W_q, b_q, W_k, b_k, W_v, b_v):  # raises inside the student's code unless d == d_k
    return X @ W_q.T + b_q, X @ W_k + b_k, X @ W_v + b_v


def _project(X, W, b):
    return X @ W.transpose(0, 2) + b  # a (d_out, d) matrix has no dimension 2: raises IndexError


def qkv_helper_raises(X, W_q, b_q, W_k, b_k, W_v, b_v):
    return _project(X, W_q, b_q), _project(X, W_k, b_k), _project(X, W_v, b_v)


def qkv_value_bias_k(X, W_q, b_q, W_k, b_k, W_v, b_v):  # V gets K's bias: only V is wrong
    return X @ W_q.T + b_q, X @ W_k.T + b_k, X @ W_v.T + b_k[: W_v.shape[0]] if W_v.shape[0] <= b_k.shape[0] else \
        X @ W_v.T


def qkv_bias_scaled(X, W_q, b_q, W_k, b_k, W_v, b_v):  # halves every bias: no named mistake
    return X @ W_q.T + b_q / 2, X @ W_k.T + b_k / 2, X @ W_v.T + b_v / 2


def _allowed(key_mask, n, causal, device):
    allowed = key_mask.bool()[:, None, :]
    return allowed & _causal(n, device) if causal else allowed


def att_float32_inside(Q, K, V, key_mask, causal):  # float32 arithmetic for float64 inputs, cast back
    scores = Q.float() @ K.float().transpose(1, 2) / math.sqrt(Q.shape[-1])
    A = torch.softmax(scores.masked_fill(~_allowed(key_mask, Q.shape[1], causal, Q.device), INF), -1)
    return (A @ V.float()).to(Q.dtype), A.to(Q.dtype)


def att_softmax_float32(Q, K, V, key_mask, causal):  # "softmax is safer in float32"
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    A = torch.softmax(scores.masked_fill(~_allowed(key_mask, Q.shape[1], causal, Q.device), INF).float(), -1)
    A = A.to(V.dtype)
    return A @ V, A


def att_list(Q, K, V, key_mask, causal):  # a list where the statement asks for a tuple
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    A = torch.softmax(scores.masked_fill(~_allowed(key_mask, Q.shape[1], causal, Q.device), INF), -1)
    return [A @ V, A]


def att_list_call(Q, K, V, key_mask, causal):
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    A = torch.softmax(scores.masked_fill(~_allowed(key_mask, Q.shape[1], causal, Q.device), INF), -1)
    return list((A @ V, A))


def att_squeezed(Q, K, V, key_mask, causal):  # .squeeze(0) "to drop the batch": only a batch of one has one
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    A = torch.softmax(scores.masked_fill(~_allowed(key_mask, Q.shape[1], causal, Q.device), INF), -1)
    return (A @ V).squeeze(0), A.squeeze(0)


def att_zeroes_padded_values(Q, K, V, key_mask, causal):  # "they get weight 0 anyway": V of the caller changed
    V[~key_mask.bool()] = 0.0
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    A = torch.softmax(scores.masked_fill(~_allowed(key_mask, Q.shape[1], causal, Q.device), INF), -1)
    return A @ V, A


def att_fills_K_in_place(Q, K, V, key_mask, causal):  # zeroes the padded keys of the caller's K
    K.masked_fill_(~key_mask.bool()[..., None], 0.0)
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    A = torch.softmax(scores.masked_fill(~_allowed(key_mask, Q.shape[1], causal, Q.device), INF), -1)
    return A @ V, A


def att_global_max(Q, K, V, key_mask, causal):  # subtracts one maximum for the whole batch: rows far below it
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    e = torch.exp(scores - scores.max()) * _allowed(key_mask, Q.shape[1], causal, Q.device)
    A = e / e.sum(-1, keepdim=True)
    return A @ V, A


def att_clamped_scores(Q, K, V, key_mask, causal):  # clamps the scores "against overflow": wrong for large ones
    scores = (Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])).clamp(-20, 20)
    A = torch.softmax(scores.masked_fill(~_allowed(key_mask, Q.shape[1], causal, Q.device), INF), -1)
    return A @ V, A


def att_mask_not_unsqueezed(Q, K, V, key_mask, causal):  # (B, n) against (B, n, n): raises unless B == n
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    scores = scores.masked_fill(~key_mask, INF)
    if causal:
        scores = scores.masked_fill(~_causal(Q.shape[1], Q.device), INF)
    A = torch.softmax(scores, -1)
    return A @ V, A


def att_python_and(Q, K, V, key_mask, causal):  # `and` on tensors raises "Boolean value ... is ambiguous"
    n = Q.shape[1]
    allowed = key_mask[:, None, :] and _causal(n, Q.device) if causal else key_mask[:, None, :]
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    A = torch.softmax(scores.masked_fill(~allowed, INF), -1)
    return A @ V, A


def att_softmax_of_mask(Q, K, V, key_mask, causal):  # softmax of the bool mask: torch raises NotImplementedError
    allowed = _allowed(key_mask, Q.shape[1], causal, Q.device)
    A = torch.softmax(allowed, -1) * (Q @ K.transpose(1, 2))
    return A @ V, A


def att_softmax_dim0(Q, K, V, key_mask, causal):  # softmax over the batch: NaN where every batch row is -inf
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    A = torch.softmax(scores.masked_fill(~_allowed(key_mask, Q.shape[1], causal, Q.device), INF), 0)
    return A @ V, A


def att_keys_by_queries(Q, K, V, key_mask, causal):  # K Qᵀ: row j is key j against every query
    scores = K @ Q.transpose(1, 2) / math.sqrt(Q.shape[-1])
    A = torch.softmax(scores.masked_fill(~_allowed(key_mask, Q.shape[1], causal, Q.device), INF), -1)
    return A @ V, A


def att_keys_by_queries_einsum(Q, K, V, key_mask, causal):
    scores = torch.einsum("bjd,bid->bji", K, Q) / Q.shape[-1] ** 0.5
    A = (scores.masked_fill(~_allowed(key_mask, Q.shape[1], causal, Q.device), INF)).softmax(dim=2)
    return torch.einsum("bij,bjv->biv", A, V), A


def att_sqrt_dv(Q, K, V, key_mask, causal):  # divides by sqrt(d_v): right only where d_v == d_k
    scores = Q @ K.transpose(1, 2) / math.sqrt(V.shape[-1])
    A = torch.softmax(scores.masked_fill(~_allowed(key_mask, Q.shape[1], causal, Q.device), INF), -1)
    return A @ V, A


def att_values_averaged(Q, K, V, key_mask, causal):  # the output averages the values, ignoring the weights
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    allowed = _allowed(key_mask, Q.shape[1], causal, Q.device)
    A = torch.softmax(scores.masked_fill(~allowed, INF), -1)
    Y = (allowed.to(V.dtype) / allowed.sum(-1, keepdim=True)) @ V
    return Y, A


WRONG = {
    "qkv_projections": [
        Student(qkv_no_transpose, _has(QKV, "multiplied by W instead of Wᵀ")),
        Student(qkv_no_bias, _has(QKV, "left out the biases")),
        Student(qkv_order, _has(QKV, "swapped K and V")),
        Student(qkv_one_matrix, _has(QKV, "used W_q for all three")),
        Student(qkv_prescaled, _has(QKV, "divided Q by sqrt(d_k)")),
        Student(qkv_bias_first, None),
        Student(qkv_float32, None),
        Student(qkv_transposes_in_place, None),
        Student(qkv_values_in_numpy, None, note="V computed in NumPy: no gradient reaches W_v"),
        Student(qkv_float32_inside, None, note="float32 arithmetic, float64 returned"),
        Student(qkv_float32_weights, None, note="float32 weights, float64 returned"),
        Student(qkv_list, None, note="a list, not a tuple"),
        Student(qkv_list_comprehension, None, note="a list comprehension, not a tuple"),
        Student(qkv_squeezed, None, note=".squeeze() drops a batch of one"),
        Student(qkv_transpose_q_only, None, note="raises inside the student's code on non-square weights"),
        Student(qkv_helper_raises, None, note="a helper of the student's raises"),
        Student(qkv_value_bias_k, None, note="V with K's bias"),
        Student(qkv_bias_scaled, None, note="half the biases"),
    ],
    "masked_attention": [
        Student(att_weights_detached, None, note="right values; no gradient reaches Q or K"),
        Student(att_no_scale, _has(MASKED_ATTENTION, "left out the 1/sqrt(d_k)")),
        Student(att_by_d, _has(MASKED_ATTENTION, "divided the scores by d_k")),
        Student(att_softmax_dim1, _has(MASKED_ATTENTION, "took the softmax over the queries")),
        Student(att_mask_after, _has(MASKED_ATTENTION, "applied the mask after the softmax")),
        Student(att_mask_after_renormalised, None),
        Student(att_triu_as_allowed, _has(MASKED_ATTENTION, "inverted the causal mask")),
        Student(att_leak_one, _has(MASKED_ATTENTION, "let the future leak by one")),
        Student(att_rows_masked, _has(MASKED_ATTENTION, "masked padded queries (rows)")),
        Student(att_causal_only, _has(MASKED_ATTENTION, "attended to padding")),
        Student(att_batch_as_dk, None),
        Student(att_scales_q_in_place, None),
        Student(att_exp, _has(MASKED_ATTENTION, "computed exp(scores) directly")),
        Student(att_float32_inside, None, note="float32 arithmetic, float64 returned"),
        Student(att_softmax_float32, None, note="the softmax in float32"),
        Student(att_list, None, note="a list, not a tuple"),
        Student(att_list_call, None, note="list(...), not a tuple"),
        Student(att_squeezed, None, note=".squeeze(0) breaks a batch of one"),
        Student(att_zeroes_padded_values, None, note="zeroes the caller's V at padding"),
        Student(att_fills_K_in_place, None, note="masked_fill_ on the caller's K"),
        Student(att_global_max, None, note="one maximum for the whole batch: 0/0 for rows far below it"),
        Student(att_clamped_scores, None, note="clamped scores: wrong for large ones"),
        Student(att_mask_not_unsqueezed, None, note="raises inside the student's code"),
        Student(att_python_and, None, note="`and` on tensors raises"),
        Student(att_softmax_of_mask, None, note="torch raises NotImplementedError inside the student's code"),
        Student(att_softmax_dim0, None, note="softmax over the batch: NaN"),
        Student(att_keys_by_queries, _has(MASKED_ATTENTION, "computed the scores as K Qᵀ")),
        Student(att_keys_by_queries_einsum, _has(MASKED_ATTENTION, "computed the scores as K Qᵀ")),
        Student(att_sqrt_dv, None, note="sqrt(d_v) for sqrt(d_k)"),
        Student(att_values_averaged, None, note="the output ignores the weights"),
    ],
}

RIGHT = {
    "qkv_projections": [qkv_right_matmul_other_side, qkv_right_einsum, qkv_right_addmm],
    "masked_attention": [att_right_minus_1e9, att_right_where, att_right_rows],
}


# ============================================================================= thinking questions
# The derive / count / predict questions (lmbook.tasks.questions.ch05), as students answer them.

from lmbook.tasks.questions.ch05 import CROSSOVER, SCORE_VARIANCE, WEIGHTS_BYTES  # noqa: E402

# ----------------------------------------------------------------------------- score_variance


def var_ignores_scaled(d_k, var_q, var_k, scaled):
    return d_k * var_q * var_k


def var_no_d_k(d_k, var_q, var_k, scaled):
    return var_q * var_k  # "each term has variance var_q var_k"


def var_std_product(d_k, var_q, var_k, scaled):
    v = d_k * math.sqrt(var_q) * math.sqrt(var_k)
    return v / d_k if scaled else v


def var_divided_by_sqrt(d_k, var_q, var_k, scaled):
    v = d_k * var_q * var_k
    return v / math.sqrt(d_k) if scaled else v


def var_sum_of_variances(d_k, var_q, var_k, scaled):
    v = d_k * (var_q + var_k)
    return v / d_k if scaled else v


def var_returns_std(d_k, var_q, var_k, scaled):  # the spread, not the variance
    sd = math.sqrt(d_k * var_q * var_k)
    return sd / math.sqrt(d_k) if scaled else sd


def var_as_tensor_pair(d_k, var_q, var_k, scaled):
    return torch.tensor([d_k * var_q * var_k, var_q * var_k])


def var_right_sum(d_k, var_q, var_k, scaled):
    terms = [var_q * var_k for _ in range(d_k)]  # Var(q_m k_m), independent: they add
    total = sum(terms)
    return total / (math.sqrt(d_k) ** 2) if scaled else total


def var_right_one_line(d_k, var_q, var_k, scaled):
    return var_q * var_k * (1 if scaled else d_k)


def var_right_prod(d_k, var_q, var_k, scaled):
    return math.prod([d_k, var_q, var_k]) / d_k ** int(scaled)


# ----------------------------------------------------------------------------- attention_crossover


def cross_assumes_4d(d, d_ff, causal_skip):
    n = 6 * d  # the chapter's answer
    return 2 * n if causal_skip else n


def cross_no_ffn(d, d_ff, causal_skip):
    weights = 2 * 4 * d * d
    attention = 4 * d / (2 if causal_skip else 1)
    return weights / attention


def cross_three_projections(d, d_ff, causal_skip):
    weights = 2 * (3 * d * d + 2 * d * d_ff)  # Q, K, V and the FFN
    return weights / (2 * d if causal_skip else 4 * d)


def cross_scores_only(d, d_ff, causal_skip):
    weights = 8 * d * d + 4 * d * d_ff
    per_key = 2 * d  # q . k_j
    return weights / (per_key / 2 if causal_skip else per_key)


def cross_ignores_skip(d, d_ff, causal_skip):
    return 2 * d + d_ff


def cross_skip_halves_n(d, d_ff, causal_skip):  # skipping work makes attention cheaper, not n smaller
    n = 2 * d + d_ff
    return n / 2 if causal_skip else n


def cross_macs_vs_flops(d, d_ff, causal_skip):  # multiply-adds for the weights, FLOPs for attention
    weights = 4 * d * d + 2 * d * d_ff
    return weights / (2 * d if causal_skip else 4 * d)


def cross_right_flops(d, d_ff, causal_skip):
    return (8 * d * d + 4 * d * d_ff) / (4 * d) * (2 if causal_skip else 1)


def cross_right_macs(d, d_ff, causal_skip):
    macs = 4 * d**2 + 2 * d * d_ff  # per position
    per_n = 2 * d / (2 if causal_skip else 1)  # multiply-adds per key: q . k_j and alpha_j v_j
    return macs / per_n


def cross_right_factored(d, d_ff, causal_skip):
    return float(2 * d + d_ff) * (1 + int(causal_skip))


# ----------------------------------------------------------------------------- attention_weights_bytes


def bytes_no_heads(batch, n_layer, n_head, n, bytes_per_value):
    return batch * n_layer * n * n * bytes_per_value


def bytes_n_not_squared(batch, n_layer, n_head, n, bytes_per_value):
    return batch * n_layer * n_head * n * bytes_per_value


def bytes_causal_half(batch, n_layer, n_head, n, bytes_per_value):
    return batch * n_layer * n_head * (n * (n + 1) // 2) * bytes_per_value


def bytes_no_layers(batch, n_layer, n_head, n, bytes_per_value):
    return batch * n_head * n**2 * bytes_per_value


def bytes_no_batch(batch, n_layer, n_head, n, bytes_per_value):
    return n_layer * n_head * n**2 * bytes_per_value


def bytes_in_bits(batch, n_layer, n_head, n, bytes_per_value):
    return batch * n_layer * n_head * n**2 * bytes_per_value * 8


def bytes_in_mib(batch, n_layer, n_head, n, bytes_per_value):
    return batch * n_layer * n_head * n**2 * bytes_per_value / 2**20


def bytes_right_prod(batch, n_layer, n_head, n, bytes_per_value):
    return math.prod([batch, n_layer, n_head, n, n, bytes_per_value])


def bytes_right_loop(batch, n_layer, n_head, n, bytes_per_value):
    total = 0
    for _ in range(n_layer):
        total += batch * n_head * n * n * bytes_per_value  # one layer's weights
    return total


def bytes_right_shape(batch, n_layer, n_head, n, bytes_per_value):
    shape = torch.Size([batch, n_head, n, n])  # one layer's weights, as the layer returns them
    return n_layer * shape.numel() * bytes_per_value


WRONG.update({
    "score_variance": [
        Student(var_ignores_scaled, _has(SCORE_VARIANCE, "ignored `scaled`")),
        Student(var_no_d_k, _has(SCORE_VARIANCE, "left out the d_k terms")),
        Student(var_std_product, _has(SCORE_VARIANCE, "multiplied standard deviations")),
        Student(var_divided_by_sqrt, _has(SCORE_VARIANCE, "divided the variance by sqrt(d_k)")),
        Student(var_sum_of_variances, _has(SCORE_VARIANCE, "added the two variances")),
        Student(var_returns_std, None),
        Student(var_as_tensor_pair, None),
    ],
    "attention_crossover": [
        Student(cross_assumes_4d, _has(CROSSOVER, "assumed d_ff = 4d")),
        Student(cross_no_ffn, _has(CROSSOVER, "left out the feed-forward network")),
        Student(cross_three_projections, _has(CROSSOVER, "left out the output projection")),
        Student(cross_scores_only, _has(CROSSOVER, "counted only the scores")),
        Student(cross_ignores_skip, _has(CROSSOVER, "ignored `causal_skip`")),
        Student(cross_skip_halves_n, None),
        Student(cross_macs_vs_flops, None),
    ],
    "attention_weights_bytes": [
        Student(bytes_no_heads, _has(WEIGHTS_BYTES, "left out the heads")),
        Student(bytes_n_not_squared, _has(WEIGHTS_BYTES, "counted n weights per head")),
        Student(bytes_causal_half, _has(WEIGHTS_BYTES, "counted only the causal half")),
        Student(bytes_no_layers, _has(WEIGHTS_BYTES, "left out the layers")),
        Student(bytes_no_batch, _has(WEIGHTS_BYTES, "left out the batch")),
        Student(bytes_in_bits, _has(WEIGHTS_BYTES, "counted bits")),
        Student(bytes_in_mib, None),
    ],
})

RIGHT.update({
    "score_variance": [var_right_sum, var_right_one_line, var_right_prod],
    "attention_crossover": [cross_right_flops, cross_right_macs, cross_right_factored],
    "attention_weights_bytes": [bytes_right_prod, bytes_right_loop, bytes_right_shape],
})
