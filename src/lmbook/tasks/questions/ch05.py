"""Thinking questions of exercise 5 (chapter 5): derive the variance of an attention score, derive the
length at which attention's arithmetic overtakes the weights', and predict the memory of the attention
weights a model keeps for its backward pass, each as a function of its configuration.

The references are the closed forms; each question's mutants are the mistakes a student makes on the
way (a factor of d_k dropped, standard deviations for variances, the FFN or W_o left out of the count).
"""

from __future__ import annotations

import math
import numbers

import torch

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_scalar_mismatch, describe_value


def exact_int(out, ref) -> str | None:
    """A count: an int (or a one-element integer tensor) equal to the reference."""
    if isinstance(ref, float) and not ref.is_integer():  # a known mistake's answer, not a whole number
        return number()(out, ref)
    if isinstance(out, torch.Tensor) and out.numel() == 1 and not out.is_floating_point():
        out = out.item()
    if isinstance(out, float) and out.is_integer():
        out = int(out)
    if isinstance(out, bool) or not isinstance(out, numbers.Integral):
        return f"returned {describe_value(out)}, expected a whole number (an int)"
    if int(out) == int(ref):
        return None
    return (f"returned {int(out):,}, expected {int(ref):,} ({abs(int(out) - int(ref)):,} too "
            f"{'few' if out < ref else 'many'})")


def number(rtol: float = 1e-6, atol: float = 1e-12):
    return lambda out, ref: describe_scalar_mismatch(out, ref, rtol=rtol, atol=atol, accept=("number",))


def given(*args):
    """A case whose inputs are the numbers given."""
    return lambda g, device: (tuple(args), {})


# ----------------------------------------------------------------------------- Var(q · k)

def _score_variance(d_k, var_q, var_k, scaled):
    v = d_k * var_q * var_k  # d_k independent terms q_m k_m, each of variance E[q²] E[k²]
    return v / d_k if scaled else v  # dividing by sqrt(d_k) divides the variance by d_k


def _scaled_if(fn):
    return lambda d_k, var_q, var_k, scaled: fn(d_k, var_q, var_k) / (d_k if scaled else 1)


SCORE_VARIANCE = Check(
    task="score_variance",
    what="Var(q·k) = d_k·var_q·var_k, and Var(q·k / sqrt(d_k)) = var_q·var_k",
    reference=_score_variance,
    compare=number(),
    cases=[Case("d_k = 64, unit variances, unscaled", given(64, 1.0, 1.0, False)),
           Case("d_k = 16, var_q = 2, var_k = 3, scaled by 1/sqrt(d_k)", given(16, 2.0, 3.0, True))],
    hidden_cases=[Case("d_k = 16, var_q = 2, var_k = 0.5, unscaled", given(16, 2.0, 0.5, False)),
                  Case("d_k = 1, var_q = 3, var_k = 4, unscaled", given(1, 3.0, 4.0, False)),
                  Case("d_k = 512, var_q = var_k = 0.02, unscaled", given(512, 0.02, 0.02, False)),
                  Case("d_k = 128, var_q = 0.5, var_k = 3, scaled", given(128, 0.5, 3.0, True)),
                  Case("d_k = 7, var_q = 1.5, var_k = 2, unscaled", given(7, 1.5, 2.0, False)),
                  Case("d_k = 1024, unit variances, scaled", given(1024, 1.0, 1.0, True))],
    mutants=[
        Mutant(lambda d_k, var_q, var_k, scaled: var_q * var_k,
               "left out the d_k terms: q·k sums d_k independent products, so their variances add up to "
               "d_k·var_q·var_k"),
        Mutant(_scaled_if(lambda d_k, var_q, var_k: d_k * (var_q + var_k)),
               "added the two variances: the variance of a product of independent zero-mean variables is the "
               "product of their variances"),
        Mutant(_scaled_if(lambda d_k, var_q, var_k: d_k * math.sqrt(var_q * var_k)),
               "multiplied standard deviations: Var(q_m k_m) = E[q_m²] E[k_m²] = var_q·var_k"),
        Mutant(lambda d_k, var_q, var_k, scaled: d_k * var_q * var_k / (math.sqrt(d_k) if scaled else 1),
               "divided the variance by sqrt(d_k): dividing a variable by c divides its variance by c², so "
               "the scaled score's variance is Var(q·k) / d_k"),
        Mutant(_scaled_if(lambda d_k, var_q, var_k: d_k * d_k * var_q * var_k),
               "squared d_k: the variances of d_k independent terms add, giving d_k times one term's"),
        Mutant(lambda d_k, var_q, var_k, scaled: d_k * var_q * var_k,
               "ignored `scaled`: with scaled=True the score is q·k / sqrt(d_k)"),
    ],
)


# ----------------------------------------------------------------------------- n at which attention dominates

def _crossover(d, d_ff, causal_skip):
    weights = 2 * (4 * d * d + 2 * d * d_ff)  # W_q, W_k, W_v, W_o and the FFN's two matrices, per position
    per_n = 2 * d if causal_skip else 4 * d  # q·k_j and α_j v_j for n keys: 2·n·d multiply-adds
    return weights / per_n


def _crossover_with(weights_fn, per_n_fn):
    return lambda d, d_ff, causal_skip: weights_fn(d, d_ff) / per_n_fn(d, causal_skip)


def _attn(d, causal_skip):
    return 2 * d if causal_skip else 4 * d


