"""Subject-verb agreement by distance: does a language model prefer the verb form with the right number?

In the course's toy English (:mod:`lmbook.corpus`) the first noun of a sentence is its subject, and a
prepositional phrase may push the verb away from it. For every verb of a text we record its position, its
distance D from the subject, the form that was written (right) and the same verb with the other number
(wrong). A model agrees at a verb when it gives the right form a higher probability than the wrong one
(chapters 1, 2 and 5).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .corpus import EOS, NOUNS_PL, NOUNS_SG, VERBS_INTRANS, VERBS_TRANS, Vocab

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
