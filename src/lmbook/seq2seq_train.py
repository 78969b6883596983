"""Training a :class:`lmbook.seq2seq.Seq2Seq` translator: sentence pairs to padded batches of similar length,
the validation loss, and the training loop (Adam, gradient clipping, a learning-rate warm-up and cosine
decay, label smoothing).

Learning-rate schedules, as factors of the peak rate (chapter 8 plots them):

    warmup_cosine(k)  = min(1, (k + 1) / warmup) · (0.1 + 0.45 (1 + cos(π k / steps)))   what ``fit`` uses
    inverse_sqrt(s)   = d^-0.5 · min(s^-0.5, s · warmup^-1.5)                            Vaswani et al. (2017)

The paper's schedule is a rate, not a factor: it rises linearly for ``warmup`` steps (s counts from 1), peaks
at (d · warmup)^-0.5 and then falls as 1/sqrt(s).

Label smoothing (Szegedy et al., 2016; ε = 0.1 in Vaswani et al.) trains against the target
(1 − ε) · one_hot(y) + ε / V, V the vocabulary size (``F.cross_entropy(label_smoothing=ε)``'s convention):
the loss can then never reach 0, and it is lowest when the model gives the right word 1 − ε + ε/V.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .seq2seq import PAD, Seq2Seq


def encode_pairs(pairs: Sequence[tuple[list[str], list[str]]], src_vocab, tgt_vocab):
    """Sentence pairs → padded source ids x (N, S) ending in <eos>, their lengths (N,), targets y (N, T)
    as [<bos>, ..., <eos>, <pad>...]."""
    from .translation import to_batch

    x, x_len = to_batch([src for src, _ in pairs], src_vocab)
    y, _ = to_batch([tgt for _, tgt in pairs], tgt_vocab, bos=True)
    return x, x_len, y


def length_bucketed_batches(lengths: torch.Tensor, batch_size: int, generator: torch.Generator, pool: int = 50):
    """Endless random mini-batches (index tensors) of sentences of similar length.

    Each epoch shuffles the data, sorts pools of ``pool`` batches by length, cuts them into batches and
    shuffles the batches: batches stay random, but little time is spent on padding.
    """
    n = len(lengths)
    while True:
        perm = torch.randperm(n, generator=generator)
        for start in range(0, n, batch_size * pool):
            chunk = perm[start:start + batch_size * pool]
            chunk = chunk[torch.argsort(lengths[chunk], stable=True)]
            parts = list(chunk.split(batch_size))
            for i in torch.randperm(len(parts), generator=generator).tolist():
                yield parts[i]


def _trim(x: torch.Tensor, x_len: torch.Tensor, y: torch.Tensor):
    """Cut a batch's padding columns down to its longest source and target."""
    return x[:, : int(x_len.max())], x_len, y[:, : int((y != PAD).sum(1).max())]


@dataclass
class TrainLog:
    """Training loss at every step; validation loss (and ``metric``) every ``eval_every`` steps; seconds spent."""

    loss: list[float] = field(default_factory=list)
    val_steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    val_metric: list[float] = field(default_factory=list)
    val_seconds: list[float] = field(default_factory=list)  # training seconds spent when each was recorded
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # CPU time of the training steps: time spent waiting for a busy core is not in it


@torch.no_grad()
def evaluate_loss(model: Seq2Seq, data, batch_size: int = 500) -> float:
    """Masked cross-entropy per target token over a whole data set (x, x_len, y)."""
    model.eval()
    x, x_len, y = data
    total = count = 0.0
    for i in range(0, len(x), batch_size):
        xb, lb, yb = (t.to(model.device) for t in _trim(x[i:i + batch_size], x_len[i:i + batch_size],
                                                        y[i:i + batch_size]))
        n = int((yb[:, 1:] != PAD).sum())
        total += float(model.loss(xb, lb, yb)) * n
        count += n
    return total / count


