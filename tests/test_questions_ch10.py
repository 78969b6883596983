"""Exercise 10's thinking questions: each reference answer against simulation, enumeration or the construction."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from lmbook.bert import mask_tokens
from lmbook.tasks.questions.ch10 import SHOWN_TRUE_SHARE, SPAN_CANDIDATES, SPAN_CORRUPTION_LENGTHS, TRUE_GIVEN_SHOWN

MASK, PAD = 10, 11  # after ten ordinary tokens


def _masked(vocab_size: int, n: int = 400_000, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (n,), generator=g)
    inputs, labels = mask_tokens(ids, mask_id=MASK, vocab_size=PAD + 1, special_ids=[], pad_id=PAD, generator=g)
    return ids, inputs, labels


def _within(k: int, n: int, rate: float) -> bool:
    return abs(k - n * rate) <= 5 * math.sqrt(n * rate * (1 - rate))


def test_shown_true_share_is_what_bert_masking_leaves_on_view():
    ids, inputs, _ = _masked(10)
    rate = SHOWN_TRUE_SHARE.reference(0.15, 0.8, 0.1, 10)  # mask_tokens draws from the 10 ordinary tokens
    assert _within(int((inputs == ids).sum()), len(ids), rate), ((inputs == ids).float().mean(), rate)


def test_true_given_shown_is_the_chance_a_visible_chosen_token_is_the_answer():
    ids, inputs, labels = _masked(10, seed=1)
    shown = (labels != -100) & (inputs != MASK)
    rate = TRUE_GIVEN_SHOWN.reference(0.8, 0.1, 10)
    assert _within(int((inputs[shown] == ids[shown]).sum()), int(shown.sum()), rate)
    assert abs(TRUE_GIVEN_SHOWN.reference(0.8, 0.1, 30522) - 0.5) < 1e-4  # BERT's rule: about half


@pytest.mark.parametrize(("n", "m"), [(1, 1), (5, 2), (7, 7), (10, 50), (20, 1), (33, 6)])
def test_span_candidates_is_the_number_of_spans_enumerated(n, m):
    spans = [(i, j) for i, j in itertools.product(range(n), repeat=2) if i <= j and j - i + 1 <= m]
    assert SPAN_CANDIDATES.reference(n, m) == len(spans)


def _corrupt(tokens: list[str], spans: list[tuple[int, int]]) -> tuple[list[str], list[str]]:
    """T5's span corruption by hand: spans (start, length), sorted and apart."""
    encoder, decoder, i = [], [], 0
    for k, (start, length) in enumerate(spans):
        encoder += tokens[i:start] + [f"<{k}>"]
        decoder += [f"<{k}>"] + tokens[start:start + length]
        i = start + length
    return encoder + tokens[i:], decoder + [f"<{len(spans)}>"]


def test_span_corruption_lengths_match_the_chapters_example():
    encoder, decoder = _corrupt("the old dog near the cat sleeps .".split(), [(1, 2), (6, 1)])
    assert " ".join(encoder) == "the <0> near the cat <1> ."
    assert " ".join(decoder) == "<0> old dog <1> sleeps <2>"
    assert SPAN_CORRUPTION_LENGTHS.reference(8, 2, 3) == (len(encoder), len(decoder))


def test_span_corruption_lengths_match_corruptions_built_at_random():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        n = int(torch.randint(2, 60, (1,), generator=g))
        cut = sorted(torch.randperm(n + 1, generator=g)[: 2 * int(torch.randint(1, n // 2 + 1, (1,),
                                                                                 generator=g))].tolist())
        spans = [(a, b - a) for a, b in zip(cut[::2], cut[1::2], strict=True) if b > a]
        spans = [s for k, s in enumerate(spans) if k == 0 or s[0] > spans[k - 1][0] + spans[k - 1][1]]
        if not spans:
            continue
        encoder, decoder = _corrupt([str(t) for t in range(n)], spans)
        corrupted = sum(length for _, length in spans)
        assert SPAN_CORRUPTION_LENGTHS.reference(n, len(spans), corrupted) == (len(encoder), len(decoder))
