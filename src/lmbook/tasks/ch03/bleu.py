"""Task 4 of exercise 3: corpus BLEU."""

from __future__ import annotations

import math
import random

import torch

from ... import metrics as lmbook_metrics
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_scalar_mismatch
from .toy_decoder import COURSE

WORDS = ("the", "a", "cat", "dog", "bird", "sat", "ran", "saw", "on", "near", "mat", "big", "small", "red", "and",
         "with")


def _perturb(rng: random.Random, sent: list[str], noise: float = 1.0) -> list[str]:
    """A noisy copy: tokens dropped, replaced, swapped with a neighbour, or inserted."""
    out, i = list(sent), 0
    while i < len(out):
        u = rng.random() / noise
        if u < 0.08 and len(out) > 3:
            del out[i]
            continue
        if u < 0.16:
            out[i] = rng.choice(WORDS)
        elif u < 0.22 and i + 1 < len(out):
            out[i], out[i + 1] = out[i + 1], out[i]
        elif u < 0.28:
            out.insert(i, rng.choice(WORDS))
            i += 1
        i += 1
    return out


def _noisy(rng: random.Random, ref: list[str], n: int) -> list[str]:
    """A noisy copy of ``ref`` of exactly ``n`` tokens (cut, or filled up with random words)."""
    return (_perturb(rng, ref) + [rng.choice(WORDS) for _ in range(n)])[:n]