CROSSOVER = Check(
    task="attention_crossover",
    what="n = (8d² + 4·d·d_ff) / (4d) = 2d + d_ff, twice that when the masked half is skipped",
    reference=_crossover,
    compare=number(),
    cases=[Case("this chapter's block: d = 64, d_ff = 256, full scores", given(64, 256, False)),
           Case("GPT-2 small: d = 768, d_ff = 3072, full scores", given(768, 3072, False))],
    hidden_cases=[Case("GPT-2 small, the masked half skipped", given(768, 3072, True)),
                  Case("d = 512, d_ff = 2048, full scores", given(512, 2048, False)),
                  Case("d = 100, d_ff = 300 (not 4d), full scores", given(100, 300, False)),
                  Case("this chapter's block, the masked half skipped", given(64, 256, True)),
                  Case("GPT-2 XL: d = 1600, d_ff = 6400, full scores", given(1600, 6400, False)),
                  Case("d = 96, d_ff = 64 (smaller than d), the masked half skipped", given(96, 64, True)),
                  Case("GPT-3: d = 12288, d_ff = 49152, full scores", given(12288, 49152, False))],
    mutants=[
        Mutant(lambda d, d_ff, causal_skip: 6 * d * (2 if causal_skip else 1),
               "assumed d_ff = 4d: the FFN's two matrices hold 2·d·d_ff weights, whatever d_ff is"),
        Mutant(_crossover_with(lambda d, d_ff: 8 * d * d, _attn),
               "left out the feed-forward network: its two matrices are part of the block's weights, "
               "2·(2·d·d_ff) FLOPs per position"),
        Mutant(_crossover_with(lambda d, d_ff: 2 * (3 * d * d + 2 * d * d_ff), _attn),
               "left out the output projection W_o: the attention layer has four d × d matrices"),
        Mutant(_crossover_with(lambda d, d_ff: 2 * (4 * d * d + 2 * d * d_ff), lambda d, c: d if c else 2 * d),
               "counted only the scores q·k_j: averaging the values, Σ α_j v_j, costs as much again"),
        Mutant(lambda d, d_ff, causal_skip: 2 * d + d_ff,
               "ignored `causal_skip`: skipping the masked half halves attention's arithmetic, so the "
               "crossing moves to twice the length"),
        Mutant(_crossover_with(lambda d, d_ff: 2 * (4 * d * d + d * d_ff), _attn),
               "counted one of the FFN's matrices: it has two, d × d_ff and d_ff × d"),
    ],
)


# ----------------------------------------------------------------------------- memory of the weights

def _weights_bytes(batch, n_layer, n_head, n, bytes_per_value):
    return batch * n_layer * n_head * n * n * bytes_per_value  # one n × n matrix per sequence, layer and head


def _weights_bytes_with(fn):
    return lambda batch, n_layer, n_head, n, bytes_per_value: fn(batch, n_layer, n_head, n) * bytes_per_value


WEIGHTS_BYTES = Check(
    task="attention_weights_bytes",
    what="batch · n_layer · n_head · n² · bytes_per_value",
    reference=_weights_bytes,
    compare=exact_int,
    cases=[Case("GPT-2 small, one sequence of 1,024 tokens in float32", given(1, 12, 12, 1024, 4)),
           Case("this chapter's model: a batch of 32 windows of 32 words, float32", given(32, 2, 1, 32, 4))],
    hidden_cases=[Case("4 sequences, 24 layers, 16 heads, n = 512, bfloat16", given(4, 24, 16, 512, 2)),
                  Case("GPT-2 XL: 48 layers, 25 heads, n = 1,024, float16, batch 2", given(2, 48, 25, 1024, 2)),
                  Case("16 sequences, 6 layers, 8 heads, n = 128, float32", given(16, 6, 8, 128, 4)),
                  Case("3 sequences, 5 layers, 7 heads, n = 11, float16", given(3, 5, 7, 11, 2)),
                  Case("one sequence, one layer, one head, n = 2,048, float64", given(1, 1, 1, 2048, 8)),
                  Case("8 sequences, 12 layers, 12 heads, n = 4,096, float32", given(8, 12, 12, 4096, 4))],
    mutants=[
        Mutant(_weights_bytes_with(lambda b, L, h, n: b * L * n * n),
               "left out the heads: every head of every layer keeps its own n × n weights"),
        Mutant(_weights_bytes_with(lambda b, L, h, n: b * L * h * n),
               "counted n weights per head: each of the n queries has a weight for each of the n keys, n²"),
        Mutant(_weights_bytes_with(lambda b, L, h, n: b * L * h * n * (n + 1) // 2),
               "counted only the causal half: the layer computes and stores the whole n × n matrix, the "
               "masked weights as zeros"),
        Mutant(_weights_bytes_with(lambda b, L, h, n: b * h * n * n),
               "left out the layers: every layer keeps its own weights for the backward pass"),
        Mutant(_weights_bytes_with(lambda b, L, h, n: L * h * n * n),
               "left out the batch: every sequence of the batch has its own weights"),
        Mutant(lambda b, L, h, n, nb: 8 * _weights_bytes(b, L, h, n, nb),
               "counted bits: bytes_per_value is already in bytes (4 for float32)"),
    ],
)

QUESTIONS = [SCORE_VARIANCE, CROSSOVER, WEIGHTS_BYTES]
