"""Task 2 of exercise 7: rotary position embeddings (RoPE)."""

from __future__ import annotations

import torch

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_tensor_mismatch
from ...grading.reproduce import sized
from ..common import in_dtype
from ..common import randn as _randn
from .shared import BASE, FORBIDDEN, theta_of


def _rope_case(shape: tuple[int, ...], positions=None, dtype=torch.float32, start: int = 0):
    def make(g, device):
        x = in_dtype(_randn(shape, g, device), dtype)
        T = shape[-2]
        pos = torch.arange(start, start + T) if positions is None else torch.tensor(positions)
        return ((x, pos.to(device)), {})
    return make


def _rope_sized(B: int, h: int, T: int, d: int, start: int = 0, dtype=torch.float32):
    return _rope_case((B, h, T, d), dtype=dtype, start=start)


def _even(p: dict) -> dict:
    p["d"] += p["d"] % 2  # d is even: pairs of dimensions
    return p


SHRINK = dict(floors={"B": 1, "h": 1, "T": 1, "d": 2}, fit=_even)


def _rope_ref(x, positions):
    d = x.shape[-1]
    theta = torch.tensor([theta_of(i, d) for i in range(d // 2)], dtype=torch.float64)
    angles = positions.cpu().double()[:, None] * theta  # (T, d/2)
    z = torch.view_as_complex(x.cpu().double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    turned = z * torch.polar(torch.ones_like(angles), angles)  # (x_2i + i x_2i+1) e^{i p θ_i}
    return torch.view_as_real(turned).reshape(x.shape).to(x.dtype)


def _rope_with(mistake: str):
    def fn(x, positions):
        T, d = x.shape[-2], x.shape[-1]
        i = torch.arange(d // 2, dtype=torch.float64, device=x.device)
        theta = BASE ** (-i / d) if mistake == "per_dimension_exponent" else BASE ** (-2 * i / d)
        pos = torch.arange(T, device=x.device) if mistake == "ignored_positions" else positions
        angles = pos.double()[:, None] * theta
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        if mistake == "backwards":
            sin = -sin
        if mistake == "wrong_axis":  # (B, T, h, d) code run on (B, h, T, d): dim -3 taken for the positions
            angles = torch.arange(x.shape[-3], device=x.device).double()[:, None, None] * theta
            cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        if mistake == "half_split":
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
        else:
            x1, x2 = x[..., 0::2], x[..., 1::2]
        if mistake == "sin_cos_swapped":
            cos, sin = sin, cos
        r1, r2 = x1 * cos - x2 * sin, x1 * sin + x2 * cos
        if mistake == "half_split":
            return torch.cat([r1, r2], dim=-1)
        return torch.stack([r1, r2], dim=-1).flatten(-2)
    return fn


ROPE = Check(
    task="apply_rope",
    what="each pair (x_2i, x_2i+1) of the vector at position p turned by the angle p θ_i, θ_i = 10000^(-2i/d)",
    reference=_rope_ref,
    grad_of=(0,),  # x: the queries and keys a Transformer is trained through
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=2e-4, dim=None),
    cases=[sized("(batch 1, 2 heads, T=5, d=4), positions 0 … 4", _rope_sized, B=1, h=2, T=5, d=4, **SHRINK),
           sized("(batch 2, 3 heads, T=6, d=8), positions 3 … 8", _rope_sized, B=2, h=3, T=6, d=8, start=3, **SHRINK),
           sized("float64 inputs, (batch 1, 2 heads, T=3, d=4), positions 2 … 4", _rope_sized, B=1, h=2, T=3, d=4,
                 start=2, dtype=torch.float64, **SHRINK)],
    hidden_cases=[Case("a single position (T=1), positions [0]", _rope_case((2, 2, 1, 6))),
                  Case("one position that is not 0 (the newest token of a cache), positions [9]",
                       _rope_case((1, 2, 1, 8), start=9)),
                  Case("positions 12 … 16 (queries after a cache of 12)", _rope_case((2, 2, 5, 8), start=12)),
                  Case("positions in no order, with repeats", _rope_case((1, 1, 6, 4), positions=[5, 0, 3, 3, 9, 1])),
                  Case("d = 2 (one pair)", _rope_case((2, 1, 7, 2))),
                  Case("a 3-d input (batch, T, d), odd T=7", _rope_case((3, 7, 8))),
                  Case("float64 inputs", _rope_case((2, 2, 6, 16), dtype=torch.float64)),
                  Case("far positions 1000 … 1005", _rope_case((1, 2, 6, 8), start=1000)),
                  Case("batch 4, 4 heads, T=10, d=32", _rope_case((4, 4, 10, 32)))],
    mutants=[
        Mutant(_rope_with("half_split"), "paired dimension i with i + d/2 (the half-split layout of GPT-NeoX and "
                                         "Llama): this task pairs neighbours, (2i, 2i+1), as the RoPE paper does"),
        Mutant(_rope_with("backwards"), "turned the pairs the wrong way (by -p θ_i): "
                                        "x'_2i = x_2i cos − x_2i+1 sin, x'_2i+1 = x_2i sin + x_2i+1 cos"),
        Mutant(_rope_with("sin_cos_swapped"), "swapped cos and sin: x'_2i = x_2i cos(p θ_i) − x_2i+1 sin(p θ_i)"),
        Mutant(_rope_with("per_dimension_exponent"), "used θ_i = 10000^(-i/d): pair i turns at 10000^(-2i/d)"),
        Mutant(_rope_with("ignored_positions"), "used 0 … T-1 instead of the positions given: turn each row by its "
                                                "own position, positions[t]"),
        Mutant(_rope_with("wrong_axis"), "turned each vector by its index along dim −3 (the heads, for a "
                                         "(batch, heads, T, d) input) instead of its position along dim −2: code "
                                         "written for (batch, T, heads, d) does this"),
    ],
    keep_dtype=True,
    **FORBIDDEN,
)
