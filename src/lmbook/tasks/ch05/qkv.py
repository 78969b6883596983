"""Task 2 of exercise 5: the Q, K, V projections."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import compare_parts
from ...grading.reproduce import sized
from ..common import COURSE, COURSE_ATTRS, TORCH_ATTENTION, TORCH_ATTENTION_ATTRS, in_dtype
from ..common import randn as _randn


def _qkv_case(B: int, n: int, d: int, d_k: int, d_v: int, scale: float = 1.0, dtype=torch.float32):
    def make(g, device):
        X = in_dtype(_randn((B, n, d), g, device, scale), dtype)
        ws = []
        for d_out in (d_k, d_k, d_v):
            ws += [in_dtype(_randn((d_out, d), g, device, 1 / math.sqrt(d)), dtype),
                   in_dtype(_randn((d_out,), g, device), dtype)]
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


SMALLEST = {"B": 1, "n": 1, "d": 1, "d_k": 1, "d_v": 1}


def _qkv_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [sized("batch 2, n=4, d=6, d_k=3, d_v=5", _qkv_case, B=2, n=4, d=6, d_k=3, d_v=5, floors=SMALLEST),
                sized("batch 1, n=3, d=d_k=d_v=4 (square weights)", _qkv_case, B=1, n=3, d=4, d_k=4, d_v=4,
                      floors=SMALLEST),
                sized("float64 inputs, batch 2, n=3, d=4, d_k=2, d_v=3", _qkv_case, B=2, n=3, d=4, d_k=2, d_v=3,
                      dtype=torch.float64, floors=SMALLEST)]
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
    compare=compare_parts("Q", "K", "V", rtol=1e-4, atol=1e-4, tuple_only=True),
    grad_of=(0, 1, 2, 3, 4, 5, 6),  # X and the six weights and biases: attention is trained through them
    trained_outputs=3,  # through Q, K and V alike
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