@torch.no_grad()
def teacher_forced_exact_match(model: Seq2Seq, data, batch_size: int = 500) -> float:
    """Share of sentences whose every next token, read with teacher forcing, is the model's argmax.

    This is greedy decoding's exact match, at the cost of one forward pass: if every argmax along the reference
    is right, greedy decoding writes the reference (by induction over its steps), and if greedy decoding writes
    the reference, every argmax along it was right.
    """
    model.eval()
    x, x_len, y = data
    right = 0
    for i in range(0, len(x), batch_size):
        xb, lb, yb = (t.to(model.device) for t in _trim(x[i:i + batch_size], x_len[i:i + batch_size],
                                                        y[i:i + batch_size]))
        target = yb[:, 1:]
        hit = (model(xb, lb, yb[:, :-1]).argmax(-1) == target) | (target == PAD)
        right += int(hit.all(dim=1).sum())
    return right / len(x)


def warmup_cosine(k: int, steps: int, warmup: int = 0, decay: bool = True) -> float:
    """The factor of the peak learning rate at step k = 0, 1, … (steps taken so far) that ``fit`` uses.

    A linear ramp from 1/warmup to 1 over ``warmup`` steps (none if 0), times, with ``decay``, a cosine
    from 1 down to 0.1 over ``steps``.
    """
    ramp = min(1.0, (k + 1) / warmup) if warmup else 1.0
    cosine = 0.1 + 0.45 * (1 + math.cos(math.pi * k / steps)) if decay else 1.0
    return ramp * cosine


def inverse_sqrt(s: int, d_model: int, warmup: int) -> float:
    """The paper's rate at step s = 1, 2, …: d^-0.5 min(s^-0.5, s warmup^-1.5)."""
    if s < 1:
        raise ValueError(f"the paper counts steps from 1, got {s}")
    return d_model**-0.5 * min(s**-0.5, s * warmup**-1.5)


def smoothed_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """Cross-entropy against (1 − ε) one_hot(y) + ε/V, averaged over the non-pad targets (B, T)."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=PAD,
                           label_smoothing=label_smoothing)


def fit(model: Seq2Seq, train, val=None, *, steps: int, batch_size: int = 64, lr: float = 3e-3,
        clip: float = 1.0, seed: int = 0, eval_every: int | None = None,
        metric: Callable[[Seq2Seq], float] | None = None, decay: bool = False, warmup: int = 0,
        betas: tuple[float, float] = (0.9, 0.999), label_smoothing: float = 0.0) -> TrainLog:
    """Train with Adam on length-bucketed batches of (x, x_len, y), clipping the gradient norm at ``clip``.

    Every ``eval_every`` steps (and at the end) the validation loss on ``val`` is recorded, and
    ``metric(model)`` too if given (the time these take is not counted in ``seconds``). The learning rate is
    ``lr`` times :func:`warmup_cosine`: with ``decay`` it falls along a cosine from ``lr`` to lr / 10 over
    the ``steps`` (by default it is constant); with ``warmup`` it first rises linearly from lr / warmup to
    ``lr`` over that many steps. With ``label_smoothing`` ε > 0 the training loss is :func:`smoothed_loss`;
    the logged validation loss stays the plain cross-entropy, comparable across ε.
    """
    device = model.device
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=betas)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: warmup_cosine(k, steps, warmup, decay))
    x, x_len, y = train
    batches = length_bucketed_batches(x_len, batch_size, torch.Generator().manual_seed(seed))
    log, start, cpu_start = TrainLog(), time.perf_counter(), time.process_time()
    for step in range(1, steps + 1):
        model.train()
        idx = next(batches)
        xb, lb, yb = (t.to(device) for t in _trim(x[idx], x_len[idx], y[idx]))
        if label_smoothing:
            loss = smoothed_loss(model(xb, lb, yb[:, :-1]), yb[:, 1:], label_smoothing)
        else:
            loss = model.loss(xb, lb, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sched.step()
        log.loss.append(loss.item())
        if val is not None and eval_every and (step % eval_every == 0 or step == steps):
            paused, cpu_paused = time.perf_counter(), time.process_time()
            log.val_steps.append(step)
            log.val_seconds.append(paused - start)
            log.val_loss.append(evaluate_loss(model, val))
            if metric is not None:
                log.val_metric.append(metric(model))
            start += time.perf_counter() - paused
            cpu_start += time.process_time() - cpu_paused
    log.seconds = time.perf_counter() - start
    log.cpu_seconds = time.process_time() - cpu_start
    return log
