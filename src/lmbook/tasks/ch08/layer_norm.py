"""Task 1 of exercise 8: LayerNorm."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ... import transformer as _course_transformer
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_tensor_mismatch
from ...grading.reproduce import sized
from ..common import in_dtype
from ..common import randn as _randn
from .shared import ATTRS, MODULES

_T = _course_transformer


# torch's normalisation layers: each is LayerNorm when its input is reshaped (instance_norm over a (1, rows, d)
# view, group_norm with one group, batch_norm over a transposed view in training mode)
TORCH_NORMS = (F.layer_norm, nn.LayerNorm, torch.layer_norm, torch.native_layer_norm, F.group_norm, nn.GroupNorm,
               torch.group_norm, torch.native_group_norm, F.instance_norm, nn.InstanceNorm1d, nn.InstanceNorm2d,
               nn.InstanceNorm3d, torch.instance_norm, F.batch_norm, nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d,
               torch.batch_norm, torch.native_batch_norm)
TORCH_NORM_ATTRS = ("layer_norm", "LayerNorm", "native_layer_norm", "group_norm", "GroupNorm", "native_group_norm",
                    "instance_norm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "batch_norm",
                    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "native_batch_norm")


def _ln_case(shape: tuple[int, ...], eps: float = 1e-5, scale: float = 1.0, offset: float = 0.0,
             dtype=torch.float32):
    def make(g, device):
        d = shape[-1]
        x = _randn(shape, g, device, scale, offset)
        weight = _randn((d,), g, device, 0.5, 1.0)  # a gain around 1, and a bias: neither is the identity
        bias = _randn((d,), g, device, 0.5)
        return ((in_dtype(x, dtype), in_dtype(weight, dtype), in_dtype(bias, dtype), eps), {})
    return make


def _ln_ref(x, weight, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def _ln_with(mistake: str):
    def fn(x, weight, bias, eps):
        dims = {"over_batch": 0, "over_sequence": (-2, -1)}.get(mistake, -1)
        mu = x.mean(dims, keepdim=True)
        if mistake == "naive_variance":  # E[x²] − E[x]²: cancels catastrophically when |mean| ≫ spread
            var = (x * x).mean(dims, keepdim=True) - mu * mu
        else:
            var = ((x - mu) ** 2).mean(dims, keepdim=True)
        if mistake in ("unbiased", "annotated"):
            n = x.shape[-1]
            var = var * n / (n - 1)
        if mistake in ("eps_on_std", "annotated"):
            normed = (x - mu) / (var.sqrt() + eps)
        elif mistake == "no_eps":
            normed = (x - mu) / var.sqrt()
        elif mistake.startswith("fixed_eps"):  # a constant written in, the argument ignored
            normed = (x - mu) / torch.sqrt(var + float(mistake.split(":")[1]))
        elif mistake == "variance_floor":  # ε as the smallest variance allowed
            normed = (x - mu) / torch.sqrt(var.clamp(min=eps))
        elif mistake == "std_floor":
            normed = (x - mu) / var.sqrt().clamp(min=eps)
        elif mistake == "variance":
            normed = (x - mu) / (var + eps)
        else:
            normed = (x - mu) / torch.sqrt(var + eps)
        if mistake == "no_affine":
            return normed
        if mistake == "swapped_affine":
            return bias * normed + weight
        return weight * normed + bias
    return fn


def _ln_sized(B: int, n: int, d: int, eps: float = 1e-5, scale: float = 1.0, dtype=torch.float32):
    return _ln_case((B, n, d), eps, scale, dtype=dtype)


SHRINK = {"B": 1, "n": 1, "d": 2}


def _ln_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [sized("x (2, 5, 8), eps=1e-5", _ln_sized, B=2, n=5, d=8, floors=SHRINK),
                sized("x (3, 4, 6), eps=0.1", _ln_sized, B=3, n=4, d=6, eps=0.1, floors=SHRINK),
                sized("a small spread: x (2, 3, 6) of std 0.01, eps=1e-5 (where ε matters)", _ln_sized, B=2, n=3, d=6,
                      scale=0.01, floors=SHRINK),
                sized("float64 inputs, x (2, 3, 4), eps=1e-3", _ln_sized, B=2, n=3, d=4, eps=1e-3, dtype=torch.float64,
                      floors=SHRINK),
                Case("d = 1: x (2, 3, 1), one feature per vector (σ² = 0, the output is the bias)",
                     _ln_case((2, 3, 1))),
                sized("a spread smaller than ε: x (2, 3, 6) of std 0.1, eps=0.1", _ln_sized, B=2, n=3, d=6,
                      eps=0.1, scale=0.1, floors=SHRINK)]
    return [Case("a batch of one, length one: x (1, 1, 8)", _ln_case((1, 1, 8))),
            Case("length one, x (3, 1, 16)", _ln_case((3, 1, 16))),
            Case("a 2-d input (n, d) = (7, 12)", _ln_case((7, 12))),
            Case("a 4-d input (2, 3, 4, 8), eps=0.01", _ln_case((2, 3, 4, 8), eps=0.01)),
            Case("d = 1 (the output is the bias)", _ln_case((3, 4, 1))),
            Case("a small spread (std 0.01), eps=1e-5", _ln_case((2, 3, 16), scale=0.01)),
            Case("large values (std 1e4)", _ln_case((2, 3, 16), scale=1e4)),
            Case("a large mean (500) and a small spread (std 2), float32", _ln_case((2, 4, 64), scale=2.0,
                                                                                     offset=500.0)),
            Case("float64 inputs, x (2, 5, 32), eps=1e-3", _ln_case((2, 5, 32), eps=1e-3, dtype=torch.float64)),
            Case("batch 4, n=9, d=64", _ln_case((4, 9, 64)))]


LAYER_NORM = Check(
    task="layer_norm",
    what="LN(x) = g ⊙ (x − μ) / sqrt(σ² + ε) + b over the last dimension, σ² the biased variance",
    reference=_ln_ref,
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=2e-4, dim=None),
    cases=_ln_cases(hidden=False),
    hidden_cases=_ln_cases(hidden=True),
    mutants=[
        Mutant(_ln_with("over_batch"), "normalised over the batch (dim 0), as BatchNorm does: LayerNorm normalises "
                                       "each vector over its own d features, the last dimension"),
        Mutant(_ln_with("over_sequence"), "normalised over the last two dimensions (the positions and the features "
                                          "together): each position's vector is normalised on its own, over its "
                                          "d features"),
        Mutant(_ln_with("unbiased"), "used the unbiased variance (divided by d − 1, torch's default for .var() and "
                                     ".std()): LayerNorm's σ² divides by d (unbiased=False)"),
        Mutant(_ln_with("annotated"), "wrote the Annotated Transformer's (x − μ) / (std + ε) with torch's unbiased "
                                      "std: LayerNorm divides by sqrt(σ² + ε), with σ² the biased variance "
                                      "(divided by d)"),
        Mutant(_ln_with("eps_on_std"), "added ε to the standard deviation, (x − μ) / (σ + ε): ε goes inside the "
                                       "square root, (x − μ) / sqrt(σ² + ε)"),
        Mutant(_ln_with("no_eps"), "left out ε: divide by sqrt(σ² + ε)"),
        *[Mutant(_ln_with(f"fixed_eps:{e}"), "used a fixed ε instead of the eps argument: divide by sqrt(σ² + eps) "
                                             "with the eps given (1e-5 in the block, 0.1 or 1e-3 in the tests)")
          for e in (1e-5, 1e-6, 1e-12)],
        *[Mutant(_ln_with(m), "used ε as a floor, max(σ², ε) or max(σ, ε): ε is added to the variance, "
                              "(x − μ) / sqrt(σ² + ε), so it changes every vector a little, not only the flat ones")
          for m in ("variance_floor", "std_floor")],
        Mutant(_ln_with("variance"), "divided by the variance: divide by the standard deviation, sqrt(σ² + ε)"),
        Mutant(_ln_with("no_affine"), "left out the gain and the bias: LN(x) = g ⊙ x̂ + b, with x̂ the normalised "
                                      "vector"),
        Mutant(_ln_with("swapped_affine"), "swapped the gain and the bias: the gain `weight` multiplies the "
                                           "normalised vector, the `bias` is added"),
        Mutant(_ln_with("naive_variance"), "computed the variance as E[x²] − E[x]²: when the mean is large next to "
                                           "the spread, the two terms nearly cancel and float32 loses the variance; "
                                           "average the squared deviations, mean((x − μ)²)"),
    ],
    forbidden=(*TORCH_NORMS, _T.LayerNorm),
    forbidden_attrs=(*ATTRS, *TORCH_NORM_ATTRS),
    forbidden_modules=MODULES,
    keep_dtype=True,
    grad_of=(0, 1, 2),  # x, the gain and the bias: a Transformer is trained through it
)
