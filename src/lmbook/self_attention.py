"""Self-attention: the queries, keys and values all come from one sequence (chapter 5).

For a sequence X of n vectors of size d (one row per position):

    Q = X W_q,   K = X W_k,   V = X W_v                       (n, d_k), (n, d_k), (n, d_v)
    A = softmax(Q Kᵀ / sqrt(d_k))                              (n, n): row i weighs every position j for i
    Y = A V                                                    (n, d_v)

Dividing by sqrt(d_k) keeps the scores' variance near 1 whatever d_k is (a dot product of d_k independent
unit-variance terms has variance d_k), so the softmax neither saturates nor flattens as d_k grows.

Masks are boolean and mean **True = may attend**, as in ``F.scaled_dot_product_attention``. (Beware:
``nn.MultiheadAttention``'s ``key_padding_mask`` and boolean ``attn_mask`` mean the opposite, True = masked.)
A masked score becomes -inf before the softmax, so its weight is exactly 0. Every query must be allowed at
least one key; a row with none would be 0/0.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def causal_mask(n_q: int, n_k: int | None = None, device: torch.device | str | None = None) -> torch.Tensor:
    """(n_q, n_k) True where query i may see key j: j ≤ i, aligned at the end when n_k > n_q (the last query
    is the newest token, as when new queries attend to a cache of earlier keys)."""
    n_k = n_q if n_k is None else n_k
    i = torch.arange(n_q, device=device).unsqueeze(1) + (n_k - n_q)
    return torch.arange(n_k, device=device).unsqueeze(0) <= i


def key_padding_to_mask(key_mask: torch.Tensor) -> torch.Tensor:
    """A (B, n_k) mask, True at real tokens, as an attention mask (B, 1, 1, n_k) that broadcasts over heads
    and queries."""
    return key_mask[:, None, None, :].bool()


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q Kᵀ / sqrt(d_k) with masked scores at -inf) V, and the weights.

    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v); ``mask`` broadcasts to (..., n_q, n_k): boolean,
    True = may attend, or float, added to the scores (as ``F.scaled_dot_product_attention`` takes it).
    Returns the outputs (..., n_q, d_v) and the attention weights (..., n_q, n_k).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:  # a float mask is added to the scores: a position bias, -inf where masked (chapter 7)
        scores = scores + mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


class SelfAttention(nn.Module):
    """One head of self-attention: Q, K, V are linear maps of the same input (no bias, as in the chapter)."""

    def __init__(self, d_model: int, d_k: int, d_v: int | None = None):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_v or d_k, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, n, d_model) → outputs (B, n, d_v) and weights (B, n, n)."""
        if causal:
            c = causal_mask(x.shape[1], device=x.device)
            mask = c if mask is None else mask & c
        return scaled_dot_product_attention(self.W_q(x), self.W_k(x), self.W_v(x), mask)
