"""Task 1 of exercise 7: sinusoidal position encodings."""

from __future__ import annotations

import math

import torch

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_tensor_mismatch, to_reference
from ...grading.reproduce import sized
from .shared import BASE, FORBIDDEN, theta_of


def _sin_case(n_pos: int, d: int):
    def make(g, device):
        return ((n_pos, d), {})
    return make


def _sin_ref(n_pos, d):
    pe = [[0.0] * d for _ in range(n_pos)]
    for p in range(n_pos):
        for i in range(d // 2):
            pe[p][2 * i] = math.sin(p * theta_of(i, d))
            pe[p][2 * i + 1] = math.cos(p * theta_of(i, d))
    return torch.tensor(pe, dtype=torch.float64).reshape(n_pos, d)


def _sin_with(mistake: str):
    def fn(n_pos, d):
        p = torch.arange(n_pos, dtype=torch.float64)[:, None]
        i = torch.arange(d // 2, dtype=torch.float64)
        theta = BASE ** (-2 * i / d)
        if mistake == "pair_index":  # 10000^(-i/d): the exponent halved
            theta = BASE ** (-i / d)
        elif mistake == "reciprocal":  # p · 10000^(2i/d)
            theta = BASE ** (2 * i / d)
        elif mistake == "from_one":
            p = p + 1
        angles = p * theta
        if mistake == "per_dimension":  # dimension j's own frequency 10000^(-j/d), sin at even j, cos at odd
            j = torch.arange(d, dtype=torch.float64)
            a = p * BASE ** (-j / d)
            return torch.where(j % 2 == 0, a.sin(), a.cos())
        first, second = (angles.cos(), angles.sin()) if mistake == "swapped" else (angles.sin(), angles.cos())
        if mistake == "halves":
            return torch.cat([first, second], dim=-1)
        return torch.stack([first, second], dim=-1).reshape(n_pos, d)
    return fn


def _sin_compare(out, ref):
    # float32 angles are accurate to about 1e-4 for the positions tested (< 1100)
    problem = describe_tensor_mismatch(out, ref, rtol=0.0, atol=2e-4, dim=None)
    if problem is None or not isinstance(out, torch.Tensor) or out.shape != ref.shape or not out.is_floating_point():
        return problem
    return problem + _frequencies(to_reference(out), ref)


def _frequencies(out: torch.Tensor, ref: torch.Tensor) -> str:
    """Where the rows are sines and cosines of some angle, the pair whose angle per position is wrong, and what
    it is: the values of row 1 (position 1) are sin and cos of that angle."""
    n_pos, d = ref.shape
    if n_pos < 2 or d % 2 or not torch.isfinite(out).all():
        return ""
    if not torch.allclose(out[0], ref[0], atol=2e-4):
        return "; row 0 is position 0: sin(0) = 0 at the even dimensions, cos(0) = 1 at the odd ones"
    pairs = out.reshape(n_pos, d // 2, 2)
    if not torch.allclose(pairs.pow(2).sum(-1), torch.ones(n_pos, d // 2, dtype=out.dtype), atol=1e-3):
        return ""  # not (sin, cos) pairs of one angle: nothing more to say
    for i in range(d // 2):
        turn = math.atan2(float(pairs[1, i, 0]), float(pairs[1, i, 1]))
        want = theta_of(i, d)
        if abs(turn - want) > 1e-3:
            return (f"; pair {i} (dimensions {2 * i} and {2 * i + 1}) turns by {turn:.6g} radians per position (row 1 "
                    f"holds the sin and cos of {turn:.6g}), expected θ_{i} = 10000^(-2·{i}/{d}) = {want:.6g}")
    return ""


def _even(p: dict) -> dict:
    p["d"] += p["d"] % 2  # d is even: pairs of dimensions
    return p


SINUSOIDAL = Check(
    task="sinusoidal_encoding",
    what="PE(p)[2i] = sin(p θ_i), PE(p)[2i+1] = cos(p θ_i), θ_i = 10000^(-2i/d): an (n_pos, d) float tensor",
    reference=_sin_ref,
    compare=_sin_compare,
    cases=[sized("n_pos=6, d=4", _sin_case, n_pos=6, d=4, floors={"n_pos": 1, "d": 2}, fit=_even),
           sized("n_pos=10, d=8", _sin_case, n_pos=10, d=8, floors={"n_pos": 1, "d": 2}, fit=_even)],
    hidden_cases=[Case("one position (p = 0 only)", _sin_case(1, 6)),
                  Case("d = 2 (one pair)", _sin_case(7, 2)),
                  Case("n_pos=50, d=16", _sin_case(50, 16)),
                  Case("far positions, n_pos=1024, d=32", _sin_case(1024, 32)),
                  Case("wide, n_pos=20, d=128", _sin_case(20, 128))],
    mutants=[
        Mutant(_sin_with("swapped"), "put cos at the even dimensions and sin at the odd ones: PE(p)[2i] = "
                                     "sin(p θ_i), PE(p)[2i+1] = cos(p θ_i)"),
        Mutant(_sin_with("halves"), "put all the sines in the first half and all the cosines in the second: here "
                                    "the pairs are interleaved, sin at dimension 2i and cos at 2i+1 beside it"),
        Mutant(_sin_with("pair_index"), "used 10000^(-i/d) for pair i: the exponent is -2i/d (pair i holds "
                                        "dimensions 2i and 2i+1), so the last pair turns at about 10000^(-1)"),
        Mutant(_sin_with("per_dimension"), "gave every dimension j its own frequency 10000^(-j/d): dimensions 2i "
                                           "and 2i+1 share θ_i = 10000^(-2i/d), one sin and one cos of the "
                                           "same angle"),
        Mutant(_sin_with("reciprocal"), "multiplied by 10000^(2i/d): the frequencies shrink with i, "
                                        "θ_i = 10000^(-2i/d) = 1 / 10000^(2i/d)"),
        Mutant(_sin_with("from_one"), "numbered the positions from 1: the first row is position 0, "
                                      "PE(0) = [0, 1, 0, 1, …]"),
    ],
    **FORBIDDEN,
)
