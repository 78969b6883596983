"""Thinking questions of exercise 3 (chapter 3): the masked loss of a padded batch, the number of
candidates beam search scores, and the BLEU of a translation cut short, each as a function of its
configuration."""

from __future__ import annotations

import math

from ...grading.checks import Case, Check, Mutant
from .ch01 import exact_int, given, number

# ----------------------------------------------------------------------------- the masked mean over a padded batch

def _masked_mean_loss(lengths, losses):
    return sum(n * loss for n, loss in zip(lengths, losses, strict=True)) / sum(lengths)


def _total(lengths, losses):
    return sum(n * loss for n, loss in zip(lengths, losses, strict=True))


MASKED_MEAN_LOSS = Check(
    task="masked_mean_loss",
    what="Σ_b L_b ℓ_b / Σ_b L_b: the mean over the real tokens of the batch",
    reference=_masked_mean_loss,
    compare=number(rtol=1e-9),
    cases=[Case("lengths (5, 2), losses (1.0, 3.0)", given((5, 2), (1.0, 3.0))),
           Case("lengths (3, 3, 6), losses (0.5, 1.0, 2.0)", given((3, 3, 6), (0.5, 1.0, 2.0)))],
    hidden_cases=[Case("a single sentence", given((4,), (2.5,))),
                  Case("two sentences of the same length", given((7, 7), (1.0, 2.0))),
                  Case("one long and two one-token sentences", given((10, 1, 1), (0.1, 5.0, 5.0))),
                  Case("four sentences", given((2, 9, 4, 1), (3.0, 0.2, 1.0, 7.0)))],
    mutants=[
        Mutant(lambda lengths, losses: sum(losses) / len(losses),
               "averaged the sentences' mean losses: every real token counts the same, so weigh each "
               "sentence by its length"),
        Mutant(lambda lengths, losses: _total(lengths, losses) / (len(lengths) * max(lengths)),
               "divided by every position of the padded batch: padding positions are not tokens"),
        Mutant(_total, "returned the sum over the tokens: the loss is their mean"),
        Mutant(lambda lengths, losses: _total(lengths, losses) / len(lengths),
               "divided by the number of sentences: divide by the number of real tokens"),
        Mutant(lambda lengths, losses: _masked_mean_loss([n + 1 for n in lengths], losses),
               "added a token for <eos>: the lengths given already count it"),
    ],
)


# ----------------------------------------------------------------------------- the candidates beam search scores

def _beam_candidates(V, k, T):
    return V + (T - 1) * k * V  # one prefix (<bos>) at the first step, k after it


BEAM_CANDIDATES = Check(
    task="beam_candidates",
    what="V + (T - 1) k V: one prefix at the first step, k at every later one, each with V next tokens",
    reference=_beam_candidates,
    compare=exact_int,
    cases=[Case("V = 10, k = 3, T = 4", given(10, 3, 4)), Case("V = 1000, k = 5, T = 20", given(1000, 5, 20))],
    hidden_cases=[Case("a beam of one (greedy), V = 5, T = 6", given(5, 1, 6)),
                  Case("V = 8000, k = 10, T = 30", given(8000, 10, 30)),
                  Case("V = 2, k = 2, T = 3", given(2, 2, 3)),
                  Case("k = V = 50, T = 2", given(50, 50, 2)),
                  Case("a single step, V = 7, k = 4", given(7, 4, 1))],
    mutants=[
        Mutant(lambda V, k, T: T * k * V,
               "started with k prefixes: the first step extends one prefix, <bos>, into V candidates"),
        Mutant(lambda V, k, T: V + (T - 1) * k * k,
               "scored only k continuations of each prefix: every prefix is scored with all V next tokens, and "
               "the best k of those k·V candidates are kept"),
        Mutant(lambda V, k, T: T * V,
               "counted greedy decoding's candidates: beam search extends each of its k prefixes by V tokens"),
        Mutant(lambda V, k, T: (T - 1) * k * V, "left out the first step's V candidates"),
        Mutant(lambda V, k, T: T * k, "gave each prefix one continuation: each can be followed by any of V tokens"),
    ],
)


# ----------------------------------------------------------------------------- BLEU of a translation cut short

def _bleu_of_prefix(c, r):
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return 100 * bp  # every n-gram of a prefix occurs in the reference: each p_n = 1


BLEU_OF_PREFIX = Check(
    task="bleu_of_prefix",
    what="100 exp(1 - r/c): every clipped precision is 1, only the brevity penalty is left",
    reference=_bleu_of_prefix,
    compare=number(rtol=1e-6),
    cases=[Case("the first 4 words of an 8-word reference", given(4, 8)),
           Case("the first 9 words of a 10-word reference", given(9, 10))],
    hidden_cases=[Case("the whole 10-word reference", given(10, 10)),
                  Case("the first 5 words of 25", given(5, 25)),
                  Case("the first 20 words of 21", given(20, 21)),
                  Case("the first 4 words of 100", given(4, 100)),
                  Case("the first 30 words of 31", given(30, 31))],
    mutants=[
        Mutant(lambda c, r: 100.0,
               "left out the brevity penalty: every n-gram of a prefix of the reference matches, so only the "
               "penalty lowers BLEU"),
        Mutant(lambda c, r: 100 * math.exp(1 - c / r),
               "wrote the penalty as exp(1 - c/r): it is exp(1 - r/c), the reference length over the candidate's"),
        Mutant(lambda c, r: 100 * c / r, "took the length ratio c/r as the penalty: it is exp(1 - r/c)"),
        Mutant(lambda c, r: math.exp(1 - r / c), "gave BLEU between 0 and 1: report it on the 0-100 scale"),
        Mutant(lambda c, r: 100 * math.exp(1 - r / c) * c / r,
               "lowered the precisions too: every n-gram of the candidate occurs in the reference, so each "
               "clipped precision p_n is 1"),
    ],
)

QUESTIONS = [MASKED_MEAN_LOSS, BEAM_CANDIDATES, BLEU_OF_PREFIX]
