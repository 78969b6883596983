"""Checks for exercise 5 (chapter 5: self-attention).

The references are torch's own ops given the student's inputs (``F.scaled_dot_product_attention``,
``F.linear``), never the course's answers in ``lmbook.self_attention`` or ``lmbook.multihead``. Usage in a
notebook: ``from lmbook.tasks.ch05 import check``.

Shapes, as in the chapter, with a batch dimension in front: Q, K (B, n, d_k), V (B, n, d_v); ``key_mask``
(B, n) is True at real tokens, padding comes at the end of a sequence and every sequence has at least one
real token; ``causal`` (a bool) lets position i attend only to positions j ≤ i. Masks mean True = may attend.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..grading.checks import Case, Check, Mutant, Registry
from ..grading.compare import compare_parts
from .common import randn as _randn
from .questions.ch05 import QUESTIONS

COURSE = ("lmbook.self_attention", "lmbook.multihead", "lmbook.causal_lm", "lmbook.attention")
COURSE_ATTRS = ("self_attention", "multihead", "causal_lm", "attention")
TORCH_ATTENTION = (F.scaled_dot_product_attention, nn.MultiheadAttention, F.multi_head_attention_forward,
                   nn.Transformer, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, nn.TransformerEncoder,
                   nn.TransformerDecoder)
TORCH_ATTENTION_ATTRS = ("scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward",
                         "Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder",
                         "TransformerDecoder")
NEG_INF = float("-inf")


def _key_mask(B: int, n: int, g: torch.Generator, lengths=None) -> torch.Tensor:
    """(B, n) bool, True at real tokens (padding at the end); the longest sequence fills the batch."""
    lens = torch.tensor(lengths) if lengths is not None else torch.randint(1, n + 1, (B,), generator=g)
    if lengths is None:
        lens[int(torch.randint(0, B, (1,), generator=g))] = n
    return torch.arange(n).unsqueeze(0) < lens.unsqueeze(1)


# ----------------------------------------------------------------------------- Task 1: masked attention

def _attention_case(B: int, n: int, d_k: int, d_v: int, causal: bool, lengths=None, scale: float = 1.0,
                    dtype=torch.float32):
    def make(g, device):
        key_mask = _key_mask(B, n, g, lengths)
        Q = _randn((B, n, d_k), g, device, scale).to(dtype)
        K = _randn((B, n, d_k), g, device, scale).to(dtype)
        # large made-up keys at padding: a query that attends there gets a very different answer
        K = torch.where(key_mask.to(device).unsqueeze(-1), K, 3.0 * K.abs() + 2.0)
        Vals = _randn((B, n, d_v), g, device).to(dtype)
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
                    padding=True):
    def fn(Q, K, V, key_mask, causal):
        n, d_k = Q.shape[1], Q.shape[-1]
        keys, values = (V, K) if swap_kv else (K, V)
        scores = Q @ keys.transpose(1, 2)
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


def _attention_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("causal, batch 2, lengths (5, 3), d_k=4, d_v=3",
                     _attention_case(2, 5, 4, 3, True, lengths=[5, 3])),
                Case("not causal, batch 3, lengths (4, 2, 3), d_k=d_v=6",
                     _attention_case(3, 4, 6, 6, False, lengths=[4, 2, 3]))]
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
    compare=compare_parts("output", "weights", rtol=1e-4, atol=1e-5, order=(1, 0)),
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
    ],
    forbidden=TORCH_ATTENTION,
    forbidden_attrs=(*COURSE_ATTRS, *TORCH_ATTENTION_ATTRS),
    forbidden_modules=COURSE,
    keep_dtype=True,
)


# ----------------------------------------------------------------------------- Task 2: Q, K, V projections

def _qkv_case(B: int, n: int, d: int, d_k: int, d_v: int, scale: float = 1.0, dtype=torch.float32):
    def make(g, device):
        X = _randn((B, n, d), g, device, scale).to(dtype)
        ws = []
        for d_out in (d_k, d_k, d_v):
            ws += [_randn((d_out, d), g, device, 1 / math.sqrt(d)).to(dtype), _randn((d_out,), g, device).to(dtype)]
        return ((X, *ws), {})
    return make


def _qkv_ref(X, W_q, b_q, W_k, b_k, W_v, b_v):
    return F.linear(X, W_q, b_q), F.linear(X, W_k, b_k), F.linear(X, W_v, b_v)


def _qkv_with(transpose=True, bias=True, swap_kv=False, one_matrix=None, prescale=False):
    def proj(X, W, b):
        y = X @ (W.T if transpose else W)
        return y + b if bias else y

    def fn(X, W_q, b_q, W_k, b_k, W_v, b_v):
        if one_matrix == "q":
            W_k, b_k, W_v, b_v = W_q, b_q, W_q, b_q
        Q, K, Vals = proj(X, W_q, b_q), proj(X, W_k, b_k), proj(X, W_v, b_v)
        if prescale:
            Q = Q / math.sqrt(W_q.shape[0])
        return (Q, Vals, K) if swap_kv else (Q, K, Vals)
    return fn


def _qkv_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("batch 2, n=4, d=6, d_k=3, d_v=5", _qkv_case(2, 4, 6, 3, 5)),
                Case("batch 1, n=3, d=d_k=d_v=4 (square weights)", _qkv_case(1, 3, 4, 4, 4))]
    return [Case("a batch of one, length one, d=5, d_k=2, d_v=3", _qkv_case(1, 1, 5, 2, 3)),
            Case("square weights, d=d_k=d_v=8", _qkv_case(3, 6, 8, 8, 8)),
            Case("d_k = d_v, d=4, d_k=d_v=7", _qkv_case(2, 5, 4, 7, 7)),
            Case("large inputs", _qkv_case(2, 4, 6, 6, 6, scale=50.0)),
            Case("float64 inputs", _qkv_case(2, 5, 6, 3, 6, dtype=torch.float64)),
            Case("batch 8, n=12, d=16, d_k=8, d_v=8", _qkv_case(8, 12, 16, 8, 8))]


QKV = Check(
    task="qkv_projections",
    what="Q = X W_qᵀ + b_q, K = X W_kᵀ + b_k, V = X W_vᵀ + b_v, with W as nn.Linear stores it (d_out, d)",
    reference=_qkv_ref,
    compare=compare_parts("Q", "K", "V", rtol=1e-4, atol=1e-4),
    cases=_qkv_cases(hidden=False),
    hidden_cases=_qkv_cases(hidden=True),
    mutants=[
        Mutant(_qkv_with(transpose=False), "multiplied by W instead of Wᵀ: the weights are stored as nn.Linear "
                                           "stores them, (d_out, d), so Q = X @ W_q.T + b_q"),
        Mutant(_qkv_with(bias=False), "left out the biases: Q = X W_qᵀ + b_q, and the same for K and V"),
        Mutant(_qkv_with(swap_kv=True), "swapped K and V (or returned them as (Q, V, K)): K = X W_kᵀ + b_k "
                                        "comes second, V = X W_vᵀ + b_v third"),
        Mutant(_qkv_with(one_matrix="q"), "used W_q for all three: queries, keys and values each have their own "
                                          "weights"),
        Mutant(_qkv_with(prescale=True), "divided Q by sqrt(d_k): that scaling belongs to the attention scores "
                                         "(Task 1); the projection is Q = X W_qᵀ + b_q"),
    ],
    forbidden=(*TORCH_ATTENTION, F.linear, nn.Linear, F.bilinear, nn.Bilinear),
    forbidden_attrs=(*COURSE_ATTRS, *TORCH_ATTENTION_ATTRS, "linear", "Linear", "bilinear", "Bilinear"),
    forbidden_modules=COURSE,
    keep_dtype=True,
)

CHECKS = [MASKED_ATTENTION, QKV]
check = Registry(CHECKS + QUESTIONS)
