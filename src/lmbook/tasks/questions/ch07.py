"""Thinking questions of exercise 7 (positional information): derive, count, predict.

Each answer is a small function of the configuration, so that the hidden cases, on other configurations,
cannot be answered by copying a number. The references are the closed forms, written with ``math``; the
mutants are the answers a student reaches with one step of the derivation wrong.

* ``pe_dot(k, d)``: PE(p) · PE(p + k) for the sinusoidal encodings (θ_i = 10000^(-2i/d)), which does not
  depend on p: each pair is a rotation, so the dot product of pair i is cos(k θ_i), and the sum is
  Σ_{i < d/2} cos(k θ_i).
* ``position_parameters(scheme, ...)``: the parameters a position scheme adds to a model: learned
  absolute positions a (block_size, d) table; the book's relative bias one number per head and clipped
  offset, (2D + 1) n_head, shared by the layers; Shaw et al.'s vectors a^K and a^V of the head's size per
  clipped offset, shared by the heads, one pair of tables per layer, 2 (2D + 1) d_head n_layer;
  sinusoidal, RoPE and ALiBi none.
* ``alibi_weight_ratio(m, near, far)``: two keys with the same content score, ``near`` and ``far`` words
  back from the query, in a head of slope m: their attention weights are in the ratio
  exp(-m near) / exp(-m far) = exp(m (far - near)); the softmax's denominator cancels.
"""

from __future__ import annotations

import math

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_scalar_mismatch
from ..common import compare_whole_number

BASE = 10000.0


def _number_compare(out, ref) -> str | None:
    return describe_scalar_mismatch(out, ref, rtol=1e-6, atol=1e-9, accept=("number", "tensor"))


def _args(*args, **kwargs):
    def make(g, device):
        return (args, kwargs)
    return make


# ----------------------------------------------------------------------------- Question 1: PE(p) · PE(p + k)