def _corpus_case(size, n_refs=(1, 1), lengths=(4, 16), kind="noisy"):
    """``size`` sentences; candidates and extra references are noisy copies of a random first reference."""
    def make(g, device):
        rng = random.Random(int(torch.randint(0, 2**31, (1,), generator=g)))
        cands, refs = [], []
        for i in range(size):
            ref = [rng.choice(WORDS) for _ in range(rng.randint(*lengths))]
            k = rng.randint(*n_refs)
            if kind == "ties":  # references one token shorter and one longer than the candidate (and a longest)
                cand = _perturb(rng, ref)
                c = len(cand)
                rs = [_noisy(rng, ref, c - 1), _noisy(rng, ref, c + 1)] + ([_noisy(rng, ref, c + 3)] if k > 1 else [])
                rng.shuffle(rs)
            elif kind == "mixed":  # in turn: cut to half its only reference; between references c-2 and c+1
                if i % 2:
                    rs, cand = [ref], ref[: len(ref) // 2]
                else:
                    cand = _perturb(rng, ref)
                    c = len(cand)
                    rs = [_noisy(rng, ref, c + 1), _noisy(rng, ref, c - 2)]
            elif kind == "straddle":  # references on both sides of the candidate: closest, shortest, longest differ
                cand = _perturb(rng, ref)
                c = len(cand)
                # in turn: closest c+1, shortest c-2, longest c+5; and one reference c+4 (shortest in total > c)
                rs = [_noisy(rng, ref, c + 1), _noisy(rng, ref, c - 2), _noisy(rng, ref, c + 5)] if i % 2 else \
                    [_noisy(rng, ref, c + 4)]
            else:
                rs = [ref] + [_perturb(rng, ref) for _ in range(k - 1)]
                cand = _perturb(rng, ref)
                if kind == "short":  # the candidate keeps only the first half to three quarters
                    cand = cand[: max(2, int(len(cand) * rng.uniform(0.5, 0.75)))]
                elif kind == "repeats":  # a word of the reference said over and over
                    w = rng.choice(ref)
                    cand = cand[:2] + [w] * rng.randint(2, 4) + cand[2:]
                elif kind == "shuffled":  # the reference's words in an order that shares no 4-gram with it
                    ref_4grams = set(_ngram_counts(ref, 4))
                    while True:
                        cand = rng.sample(ref, len(ref))
                        if not ref_4grams & set(_ngram_counts(cand, 4)):
                            break
                elif kind == "perfect":
                    cand = list(ref)
            cands.append(tuple(cand))
            refs.append(tuple(tuple(r) for r in rs))
        return ((tuple(cands), tuple(refs)), {})
    return make


def _example_case(g, device):
    cand = tuple("the cat the cat on the mat".split())
    refs = (tuple("the cat is on the mat".split()), tuple("there is a cat on the mat".split()))
    return (((cand,), (refs,)), {})


def _bleu_ref(candidates, references):
    from sacrebleu.metrics import BLEU  # the standard implementation (0-100 scale)

    k = max(len(refs) for refs in references)
    # sacrebleu wants reference streams: streams[j][i] is the j-th reference of sentence i (None if it has fewer)
    streams = [[" ".join(refs[j]) if j < len(refs) else None for refs in references] for j in range(k)]
    bleu = BLEU(tokenize="none", smooth_method="none", effective_order=False)
    return bleu.corpus_score([" ".join(c) for c in candidates], streams).score


def _ngram_counts(tokens, n):
    counts: dict[tuple, int] = {}
    for i in range(len(tokens) - n + 1):
        gram = tuple(tokens[i:i + n])
        counts[gram] = counts.get(gram, 0) + 1
    return counts


def _bleu_with(clip="max", mean="geometric", ref_len="closest", bp="normal", level="corpus", scale=100.0,
               skip_zero=False):
    """Corpus BLEU with one known mistake (the default settings give the right answer)."""
    def sentence_stats(cand, refs):
        stats = []
        for n in range(1, 5):
            cand_counts = _ngram_counts(cand, n)
            ref_counts = [_ngram_counts(r, n) for r in refs]
            matches = 0
            for gram, c in cand_counts.items():
                in_refs = [rc.get(gram, 0) for rc in ref_counts]
                cap = {"max": max(in_refs), "sum": sum(in_refs), "none": c if max(in_refs) else 0}[clip]
                matches += min(c, cap)
            stats.append((matches, sum(cand_counts.values())))
        lens = [len(r) for r in refs]
        r = {"closest": min(lens, key=lambda x: (abs(x - len(cand)), x)),
             "longer_tie": min(lens, key=lambda x: (abs(x - len(cand)), -x)),
             "longest": max(lens), "shortest": min(lens)}[ref_len]
        return stats, len(cand), r

    def score(stats, c, r):
        p = [m / t if t else 0.0 for m, t in stats]
        if mean == "arithmetic":
            avg = sum(p) / 4
        elif skip_zero:  # the geometric mean of the non-zero precisions only
            logs = [math.log(x) for x in p if x > 0]
            avg = math.exp(sum(logs) / len(logs)) if logs else 0.0
        elif min(p) == 0:
            return 0.0
        else:
            avg = math.exp(sum(map(math.log, p)) / 4)
        if bp == "none":
            penalty = 1.0
        elif bp == "always" or c <= r:
            penalty = math.exp(1 - r / c)
        else:
            penalty = 1.0
        return scale * penalty * avg

    def fn(candidates, references):
        per = [sentence_stats(list(c), [list(r) for r in refs]) for c, refs in zip(candidates, references,
                                                                                  strict=True)]
        if level == "sentence":
            return sum(score(*s) for s in per) / len(per)
        stats = [(sum(s[0][n][0] for s in per), sum(s[0][n][1] for s in per)) for n in range(4)]
        return score(stats, sum(s[1] for s in per), sum(s[2] for s in per))
    return fn


BLEU_CHECK = Check(
    task="corpus_bleu",
    what="100 · BP · exp(mean of log p_1..p_4), clipped precisions pooled over the corpus; agrees with sacrebleu",
    reference=_bleu_ref,
    # the statement asks for a Python number (NumPy's floats are numbers too), not a tensor
    compare=lambda out, ref: describe_scalar_mismatch(out, ref, rtol=1e-6, atol=1e-6, accept=("number",)),
    cases=[Case("the course's example: 'the cat the cat on the mat', two references", _example_case),
           Case("20 sentences, one reference each", _corpus_case(20)),
           Case("30 sentences, references both shorter and longer than the candidates",
                _corpus_case(30, lengths=(6, 16), kind="straddle"))],
    hidden_cases=[Case("candidates shorter than their references (brevity penalty)",
                       _corpus_case(25, n_refs=(1, 2), kind="short")),
                  Case("candidates repeating a word (clipping)", _corpus_case(25, n_refs=(1, 2), kind="repeats")),
                  Case("two references equally close in length to each candidate (ties go to the shorter)",
                       _corpus_case(25, n_refs=(1, 2), kind="ties")),
                  Case("30 sentences, one to three references each", _corpus_case(30, n_refs=(1, 3))),
                  # the shortest reference gives a brevity penalty here that is neither 1 nor the right one
                  Case("candidates cut short, and candidates between a shorter and a longer reference",
                       _corpus_case(30, lengths=(6, 16), kind="mixed")),
                  Case("a corpus of one sentence, two references", _corpus_case(1, n_refs=(2, 2), lengths=(8, 12))),
                  Case("shuffled words, no 4-gram in common: BLEU is 0",
                       _corpus_case(5, lengths=(5, 7), kind="shuffled")),
                  Case("perfect translations: BLEU is 100", _corpus_case(10, n_refs=(1, 3), kind="perfect")),
                  Case("100 sentences, one to four references each, up to 30 tokens",
                       _corpus_case(100, n_refs=(1, 4), lengths=(3, 30)))],
    mutants=[
        Mutant(_bleu_with(clip="none"), "did not clip the n-gram counts: a candidate n-gram counts at most as many "
                                        "times as it occurs in a single reference"),
        Mutant(_bleu_with(clip="sum"), "clipped to the total count over all references: clip to the largest count "
                                       "in any one reference"),
        Mutant(_bleu_with(mean="arithmetic"), "averaged the precisions arithmetically: BLEU takes their geometric "
                                              "mean, exp((1/4) Σ log p_n)"),
        Mutant(_bleu_with(level="sentence"), "averaged sentence-level BLEU: corpus BLEU adds up the matches, the "
                                             "n-gram counts and the lengths over all sentences before dividing"),
        Mutant(_bleu_with(bp="none"), "left out the brevity penalty BP = exp(1 - r/c) for c <= r"),
        Mutant(_bleu_with(bp="always"), "applied the brevity penalty to long candidates too: BP = 1 when c > r"),
        Mutant(_bleu_with(ref_len="longest"), "used the longest reference for r: use the reference length closest "
                                              "to the candidate's (ties: the shorter)"),
        Mutant(_bleu_with(ref_len="shortest"), "used the shortest reference for r: use the reference length "
                                               "closest to the candidate's (ties: the shorter)"),
        Mutant(_bleu_with(ref_len="longer_tie"), "broke ties between equally close references towards the longer "
                                                 "one: sacrebleu takes the shorter"),
        Mutant(_bleu_with(skip_zero=True), "left out the orders n with no match: without smoothing, BLEU is 0 "
                                           "as soon as one precision p_n is 0"),
        Mutant(_bleu_with(scale=1.0), "returned BLEU on a 0-1 scale: report it on sacrebleu's 0-100 scale"),
    ],
    forbidden=(lmbook_metrics.corpus_bleu, lmbook_metrics.modified_precision, lmbook_metrics.brevity_penalty,
               lmbook_metrics.closest_ref_length, lmbook_metrics.ngrams),
    forbidden_attrs=("corpus_bleu", "sentence_bleu", "corpus_score", "sentence_score", "bleu_score"),
    forbidden_modules=(*COURSE, "lmbook.metrics", "sacrebleu", "nltk", "torchmetrics", "torchtext", "evaluate"),
)
