"""What the attention and block tasks of exercises 6 to 9 share: weights drawn and named as torch's layers name them
(``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer`` and ``nn.TransformerDecoderLayer``), and the multi-head
attention their known mistakes are built from."""

from __future__ import annotations

import math

import torch

from .common import NEG_INF, randn


def attention_params(g: torch.Generator, device: torch.device, d: int, prefix: str = "",
                     scale: float = 1.0) -> dict[str, torch.Tensor]:
    """``nn.MultiheadAttention``'s weights, named as its ``state_dict()`` (after ``prefix``): the packed (3d, d)
    [W_q; W_k; W_v] and its bias, the output projection and its bias, of the scale a trained layer has (times
    ``scale``)."""
    return {f"{prefix}in_proj_weight": randn((3 * d, d), g, device, scale / math.sqrt(d)),
            f"{prefix}in_proj_bias": randn((3 * d,), g, device, 0.5 * scale),
            f"{prefix}out_proj.weight": randn((d, d), g, device, scale / math.sqrt(d)),
            f"{prefix}out_proj.bias": randn((d,), g, device, 0.5 * scale)}


def block_params(g: torch.Generator, device: torch.device, d: int, d_ff: int,
                 attentions: tuple[str, ...] = ("self_attn",), n_norms: int = 2,
                 scale: float = 1.0) -> dict[str, torch.Tensor]:
    """A Transformer layer's weights, named and ordered as its torch layer's ``state_dict()``: each attention's,
    the feed-forward network's, and ``n_norms`` LayerNorms'. ``scale`` multiplies the attentions' and the
    feed-forward network's (small ones keep the activations small, where LayerNorm's ε matters)."""
    p = {}
    for a in attentions:
        p |= attention_params(g, device, d, f"{a}.", scale)
    p["linear1.weight"] = randn((d_ff, d), g, device, scale / math.sqrt(d))
    p["linear1.bias"] = randn((d_ff,), g, device, 0.5 * scale)
    p["linear2.weight"] = randn((d, d_ff), g, device, scale / math.sqrt(d_ff))
    p["linear2.bias"] = randn((d,), g, device, 0.5 * scale)
    for i in range(1, n_norms + 1):  # gains around 1 and biases: every norm is told apart from the others
        p[f"norm{i}.weight"] = randn((d,), g, device, 0.3, 1.0)
        p[f"norm{i}.bias"] = randn((d,), g, device, 0.3)
    return p


def mha(query: torch.Tensor, kv: torch.Tensor, p: dict, prefix: str, n_head: int, blocked: torch.Tensor | None = None,
        scale: float | None = None) -> torch.Tensor:
    """The known mistakes' multi-head attention: queries from ``query`` (B, n_q, d), keys and values from ``kv``
    (B, n_k, d), the weights ``p[prefix + "in_proj_weight"]`` and so on; ``blocked``, broadcastable to
    (B, n_head, n_q, n_k), is True where a query may not look; the scores are divided by ``scale``
    (sqrt(d_head) unless given)."""
    B, n_q, d = query.shape
    n_k, d_head = kv.shape[1], d // n_head
    w_q, w_k, w_v = p[f"{prefix}in_proj_weight"].chunk(3)
    b_q, b_k, b_v = p[f"{prefix}in_proj_bias"].chunk(3)
    q = (query @ w_q.T + b_q).view(B, n_q, n_head, d_head).transpose(1, 2)
    k = (kv @ w_k.T + b_k).view(B, n_k, n_head, d_head).transpose(1, 2)
    v = (kv @ w_v.T + b_v).view(B, n_k, n_head, d_head).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / (scale or math.sqrt(d_head))
    if blocked is not None:
        scores = scores.masked_fill(blocked, NEG_INF)
    y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, n_q, d)
    return y @ p[f"{prefix}out_proj.weight"].T + p[f"{prefix}out_proj.bias"]
