"""Thinking questions of exercise 2 (chapter 2): count a recurrent LM's parameters, predict how many
steps a geometrically shrinking gradient survives, and derive what temperature does to two words'
odds, each as a function of its configuration."""

from __future__ import annotations

import math

from ...grading.checks import Case, Check, Mutant
from ...rnn import RNNLM, GRUCell, LSTMCell, RNNCell
from ..common import TORCH_RNN_NAMES
from .ch01 import exact_int, given, number

GATES = {"rnn": 1, "gru": 3, "lstm": 4}  # weight blocks per cell: h; r, z, n; i, f, c~, o


# ----------------------------------------------------------------------------- a recurrent LM's parameters

def _rnn_lm_parameters(V, d, H, cell):
    g = GATES[cell]
    return V * d + g * (H * d + H * H + 2 * H) + H * V + V  # E; W_x, W_h, b_ih, b_hh per block; U, c


def _with_gates(gates: dict):
    return lambda V, d, H, cell: V * d + gates[cell] * (H * d + H * H + 2 * H) + H * V + V


RNN_LM_PARAMETERS = Check(
    task="rnn_lm_parameters",
    what="V·d + g(H·d + H·H + 2H) + H·V + V, with g = 1, 3, 4 blocks for rnn, gru, lstm",
    reference=_rnn_lm_parameters,
    compare=exact_int,
    cases=[Case("vanilla RNN, V = 47, d = 32, H = 128 (the chapter's)", given(47, 32, 128, "rnn")),
           Case("LSTM, V = 47, d = 32, H = 128 (the chapter's)", given(47, 32, 128, "lstm"))],
    hidden_cases=[Case("GRU, V = 47, d = 32, H = 128", given(47, 32, 128, "gru")),
                  Case("LSTM, V = 10000, d = 256, H = 512", given(10000, 256, 512, "lstm")),
                  Case("GRU, V = 5, d = 3, H = 2", given(5, 3, 2, "gru")),
                  Case("vanilla RNN with d = H = 64, V = 100", given(100, 64, 64, "rnn")),
                  Case("the smallest LSTM: V = 2, d = 1, H = 1", given(2, 1, 1, "lstm"))],
    mutants=[
        Mutant(lambda V, d, H, cell: V * d + GATES[cell] * (H * d + H * H + H) + H * V + V,
               "counted one bias vector per block: torch's cells keep two, b_ih and b_hh (the chapter adds "
               "them into one b)"),
        Mutant(_with_gates({"rnn": 1, "gru": 4, "lstm": 3}),
               "swapped the blocks: an LSTM has four (i, f, c̃, o), a GRU three (r, z, n)"),
        Mutant(_with_gates({"rnn": 1, "gru": 1, "lstm": 1}),
               "counted one block for a gated cell: an LSTM stacks four (i, f, c̃, o), a GRU three (r, z, n)"),
        Mutant(lambda V, d, H, cell: V * d + GATES[cell] * (H * d + H * H + 2 * H),
               "left out the output layer: U is V × H and c has V entries"),
        Mutant(lambda V, d, H, cell: GATES[cell] * (H * d + H * H + 2 * H) + H * V + V,
               "left out the embedding matrix E, V × d"),
        Mutant(lambda V, d, H, cell: V * d + GATES[cell] * (2 * H * d + 2 * H) + H * V + V,
               "gave W_h the shape of W_x: it maps the state to the state, H × H"),
    ],
    forbidden=(RNNLM, RNNCell, LSTMCell, GRUCell),
    forbidden_attrs=(*TORCH_RNN_NAMES, "RNNLM", "numel"),
)


# ----------------------------------------------------------------------------- how far a vanishing gradient reaches

def _steps_until_below(a, threshold):
    D = math.floor(math.log(threshold) / math.log(a)) + 1  # the first D with a^D < threshold
    while D > 0 and a ** (D - 1) < threshold:  # guard against rounding in the logarithms
        D -= 1
    while a ** D >= threshold:
        D += 1
    return D


