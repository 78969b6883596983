"""The loss functions of a language model, written out from their definitions.

These are the course's reference versions; chapters use them and tests
compare them with torch's own ops.
"""

from __future__ import annotations

import math

import torch


def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """log softmax(x) = x - logsumexp(x), computed without overflow.

    Subtracting the maximum first makes every exponent <= 0, so exp never
    overflows; the shift cancels out exactly.
    """
    m = x.amax(dim=dim, keepdim=True).detach()
    shifted = x - m
    return shifted - shifted.exp().sum(dim=dim, keepdim=True).log()


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """Mean negative log-likelihood (nats) of ``targets`` under ``logits``.

    ``logits`` has shape (..., V) and ``targets`` shape (...). Positions whose
    target is ``ignore_index`` (padding) are left out of the mean.
    """
    logp = log_softmax(logits, dim=-1).reshape(-1, logits.shape[-1])
    targets = targets.reshape(-1)
    keep = targets != ignore_index
    nll = -logp[keep].gather(1, targets[keep].unsqueeze(1)).squeeze(1)
    return nll.mean()


def perplexity(mean_nll: float | torch.Tensor) -> float:
    """Perplexity = exp(mean negative log-likelihood in nats)."""
    return math.exp(float(mean_nll))
