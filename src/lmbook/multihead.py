"""Multi-head attention: h heads of size d/h attend in parallel, then one projection mixes them (chapter 6).

    Q = X_q W_q + b_q,   K = X_kv W_k + b_k,   V = X_kv W_v + b_v                 (B, n, d)
    split: (B, n, d) → (B, h, n, d/h)              a view, then a transpose (no copy)
    head_i = softmax(Q_i K_iᵀ / sqrt(d/h)) V_i       every head at once, as one batched matmul
    merge: (B, h, n, d/h) → (B, n, d)              transpose back, then one copy into rows
    Y = merge(heads) W_o + b_o

The weights are packed as in ``torch.nn.MultiheadAttention``: ``in_proj`` holds [W_q; W_k; W_v] as one
(3d, d) matrix, so ``load_torch`` copies one into the other and the two agree to rounding. Self-attention
passes one sequence; cross-attention (chapter 8) passes the decoder's states as ``x`` and the encoder's as
``context``. Masks mean True = may attend (see :mod:`lmbook.self_attention`).
"""

from __future__ import annotations

import torch
from torch import nn

from .positions import rope
from .self_attention import causal_mask, key_padding_to_mask, scaled_dot_product_attention


def split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """(B, n, d) → (B, n_head, n, d / n_head): head i gets features i·d/h ... (i+1)·d/h − 1 of every position."""
    B, n, d = x.shape
    return x.view(B, n, n_head, d // n_head).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, n_head, n, d_head) → (B, n, n_head · d_head), the inverse of :func:`split_heads`."""
    B, h, n, d_head = x.shape
    return x.transpose(1, 2).reshape(B, n, h * d_head)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int, bias: bool = True, rope: bool = False):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} is not divisible by n_head={n_head}")
        if rope and (d_model // n_head) % 2:
            raise ValueError(f"RoPE turns pairs of dimensions: the head size {d_model // n_head} must be even")
        self.n_head = n_head
        self.rope = rope  # chapter 7: rotate each head's queries and keys by their positions
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)  # [W_q; W_k; W_v]
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None, *, key_mask: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, n_q, d) queries; ``context`` (B, n_k, d) keys and values (default: x itself).

        ``key_mask`` (B, n_k) True at real tokens; ``mask`` broadcastable to (B, h, n_q, n_k), True = may attend,
        or float, a bias added to the scores (-inf where masked);
        ``causal``: query i sees keys up to i. Returns the outputs (B, n_q, d) and the weights (B, h, n_q, n_k).
        """
        w_q, w_kv = self.in_proj.weight.split([x.shape[-1], 2 * x.shape[-1]])
        b_q, b_kv = self.in_proj.bias.split([x.shape[-1], 2 * x.shape[-1]]) if self.in_proj.bias is not None \
            else (None, None)
        q = nn.functional.linear(x, w_q, b_q)
        k, v = nn.functional.linear(x if context is None else context, w_kv, b_kv).chunk(2, dim=-1)
        bias = mask if mask is not None and mask.is_floating_point() else None  # a position bias (chapter 7)
        allowed = None if bias is not None else mask
        if key_mask is not None:
            allowed = key_padding_to_mask(key_mask) if allowed is None else allowed & key_padding_to_mask(key_mask)
        if causal:
            c = causal_mask(q.shape[1], k.shape[1], device=x.device)
            allowed = c if allowed is None else allowed & c
        if bias is not None:
            allowed = bias if allowed is None else bias.masked_fill(~allowed, float("-inf"))
        q, k, v = (split_heads(t, self.n_head) for t in (q, k, v))
        if self.rope:  # queries are the newest n_q of the n_k positions, as in causal_mask
            n_q, n_k = q.shape[-2], k.shape[-2]
            q, k = rope(q, torch.arange(n_k - n_q, n_k)), rope(k)
        y, weights = scaled_dot_product_attention(q, k, v, allowed)
        return self.out_proj(merge_heads(y)), weights

    @torch.no_grad()
    def load_torch(self, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy the weights of a ``torch.nn.MultiheadAttention`` with the same size (packed in_proj layout)."""
        self.in_proj.weight.copy_(mha.in_proj_weight)
        self.out_proj.weight.copy_(mha.out_proj.weight)
        if self.in_proj.bias is not None:
            self.in_proj.bias.copy_(mha.in_proj_bias)
            self.out_proj.bias.copy_(mha.out_proj.bias)
        return self
