"""Thinking questions of exercise 4 (chapter 4): the weight the softmax gives the best key, the
parameters of each score, and the multiplications the additive score costs over a translation, each
as a function of its configuration."""

from __future__ import annotations

import math

from ...attention import AdditiveScore, MultiplicativeScore
from ...grading.checks import Case, Check, Mutant
from .ch01 import exact_int, given, number

# ----------------------------------------------------------------------------- how much weight the best key gets

def _peak_weight(delta, S):
    return math.exp(delta) / (math.exp(delta) + S - 1)


PEAK_WEIGHT = Check(
    task="peak_weight",
    what="e^δ / (e^δ + S - 1): the softmax weight of one key δ above S - 1 equal others",
    reference=_peak_weight,
    compare=number(rtol=1e-6),
    cases=[Case("δ = 2 above 3 other keys (S = 4)", given(2.0, 4)), Case("δ = 1, S = 10", given(1.0, 10))],
    hidden_cases=[Case("δ = 0: all S = 5 scores equal", given(0.0, 5)), Case("δ = 5, S = 10", given(5.0, 10)),
                  Case("two keys, δ = 1", given(1.0, 2)), Case("δ = 10, S = 100", given(10.0, 100)),
                  Case("δ = 0.5, S = 30", given(0.5, 30)), Case("δ = -1: the key scores lower", given(-1.0, 3))],
    mutants=[
        Mutant(lambda delta, S: 1 / S,
               "made the weights uniform: the softmax gives the better key e^δ times the weight of each other"),
        Mutant(lambda delta, S: delta / (delta + S - 1),
               "weighed the keys by their scores: the softmax weighs them by exp(score)"),
        Mutant(lambda delta, S: math.exp(delta) / (math.exp(delta) + S),
               "counted S other keys: besides the best one there are S - 1"),
        Mutant(lambda delta, S: math.exp(delta) / (math.exp(delta) + 1),
               "left out all but one of the other keys: the denominator sums exp(score) over all S keys"),
    ],
)


# ----------------------------------------------------------------------------- the parameters of each score

def _score_parameters(kind, d_s, d_h, d_a):
    return {"dot": 0, "scaled_dot": 0, "multiplicative": d_s * d_h,
            "additive": d_a * d_h + d_a * d_s + d_a}[kind]  # W_1, W_2, v; no biases


def _score_with(**changes):
    def fn(kind, d_s, d_h, d_a):
        return changes[kind](d_s, d_h, d_a) if kind in changes else _score_parameters(kind, d_s, d_h, d_a)
    return fn


SCORE_PARAMETERS = Check(
    task="score_parameters",
    what="dot and scaled dot 0, multiplicative d_s·d_h, additive d_a·d_h + d_a·d_s + d_a",
    reference=_score_parameters,
    compare=exact_int,
    cases=[Case("additive, d_s = d_h = d_a = 128 (the chapter's)", given("additive", 128, 128, 128)),
           Case("multiplicative, d_s = 64, d_h = 32", given("multiplicative", 64, 32, 16))],
    hidden_cases=[Case("dot, d = 128", given("dot", 128, 128, 10)),
                  Case("scaled dot, d = 64", given("scaled_dot", 64, 64, 8)),
                  Case("additive, d_s = 10, d_h = 20, d_a = 5", given("additive", 10, 20, 5)),
                  Case("multiplicative, d_s = d_h = 128", given("multiplicative", 128, 128, 64)),
                  Case("additive, all sizes 1", given("additive", 1, 1, 1)),
                  Case("multiplicative, d_s = 3, d_h = 7", given("multiplicative", 3, 7, 2))],
    mutants=[
        Mutant(_score_with(additive=lambda d_s, d_h, d_a: d_a * (d_h + d_s)),
               "left out v: the additive score ends with v^T, d_a more weights"),
        Mutant(_score_with(multiplicative=lambda d_s, d_h, d_a: d_s * d_s),
               "made W square: it maps h_j (size d_h) to the query's space (size d_s), d_s × d_h"),
        Mutant(_score_with(additive=lambda d_s, d_h, d_a: 2 * d_a * d_h + d_a),
               "gave W_2 the shape of W_1: W_2 reads the query, d_a × d_s"),
        Mutant(_score_with(additive=lambda d_s, d_h, d_a: d_a * (d_h + d_s) + 3 * d_a),
               "counted biases for W_1 and W_2: the score v^T tanh(W_1 h_j + W_2 s) has none"),
        Mutant(_score_with(dot=lambda d_s, d_h, d_a: d_s, scaled_dot=lambda d_s, d_h, d_a: d_s),
               "counted the vectors' entries: the dot product compares s and h_j directly, with no parameters"),
        Mutant(_score_with(scaled_dot=lambda d_s, d_h, d_a: 1),
               "counted the scale: 1/√d is a constant, not a learned parameter"),
    ],
    forbidden=(AdditiveScore, MultiplicativeScore),
    forbidden_attrs=("AdditiveScore", "MultiplicativeScore", "numel"),
)


# ----------------------------------------------------------------------------- the additive score's cost

def _additive_multiplications(S, T, d_h, d_s, d_a):
    return S * d_a * d_h + T * d_a * d_s + T * S * d_a  # W_1 h_j once; W_2 s_{t-1} per step; v^T per pair


ADDITIVE_MULTIPLICATIONS = Check(
    task="additive_multiplications",
    what="S·d_a·d_h + T·d_a·d_s + T·S·d_a: W_1 h_j once per sentence, W_2 s_{t-1} once per step, v per pair",
    reference=_additive_multiplications,
    compare=exact_int,
    cases=[Case("S = 10 source words, T = 12 steps, all sizes 128", given(10, 12, 128, 128, 128)),
           Case("S = 4, T = 5, d_h = 8, d_s = 6, d_a = 3", given(4, 5, 8, 6, 3))],
    hidden_cases=[Case("everything 1", given(1, 1, 1, 1, 1)),
                  Case("S = 30, T = 35, d_h = d_s = 256, d_a = 64", given(30, 35, 256, 256, 64)),
                  Case("a single output step", given(20, 1, 10, 10, 10)),
                  Case("S = 7, T = 9, d_h = 3, d_s = 5, d_a = 11", given(7, 9, 3, 5, 11)),
                  Case("S = 100, T = 120, d_h = 512, d_s = 1024, d_a = 128", given(100, 120, 512, 1024, 128))],
    mutants=[
        Mutant(lambda S, T, d_h, d_s, d_a: T * S * d_a * d_h + T * d_a * d_s + T * S * d_a,
               "computed W_1 h_j again at every step: it does not depend on the query, so once per sentence"),
        Mutant(lambda S, T, d_h, d_s, d_a: S * d_a * d_h + T * d_a * d_s,
               "left out v^T tanh(...): d_a multiplications for every (step, source word) pair"),
        Mutant(lambda S, T, d_h, d_s, d_a: S * d_a * d_h + T * S * d_a * d_s + T * S * d_a,
               "computed W_2 s_{t-1} for every source word: it depends on the step only"),
        Mutant(lambda S, T, d_h, d_s, d_a: T * S * d_h,
               "counted a dot-product score: the additive score runs a small network on every pair"),
        Mutant(lambda S, T, d_h, d_s, d_a: T * d_a * d_s + T * S * d_a,
               "left out W_1 h_j: computed once per sentence, it still costs S·d_a·d_h"),
    ],
)

QUESTIONS = [PEAK_WEIGHT, SCORE_PARAMETERS, ADDITIVE_MULTIPLICATIONS]
