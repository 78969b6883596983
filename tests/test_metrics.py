"""lmbook.metrics checked against sacrebleu, closed-form cases, and deliberately wrong variants."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest
from sacrebleu.metrics import BLEU

from lmbook.metrics import brevity_penalty, closest_ref_length, corpus_bleu, modified_precision, ngrams

Sentence = list[str]
VOCAB = [f"w{i}" for i in range(20)]


def _perturb(rng: random.Random, sent: Sentence) -> Sentence:
    """A noisy copy: each token is kept, dropped, replaced or swapped with its neighbour; sometimes one is inserted."""
    out = list(sent)
    i = 0
    while i < len(out):
        u = rng.random()
        if u < 0.08 and len(out) > 3:
            del out[i]
            continue
        if u < 0.16:
            out[i] = rng.choice(VOCAB)
        elif u < 0.22 and i + 1 < len(out):
            out[i], out[i + 1] = out[i + 1], out[i]
        elif u < 0.28:
            out.insert(i, rng.choice(VOCAB))
            i += 1
        i += 1
    return out


def _make_corpus(seed: int, n_refs: Callable[[random.Random], int], size: int = 200):
    """Random reference sentences of 3-30 tokens; candidates and extra references are perturbed copies."""
    rng = random.Random(seed)
    candidates, references = [], []
    for _ in range(size):
        ref = [rng.choice(VOCAB) for _ in range(rng.randint(3, 30))]
        refs = [ref] + [_perturb(rng, ref) for _ in range(n_refs(rng) - 1)]
        candidates.append(_perturb(rng, ref))
        references.append(refs)
    return candidates, references


CORPORA = {
    "one_ref": _make_corpus(0, lambda rng: 1),
    "two_refs": _make_corpus(1, lambda rng: 2),
    "one_or_two_refs": _make_corpus(2, lambda rng: rng.choice([1, 2])),
}


def _sacrebleu(candidates: list[Sentence], references: list[list[Sentence]]) -> float:
    # sacrebleu wants reference *streams*: streams[k][i] is the k-th reference of sentence i,
    # with None (not "", which would count as a 0-length reference) where sentence i has fewer.
    k = max(len(refs) for refs in references)
    streams = [[" ".join(refs[j]) if j < len(refs) else None for refs in references] for j in range(k)]
    bleu = BLEU(tokenize="none", smooth_method="none", effective_order=False)
    return bleu.corpus_score([" ".join(c) for c in candidates], streams).score


@pytest.mark.parametrize("name", CORPORA)
def test_corpus_bleu_agrees_with_sacrebleu(name):
    candidates, references = CORPORA[name]
    ours, theirs = corpus_bleu(candidates, references), _sacrebleu(candidates, references)
    assert 0 < theirs < 100, f"the generated set should give a non-trivial BLEU, sacrebleu says {theirs}"
    assert abs(ours - theirs) < 1e-6, f"{name}: lmbook {ours!r} vs sacrebleu {theirs!r}"


def test_generated_set_exercises_length_ties():
    # The tie rule (closest reference length, ties to the shorter) is only tested if ties occur.
    candidates, references = CORPORA["two_refs"]
    ties = sum(
        1
        for cand, refs in zip(candidates, references, strict=True)
        if len({len(r) for r in refs}) == 2 and abs(len(refs[0]) - len(cand)) == abs(len(refs[1]) - len(cand))
    )
    assert ties >= 3, f"only {ties} equidistant-reference sentences were generated"


def test_identical_candidate_scores_100():
    sent = "the cat sat on the mat today".split()
    assert corpus_bleu([sent], [[sent]]) == pytest.approx(100.0, abs=1e-12)


def test_no_shared_unigram_scores_0():
    assert corpus_bleu([["a", "b", "c", "d", "e"]], [[["v", "w", "x", "y", "z"]]]) == 0.0
    # No smoothing: a corpus with no 4-grams at all also scores 0, as in sacrebleu.
    short = [["a", "b", "c"]]
    assert corpus_bleu(short, [short]) == 0.0 == _sacrebleu(short, [short])


def test_strict_prefix_has_precision_1_and_only_the_brevity_penalty():
    ref = "the cat sat on the mat with a hat".split()  # r = 9
    cand = ref[:6]  # c = 6: every n-gram of a prefix occurs in the reference
    for n in range(1, 5):
        assert modified_precision(cand, [ref], n) == (6 - n + 1, 6 - n + 1)
    assert brevity_penalty(6, 9) == math.exp(1 - 9 / 6)
    assert corpus_bleu([cand], [[ref]]) == 100 * math.exp(1 - 9 / 6)


def test_brevity_penalty_is_1_unless_shorter_and_0_for_empty():
    assert brevity_penalty(10, 9) == 1.0
    assert brevity_penalty(9, 9) == 1.0  # exp(1 - 1)
    assert brevity_penalty(0, 5) == 0.0


def test_effective_reference_length_is_closest_with_ties_to_the_shorter():
    assert closest_ref_length(5, [4, 6]) == 4
    assert closest_ref_length(5, [6, 4]) == 4
    assert closest_ref_length(5, [2, 7, 9]) == 7
    # c = 5 between references of length 4 and 6: r = 4 so no penalty; r = 6 would give exp(1 - 6/5).
    cand = "a b c d e".split()
    refs = ["a b c d".split(), "a b c d e f".split()]
    assert corpus_bleu([cand], [refs]) == pytest.approx(_sacrebleu([cand], [refs]), abs=1e-9)


def test_ngrams_counts_repeats():
    assert ngrams("a b a b".split(), 2) == {("a", "b"): 2, ("b", "a"): 1}
    assert ngrams(["a"], 2) == {}


def test_clipping_example_from_the_course_notes():
    # Candidate bigrams: the-cat x2, cat-the, cat-on, on-the, the-mat (6 in all).
    cand = "the cat the cat on the mat".split()
    ref1 = "the cat is on the mat".split()
    ref2 = "there is a cat on the mat".split()
    # With both references the notes' 4/6 is right: the-cat clipped to 1, cat-the unmatched,
    # cat-on (only in ref2), on-the and the-mat once each.
    assert modified_precision(cand, [ref1, ref2], 2) == (4, 6)
    # With ref1 alone cat-on is unmatched: 3/6, not 4/6.
    assert modified_precision(cand, [ref1], 2) == (3, 6)
    # Unigrams: "the" x3 clipped to 2 (ref1 has two), "cat" x2 clipped to 1, "on", "mat": 5/7.
    assert modified_precision(cand, [ref1, ref2], 1) == (5, 7)


# --- Known wrong implementations: the agreement test must be able to tell them apart. ---


def _variant_bleu(candidates, references, *, clip=True, ref_len=closest_ref_length, geometric=True, max_n=4):
    matches, totals = [0] * max_n, [0] * max_n
    c = r = 0
    for cand, refs in zip(candidates, references, strict=True):
        c += len(cand)
        r += ref_len(len(cand), [len(ref) for ref in refs])
        for n in range(1, max_n + 1):
            m, t = modified_precision(cand, refs, n)
            if not clip:
                cand_ngrams = ngrams(cand, n)
                ref_ngrams = set().union(*(ngrams(ref, n) for ref in refs))
                m = sum(count for g, count in cand_ngrams.items() if g in ref_ngrams)
            matches[n - 1] += m
            totals[n - 1] += t
    p = [m / t for m, t in zip(matches, totals, strict=True)]
    mean = math.exp(sum(map(math.log, p)) / max_n) if geometric else sum(p) / max_n
    return 100 * brevity_penalty(c, r) * mean


WRONG = {
    "no_clipping": dict(clip=False),
    "longest_reference": dict(ref_len=lambda c, lens: max(lens)),
    "arithmetic_mean": dict(geometric=False),
    "ties_to_longer_reference": dict(ref_len=lambda c, lens: min(lens, key=lambda r: (abs(r - c), -r))),
}


def test_variant_with_right_settings_is_exact():
    # Guards the variants below: with nothing switched off it must reproduce sacrebleu.
    candidates, references = CORPORA["one_or_two_refs"]
    assert abs(_variant_bleu(candidates, references) - _sacrebleu(candidates, references)) < 1e-6


@pytest.mark.parametrize("wrong", WRONG)
def test_known_wrong_variants_disagree_with_sacrebleu(wrong):
    # The reference-length variants only differ with several references, so use the two-reference set.
    candidates, references = CORPORA["two_refs"]
    got, want = _variant_bleu(candidates, references, **WRONG[wrong]), _sacrebleu(candidates, references)
    assert abs(got - want) > 1e-3, f"{wrong} gives {got!r}, too close to sacrebleu's {want!r} to be caught"
