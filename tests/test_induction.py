"""lmbook.induction: the repeated-sequence task, and the induction and previous-token scores on hand-made
attention patterns whose scores are known."""

from __future__ import annotations

import pytest
import torch

from lmbook.induction import (
    induction_score,
    loss_by_position,
    prefix_match_mask,
    previous_token_score,
    repeated_sequences,
)


def test_rows_end_with_a_segment_written_twice():
    ids = repeated_sequences(50, 8, 30, seed=0, min_length=3)
    assert ids.shape == (50, 16) and 0 <= ids.min() and ids.max() < 30
    periods = set()
    for row in ids.tolist():
        L = next(L for L in range(3, 9) if row[16 - L:] == row[16 - 2 * L: 16 - L])
        periods.add(L)
    assert len(periods) > 2, "min_length < length should vary the segment's length"


def test_fixed_length_rows_are_two_copies():
    ids = repeated_sequences(4, 5, 10, seed=1)
    assert torch.equal(ids[:, :5], ids[:, 5:])


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="min_length"):
        repeated_sequences(2, 4, 10, min_length=5)


def test_prefix_match_marks_the_token_after_each_earlier_occurrence():
    ids = torch.tensor([[5, 6, 7, 5, 6, 7]])
    m = prefix_match_mask(ids)[0]
    assert m[3].nonzero().flatten().tolist() == [1]  # query "5" at 3: key 1 follows the earlier "5"
    assert m[5].nonzero().flatten().tolist() == [3]  # query "7" at 5: key 3 follows the "7" at 2
    assert not m[:3].any()


def _pattern(n: int, offset: int) -> torch.Tensor:
    """Attention weights (n, n) with all of query i's weight on key i − offset (or key 0 before that)."""
    w = torch.zeros(n, n)
    for i in range(n):
        w[i, max(i - offset, 0)] = 1.0
    return w


def test_a_perfect_induction_head_scores_one_and_a_previous_token_head_does_not():
    L = 6
    ids = repeated_sequences(3, L, 50, seed=2)
    induction = _pattern(2 * L, L - 1).expand(3, 2, 2 * L, 2 * L)  # (B, heads, n, n)
    previous = _pattern(2 * L, 1).expand(3, 2 * L, 2 * L)
    assert induction_score(induction, ids).tolist() == pytest.approx([1.0, 1.0])
    assert induction_score(previous, ids).item() < 0.2
    assert previous_token_score(previous).item() == 1.0
    assert (previous_token_score(induction) < 0.2).all()  # only query 1, whose key 0 is also i − 1


def test_uniform_attention_scores_about_one_over_the_position():
    n = 10
    ids = repeated_sequences(2, 5, 1000, seed=3)
    uniform = torch.ones(n, n).tril()
    uniform = (uniform / uniform.sum(-1, keepdim=True)).expand(2, n, n)
    assert induction_score(uniform, ids).item() == pytest.approx(sum(1 / (i + 1) for i in range(5, 10)) / 5, rel=1e-5)


def test_loss_by_position_is_the_mean_negative_log_probability_at_each_position():
    logits = torch.log(torch.tensor([[[0.5, 0.5], [0.9, 0.1]], [[0.5, 0.5], [0.2, 0.8]]]))
    ids = torch.tensor([[0, 1, 0], [0, 0, 1]])
    got = loss_by_position(logits, ids)
    assert got.tolist() == pytest.approx([-torch.tensor(0.5).log().item(),
                                          -(torch.tensor(0.9).log() + torch.tensor(0.8).log()).item() / 2])


def test_same_subject_documents_share_one_subject_noun_per_document():
    from lmbook.corpus import NOUNS_PL, NOUNS_SG, load_corpus
    from lmbook.induction import same_subject_documents
    from lmbook.instruct import parse, sentences

    corpus = load_corpus(n_train=3000, n_val=10, n_test=10)
    docs, nouns = same_subject_documents(corpus.train, corpus.vocab, 20, 40, seed=1)
    assert docs.shape == (20, 40) and len(set(nouns)) > 2
    for row, noun in zip(docs, nouns, strict=True):
        assert corpus.vocab.itos[row[0]] == "."
        subjects = {parse(words).subject.noun for words in sentences(row, corpus.vocab)}  # the complete ones
        assert subjects == {noun}, f"{corpus.vocab.decode(row)}: subjects {subjects}, expected only {noun!r}"
        assert noun in NOUNS_SG + NOUNS_PL


def test_subject_positions_find_each_sentence_subject_after_its_adjectives():
    from lmbook.corpus import load_corpus
    from lmbook.induction import subject_positions

    vocab = load_corpus(n_train=200, n_val=10, n_test=10).vocab
    doc = vocab.encode(". the old red cat runs . a dog sees the cat . some")
    assert subject_positions(doc, vocab) == [(0, 4), (1, 8)]
    assert [vocab.itos[doc[t]] for _, t in subject_positions(doc, vocab)] == ["cat", "dog"]
