"""BLEU, the n-gram overlap score used to evaluate machine translation.

For a corpus of candidate translations, each with one or more references,
corpus BLEU with maximum order N (usually 4) is

    BLEU = 100 * BP * exp( (1/N) * sum_{n=1..N} log p_n )

where p_n is the modified n-gram precision *pooled over the corpus*

    p_n = sum_sentences clipped matches of order n / sum_sentences candidate n-grams of order n

and a candidate n-gram's count is clipped to the most times it occurs in any
single reference, so repeating a correct word earns nothing. Precision alone
rewards short outputs, so the brevity penalty is

    BP = 1                  if c > r
         exp(1 - r / c)     otherwise

with c the total candidate length and r the effective reference length: for
each sentence the reference length closest to the candidate's, ties broken
towards the shorter reference. These conventions (and the 0-100 scale, with no
smoothing) match ``sacrebleu.corpus_bleu(..., tokenize="none", smooth_method="none")``.
Inputs are already tokenised: each sentence is a list of tokens. Exact match, and both scores by source
length (the bottleneck experiments of chapters 3 and 4), are here too.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

Tokens = Sequence[str]


def ngrams(tokens: Tokens, n: int) -> Counter[tuple[str, ...]]:
    """Count of every run of ``n`` consecutive tokens (``len(tokens) - n + 1`` of them in all)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def modified_precision(candidate: Tokens, references: Sequence[Tokens], n: int) -> tuple[int, int]:
    """Clipped n-gram matches and total candidate n-grams of one sentence: ``(matches, total)``.

    matches = sum_g min(count_cand(g), max_ref count_ref(g)), total = sum_g count_cand(g).
    The caller divides (after summing over a corpus), so the numbers stay exact.

    Example (the course notes): candidate "the cat the cat on the mat" has 6 bigrams. Against
    the references "the cat is on the mat" and "there is a cat on the mat", "the cat" occurs twice
    but is clipped to 1, "cat the" matches nothing, and "cat on", "on the", "the mat" match once:
    4/6. Against the first reference alone "cat on" no longer matches: 3/6.
    """
    cand = ngrams(candidate, n)
    max_ref: Counter[tuple[str, ...]] = Counter()
    for ref in references:
        max_ref |= ngrams(ref, n)  # Counter union keeps the larger count: the max over references
    matches = sum(min(count, max_ref[g]) for g, count in cand.items())
    return matches, sum(cand.values())


def brevity_penalty(c: int, r: int) -> float:
    """BP = 1 if c > r else exp(1 - r / c); c = candidate length, r = effective reference length."""
    if c > r:
        return 1.0
    if c == 0:
        return 0.0  # an empty output gets no credit (the limit of exp(1 - r/c) as c -> 0)
    return math.exp(1 - r / c)


def closest_ref_length(c: int, ref_lengths: Sequence[int]) -> int:
    """The reference length closest to the candidate length ``c``, ties going to the shorter one."""
    return min(ref_lengths, key=lambda r: (abs(r - c), r))


def corpus_bleu(candidates: Sequence[Tokens], references: Sequence[Sequence[Tokens]], max_n: int = 4) -> float:
    """Corpus BLEU on a 0-100 scale: 100 * BP * exp(mean_n log p_n), n = 1..max_n, no smoothing.

    ``references[i]`` is the list of references (each a list of tokens) for ``candidates[i]``;
    sentences may have different numbers of references. Matches and totals are summed over the
    whole corpus before dividing, which is why corpus BLEU is not the mean of sentence BLEUs.
    If any p_n is 0 the geometric mean, and so BLEU, is 0.
    """
    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} reference lists")
    matches, totals = [0] * max_n, [0] * max_n
    c = r = 0
    for cand, refs in zip(candidates, references, strict=True):
        if not refs:
            raise ValueError("every candidate needs at least one reference")
        c += len(cand)
        r += closest_ref_length(len(cand), [len(ref) for ref in refs])
        for n in range(1, max_n + 1):
            m, t = modified_precision(cand, refs, n)
            matches[n - 1] += m
            totals[n - 1] += t
    if min(matches) == 0:  # also covers a corpus too short to have any max_n-grams
        return 0.0
    log_p = sum(math.log(m / t) for m, t in zip(matches, totals, strict=True)) / max_n
    return 100 * brevity_penalty(c, r) * math.exp(log_p)


def exact_match(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> float:
    """Fraction of outputs identical to their reference."""
    return sum(list(h) == list(r) for h, r in zip(hypotheses, references, strict=True)) / len(references)


def scores_by_length(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]],
                     src_lengths: Sequence[int], buckets: Sequence[tuple[int, int]]) -> dict[str, list[float]]:
    """Exact match and corpus BLEU of the sentences whose source length lies in each (lo, hi) bucket
    (``n``: how many sentences each bucket holds)."""
    out: dict[str, list[float]] = {"exact": [], "bleu": [], "n": []}
    for lo, hi in buckets:
        idx = [i for i, n in enumerate(src_lengths) if lo <= n <= hi]
        hyps, refs = [hypotheses[i] for i in idx], [references[i] for i in idx]
        out["exact"].append(exact_match(hyps, refs))
        out["bleu"].append(corpus_bleu(hyps, [[r] for r in refs]))
        out["n"].append(len(idx))
    return out

