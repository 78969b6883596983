"""Subject-verb agreement by distance: does a language model prefer the verb form with the right number?

In the course's toy English (:mod:`lmbook.corpus`) the first noun of a sentence is its subject, and a
prepositional phrase may push the verb away from it. For every verb of a text we record its position, its
distance D from the subject, the form that was written (right) and the same verb with the other number
(wrong). A model agrees at a verb when it gives the right form a higher probability than the wrong one
(chapters 1, 2 and 5).

:func:`long_phrase_windows` builds test sentences whose phrase is longer than any the training text is
likely to hold (the grammar allows any number of adjectives in it, each less likely than the last), with
the phrase's noun of the other number: a test of agreement at distances a model has never been trained on.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .corpus import ADJS, DETS_PL, DETS_SG, EOS, NOUNS_PL, NOUNS_SG, PREPS, VERBS_INTRANS, VERBS_TRANS, Vocab

# D = 2 and 3 cannot occur (a verb follows its subject at once, or after a phrase of at least 3 words)
BUCKETS = [(1, 1), (4, 4), (5, 5), (6, 6), (7, 7), (8, 99)]
BUCKET_NAMES = ["1", "4", "5", "6", "7", "8+"]


@dataclass
class Sites:
    pos: torch.Tensor  # (N,) the verbs' positions in the text
    dist: torch.Tensor  # (N,) distance from the subject
    right: torch.Tensor  # (N,) the verb as written
    wrong: torch.Tensor  # (N,) the same verb with the other number


def verb_sites(ids: torch.Tensor, vocab: Vocab, min_pos: int = 1) -> Sites:
    """Every verb at position ≥ ``min_pos`` (e.g. a feedforward LM's window) whose subject is in the text."""
    flip = {}
    for sg, pl in VERBS_INTRANS + VERBS_TRANS:
        flip[vocab.stoi[sg]], flip[vocab.stoi[pl]] = vocab.stoi[pl], vocab.stoi[sg]
    nouns = {vocab.stoi[n] for n in NOUNS_SG + NOUNS_PL}
    eos = vocab.stoi[EOS]
    pos, dist, subject = [], [], None
    for t, word in enumerate(ids.tolist()):
        if word == eos:
            subject = None
        elif word in nouns and subject is None:
            subject = t  # the first noun of a sentence is its subject
        elif word in flip and subject is not None and t >= min_pos:
            pos.append(t)
            dist.append(t - subject)
    pos_t = torch.tensor(pos, dtype=torch.long)
    right = ids[pos_t]
    return Sites(pos_t, torch.tensor(dist, dtype=torch.long), right,
                 torch.tensor([flip[int(v)] for v in right], dtype=torch.long))


def agrees(log_probs: torch.Tensor, sites: Sites) -> torch.Tensor:
    """(N,) bool: True where the model prefers the right form. ``log_probs`` (N, V): row i is the model's
    next-word distribution (log or not) for the position of verb i, given the words before it."""
    log_probs = log_probs.cpu()
    return log_probs.gather(1, sites.right[:, None])[:, 0] > log_probs.gather(1, sites.wrong[:, None])[:, 0]


def accuracy_by_distance(correct: torch.Tensor, sites: Sites,
                         buckets: list[tuple[int, int]] = BUCKETS) -> tuple[list[float], list[int]]:
    """The share of verbs agreed with, and their number, in each distance bucket (lo ≤ D ≤ hi)."""
    acc, counts = [], []
    for lo, hi in buckets:
        m = (sites.dist >= lo) & (sites.dist <= hi)
        counts.append(int(m.sum()))
        acc.append(correct[m].float().mean().item() if m.any() else float("nan"))
    return acc, counts


@dataclass
class PhraseTest:
    windows: torch.Tensor  # (N, length) text ending in "." then a sentence up to the word before its verb
    right: torch.Tensor  # (N,) the verb form that agrees with the subject
    wrong: torch.Tensor  # (N,) the same verb with the other number (the phrase noun's number)
    dist: int  # distance D from the subject to the verb, the same in every row


def long_phrase_windows(text: torch.Tensor, vocab: Vocab, n_adj: int, count: int, length: int,
                        seed: int = 0) -> PhraseTest:
    """``count`` windows of ``length`` words that end with "DET NOUN PREP the ADJ × n_adj NOUN" (the verb
    comes next, at distance D = n_adj + 4 from the subject); the phrase's noun has the other number.

    Each window starts with the end of a random stretch of ``text`` that ends in ".", so that a model reads
    the sentence after real context, as it reads the test text. Every sentence is grammatical in the
    course's toy English (:func:`lmbook.corpus.toy_english`), whose phrases may hold any number of adjectives.
    """
    sentence_len = n_adj + 5  # the words before the verb
    if sentence_len >= length:
        raise ValueError(f"a phrase of {n_adj} adjectives needs windows longer than {sentence_len}, "
                         f"got length={length}")
    g = torch.Generator().manual_seed(seed)
    eos = vocab.stoi[EOS]
    ends = (text == eos).nonzero().flatten()
    ends = ends[ends >= length]  # room for the context before the sentence

    def pick(words):
        return words[int(torch.randint(len(words), (1,), generator=g))]

    rows, right, wrong = [], [], []
    for _ in range(count):
        plural = bool(torch.randint(2, (1,), generator=g))
        dets, nouns, others = (DETS_PL, NOUNS_PL, NOUNS_SG) if plural else (DETS_SG, NOUNS_SG, NOUNS_PL)
        words = [pick(dets), pick(nouns), pick(PREPS), "the"] + [pick(ADJS) for _ in range(n_adj)]
        words.append(pick(others))  # the attractor: a noun of the other number, right before the verb
        singular_form, plural_form = pick(VERBS_INTRANS + VERBS_TRANS)
        end = int(pick(ends))
        context = text[end + 1 - (length - sentence_len) : end + 1].tolist()
        rows.append(context + vocab.encode(words))
        r, w = (plural_form, singular_form) if plural else (singular_form, plural_form)
        right.append(vocab.stoi[r])
        wrong.append(vocab.stoi[w])
    return PhraseTest(torch.tensor(rows), torch.tensor(right), torch.tensor(wrong), n_adj + 4)
