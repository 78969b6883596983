"""Task 2 of exercise 8: the position-wise feed-forward network."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ... import transformer as _course_transformer
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_tensor_mismatch
from ...grading.reproduce import sized
from ..common import in_dtype
from ..common import randn as _randn
from .shared import ATTRS, MODULES

_T = _course_transformer


def _ffn_case(shape: tuple[int, ...], d_ff: int, scale: float = 1.0, dtype=torch.float32):
    def make(g, device):
        d = shape[-1]
        x = _randn(shape, g, device, scale)
        w1 = _randn((d_ff, d), g, device, 1 / math.sqrt(d))
        b1 = _randn((d_ff,), g, device, 0.5)
        w2 = _randn((d, d_ff), g, device, 1 / math.sqrt(d_ff))
        b2 = _randn((d,), g, device, 0.5)
        return (tuple(in_dtype(t, dtype) for t in (x, w1, b1, w2, b2)), {})
    return make


def _ffn_ref(x, w1, b1, w2, b2):
    return F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)


def _ffn_with(mistake: str):
    def fn(x, w1, b1, w2, b2):
        if mistake == "no_transpose":
            return torch.relu(x @ w1 + b1) @ w2 + b2
        if mistake == "relu_first":
            return (torch.relu(x) @ w1.T + b1) @ w2.T + b2
        if mistake == "no_bias":
            return torch.relu(x @ w1.T) @ w2.T
        pre = x @ w1.T + b1
        h = {"gelu": F.gelu(pre), "linear": pre, "bias_after": torch.relu(x @ w1.T) + b1}.get(mistake, torch.relu(pre))
        out = h @ w2.T + b2
        return torch.relu(out) if mistake == "relu_after" else out
    return fn


def _ffn_sized(n: int, d: int, d_ff: int, B: int | None = None, dtype=torch.float32):
    return _ffn_case((n, d) if B is None else (B, n, d), d_ff, dtype=dtype)  # no B: a 2-d input


SHRINK = {"B": 1, "n": 1, "d": 1, "d_ff": 1}
SHRINK_2D = {"n": 1, "d": 1, "d_ff": 1}


def _ffn_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [sized("x (2, 5, 8), d_ff=16", _ffn_sized, B=2, n=5, d=8, d_ff=16, floors=SHRINK),
                sized("x (3, 6), d_ff = d = 6 (square weights)", _ffn_sized, n=3, d=6, d_ff=6, floors=SHRINK_2D),
                sized("float64 inputs, x (2, 3, 4), d_ff=6", _ffn_sized, B=2, n=3, d=4, d_ff=6, dtype=torch.float64,
                      floors=SHRINK)]
    return [Case("a batch of one, length one, d=4, d_ff=8", _ffn_case((1, 1, 4), 8)),
            Case("a 4-d input (2, 3, 4, 6), d_ff=24", _ffn_case((2, 3, 4, 6), 24)),
            Case("d_ff < d (a bottleneck): d=8, d_ff=3", _ffn_case((2, 4, 8), 3)),
            Case("square weights, d = d_ff = 7", _ffn_case((2, 5, 7), 7)),
            Case("d = d_ff = 1", _ffn_case((3, 4, 1), 1)),
            Case("large inputs (std 100)", _ffn_case((2, 4, 8), 32, scale=100.0)),
            Case("float64 inputs, d=12, d_ff=48", _ffn_case((2, 5, 12), 48, dtype=torch.float64)),
            Case("batch 4, n=9, d=16, d_ff=64", _ffn_case((4, 9, 16), 64))]


FEED_FORWARD = Check(
    task="feed_forward",
    what="FFN(x) = max(0, x W_1ᵀ + b_1) W_2ᵀ + b_2 at every position",
    reference=_ffn_ref,
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-4, dim=None),
    cases=_ffn_cases(hidden=False),
    hidden_cases=_ffn_cases(hidden=True),
    mutants=[
        Mutant(_ffn_with("gelu"), "used GELU: this network's activation is ReLU, max(0, ·)"),
        Mutant(_ffn_with("linear"), "left out the ReLU between the two layers: without it the two layers are one "
                                    "linear map"),
        Mutant(_ffn_with("relu_after"), "applied the ReLU to the output too: only the hidden layer goes through it, "
                                        "FFN(x) = max(0, x W_1ᵀ + b_1) W_2ᵀ + b_2"),
        Mutant(_ffn_with("relu_first"), "applied the ReLU to the input: it goes between the two layers, on "
                                        "x W_1ᵀ + b_1"),
        Mutant(_ffn_with("bias_after"), "added b_1 after the ReLU: the bias is inside it, max(0, x W_1ᵀ + b_1)"),
        Mutant(_ffn_with("no_bias"), "left out the biases: FFN(x) = max(0, x W_1ᵀ + b_1) W_2ᵀ + b_2"),
        Mutant(_ffn_with("no_transpose"), "multiplied by W instead of Wᵀ: the weights are stored as nn.Linear "
                                          "stores them, (d_out, d_in), so the hidden layer is x @ W_1.T + b_1"),
    ],
    forbidden=(_T.FeedForward,),
    forbidden_attrs=(*ATTRS, "FeedForward"),
    forbidden_modules=MODULES,
    keep_dtype=True,
    grad_of=(0, 1, 2, 3, 4),  # x and the four weights: a Transformer is trained through it
)