def _pe_dot_ref(k: int, d: int) -> float:
    return sum(math.cos(k * BASE ** (-2 * i / d)) for i in range(d // 2))


def _pe_dot_with(mistake: str):
    def fn(k, d):
        if mistake == "sin":  # took sin(a + b) = sin a sin b + ...: the sines of the offsets
            return sum(math.sin(k * BASE ** (-2 * i / d)) for i in range(d // 2))
        if mistake == "per_dimension":  # θ_j = 10000^(-j/d) for every dimension j, d terms
            return sum(math.cos(k * BASE ** (-j / d)) for j in range(d))
        if mistake == "norm":  # |PE(p)|² = d/2: as if the offset did not matter at all
            return d / 2
        if mistake == "one_speed":  # every pair at the first pair's speed, θ = 1
            return d / 2 * math.cos(k)
        if mistake == "twice":  # counted each pair twice (sin² + cos² taken as 2)
            return 2 * _pe_dot_ref(k, d)
        raise ValueError(mistake)
    return fn


PE_DOT = Check(
    task="pe_dot",
    what="PE(p) · PE(p + k) = Σ_{i < d/2} cos(k θ_i), θ_i = 10000^(-2i/d), a float that does not depend on p",
    reference=_pe_dot_ref,
    compare=_number_compare,
    cases=[Case("k = 1, d = 4", _args(1, 4)), Case("k = 3, d = 8", _args(3, 8)),
           Case("k = 10, d = 16", _args(10, 16))],
    hidden_cases=[Case("k = 0 (the same position), d = 12", _args(0, 12)),
                  Case("one pair, d = 2, k = 5", _args(5, 2)),
                  Case("a negative offset, k = -7, d = 32", _args(-7, 32)),
                  Case("far apart, k = 1000, d = 64", _args(1000, 64)),
                  Case("wide, k = 2, d = 512", _args(2, 512))],
    mutants=[
        Mutant(_pe_dot_with("sin"), "summed sin(k θ_i): pair i of PE(p) and pair i of PE(p + k) are two unit "
                                    "vectors k θ_i apart, and the dot product of two unit vectors is not the "
                                    "sine of the angle between them"),
        Mutant(_pe_dot_with("per_dimension"), "gave each of the d dimensions its own speed 10000^(-j/d): "
                                              "dimensions 2i and 2i+1 are one pair and turn together"),
        Mutant(_pe_dot_with("norm"), "returned d/2, the value at k = 0: moving k positions turns each pair, "
                                     "and that changes the dot product"),
        Mutant(_pe_dot_with("one_speed"), "turned every pair by k radians: pair i turns by its own θ_i per "
                                          "position, from 1 for the first pair to about 10^-4 for the last"),
        Mutant(_pe_dot_with("twice"), "counted each pair's contribution twice: a pair holds one sine and one "
                                      "cosine of the same angle"),
    ],
)


# ----------------------------------------------------------------------------- Question 2: parameters of positions

SCHEMES = ("none", "learned", "sinusoidal", "rope", "alibi", "relative", "shaw")


def _params_ref(scheme: str, n_layer: int, n_head: int, d_model: int, block_size: int, max_distance: int) -> int:
    if scheme == "learned":
        return block_size * d_model
    if scheme == "relative":
        return (2 * max_distance + 1) * n_head
    if scheme == "shaw":
        return 2 * (2 * max_distance + 1) * (d_model // n_head) * n_layer
    if scheme in SCHEMES:
        return 0
    raise ValueError(f"unknown scheme {scheme!r}")


def _params_with(mistake: str):
    def fn(scheme, n_layer, n_head, d_model, block_size, max_distance):
        n = _params_ref(scheme, n_layer, n_head, d_model, block_size, max_distance)
        rows = 2 * max_distance + 1
        if mistake == "relative_per_layer" and scheme == "relative":
            return n * n_layer
        if mistake == "relative_2D" and scheme == "relative":
            return 2 * max_distance * n_head
        if mistake == "relative_no_heads" and scheme == "relative":
            return rows
        if mistake == "learned_per_layer" and scheme == "learned":
            return n * n_layer
        if mistake == "sinusoidal_table" and scheme == "sinusoidal":
            return block_size * d_model
        if mistake == "shaw_keys_only" and scheme == "shaw":
            return n // 2
        if mistake == "shaw_d_model" and scheme == "shaw":
            return 2 * rows * d_model * n_layer
        return n
    return fn


def _params_cases(config: dict, schemes=SCHEMES) -> list[Case]:
    text = ", ".join(f"{k}={v}" for k, v in config.items())
    return [Case(f"{s}, {text}", _args(s, **config)) for s in schemes]


_SMALL = dict(n_layer=2, n_head=4, d_model=64, block_size=32, max_distance=32)  # chapter 7's models
_OTHER = dict(n_layer=6, n_head=8, d_model=512, block_size=128, max_distance=16)  # Shaw et al.'s k = 16
_ODD = dict(n_layer=3, n_head=3, d_model=48, block_size=10, max_distance=2)

POSITION_PARAMETERS = Check(
    task="position_parameters",
    what="the parameters each position scheme adds: learned block_size·d; relative (2D+1)·n_head; "
         "Shaw et al. 2·(2D+1)·d_head·n_layer; none, sinusoidal, RoPE and ALiBi 0",
    reference=_params_ref,
    compare=compare_whole_number("parameters"),
    cases=_params_cases(_SMALL),
    hidden_cases=[*_params_cases(_OTHER), *_params_cases(_ODD, ("learned", "relative", "shaw", "sinusoidal"))],
    mutants=[
        Mutant(_params_with("relative_per_layer"), "counted the relative bias once per layer: one table is "
                                                   "shared by all the layers"),
        Mutant(_params_with("relative_2D"), "gave the relative table 2D rows: offsets −D … D are 2D + 1 of them, "
                                            "offset 0 included"),
        Mutant(_params_with("relative_no_heads"), "gave the relative bias one number per offset: each head has "
                                                  "its own"),
        Mutant(_params_with("learned_per_layer"), "counted the learned position table once per layer: it is "
                                                  "added to the embeddings once, before the first block"),
        Mutant(_params_with("sinusoidal_table"), "counted the sinusoidal table as parameters: it is computed "
                                                 "from a formula, nothing is learned"),
        Mutant(_params_with("shaw_keys_only"), "counted only Shaw et al.'s key vectors a^K: they also add a "
                                               "vector a^V to the values, a second table of the same size"),
        Mutant(_params_with("shaw_d_model"), "counted d_model numbers per Shaw vector and layer: the vectors are "
                                             "added to one head's keys and values, so they are d_head long, and the "
                                             "heads of a layer share them"),
    ],
)


# ----------------------------------------------------------------------------- Question 3: ALiBi's weights


def _ratio_ref(m: float, near: int, far: int) -> float:
    return math.exp(m * (far - near))


def _ratio_with(mistake: str):
    def fn(m, near, far):
        if mistake == "inverted":
            return math.exp(m * (near - far))
        if mistake == "no_exp":  # the difference of the biases, not of the weights
            return m * (far - near)
        if mistake == "bias_ratio":  # ratio of the biases -m near / -m far
            return near / far if far else float("inf")
        if mistake == "weight":  # the near key's weight when only these two keys are visible
            return 1 / (1 + math.exp(-m * (far - near)))
        if mistake == "base_two":
            return 2 ** (m * (far - near))
        raise ValueError(mistake)
    return fn


ALIBI_WEIGHT_RATIO = Check(
    task="alibi_weight_ratio",
    what="weight(near) / weight(far) = exp(m (far − near)) for two keys with the same content score",
    reference=_ratio_ref,
    compare=_number_compare,
    cases=[Case("m = 1/2, keys 1 and 3 words back", _args(0.5, 1, 3)),
           Case("m = 1/16, keys 2 and 10 words back", _args(1 / 16, 2, 10))],
    hidden_cases=[Case("the same distance, m = 1/4, 5 and 5", _args(0.25, 5, 5)),
                  Case("the query itself against a key 8 back, m = 1/2", _args(0.5, 0, 8)),
                  Case("a gentle head, m = 1/256, 3 and 300", _args(1 / 256, 3, 300)),
                  Case("a steep head, m = 2^(-8/12), 4 and 6", _args(2 ** (-8 / 12), 4, 6))],
    mutants=[
        Mutant(_ratio_with("inverted"), "gave the far key the larger weight: ALiBi's bias −m (i − j) penalises "
                                        "distance, so the nearer key gets more"),
        Mutant(_ratio_with("no_exp"), "returned a difference of scores: the softmax turns scores into weights "
                                      "through an exponential, so a difference of scores becomes a ratio"),
        Mutant(_ratio_with("bias_ratio"), "divided the two biases: weights are not proportional to the scores "
                                          "they come from"),
        Mutant(_ratio_with("weight"), "returned the near key's weight when only the two keys are visible: the "
                                      "question asks for the ratio of the two weights, whatever the other keys"),
        Mutant(_ratio_with("base_two"), "used powers of 2: the softmax's exponential is base e; 2 appears only in "
                                        "the slopes m = 2^(-8h/n)"),
    ],
)

QUESTIONS = [PE_DOT, POSITION_PARAMETERS, ALIBI_WEIGHT_RATIO]
