"""Positional information for attention (chapter 7).

Attention treats its input as a set: permute the tokens and the outputs permute with them. Order must be
put in, either into the vectors (absolute positions) or into the scores (relative positions).

Sinusoidal encodings (Vaswani et al., 2017), for position p and dimension pair i = 0 … d/2 - 1:

    θ_i = base^(-2i/d)
    PE(p)[2i] = sin(p θ_i),   PE(p)[2i+1] = cos(p θ_i)

Each pair is a point on a circle turning at its own speed, so moving k positions is a rotation by k θ_i in
every pair: one matrix M_k (block-diagonal 2×2 rotations) with M_k PE(p) = PE(p + k) for every p.

RoPE (Su et al., 2021) rotates the queries and keys themselves: pair i of a vector at position p turns by
p θ_i. Two rotations by p θ and p' θ leave a dot product that depends only on p - p'. The paper pairs
neighbouring dimensions (2i, 2i+1), as here; GPT-NeoX and Hugging Face's Llama pair dimension i with
i + d/2 ("half-split"). Both are the same rotation up to a permutation of the dimensions, but weights
trained with one are wrong under the other.

ALiBi (Press et al., 2022) adds -m_h (i - j) to head h's score of query i for key j ≤ i: a linear penalty
on distance, a different slope m_h per head, nothing learned. A relative-position bias (Shaw et al., 2018;
T5 buckets it) learns one number per head and clipped offset j - i instead.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def frequencies(d: int, base: float = 10000.0, device: torch.device | str | None = None) -> torch.Tensor:
    """θ_i = base^(-2i/d) for i = 0 … d/2 - 1: each dimension pair's angle per position."""
    if d % 2:
        raise ValueError(f"positional encodings pair dimensions: d must be even, got {d}")
    return base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)


def sinusoidal(n_pos: int, d: int, base: float = 10000.0) -> torch.Tensor:
    """(n_pos, d) encodings PE(p)[2i] = sin(p θ_i), PE(p)[2i+1] = cos(p θ_i), in float32."""
    angles = torch.arange(n_pos, dtype=torch.float64)[:, None] * frequencies(d, base)  # (n_pos, d/2)
    pe = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (n_pos, d/2, 2): pairs side by side
    return pe.reshape(n_pos, d).float()


def shift_matrix(k: int, d: int, base: float = 10000.0) -> torch.Tensor:
    """(d, d) M_k with M_k PE(p) = PE(p + k) for every p: a rotation by k θ_i in each pair (2i, 2i+1).

    From sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b - sin a sin b, with a = p θ_i
    and b = k θ_i. It does not depend on p: that is why a linear layer can learn to look k positions back.
    """
    b = k * frequencies(d, base)
    m = torch.zeros(d, d, dtype=torch.float64)
    i = torch.arange(0, d, 2)
    m[i, i], m[i, i + 1] = b.cos(), b.sin()  # new sin = sin·cos b + cos·sin b
    m[i + 1, i], m[i + 1, i + 1] = -b.sin(), b.cos()  # new cos = cos·cos b - sin·sin b
    return m


def rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0,
         interleaved: bool = True) -> torch.Tensor:
    """Rotary position embedding of ``x`` (..., T, d): pair i of the vector at position p turned by p θ_i.

    ``positions``: (T,) integer positions (default 0 … T-1). ``interleaved=True`` pairs (2i, 2i+1) as in the
    paper; ``False`` pairs (i, i + d/2) as GPT-NeoX and Llama do. The angles are computed in float64 (p θ_i
    loses digits in float32 for large p), the rotation in x's dtype.
    """
    T, d = x.shape[-2], x.shape[-1]
    positions = torch.arange(T, device=x.device) if positions is None else positions.to(x.device)
    angles = positions.double()[:, None] * frequencies(d, base, x.device)  # (T, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
    else:
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
    r1, r2 = x1 * cos - x2 * sin, x1 * sin + x2 * cos  # (x1 + i x2) · e^{i p θ}
    return torch.stack([r1, r2], dim=-1).flatten(-2) if interleaved else torch.cat([r1, r2], dim=-1)


def alibi_slopes(n_head: int) -> torch.Tensor:
    """The ALiBi paper's head slopes: for n a power of two, 2^(-8/n), 2^(-16/n), …, 2^(-8).

    Otherwise the slopes of the largest power of two m below n, then every other slope of 2m for the
    n - m heads left (the paper's own code does this; the new slopes fall between the first ones).
    """
    if n_head < 1:
        raise ValueError(f"n_head must be at least 1, got {n_head}")

    def power_of_two(n: int) -> list[float]:
        return [2 ** (-8 * (h + 1) / n) for h in range(n)]

    m = 2 ** int(math.floor(math.log2(n_head)))
    slopes = power_of_two(m) + power_of_two(2 * m)[0::2][: n_head - m]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi_bias(n_head: int, n_q: int, n_k: int | None = None) -> torch.Tensor:
    """(n_head, n_q, n_k) ALiBi bias -m_h (i - j), query i aligned at the end of the keys (as a cache is).

    Future keys (j > i) get a positive bias here; a causal mask removes them anyway.
    """
    n_k = n_q if n_k is None else n_k
    i = torch.arange(n_q)[:, None] + (n_k - n_q)
    distance = (i - torch.arange(n_k)[None, :]).double()  # i - j
    return -alibi_slopes(n_head)[:, None, None] * distance


class RelativePositionBias(nn.Module):
    """A learned bias per head and offset j - i, added to the attention scores.

    Offsets beyond ``max_distance`` share the bias of the furthest one (clipped), so a model can run on
    sequences longer than it was trained on. ``forward(n_q, n_k)`` returns (n_head, n_q, n_k).
    """

    def __init__(self, n_head: int, max_distance: int):
        super().__init__()
        self.max_distance = max_distance
        self.table = nn.Parameter(torch.zeros(2 * max_distance + 1, n_head))  # offsets -D … D

    def forward(self, n_q: int, n_k: int | None = None) -> torch.Tensor:
        n_k = n_q if n_k is None else n_k
        i = torch.arange(n_q, device=self.table.device)[:, None] + (n_k - n_q)
        offset = torch.arange(n_k, device=self.table.device)[None, :] - i  # j - i
        index = offset.clamp(-self.max_distance, self.max_distance) + self.max_distance
        return self.table[index].permute(2, 0, 1)  # (n_q, n_k, n_head) -> (n_head, n_q, n_k)
