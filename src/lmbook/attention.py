"""Attention as a soft lookup: score every key against the query, softmax, average the values.

    dot             score(s, h) = sᵀh
    scaled dot      score(s, h) = sᵀh / sqrt(d)
    multiplicative  score(s, h) = sᵀ W h                    (bilinear, Luong)
    additive        score(s, h) = vᵀ tanh(W₁ h + W₂ s)       (Bahdanau)

    α = softmax(scores) over the source positions (padding masked out)
    context = Σ_j α_j h_j

Shapes: a batch of B queries s (B, d_s) against B sequences of keys h (B, T, d_h);
``mask`` (B, T) is True at real positions. Chapter 4 builds on this; the
Transformer chapters use the scaled dot-product form with many queries.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def dot_scores(s: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """sᵀh for every key: (B, d), (B, T, d) → (B, T)."""
    return torch.einsum("bd,btd->bt", s, h)


def scaled_dot_scores(s: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """sᵀh / sqrt(d): dot products of random d-dim vectors have variance d, so this keeps softmax soft."""
    return dot_scores(s, h) / math.sqrt(s.shape[-1])


class MultiplicativeScore(nn.Module):
    """sᵀ W h, with W of shape (d_s, d_h): lets the query and the keys live in different spaces."""

    def __init__(self, d_s: int, d_h: int):
        super().__init__()
        self.W = nn.Parameter(torch.randn(d_s, d_h) / math.sqrt(d_h))

    def forward(self, s: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bi,ij,btj->bt", s, self.W, h)


class AdditiveScore(nn.Module):
    """vᵀ tanh(W₁ h + W₂ s): a one-hidden-layer network scores each (query, key) pair."""

    def __init__(self, d_s: int, d_h: int, d_a: int):
        super().__init__()
        self.W1 = nn.Linear(d_h, d_a, bias=False)
        self.W2 = nn.Linear(d_s, d_a, bias=False)
        self.v = nn.Linear(d_a, 1, bias=False)

    def forward(self, s: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return self.v(torch.tanh(self.W1(h) + self.W2(s).unsqueeze(1))).squeeze(-1)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last axis with masked-out positions at exactly 0 (scores set to -inf first)."""
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), float("-inf"))
    return torch.softmax(scores, dim=-1)


def attend(scores: torch.Tensor, h: torch.Tensor,
           mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The context vector Σ_j α_j h_j (B, d_h) and the weights α (B, T)."""
    alpha = masked_softmax(scores, mask)
    return torch.einsum("bt,btd->bd", alpha, h), alpha
