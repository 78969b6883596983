"""A task that needs two lookups at once: chapter 6's test of what several heads buy.

A sequence holds n random symbols x_0 .. x_{n-1} from an alphabet of m. At every position t ≥ 1 the model
must name the ordered pair (x_0, x_{t-1}): the first symbol and the one just before it, one of m² answers,
written as the token m + m·x_0 + x_{t-1} after the m input symbols. Position t holds neither symbol, so it
must fetch both, and keep them apart: (a, b) and (b, a) are different answers.

One attention head returns one weighted average of the values. If it splits its weight between positions
0 and t - 1, it returns a blend of the two symbols from which their order is hard to read back. Two heads
can each fetch one symbol and hand both, side by side, to the feed-forward network. A second layer gives a
second lookup too, one after the other instead of side by side.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .causal_lm import CausalLM


def vocab_size(m: int) -> int:
    """Input symbols 0 .. m-1, then the m² answers."""
    return m + m * m


def two_lookup_batch(batch_size: int, n: int, m: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random sequences x (B, n) and their answers y (B, n - 1): y[:, t - 1] = m + m·x_0 + x_{t-1} for t ≥ 1."""
    x = torch.randint(0, m, (batch_size, n), generator=g)
    y = m + m * x[:, :1] + x[:, :-1]  # (x_0, x_{t-1}) for t = 1 .. n-1
    return x, y


@dataclass
class LookupLog:
    loss: list[float]
    seconds: float


def train_two_lookups(model: CausalLM, n: int, m: int, *, steps: int = 400, batch_size: int = 64,
                      lr: float = 3e-3, seed: int = 0) -> LookupLog:
    """AdamW on fresh random sequences at every step; the loss is the cross-entropy at positions 1 .. n-1."""
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    g = torch.Generator().manual_seed(seed)
    losses, t0 = [], time.perf_counter()
    model.train()
    for _ in range(steps):
        x, y = two_lookup_batch(batch_size, n, m, g)
        logits = model(x.to(device))[:, 1:]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.to(device).reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return LookupLog(losses, time.perf_counter() - t0)


@torch.no_grad()
def two_lookup_accuracy(model: CausalLM, n: int, m: int, count: int = 1000, seed: int = 1) -> dict[str, float]:
    """On ``count`` fresh sequences: the share of positions whose pair is named right ("both"), and of
    those whose first symbol ("first") or previous symbol ("previous") is right, each on its own."""
    device = next(model.parameters()).device
    x, y = two_lookup_batch(count, n, m, torch.Generator().manual_seed(seed))
    pred = model.eval()(x.to(device))[:, 1:, m:].argmax(-1).cpu()  # the best of the m² answers
    first, previous = pred // m, pred % m
    return {"both": (pred == y - m).float().mean().item(),
            "first": (first == x[:, :1]).float().mean().item(),
            "previous": (previous == x[:, :-1]).float().mean().item()}


@torch.no_grad()
def lookup_weights(model: CausalLM, n: int, m: int, count: int = 200, seed: int = 2) -> torch.Tensor:
    """(layers, heads, 2): each head's mean attention weight on position 0 and on position t - 1, over the
    positions t ≥ 2 of ``count`` fresh sequences (at t = 1 the two are the same position)."""
    device = next(model.parameters()).device
    x, _ = two_lookup_batch(count, n, m, torch.Generator().manual_seed(seed))
    _, weights = model.eval()(x.to(device), return_weights=True)
    t = torch.arange(2, n, device=device)
    out = []
    for w in weights:
        w = w if w.dim() == 4 else w[:, None]  # one head: (B, n, n) -> (B, 1, n, n)
        on_first = w[:, :, 2:, 0].mean((0, 2))
        on_previous = w[:, :, t, t - 1].mean((0, 2))
        out.append(torch.stack([on_first, on_previous], dim=-1))
    return torch.stack(out).cpu()
