"""What the encoder and decoder blocks' checks share: their weights, and the mutants' sub-layers."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...grading.checks import Mutant
from ...grading.reproduce import sized
from ..blocks import mha
from ..common import fit_lengths


def attend(query, kv, p: dict, name: str, n_head: int, pad, causal: bool, scale: str = "d_head"):
    """The mutants' multi-head attention (exercise 6's), keys and values from ``kv``, the padding ``pad`` (B, n_k)
    and, if ``causal``, the future blocked."""
    n_q, n_k, d = query.shape[1], kv.shape[1], query.shape[-1]
    blocked = torch.zeros(n_q, n_k, dtype=torch.bool, device=query.device)
    if causal:
        blocked = blocked | torch.ones(n_q, n_k, dtype=torch.bool, device=query.device).triu(1)
    if pad is not None:
        blocked = blocked | pad[:, None, None, :]
    return mha(query, kv, p, f"{name}.", n_head, blocked, math.sqrt(d) if scale == "d" else None)


def norm_of(p: dict, i: int, eps: float = 1e-5):
    def ln(x):
        return F.layer_norm(x, (x.shape[-1],), p[f"norm{i}.weight"], p[f"norm{i}.bias"], eps)
    return ln


EPS_MISTAKE = ("used another ε in the LayerNorms (1e-6, or BERT's 1e-12): this block's are torch's default, "
               "ε = 1e-5, which matters when the activations are small")


def sized_block(name: str, build, **params):
    """A block's case with its smaller versions (d = n_head · d_head; the lengths follow the batch)."""
    def fit(p: dict) -> dict:
        return fit_lengths(p, size="S")
    return sized(name, build, floors={k: 1 for k in ("B", "T", "S", "n_head", "d_head", "d_ff") if k in params},
                 fit=fit, **params)


def ffn_of(p: dict, activation: str = "relu", relu_after: bool = False):
    def ffn(x):
        h = x @ p["linear1.weight"].T + p["linear1.bias"]
        out = (F.gelu(h) if activation == "gelu" else torch.relu(h)) @ p["linear2.weight"].T + p["linear2.bias"]
        return torch.relu(out) if relu_after else out
    return ffn


def is_pre_ln(norm_first: bool, order: str) -> bool:
    """Whether a block written with ``order`` runs pre-LN."""
    return {"right": norm_first, "always_post": False, "always_pre": True, "swapped": not norm_first}[order]


def sublayer(x, f, norm, pre: bool, wiring: str):
    """One residual sub-layer: post-LN x = LN(x + f(x)), pre-LN x = x + f(LN(x)), or a mistake."""
    if pre:
        h = norm(x)
        if wiring == "no_residual":
            return f(h)
        return (h if wiring == "residual_from_norm" else x) + f(h)
    if wiring == "no_residual":
        return norm(f(x))
    if wiring == "norm_sublayer":
        return x + norm(f(x))
    return norm(x + f(x))


def order_mutants(build) -> list[Mutant]:
    """The wiring mistakes an encoder and a decoder block share (``build``: the block's mutant builder)."""
    return [
        Mutant(build(order="always_post"), "wrote the post-LN block for norm_first=True as well: with "
                                           "norm_first=True the block is pre-LN, x = x + f(LN(x)), and the residual "
                                           "stream x itself is never normalised"),
        Mutant(build(order="always_pre"), "wrote the pre-LN block for norm_first=False as well: with "
                                          "norm_first=False it is the paper's post-LN block, x = LN(x + f(x)), the "
                                          "norm after the residual sum"),
        Mutant(build(order="swapped"), "read norm_first backwards: norm_first=True is pre-LN, x = x + f(LN(x)); "
                                       "norm_first=False is post-LN, x = LN(x + f(x))"),
        Mutant(build(wiring="residual_from_norm"), "added the normalised input as the residual, LN(x) + f(LN(x)): "
                                                   "in a pre-LN block the residual carries x itself, "
                                                   "x + f(LN(x))"),
        Mutant(build(wiring="norm_sublayer"), "normalised the sub-layer's output before adding it, x + LN(f(x)): a "
                                              "post-LN block normalises the sum, LN(x + f(x))"),
        Mutant(build(wiring="no_residual"), "left out the residual connections: each sub-layer's output is added "
                                            "to its input, LN(x + f(x)) in post-LN, x + f(LN(x)) in pre-LN"),
        Mutant(build(activation="gelu"), "used GELU in the feed-forward network: this block's is ReLU, "
                                         "max(0, x W_1ᵀ + b_1) W_2ᵀ + b_2"),
        Mutant(build(relu_after=True), "applied the ReLU to the feed-forward network's output too: only its hidden "
                                       "layer goes through it, max(0, x W_1ᵀ + b_1) W_2ᵀ + b_2"),
        Mutant(build(scale="d"), "scaled the attention scores by 1/sqrt(d): each head's scores are divided by "
                                 "sqrt(d_head), d_head = d / n_head"),
    ]
