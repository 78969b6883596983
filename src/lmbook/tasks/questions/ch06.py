"""Thinking questions of exercise 6 (chapter 6): count a multi-head attention layer's parameters, predict
what dividing every head's scores by sqrt(d) instead of sqrt(d_head) does to their variance, and predict
how many output-input pairs still interact after the wrong reshape, each as a function of its configuration.

The references are the closed forms; each question's mutants are the mistakes a student makes on the
way (full-size maps in every head, W_o or a bias forgotten, a variance confused with a standard deviation).
"""

from __future__ import annotations

import math

from ...grading.checks import Case, Check, Mutant
from .ch05 import exact_int, given, number

# ----------------------------------------------------------------------------- parameters of a layer


def _mha_parameters(d, h, bias):
    # W_q, W_k, W_v: h maps of d × d/h side by side, each d × d in all; W_o: d × d; a bias per map
    return 4 * d * d + (4 * d if bias else 0)


MHA_PARAMETERS = Check(
    task="mha_parameters",
    what="4d² (+ 4d with biases): the heads share out the columns of W_q, W_k, W_v, whatever h is",
    reference=_mha_parameters,
    compare=exact_int,
    cases=[Case("the Transformer's d = 512, h = 8, with biases", given(512, 8, True)),
           Case("d = 64, h = 4, no biases", given(64, 4, False))],
    hidden_cases=[Case("GPT-2 small's d = 768, h = 12, with biases", given(768, 12, True)),
                  Case("d = 64, one head, with biases", given(64, 1, True)),
                  Case("d = 1024, h = 16, no biases", given(1024, 16, False)),
                  Case("d = 16, h = 2, with biases", given(16, 2, True)),
                  Case("d = 120, h = 5, with biases", given(120, 5, True)),
                  Case("d = 6, h = 3, no biases", given(6, 3, False))],
    mutants=[
        Mutant(lambda d, h, bias: 3 * h * d * d + d * d + ((3 * h + 1) * d if bias else 0),
               "gave every head full-size d × d maps: head i has d × d/h maps, so the h heads together "
               "hold three d × d matrices"),
        Mutant(lambda d, h, bias: 3 * d * d + (3 * d if bias else 0),
               "left out the output projection W_o, a d × d matrix (and its bias)"),
        Mutant(lambda d, h, bias: 4 * d * d,
               "left out the biases: with bias=True each of the four maps has a bias of d entries"),
        Mutant(lambda d, h, bias: (4 * d * d + (4 * d if bias else 0)) // h,
               "divided by h: the heads split the width, not the parameters; together they are as large as "
               "one head of full width"),
        Mutant(lambda d, h, bias: 3 * d * d + d * d // h + ((3 * d + d // h) if bias else 0),
               "gave W_o one head's size: it maps the concatenation of all h heads, d numbers, to d"),
        Mutant(lambda d, h, bias: 4 * d * d + (3 * d if bias else 0),
               "left out W_o's bias: the output projection has a bias of d entries too"),
    ],
)


# ----------------------------------------------------------------------------- sqrt(d) instead of sqrt(d_head)

def _wrong_scale_variance(d, h):
    d_head = d // h
    return d_head / d  # Var(q·k) = d_head for unit entries, divided by (sqrt(d))² = d


WRONG_SCALE = Check(
    task="wrong_scale_variance",
    what="d_head / d = 1/h: each head's q·k has variance d_head, and dividing by sqrt(d) divides it by d",
    reference=_wrong_scale_variance,
    compare=number(),
    cases=[Case("d = 64, h = 4", given(64, 4)), Case("d = 768, h = 12", given(768, 12))],
    hidden_cases=[Case("d = 256, h = 8", given(256, 8)), Case("d = 64, one head", given(64, 1)),
                  Case("d = 16, h = 16 (heads of size 1)", given(16, 16)), Case("d = 120, h = 5", given(120, 5)),
                  Case("d = 1024, h = 16", given(1024, 16)), Case("d = 6, h = 3", given(6, 3))],
    mutants=[
        Mutant(lambda d, h: 1.0,
               "predicted no change: the head's dot products have d_head terms, so their variance is d_head, "
               "and dividing by sqrt(d) instead of sqrt(d_head) leaves d_head / d"),
        Mutant(lambda d, h: float(h),
               "turned the ratio upside down: the scores are divided by too much, so their variance shrinks "
               "to d_head / d"),
        Mutant(lambda d, h: 1 / math.sqrt(h),
               "gave the standard deviation: the variance is its square, d_head / d"),
        Mutant(lambda d, h: float(d // h),
               "left out the division: the question's scores are q·k / sqrt(d), whose variance is d_head / d"),
        Mutant(lambda d, h: (d // h) / math.sqrt(d),
               "divided the variance by sqrt(d): dividing a variable by c divides its variance by c²"),
    ],
)


# ----------------------------------------------------------------------------- the wrong reshape

def _wrong_reshape_pairs(n, h):
    # x.reshape(B, h, n, d/h) gives head a the n/h positions a·n/h .. (a+1)·n/h - 1, each cut into h pieces:
    # h blocks of n/h positions that see each other and nothing else
    return h * (n // h) ** 2


WRONG_RESHAPE = Check(
    task="wrong_reshape_pairs",
    what="n²/h: the reshape without the transpose cuts the sequence into h blocks of n/h positions",
    reference=_wrong_reshape_pairs,
    compare=exact_int,
    # blocks of n/h = 2 and 3 positions: were every block 2 positions long, n²/(2h) would equal n, and an
    # answer that halves the right count would read as "each output depends on its own input only"
    cases=[Case("n = 4, h = 2 (the chapter's example)", given(4, 2)), Case("n = 9, h = 3", given(9, 3))],
    hidden_cases=[Case("n = 8, h = 2", given(8, 2)), Case("n = 12, h = 4", given(12, 4)),
                  Case("n = 5, one head", given(5, 1)), Case("n = 16, h = 16", given(16, 16)),
                  Case("n = 32, h = 8", given(32, 8)), Case("n = 6, h = 3", given(6, 3))],
    mutants=[
        Mutant(lambda n, h: n * n,
               "predicted that nothing changes: without the transpose, head a gets whole positions "
               "a·n/h ... (a+1)·n/h - 1, not a slice of every position, so positions in different blocks never "
               "meet"),
        Mutant(lambda n, h: (n // h) ** 2,
               "counted one block: there are h blocks of n/h positions, each with (n/h)² pairs"),
        Mutant(lambda n, h: n,
               "let each output depend on its own input only: within a block of n/h positions, attention "
               "still mixes all of them"),
        Mutant(lambda n, h: n * n - h * (n // h) ** 2,
               "counted the pairs that are lost: the question asks for the pairs whose output still depends "
               "on the input"),
    ],
)

QUESTIONS = [MHA_PARAMETERS, WRONG_SCALE, WRONG_RESHAPE]