STEPS_UNTIL_BELOW = Check(
    task="steps_until_below",
    what="the smallest whole D with a^D < threshold: floor(ln threshold / ln a) + 1",
    reference=_steps_until_below,
    compare=exact_int,
    cases=[Case("a = 0.9, threshold 1e-3", given(0.9, 1e-3)), Case("a = 0.5, threshold 0.01", given(0.5, 0.01))],
    hidden_cases=[Case("a = 0.99, threshold 0.5", given(0.99, 0.5)),
                  Case("a = 0.1, threshold 2e-6", given(0.1, 2e-6)),
                  Case("a = 0.999, threshold 0.1", given(0.999, 0.1)),
                  Case("a = 0.6, threshold 0.59", given(0.6, 0.59)),
                  Case("a = 0.3, threshold 0.5: below after one step", given(0.3, 0.5)),
                  Case("a = 0.95, threshold 1e-9", given(0.95, 1e-9))],
    mutants=[
        Mutant(lambda a, t: math.log(t) / math.log(a),
               "returned ln(threshold) / ln(a) itself: D is a whole number of steps, the first with a^D below "
               "the threshold"),
        Mutant(lambda a, t: math.floor(math.log(t) / math.log(a)),
               "rounded down: after floor(ln(threshold) / ln(a)) steps the factor is still above the threshold"),
        Mutant(lambda a, t: math.floor(math.log(a) / math.log(t)) + 1,
               "divided the logarithms the wrong way round: a^D < threshold means D > ln(threshold) / ln(a)"),
        Mutant(lambda a, t: math.floor((1 - t) / (1 - a)) + 1,
               "let the factor fall by the same amount at every step: it is multiplied by a, so it falls "
               "geometrically"),
        Mutant(lambda a, t: math.floor(math.log10(t) / math.log(a)) + 1,
               "mixed the bases of the logarithms: take both in the same base"),
    ],
)


# ----------------------------------------------------------------------------- what temperature does to the odds

def _temperature_ratio(l1, l2, tau):
    return math.exp((l1 - l2) / tau)


TEMPERATURE_RATIO = Check(
    task="temperature_ratio",
    what="P(w_1) / P(w_2) under softmax(ℓ / τ): exp((ℓ_1 - ℓ_2) / τ)",
    reference=_temperature_ratio,
    compare=number(rtol=1e-6),
    cases=[Case("ℓ_1 = 2, ℓ_2 = 1, τ = 0.5", given(2.0, 1.0, 0.5)),
           Case("ℓ_1 = 3, ℓ_2 = 0.5, τ = 2", given(3.0, 0.5, 2.0))],
    hidden_cases=[Case("negative logits, τ = 1", given(-1.0, -3.0, 1.0)),
                  Case("the first word less likely, τ = 0.25", given(0.2, 1.2, 0.25)),
                  Case("equal logits, τ = 3", given(5.0, 5.0, 3.0)),
                  Case("ℓ_2 = 0, τ = 10", given(10.0, 0.0, 10.0)),
                  Case("a very high temperature, τ = 100", given(1.5, -0.5, 100.0))],
    mutants=[
        Mutant(lambda l1, l2, tau: math.exp((l1 - l2) * tau),
               "multiplied the logits by τ: temperature divides them, softmax(ℓ / τ)"),
        Mutant(lambda l1, l2, tau: math.exp(l1 - l2) / tau,
               "divided the odds by τ: τ divides the logits, inside the exponential"),
        Mutant(lambda l1, l2, tau: math.exp(l1 - l2), "left out τ: the odds at temperature τ are exp((ℓ_1 - ℓ_2) / τ)"),
        Mutant(lambda l1, l2, tau: 1 / (1 + math.exp((l2 - l1) / tau)),
               "returned P(w_1) among the two words: the question asks for the ratio P(w_1) / P(w_2)"),
        Mutant(lambda l1, l2, tau: (l1 / l2) ** (1 / tau),
               "took the ratio of the logits: probabilities are proportional to exp(ℓ / τ), not to ℓ"),
    ],
)

QUESTIONS = [RNN_LM_PARAMETERS, STEPS_UNTIL_BELOW, TEMPERATURE_RATIO]
