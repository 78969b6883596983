"""Task 1 of exercise 11: RMSNorm."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ... import llama as _course_llama
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_tensor_mismatch
from ...grading.reproduce import sized
from ..common import in_dtype
from ..common import randn as _randn
from .shared import ATTRS, MODULES

_L = _course_llama


def _rms_ref(x, weight, eps=1e-6):
    """g ⊙ x / sqrt(mean(x²) + ε) over the last dimension, in x's dtype."""
    mean_square = (x * x).sum(-1, keepdim=True) / x.shape[-1]
    return weight.to(x.dtype) * (x / torch.sqrt(mean_square + eps))


def _rms_with(mistake: str):
    def fn(x, weight, eps=1e-6):
        if mistake == "mean":  # LayerNorm without its bias
            mu = x.mean(-1, keepdim=True)
            return weight * (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + eps)
        if mistake == "eps_outside":
            return weight * x / (torch.sqrt((x ** 2).mean(-1, keepdim=True)) + eps)
        if mistake == "no_eps":
            return weight * x / torch.sqrt((x ** 2).mean(-1, keepdim=True))
        if mistake == "no_gain":
            return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps)
        if mistake == "norm":  # the root of the sum, not of the mean
            return weight * x / torch.sqrt((x ** 2).sum(-1, keepdim=True) + eps)
        if mistake == "all_dims":
            return weight * x / torch.sqrt((x ** 2).mean() + eps)
        raise ValueError(mistake)
    return fn


def _rms_case(shape: tuple[int, ...], scale: float = 1.0, offset: float = 0.0, eps: float | None = None,
              dtype=torch.float32, zero_row: bool = False):
    """x of the given shape (normal, times ``scale``, plus ``offset``: a mean far from 0), a gain around 1."""
    def make(g, device):
        x = _randn(shape, g, device, scale, offset)
        if zero_row:  # a position whose every feature is 0: only ε keeps the division finite
            x = x.clone()
            x.view(-1, shape[-1])[0] = 0.0
        weight = _randn((shape[-1],), g, device, 0.3, 1.0)
        kwargs = {} if eps is None else {"eps": eps}
        return ((in_dtype(x, dtype), in_dtype(weight, dtype)), kwargs)
    return make


def _rms_sized(B: int, n: int, d: int, scale: float = 1.0, offset: float = 0.0, eps: float | None = None,
               dtype=torch.float32, zero_row: bool = False):
    return _rms_case((B, n, d), scale, offset, eps, dtype, zero_row)


SHRINK = {"B": 1, "n": 1, "d": 2}


RMS_NORM = Check(
    task="rms_norm",
    what="g ⊙ x / sqrt(mean(x²) + ε) over the last dimension: no mean subtracted, no bias, ε inside the root",
    reference=_rms_ref,
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-5, dim=None),
    cases=[sized("x (2, 5, 8), mean 0.5, ε = 1e-6 (the default)", _rms_sized, B=2, n=5, d=8, offset=0.5,
                 floors=SHRINK),
           sized("small x (std 1e-3, where ε counts), ε = 1e-6", _rms_sized, B=2, n=4, d=6, scale=1e-3,
                 floors=SHRINK),
           sized("a position of zeros (ε keeps it finite: the output is 0 there)", _rms_sized, B=2, n=3, d=4,
                 zero_row=True, floors=SHRINK),
           sized("ε = 1e-5 given, x (3, 2, 16)", _rms_sized, B=3, n=2, d=16, eps=1e-5, floors=SHRINK),
           sized("float64, x (2, 3, 4) of std 0.01", _rms_sized, B=2, n=3, d=4, scale=0.01, dtype=torch.float64,
                 floors=SHRINK)],
    hidden_cases=[Case("a position of zeros", _rms_case((2, 3, 8), zero_row=True)),
                  Case("one feature (d = 1)", _rms_case((2, 4, 1))),
                  Case("a 2-D x (n, d)", _rms_case((6, 12), offset=-1.0)),
                  Case("a 1-D x (d,)", _rms_case((10,), offset=2.0)),
                  Case("tiny x (std 1e-4) and ε = 1e-5", _rms_case((2, 3, 8), scale=1e-4, eps=1e-5)),
                  Case("large x (std 1000)", _rms_case((2, 3, 8), scale=1000.0)),
                  Case("float64, ε = 1e-12", _rms_case((3, 4, 16), dtype=torch.float64, eps=1e-12, offset=0.3)),
                  Case("fresh: x (4, 7, 64)", _rms_case((4, 7, 64), offset=0.2)),
                  Case("a batch of one, x (1, 5, 8)", _rms_case((1, 5, 8), offset=-0.5))],
    mutants=[
        Mutant(_rms_with("mean"), "subtracted the mean (LayerNorm's centring): RMSNorm divides x itself by its root "
                                  "mean square, sqrt(mean(x²) + ε), and subtracts nothing"),
        Mutant(_rms_with("eps_outside"), "added ε outside the root, sqrt(mean(x²)) + ε: it goes inside, "
                                         "sqrt(mean(x²) + ε), which is what matters when x is small"),
        Mutant(_rms_with("no_eps"), "left out ε: a position of zeros then gives 0 / 0 = nan; divide by "
                                    "sqrt(mean(x²) + ε)"),
        Mutant(_rms_with("no_gain"), "left out the gain: multiply the normalised x by weight (g), feature by "
                                     "feature"),
        Mutant(_rms_with("norm"), "divided by the root of the sum of squares (the vector's norm): RMSNorm divides "
                                  "by the root of their mean, the sum divided by d"),
        Mutant(_rms_with("all_dims"), "took the mean over the whole tensor: the mean of x² is over the last "
                                      "dimension only, one per position (mean(-1, keepdim=True))"),
    ],
    forbidden=(F.rms_norm, nn.RMSNorm, _L.RMSNorm),
    forbidden_attrs=(*ATTRS, "rms_norm", "RMSNorm"),
    forbidden_modules=MODULES,
    keep_dtype=True,
    grad_of=(0, 1),  # x and the gain: Llama is trained through it
)
