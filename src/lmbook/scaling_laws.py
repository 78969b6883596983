"""Scaling laws: how the loss falls with parameters N, tokens D and compute C, and how to split a budget (chapter 11).

**Compute.** Training a model of N parameters on D tokens costs about

    C ≈ 6 N D  FLOPs

(2 N per token forward, 4 N backward: :mod:`lmbook.scaling` derives it and adds attention's share).

**Kaplan et al. (2020)** fitted, for models trained to convergence on WebText2 (N without embeddings, L in nats
per token), L(N) = (N_c / N)^α_N with α_N = 0.076, N_c = 8.8e13, and L(D) = (D_c / D)^α_D with α_D = 0.095,
D_c = 5.4e13; spending more compute, they advised growing N much faster than D (N ∝ C^0.73).

**Hoffmann et al. (2022)**, "Chinchilla", trained over 400 models with the learning-rate schedule matched to each
run's length and found N and D should grow equally, N ∝ C^0.5, D ∝ C^0.5; their fitted loss is

    L(N, D) = E + A / N^α + B / D^β,   E = 1.69, A = 406.4, B = 410.7, α = 0.34, β = 0.28

whose minimum under C = 6 N D is N_opt = G (C/6)^(β/(α+β)), D_opt = (C/6) / N_opt, G = (α A / (β B))^(1/(α+β)).
Chinchilla itself, 70B parameters on 1.4T tokens, is the rule of thumb: about **20 tokens per parameter**, so

    N = sqrt(C / (6 · 20)),   D = 20 N.

E is the loss no model reaches: the entropy of the text itself. On the course's language it is known exactly
(:meth:`lmbook.corpus.Corpus.floor_perplexity`), which no study of real text can say of its own E.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

KAPLAN = dict(alpha_N=0.076, N_c=8.8e13, alpha_D=0.095, D_c=5.4e13, N_exponent_of_C=0.73)
CHINCHILLA = dict(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28, tokens_per_param=20.0)


def training_flops(n_params: float, n_tokens: float) -> float:
    """C ≈ 6 N D: forward (2 N per token) and backward (4 N per token) through N weights, D tokens."""
    return 6.0 * n_params * n_tokens


def compute_optimal(flops: float, tokens_per_param: float = 20.0) -> tuple[float, float]:
    """(N, D) that spend ``flops`` = 6 N D with D = tokens_per_param · N: N = sqrt(C / (6 r)), D = r N."""
    if flops <= 0 or tokens_per_param <= 0:
        raise ValueError(f"flops and tokens_per_param must be positive, got {flops} and {tokens_per_param}")
    n = math.sqrt(flops / (6.0 * tokens_per_param))
    return n, tokens_per_param * n


def chinchilla_loss(n_params: float, n_tokens: float, E: float = 1.69, A: float = 406.4, B: float = 410.7,
                    alpha: float = 0.34, beta: float = 0.28) -> float:
    """L(N, D) = E + A / N^α + B / D^β, Hoffmann et al.'s fit (nats per token on their MassiveText)."""
    return E + A / n_params**alpha + B / n_tokens**beta


def chinchilla_optimal(flops: float, A: float = 406.4, B: float = 410.7, alpha: float = 0.34,
                       beta: float = 0.28) -> tuple[float, float]:
    """(N_opt, D_opt) minimising :func:`chinchilla_loss` at C = 6 N D (their equation 4)."""
    G = (alpha * A / (beta * B)) ** (1.0 / (alpha + beta))
    n = G * (flops / 6.0) ** (beta / (alpha + beta))
    return n, flops / 6.0 / n


def fit_power_law(x: Sequence[float], y: Sequence[float], alphas: Sequence[float] | None = None,
                  floor_at_most: float | None = None) -> tuple[float, float, float]:
    """Least-squares fit of y = E + A x^(-α): returns (E, A, α).

    For a fixed α the model is linear in (E, A), so each α on a grid gets its exact least-squares (E, A) and the
    best α is refined by golden-section search ("variable projection"): no starting point to guess, no local
    minimum in (E, A). ``floor_at_most`` caps E (E ≤ min y would be natural; a cap at a known floor is a
    constraint the data cannot break)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 3 or len(x) != len(y):
        raise ValueError(f"need at least 3 (x, y) points of equal number, got {len(x)} and {len(y)}")

    def solve(alpha: float) -> tuple[float, float, float]:
        f = x ** (-alpha)
        design = np.stack([np.ones_like(f), f], axis=1)
        (E, A), *_ = np.linalg.lstsq(design, y, rcond=None)
        if floor_at_most is not None and E > floor_at_most:  # constrained: E at the cap, A alone
            E = floor_at_most
            A = float(f @ (y - E) / (f @ f))
        return float(np.sum((E + A * f - y) ** 2)), float(E), float(A)

    grid = np.geomspace(0.01, 4.0, 200) if alphas is None else np.asarray(alphas, dtype=np.float64)
    errors = [solve(a)[0] for a in grid]
    i = int(np.argmin(errors))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    phi = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        a, b = hi - phi * (hi - lo), lo + phi * (hi - lo)
        if solve(a)[0] < solve(b)[0]:
            hi = b
        else:
            lo = a
    alpha = (lo + hi) / 2
    _, E, A = solve(alpha)
    return E, A, alpha
