"""Task 6 of exercise 11: a compute-optimal model size and data size for a budget."""

from __future__ import annotations

import math
import numbers

import torch

from ... import scaling_laws as _course_scaling
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_value, distinct_pair, how_far
from .shared import ATTRS, MODULES

_S = _course_scaling


def _optimal_ref(flops, tokens_per_param=20.0):
    """C = 6 N D with D = r N: N = sqrt(C / (6 r)), D = r N."""
    n = math.sqrt(flops / (6.0 * tokens_per_param))
    return n, tokens_per_param * n


def _optimal_with(mistake: str):
    def fn(flops, tokens_per_param=20.0):
        C, r = flops, tokens_per_param
        if mistake == "no_six":
            n = math.sqrt(C / r)
        elif mistake == "forward_only":
            n = math.sqrt(C / (2 * r))
        elif mistake == "no_sqrt":
            n = C / (6 * r)
        elif mistake == "root_then_r":
            n = math.sqrt(C / 6) / r
        else:
            n = math.sqrt(C / (6 * r))
        if mistake == "swapped":
            return r * n, n
        if mistake == "d_over_r":
            return n, n / r
        return n, r * n
    return fn


def _fixed(*args, **kwargs):
    def make(g, device):
        return (tuple(args), dict(kwargs))
    return make


def _random(g, device):
    exponent = float(torch.empty(1).uniform_(15, 26, generator=g))
    ratio = float(torch.empty(1).uniform_(1, 100, generator=g))
    return ((10.0 ** exponent,), {"tokens_per_param": ratio})


def _not_a_float(x) -> str | None:
    """What the statement's "two floats" rules out: a tensor, an int, anything that is not a real number."""
    if isinstance(x, torch.Tensor):
        return f"returned {describe_value(x)}, expected a Python float (.item() makes one)"
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return f"returned {describe_value(x)}, expected a number (float)"
    if isinstance(x, numbers.Integral):
        return f"returned the int {x}, expected a float: N and D are real numbers (do not round them)"
    return None


def _optimal_compare(out, ref) -> str | None:
    if isinstance(out, list) and len(out) == 2:
        return "returned a list [N, D], expected a tuple (N, D): return n_params, n_tokens"
    if not isinstance(out, tuple) or len(out) != 2:
        return f"returned {describe_value(out)}, expected a tuple (n_params, n_tokens) of two numbers"
    for name, o, r in zip(("n_params", "n_tokens"), out, ref, strict=True):
        wrong_type = _not_a_float(o)
        if wrong_type:
            return f"{name}: {wrong_type}"
        value = float(o)
        if not math.isclose(value, r, rel_tol=1e-9):
            said, expected = distinct_pair(value, r)
            return f"{name}: returned {said}, expected {expected} ({how_far(value, r)})"
    return None


COMPUTE_OPTIMAL = Check(
    task="compute_optimal",
    what="(N, D) with 6 N D = flops and D = tokens_per_param · N",
    reference=_optimal_ref,
    compare=_optimal_compare,
    cases=[Case("Chinchilla's budget, 5.76e23 FLOPs, 20 tokens per parameter", _fixed(5.76e23)),
           Case("1e18 FLOPs (a day of a large GPU), 20 tokens per parameter", _fixed(1e18)),
           Case("1e15 FLOPs, 5 tokens per parameter", _fixed(1e15, tokens_per_param=5.0))],
    hidden_cases=[Case("6 FLOPs, one token per parameter: N = D = 1", _fixed(6.0, tokens_per_param=1.0)),
                  Case("GPT-3's budget, 3.14e23 FLOPs", _fixed(3.14e23)),
                  Case("1e26 FLOPs, 200 tokens per parameter", _fixed(1e26, tokens_per_param=200.0)),
                  Case("the ratio given as an int, 40", _fixed(2.4e21, tokens_per_param=40)),
                  Case("a fresh budget and ratio", _random),
                  Case("another fresh budget and ratio", _random)],
    mutants=[
        Mutant(_optimal_with("no_six"), "left out the 6 of C = 6 N D: training costs 6 FLOPs per parameter and "
                                        "token (2 forward, 4 backward), so N = sqrt(C / (6 r))"),
        Mutant(_optimal_with("forward_only"), "counted the forward pass only, C = 2 N D: training costs 6 FLOPs "
                                              "per parameter and token (the backward pass twice the forward)"),
        Mutant(_optimal_with("no_sqrt"), "divided the budget without the square root: C = 6 N D = 6 r N², so "
                                         "N = sqrt(C / (6 r))"),
        Mutant(_optimal_with("root_then_r"), "took the root before dividing by the ratio, sqrt(C / 6) / r: "
                                             "C = 6 r N² gives N = sqrt(C / (6 r))"),
        Mutant(_optimal_with("swapped"), "returned (D, N): the tuple is (n_params, n_tokens), and with 20 tokens "
                                         "per parameter the tokens are the larger number"),
        Mutant(_optimal_with("d_over_r"), "divided N by the ratio to get D: tokens_per_param is tokens per "
                                          "parameter, D = r · N"),
    ],
    forbidden=(_S.compute_optimal, _S.chinchilla_optimal),
    forbidden_attrs=(*ATTRS, "compute_optimal", "chinchilla_optimal"),
    forbidden_modules=MODULES,
)
