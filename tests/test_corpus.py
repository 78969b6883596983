import itertools
import math

import numpy as np
import pytest
import torch

from lmbook.corpus import EOS, HMM, Vocab, load_corpus, make_windows, toy_english


def brute_force_log_prob(hmm: HMM, ids) -> float:
    """Sum P(states, words) over every state path: exponential, but independent of the forward algorithm."""
    S = len(hmm.states)
    total = 0.0
    for path in itertools.product(range(S), repeat=len(ids)):
        p = hmm.pi[path[0]] * hmm.B[path[0], ids[0]]
        for t in range(1, len(ids)):
            p *= hmm.A[path[t - 1], path[t]] * hmm.B[path[t], ids[t]]
            if p == 0.0:
                break
        total += p
    return math.log(total)


@pytest.fixture(scope="module")
def tiny_hmm() -> HMM:
    rng = np.random.default_rng(0)
    def rows(n, m):
        x = rng.random((n, m))
        return x / x.sum(1, keepdims=True)
    return HMM(["a", "b", "c"], Vocab(["x", "y", "z", "w"]), rows(1, 3)[0], rows(3, 3), rows(3, 4))


def test_forward_algorithm_matches_brute_force_sum_over_paths(tiny_hmm):
    for ids in ([0], [1, 2], [3, 0, 1, 2], [2, 2, 2, 1, 0]):
        assert tiny_hmm.log_prob(ids) == pytest.approx(brute_force_log_prob(tiny_hmm, ids), rel=1e-10), ids


def test_next_word_probs_is_the_conditional_of_joint_probabilities(tiny_hmm):
    context = [1, 3, 0]
    p_context = math.exp(tiny_hmm.log_prob(context))
    expected = [math.exp(tiny_hmm.log_prob(context + [w])) / p_context for w in range(4)]
    np.testing.assert_allclose(tiny_hmm.next_word_probs(context), expected, rtol=1e-10)


def test_probabilities_of_all_sequences_of_a_length_sum_to_one(tiny_hmm):
    total = sum(math.exp(tiny_hmm.log_prob(list(s))) for s in itertools.product(range(4), repeat=3))
    assert total == pytest.approx(1.0, abs=1e-12)


def test_rows_that_do_not_sum_to_one_are_rejected():
    with pytest.raises(ValueError, match="rows of A"):
        HMM(["a"], Vocab(["x"]), np.ones(1), np.array([[0.5]]), np.ones((1, 1)))


def test_toy_english_is_a_valid_hmm_with_sentences_ending_in_a_full_stop():
    hmm = toy_english()
    ids = hmm.sample(2000, seed=1)
    text = hmm.vocab.decode(ids)
    assert text.startswith(EOS)
    assert len(set(ids.tolist())) > 30, "the sample uses too few distinct words"


def test_sampling_is_deterministic_given_the_seed():
    hmm = toy_english()
    assert np.array_equal(hmm.sample(500, seed=7), hmm.sample(500, seed=7))
    assert not np.array_equal(hmm.sample(500, seed=7), hmm.sample(500, seed=8))


def test_verbs_agree_with_a_subject_behind_a_prepositional_phrase():
    hmm = toy_english()
    v = hmm.vocab
    context = v.encode(". the cat near the big old dogs")
    p = hmm.next_word_probs(context)
    assert p[v.stoi["sleeps"]] > 0 and p[v.stoi["sleep"]] == 0, "a singular subject must take 'sleeps'"


def test_the_true_model_beats_a_bigram_model_on_its_own_text():
    c = load_corpus(n_train=20_000, n_val=1000, n_test=5000)
    V = len(c.vocab)
    counts = np.full((V, V), 0.01)
    np.add.at(counts, (c.train[:-1].numpy(), c.train[1:].numpy()), 1)
    p = counts / counts.sum(1, keepdims=True)
    bigram = math.exp(-np.log(p[c.test[:-1].numpy(), c.test[1:].numpy()]).mean())
    assert c.floor_perplexity() < bigram


def test_make_windows_pairs_each_context_with_the_word_after_it():
    ids = torch.arange(10, 16)
    x, y = make_windows(ids, 2)
    assert x.tolist() == [[10, 11], [11, 12], [12, 13], [13, 14]]
    assert y.tolist() == [12, 13, 14, 15]


def test_make_windows_rejects_a_window_as_long_as_the_text():
    with pytest.raises(ValueError, match="need more than 3 tokens"):
        make_windows(torch.arange(3), 3)


def test_vocab_encode_names_unknown_words():
    with pytest.raises(KeyError, match="zebra"):
        toy_english().vocab.encode("the zebra")


def test_masked_word_probs_equal_brute_force_over_the_hidden_words(tiny_hmm):
    ids, masked = [0, 2, 1, 3, 2], [False, True, False, True, True]
    probs = tiny_hmm.masked_word_probs(ids, masked)
    hidden = [t for t, m in enumerate(masked) if m]
    joint = {}  # every filling of the hidden words, with its probability
    for fill in itertools.product(range(4), repeat=len(hidden)):
        full = list(ids)
        for t, w in zip(hidden, fill, strict=True):
            full[t] = w
        joint[fill] = math.exp(tiny_hmm.log_prob(full))
    total = sum(joint.values())
    for k, t in enumerate(hidden):
        expected = [sum(p for fill, p in joint.items() if fill[k] == w) / total for w in range(4)]
        np.testing.assert_allclose(probs[t], expected, rtol=1e-10, err_msg=f"position {t}")


def test_masked_word_probs_at_the_last_position_alone_is_the_next_word_distribution(tiny_hmm):
    ids = [1, 0, 3, 2]
    probs = tiny_hmm.masked_word_probs(ids, [False, False, False, True])
    np.testing.assert_allclose(probs[3], tiny_hmm.next_word_probs(ids[:3]), rtol=1e-10)
