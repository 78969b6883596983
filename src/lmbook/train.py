"""One small training loop, shared by every chapter.

It records the loss so chapters can plot learning curves, shows a tqdm
progress bar, and puts each batch on the model's device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from .functional import perplexity


@dataclass
class History:
    """Mean training loss per epoch, validation loss per epoch, and every step's loss."""

    train: list[float] = field(default_factory=list)
    val: list[float] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)

    @property
    def val_perplexity(self) -> float:
        return perplexity(self.val[-1])


def batches(*tensors: torch.Tensor, batch_size: int, shuffle: bool, generator: torch.Generator | None = None):
    """Yield aligned mini-batches of the given tensors (first dimension)."""
    n = len(tensors[0])
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    for i in range(0, n, batch_size):
        idx = order[i : i + batch_size]
        yield tuple(t[idx] for t in tensors)


Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@torch.no_grad()  # evaluation builds no graph: it needs no gradients
def evaluate(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor,
             batch_size: int = 4096, loss_fn: Loss = F.cross_entropy) -> float:
    """Mean loss of ``model`` over a whole data set (weighted by batch size)."""
    model.eval()  # dropout off
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for x, y in batches(inputs, targets, batch_size=batch_size, shuffle=False):
        loss = loss_fn(model(x.to(device)), y.to(device))
        total += float(loss) * len(y)
        count += len(y)
    return total / count


def fit(model: nn.Module, train: tuple[torch.Tensor, torch.Tensor],
        val: tuple[torch.Tensor, torch.Tensor] | None = None, *, epochs: int = 5,
        batch_size: int = 128, lr: float = 3e-3, seed: int = 0,
        clip: float | None = None, optimizer: type = torch.optim.Adam,
        loss_fn: Loss = F.cross_entropy, progress: bool = True) -> History:
    """Train ``model`` on (inputs, targets) pairs with ``optimizer`` (Adam unless told
    otherwise); return the loss history."""
    device = next(model.parameters()).device
    opt = optimizer(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)  # the order of the batches
    history = History()
    n_steps = epochs * ((len(train[0]) + batch_size - 1) // batch_size)
    bar = tqdm(total=n_steps, disable=not progress, desc=type(model).__name__,
               leave=False)
    for _ in range(epochs):
        model.train()  # dropout on, if the model has any
        epoch_losses = []
        for x, y in batches(*train, batch_size=batch_size, shuffle=True, generator=g):
            loss = loss_fn(model(x.to(device)), y.to(device))  # mean over the batch
            opt.zero_grad(set_to_none=True)  # gradients add up unless cleared
            loss.backward()  # dL/dθ for every parameter θ, by backpropagation
            if clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()  # θ <- θ - (a step computed from the gradients)
            epoch_losses.append(loss.item())
            bar.update(1)
        history.steps += epoch_losses
        history.train.append(sum(epoch_losses) / len(epoch_losses))
        if val is not None:
            history.val.append(evaluate(model, *val, loss_fn=loss_fn))
            bar.set_postfix(val_ppl=f"{perplexity(history.val[-1]):.2f}")
    bar.close()
    return history
