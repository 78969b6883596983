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
on distance, a different slope m_h per head, nothing learned.

:class:`RelativePositionBias` learns one *number* per head and clipped offset clip(j - i, -D, D), added to
the scores and shared by all layers. It combines two papers, neither of which did exactly this:

* Shaw et al. (2018) clip the offset at ±k, as here, but learn *vectors* a^K_{j-i} (and a^V_{j-i}) of the
  head's size, shared by the heads and one set per layer, and add them to the keys (and values):
  e_ij = q_i · (k_j + a^K_{j-i}) / sqrt(d_head).
* T5 (Raffel et al., 2020) learns a scalar per head and offset, shared by all layers, as here, but maps
  the offsets to 32 buckets (:func:`t5_bucket`): one bucket per offset near 0, logarithmically wider ones
  further out, and one for every offset beyond 128.
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
    """(n_pos, d) encodings: PE(p)[2i] = sin(p θ_i), PE(p)[2i+1] = cos(p θ_i)."""
    p = torch.arange(n_pos, dtype=torch.float64)
    angles = p[:, None] * frequencies(d, base)  # p θ_i, (n_pos, d/2)
    pe = torch.stack([angles.sin(), angles.cos()], dim=-1)  # sin at 2i, cos at 2i+1
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
    if positions is None:
        positions = torch.arange(T, device=x.device)
    angles = positions.to(x.device).double()[:, None] * frequencies(d, base, x.device)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, d/2)
    if interleaved:  # pair i = (x_2i, x_2i+1), the paper's
        x1, x2 = x[..., 0::2], x[..., 1::2]
    else:  # pair i = (x_i, x_i+d/2), GPT-NeoX's and Llama's
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
    r1, r2 = x1 * cos - x2 * sin, x1 * sin + x2 * cos  # (x1 + i x2) · e^{i p θ_i}
    if interleaved:
        return torch.stack([r1, r2], dim=-1).flatten(-2)
    return torch.cat([r1, r2], dim=-1)


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
        device = self.table.device
        i = torch.arange(n_q, device=device)[:, None] + (n_k - n_q)  # queries last
        offset = torch.arange(n_k, device=device)[None, :] - i  # j - i, (n_q, n_k)
        D = self.max_distance
        index = offset.clamp(-D, D) + D  # row 0 holds offset -D
        return self.table[index].permute(2, 0, 1)  # (n_head, n_q, n_k)


def t5_bucket(offset: torch.Tensor, bidirectional: bool = True, n_buckets: int = 32,
              max_distance: int = 128) -> torch.Tensor:
    """T5's bucket of each offset j - i (Raffel et al., 2020; Mesh TensorFlow's code, as Hugging Face's).

    Bidirectional (the encoder): half the buckets for keys before the query, half for keys after it.
    Causal (the decoder): all of them for keys before it, and offsets > 0 count as 0. Within a direction
    of b buckets, distances 0 … b/2 - 1 get one bucket each; larger ones share buckets spaced
    logarithmically up to ``max_distance``, and every distance beyond it shares the last bucket.
    """
    bucket = torch.zeros_like(offset)
    if bidirectional:
        n_buckets //= 2
        bucket = bucket + (offset > 0).long() * n_buckets  # keys after the query
        distance = offset.abs()
    else:
        distance = (-offset).clamp(min=0)
    exact = n_buckets // 2
    far = distance.clamp(min=1).float() / exact  # clamp: log(0) is never used, but must not warn
    log_bucket = exact + (far.log() / math.log(max_distance / exact) * (n_buckets - exact)).long()
    log_bucket = log_bucket.clamp(max=n_buckets - 1)
    return bucket + torch.where(distance < exact, distance, log_bucket)
