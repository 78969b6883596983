"""Task 1 of exercise 5: masked scaled dot-product attention."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import ATTENTION_NAN_HINT, compare_parts
from ...grading.reproduce import sized
from ..common import (
    COURSE,
    COURSE_ATTRS,
    NEG_INF,
    TORCH_ATTENTION,
    TORCH_ATTENTION_ATTRS,
    fit_lengths,
    in_dtype,
    made_up_at_padding,
    real_mask,
)
from ..common import randn as _randn


def _attention_case(B: int, n: int, d_k: int, d_v: int, causal: bool, lengths=None, scale: float = 1.0,
                    dtype=torch.float32):
    def make(g, device):
        key_mask = real_mask(B, n, g, lengths)
        Q = in_dtype(_randn((B, n, d_k), g, device, scale), dtype)
        K = in_dtype(_randn((B, n, d_k), g, device, scale), dtype)
        K = made_up_at_padding(K, ~key_mask)
        Vals = in_dtype(_randn((B, n, d_v), g, device), dtype)
        Vals = torch.where(key_mask.to(device).unsqueeze(-1), Vals, Vals + 10.0)
        return ((Q, K, Vals, key_mask.to(device), causal), {})
    return make


def _allowed(key_mask: torch.Tensor, n: int, causal: bool) -> torch.Tensor:
    allowed = key_mask.bool()[:, None, :].expand(-1, n, -1)  # (B, n_q, n_k): key j is a real token
    if causal:
        allowed = allowed & torch.ones(n, n, dtype=torch.bool, device=key_mask.device).tril()
    return allowed


def _attention_ref(Q, K, V, key_mask, causal):
    """torch's fused attention for the outputs; for the weights, the same call with V = I (the weights then
    come out as the outputs)."""
    B, n, _ = Q.shape
    allowed = _allowed(key_mask, n, causal)
    out = F.scaled_dot_product_attention(Q, K, V, attn_mask=allowed)
    eye = torch.eye(n, dtype=Q.dtype, device=Q.device).expand(B, n, n)
    weights = F.scaled_dot_product_attention(Q, K, eye, attn_mask=allowed)
    return out, weights


def _attention_with(scale="sqrt", dim=-1, mask_when="before", causal_shift=0, invert_padding=False,
                    invert_causal=False, swap_kv=False, mask_rows=False, naive_exp=False, swap_out=False,
                    padding=True, transposed=False):
    def fn(Q, K, V, key_mask, causal):
        n, d_k = Q.shape[1], Q.shape[-1]
        keys, values = (V, K) if swap_kv else (K, V)
        scores = keys @ Q.transpose(1, 2) if transposed else Q @ keys.transpose(1, 2)
        if scale == "sqrt":
            scores = scores / math.sqrt(d_k)
        elif scale == "d":
            scores = scores / d_k
        km = ~key_mask.bool() if invert_padding else key_mask.bool()
        if not padding:
            km = torch.ones_like(km)
        allowed = km[:, :, None].expand(-1, -1, n) if mask_rows else km[:, None, :].expand(-1, n, -1)
        if causal:
            i = torch.arange(n, device=Q.device)
            later = i[None, :] > i[:, None] + causal_shift  # j > i (+ shift): the future
            allowed = allowed & (later if invert_causal else ~later)
        if naive_exp:
            ex = torch.exp(scores) * allowed
            weights = ex / ex.sum(dim, keepdim=True)
        elif mask_when == "after":
            weights = torch.softmax(scores, dim=dim) * allowed
        else:
            weights = torch.softmax(scores.masked_fill(~allowed, NEG_INF), dim=dim)
        out = weights @ values
        return (weights, out) if swap_out else (out, weights)
    return fn


SMALLEST = {"B": 1, "n": 1, "d_k": 1, "d_v": 1}


def _attention_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [sized("causal, batch 2, lengths (5, 3), d_k=4, d_v=3", _attention_case, B=2, n=5, d_k=4, d_v=3,
                      causal=True, lengths=[5, 3], floors=SMALLEST, fit=fit_lengths),
                sized("not causal, batch 3, lengths (4, 2, 3), d_k=d_v=6", _attention_case, B=3, n=4, d_k=6, d_v=6,
                      causal=False, lengths=[4, 2, 3], floors=SMALLEST, fit=fit_lengths),
                sized("float64 inputs, causal, batch 2, lengths (4, 2), d_k=3, d_v=2", _attention_case, B=2, n=4, d_k=3,
                      d_v=2, causal=True, lengths=[4, 2], dtype=torch.float64, floors=SMALLEST, fit=fit_lengths)]
    return [Case("a batch of one without padding, causal", _attention_case(1, 6, 5, 5, True, lengths=[6])),
            Case("length 1 (one token per sequence), causal", _attention_case(3, 1, 4, 2, True, lengths=[1, 1, 1])),
            Case("all but one token padded, not causal", _attention_case(2, 6, 4, 4, False, lengths=[1, 6])),
            Case("all but one token padded, causal", _attention_case(2, 5, 3, 5, True, lengths=[5, 1])),
            Case("large scores (exp overflows in float32 unless the maximum is subtracted), causal",
                 _attention_case(2, 5, 8, 8, True, lengths=[5, 4], scale=10.0)),
            Case("float64 inputs, not causal", _attention_case(3, 5, 4, 4, False, dtype=torch.float64)),
            Case("float64 inputs, causal", _attention_case(2, 7, 6, 3, True, dtype=torch.float64)),
            Case("causal without padding, d_k=16, d_v=8", _attention_case(4, 9, 16, 8, True, lengths=[9] * 4)),
            Case("batch 6, random lengths up to 10, causal", _attention_case(6, 10, 8, 8, True))]


MASKED_ATTENTION = Check(
    task="masked_attention",
    what="Y = softmax(Q Kᵀ / sqrt(d_k), with -inf where key j is padding or, if causal, j > i) V, and the weights",
    reference=_attention_ref,
    grad_of=(0, 1, 2),  # Q, K and V: a model is trained through attention
    compare=compare_parts("output", "weights", rtol=1e-4, atol=1e-5, order=(1, 0), tuple_only=True,
                          nan_hint=ATTENTION_NAN_HINT),
    cases=_attention_cases(hidden=False),
    hidden_cases=_attention_cases(hidden=True),
    mutants=[
        Mutant(_attention_with(scale=None), "left out the 1/sqrt(d_k): the scores are Q Kᵀ / sqrt(d_k)"),
        Mutant(_attention_with(scale="d"), "divided the scores by d_k: divide by its square root, sqrt(d_k)"),
        Mutant(_attention_with(dim=1), "took the softmax over the queries (dim=1): each query's weights are a "
                                       "distribution over the keys, the last dimension"),
        Mutant(_attention_with(mask_when="after"), "applied the mask after the softmax: the remaining weights no "
                                                   "longer sum to 1; put -inf in the scores before the softmax"),
        Mutant(_attention_with(causal_shift=1), "let the future leak by one: position i may attend to j ≤ i, your "
                                                "mask also allows j = i + 1"),
        Mutant(_attention_with(causal_shift=-1), "kept a position from attending to itself: the causal mask "
                                                 "allows j ≤ i, the diagonal included"),
        Mutant(_attention_with(invert_causal=True), "inverted the causal mask: position i attends to the past "
                                                    "and itself (j ≤ i), not the future"),
        Mutant(_attention_with(padding=False), "attended to padding: keys where key_mask is False must get -inf "
                                               "before the softmax"),
        Mutant(_attention_with(invert_padding=True), "inverted the padding mask: key_mask is True at real tokens, "
                                                     "so -inf goes where it is False"),
        Mutant(_attention_with(mask_rows=True), "masked padded queries (rows) instead of padded keys (columns): "
                                                "key_mask says which keys may be attended to"),
        Mutant(_attention_with(swap_kv=True), "swapped K and V: the weights come from Q Kᵀ and average the rows "
                                              "of V"),
        Mutant(_attention_with(naive_exp=True), "computed exp(scores) directly: exp overflows for large scores; "
                                                "use torch.softmax (it subtracts each row's maximum)"),
        Mutant(_attention_with(swap_out=True), "returned (weights, output): return the output first, "
                                               "(output, weights)"),
        Mutant(_attention_with(transposed=True), "computed the scores as K Qᵀ (key j's row, query i's column): "
                                                 "E = Q Kᵀ, so that row i holds query i's scores against every "
                                                 "key and the softmax runs along the row"),
    ],
    forbidden=TORCH_ATTENTION,
    forbidden_attrs=(*COURSE_ATTRS, *TORCH_ATTENTION_ATTRS),
    forbidden_modules=COURSE,
    keep_dtype=True,
)
