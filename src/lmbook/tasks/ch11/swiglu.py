"""Task 2 of exercise 11: the SwiGLU feed-forward network."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ... import llama as _course_llama
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_tensor_mismatch
from ...grading.reproduce import sized
from ..common import in_dtype
from ..common import randn as _randn
from .shared import ATTRS, MODULES

_L = _course_llama

MLP_NAMES = ("gate_proj.weight", "up_proj.weight", "down_proj.weight")


def _swiglu_ref(x, params):
    """(silu(x W_gateᵀ) ⊙ x W_upᵀ) W_downᵀ, silu(z) = z σ(z), in x's dtype."""
    params = {k: v.to(x.dtype) for k, v in params.items()}
    gate = F.linear(x, params["gate_proj.weight"])
    up = F.linear(x, params["up_proj.weight"])
    return F.linear(gate * torch.sigmoid(gate) * up, params["down_proj.weight"])


def _swiglu_with(mistake: str):
    def fn(x, params):
        a = x @ params["gate_proj.weight"].T
        b = x @ params["up_proj.weight"].T
        h = {"swapped": lambda: F.silu(b) * a,
             "both": lambda: F.silu(a) * F.silu(b),
             "gelu": lambda: F.gelu(a) * b,
             "relu": lambda: F.relu(a) * b,
             "sigmoid": lambda: torch.sigmoid(a) * b,
             "no_up": lambda: F.silu(a),
             "sum": lambda: F.silu(a) + b}[mistake]()
        return h @ params["down_proj.weight"].T
    return fn


def _swiglu_case(shape: tuple[int, ...], d_ff: int, dtype=torch.float32, scale: float = 1.0):
    """x of the given shape (last dimension d) and LlamaMLP's weights, (d_ff, d), (d_ff, d), (d, d_ff)."""
    def make(g, device):
        d = shape[-1]
        x = _randn(shape, g, device, scale)
        params = {"gate_proj.weight": _randn((d_ff, d), g, device, 1 / math.sqrt(d)),
                  "up_proj.weight": _randn((d_ff, d), g, device, 1 / math.sqrt(d)),
                  "down_proj.weight": _randn((d, d_ff), g, device, 1 / math.sqrt(d_ff))}
        return ((in_dtype(x, dtype), {k: in_dtype(v, dtype) for k, v in params.items()}), {})
    return make


def _swiglu_sized(B: int, n: int, d: int, d_ff: int, dtype=torch.float32):
    return _swiglu_case((B, n, d), d_ff, dtype)


SHRINK = {"B": 1, "n": 1, "d": 1, "d_ff": 1}


SWIGLU = Check(
    task="swiglu",
    what="(silu(x W_gateᵀ) ⊙ x W_upᵀ) W_downᵀ, the weights stored as nn.Linear stores them, (out, in)",
    reference=_swiglu_ref,
    grad_of=(0, 1),  # x and the three weights: Llama is trained through it
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-5, dim=None),
    cases=[sized("x (2, 5, 8), d_ff = 24", _swiglu_sized, B=2, n=5, d=8, d_ff=24, floors=SHRINK),
           sized("x (1, 3, 6), d_ff = 16", _swiglu_sized, B=1, n=3, d=6, d_ff=16, floors=SHRINK),
           sized("float64, x (2, 2, 4), d_ff = 12", _swiglu_sized, B=2, n=2, d=4, d_ff=12, dtype=torch.float64,
                 floors=SHRINK)],
    hidden_cases=[Case("d_ff = 1", _swiglu_case((2, 3, 8), 1)),
                  Case("d_ff smaller than d", _swiglu_case((2, 3, 16), 8)),
                  Case("a 2-D x (n, d)", _swiglu_case((7, 12), 32)),
                  Case("large x (std 5: the gate far into silu's tails)", _swiglu_case((2, 4, 8), 24, scale=5.0)),
                  Case("float64", _swiglu_case((3, 4, 16), 40, dtype=torch.float64)),
                  Case("fresh: x (4, 9, 32), d_ff = 88 (about 8/3 d)", _swiglu_case((4, 9, 32), 88))],
    mutants=[
        Mutant(_swiglu_with("swapped"), "put silu on the up branch: the gate's branch goes through silu, "
                                        "silu(x W_gateᵀ) ⊙ (x W_upᵀ)"),
        Mutant(_swiglu_with("both"), "put silu on both branches: only the gate's goes through silu, the up branch "
                                     "stays linear"),
        Mutant(_swiglu_with("gelu"), "used GELU for the gate (that is GeGLU): SwiGLU's gate is silu, z σ(z)"),
        Mutant(_swiglu_with("relu"), "used ReLU for the gate (that is ReGLU): SwiGLU's gate is silu, z σ(z)"),
        Mutant(_swiglu_with("sigmoid"), "used the sigmoid for the gate (that is GLU): SwiGLU's gate is silu, "
                                        "z σ(z), the sigmoid times its input"),
        Mutant(_swiglu_with("no_up"), "left out the up branch: the gate multiplies x W_upᵀ element by element "
                                      "before W_down"),
        Mutant(_swiglu_with("sum"), "added the two branches: the gate multiplies the up branch element by element, "
                                    "silu(x W_gateᵀ) ⊙ (x W_upᵀ)"),
    ],
    forbidden=(_L.SwiGLU,),
    forbidden_attrs=(*ATTRS, "SwiGLU", "LlamaMLP"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)
