"""Behaviour of lmbook.ngram, checked against values computed by hand."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest
import torch

from lmbook.ngram import NGramLM, ngrams, unseen_ngram_fraction

# A tiny stream over the vocabulary {0, 1, 2}. Its bigrams are
# (0,1) (1,0) (0,2) (2,0) (0,1): after 0 come 1, 2, 1, so c(0) = 3, c(0,1) = 2, c(0,2) = 1, c(0,0) = 0.
TINY = [0, 1, 0, 2, 0, 1]
TINY_V = 3


def test_ngrams_lists_every_window_in_order():
    got = ngrams([5, 6, 7, 8], 3)
    assert got == [(5, 6, 7), (6, 7, 8)], f"expected the two 3-grams of [5, 6, 7, 8] in order, got {got}"


def test_ngrams_of_a_stream_shorter_than_n_is_empty():
    got = ngrams([1, 2], 3)
    assert got == [], f"a 2-token stream has no 3-grams, got {got}"


def test_mle_bigram_probability_is_the_count_ratio():
    lm = NGramLM(2, TINY_V, k=0).fit(TINY)
    got = lm.prob(1, context=[0])
    assert got == pytest.approx(2 / 3), f"P(1 | 0) should be c(0,1)/c(0) = 2/3, got {got}"


def test_mle_gives_zero_to_an_unseen_bigram():
    lm = NGramLM(2, TINY_V, k=0).fit(TINY)
    got = lm.prob(0, context=[0])
    assert got == 0.0, f"the bigram (0, 0) never occurs, so its unsmoothed probability should be 0, got {got}"


def test_add_k_probability_matches_closed_form():
    k = 0.5
    lm = NGramLM(2, TINY_V, k=k).fit(TINY)
    expected = (2 + k) / (3 + k * TINY_V)  # (c(0,1) + k) / (c(0) + kV)
    got = lm.prob(1, context=[0])
    assert got == pytest.approx(expected), f"add-{k} P(1 | 0) should be {expected:.6f}, got {got:.6f}"


def test_add_k_gives_unseen_bigram_k_over_denominator():
    k = 0.5
    lm = NGramLM(2, TINY_V, k=k).fit(TINY)
    expected = k / (3 + k * TINY_V)
    got = lm.prob(0, context=[0])
    assert got == pytest.approx(expected), f"add-{k} P(0 | 0) for an unseen bigram should be {expected:.6f}, got {got}"


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("k", [0.0, 0.01, 1.0])
def test_next_word_probs_sum_to_one_for_every_seen_context(n, k):
    rng = np.random.default_rng(0)
    stream = rng.integers(0, 6, size=300).tolist()
    lm = NGramLM(n, 6, k=k).fit(stream)
    for context in lm.counts:
        total = lm.next_word_probs(context).sum()
        assert total == pytest.approx(1.0), f"n={n}, k={k}: P(. | {context}) sums to {total}, not 1"


def test_unseen_context_gives_the_uniform_distribution():
    lm = NGramLM(3, TINY_V, k=0.1).fit(TINY)
    got = lm.next_word_probs([1, 1])  # (1, 1) never occurs as a context
    assert np.allclose(got, 1 / TINY_V), (
        f"an unseen context should give 1/V = {1 / TINY_V:.4f} to every word, got {got}"
    )


def test_only_the_last_n_minus_1_context_words_matter():
    lm = NGramLM(2, TINY_V, k=0.1).fit(TINY)
    long_context, short_context = [2, 1, 2, 0], [0]
    got, expected = lm.next_word_probs(long_context), lm.next_word_probs(short_context)
    assert np.allclose(got, expected), (
        f"a bigram model given {long_context} should use only its last word: {got} != {expected}"
    )


def test_too_short_context_is_rejected():
    lm = NGramLM(3, TINY_V).fit(TINY)
    with pytest.raises(ValueError, match="context"):
        lm.next_word_probs([0])


def test_unigram_perplexity_on_its_training_text_is_exp_of_the_entropy():
    stream = [0, 0, 1, 2]  # empirical distribution (1/2, 1/4, 1/4)
    entropy = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))  # = 1.5 ln 2 nats
    lm = NGramLM(1, 3, k=0).fit(stream)
    got = lm.perplexity(stream)
    assert got == pytest.approx(math.exp(entropy)), (
        f"unigram perplexity should be exp(H) = {math.exp(entropy):.6f}, got {got}"
    )
    assert got == pytest.approx(2**1.5), "exp(1.5 ln 2) should equal 2^1.5: the effective branching factor"


def test_a_model_with_no_counts_has_perplexity_equal_to_vocab_size():
    vocab_size = 7
    lm = NGramLM(2, vocab_size, k=1.0)  # never fitted: every context is unseen, so every prediction is uniform
    got = lm.perplexity([0, 3, 6, 2, 5, 1])
    assert got == pytest.approx(vocab_size), f"a uniform model's perplexity should be V = {vocab_size}, got {got}"


def test_perplexity_is_infinite_when_an_unsmoothed_model_meets_an_unseen_bigram():
    lm = NGramLM(2, TINY_V, k=0).fit(TINY)
    got = lm.perplexity([0, 0])  # contains the unseen bigram (0, 0)
    assert math.isinf(got), f"a zero-probability token should make perplexity infinite, got {got}"


def test_log_likelihood_skips_the_first_n_minus_1_tokens():
    lm = NGramLM(3, TINY_V, k=1.0).fit(TINY)
    _, count = lm.log_likelihood(TINY)
    assert count == len(TINY) - 2, f"a trigram model should score {len(TINY) - 2} of {len(TINY)} tokens, scored {count}"


def test_cross_entropy_is_mean_negative_log_probability():
    lm = NGramLM(2, TINY_V, k=0.5).fit(TINY)
    by_hand = -np.mean([math.log(lm.prob(w, [h])) for h, w in zip(TINY[:-1], TINY[1:], strict=True)])
    got = lm.cross_entropy(TINY)
    assert got == pytest.approx(by_hand), (
        f"cross-entropy should be the mean -ln P over bigrams ({by_hand:.6f}), got {got}"
    )


def test_fitting_on_a_tensor_equals_fitting_on_a_list():
    from_list = NGramLM(2, TINY_V, k=0.1).fit(TINY)
    from_tensor = NGramLM(2, TINY_V, k=0.1).fit(torch.tensor(TINY))
    assert from_list.counts.keys() == from_tensor.counts.keys(), "contexts differ between list and tensor input"
    for ctx, row in from_list.counts.items():
        assert np.array_equal(row, from_tensor.counts[ctx]), f"counts after {ctx} differ between list and tensor input"


def test_fit_rejects_ids_outside_the_vocabulary():
    with pytest.raises(ValueError, match="outside the vocabulary"):
        NGramLM(2, 2).fit([0, 1, 2])


@pytest.mark.parametrize(
    "kwargs", [{"n": 0, "vocab_size": 3}, {"n": 2, "vocab_size": 0}, {"n": 2, "vocab_size": 3, "k": -1}]
)
def test_invalid_hyperparameters_are_rejected(kwargs):
    with pytest.raises(ValueError):
        NGramLM(**kwargs)


def test_unseen_fraction_on_a_hand_example():
    # test bigrams (0,1) (1,1) (1,2); training has (0,1) and (1,2) but not (1,1)
    got = unseen_ngram_fraction([0, 1, 2], [0, 1, 1, 2], n=2)
    assert got == pytest.approx(1 / 3), f"one of three test bigrams is unseen, expected 1/3, got {got}"


def test_unseen_fraction_counts_repeated_ngrams_every_time():
    # test bigrams (0,1) (1,0) (0,1) (1,1): only (0,1) was seen, and it occurs twice -> 2 of 4 unseen
    got = unseen_ngram_fraction([0, 1], [0, 1, 0, 1, 1], n=2)
    assert got == pytest.approx(0.5), f"occurrences, not distinct n-grams, should be counted: expected 0.5, got {got}"


def test_unseen_fraction_is_zero_for_the_training_text_itself():
    got = unseen_ngram_fraction(TINY, TINY, n=3)
    assert got == 0.0, f"every n-gram of the training text was seen in training, got unseen fraction {got}"


def test_unseen_fraction_grows_with_n_on_toy_english():
    from lmbook.corpus import load_corpus

    corpus = load_corpus(n_train=5_000, n_val=10, n_test=2_000)
    fractions = [unseen_ngram_fraction(corpus.train, corpus.test, n) for n in range(1, 7)]
    assert all(a <= b for a, b in pairwise(fractions)), (
        f"the unseen fraction should not shrink as n grows, got {fractions}"
    )
    assert fractions[-1] > 0.5, f"most test 6-grams should be unseen in 5k training tokens, got {fractions[-1]:.3f}"


def test_bigram_lies_between_the_true_model_and_the_unigram_on_toy_english():
    from lmbook.corpus import load_corpus

    corpus = load_corpus(n_train=20_000, n_val=10, n_test=5_000)
    vocab_size = len(corpus.vocab)
    unigram = NGramLM(1, vocab_size, k=0.1).fit(corpus.train).perplexity(corpus.test)
    bigram = NGramLM(2, vocab_size, k=0.1).fit(corpus.train).perplexity(corpus.test)
    floor = corpus.floor_perplexity("test")
    assert floor < bigram < unigram, (
        f"expected floor < bigram < unigram perplexity, got {floor:.3f}, {bigram:.3f}, {unigram:.3f}"
    )
