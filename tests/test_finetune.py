"""lmbook.finetune: the subject-number task read off the corpus, its trivial baseline, and GPT-1's fine-tuning loop."""

from __future__ import annotations

import copy

import pytest
import torch

from lmbook.corpus import NOUNS_PL, NOUNS_SG, VERBS_INTRANS, VERBS_TRANS, load_corpus
from lmbook.finetune import (
    PLURAL,
    SINGULAR,
    accuracy,
    balanced_subset,
    finetune,
    last_noun_baseline,
    subject_number_examples,
)
from lmbook.gpt import GPT, GPTClassifier, GPTConfig, format_single

SG_VERBS = {sg for sg, _ in VERBS_INTRANS + VERBS_TRANS}
PL_VERBS = {pl for _, pl in VERBS_INTRANS + VERBS_TRANS}


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(n_train=3000, n_val=10, n_test=10, seed=3)


@pytest.fixture(scope="module")
def examples(corpus):
    return subject_number_examples(corpus.train, corpus.vocab)


def _stream(vocab, text: str) -> torch.Tensor:
    return torch.tensor(vocab.encode(text))


def test_each_label_is_the_number_of_the_verb_written(corpus, examples):
    words = [corpus.vocab.itos[int(v)] for v in examples.verbs]
    expected = [SINGULAR if w in SG_VERBS else PLURAL for w in words]
    assert all(w in SG_VERBS | PL_VERBS for w in words)
    assert examples.labels.tolist() == expected


def test_each_prefix_is_the_sentence_up_to_just_before_its_verb(corpus, examples):
    text = corpus.vocab.decode(corpus.train)
    for prefix, verb in zip(examples.prefixes[:200], examples.verbs[:200], strict=True):
        sentence = corpus.vocab.decode(prefix) + " " + corpus.vocab.itos[int(verb)]
        assert ". " + sentence + " " in text  # starts right after a full stop, the verb comes next
        assert "." not in corpus.vocab.decode(prefix).split()


def test_the_subject_is_the_first_noun_of_the_prefix_and_agrees_with_the_label(corpus, examples):
    number = {**{n: SINGULAR for n in NOUNS_SG}, **{n: PLURAL for n in NOUNS_PL}}
    for prefix, label in zip(examples.prefixes, examples.labels.tolist(), strict=True):
        first_noun = next(w for w in corpus.vocab.decode(prefix).split() if w in number)
        assert number[first_noun] == label


def test_min_dist_keeps_only_verbs_that_far_from_their_subject(corpus, examples):
    assert int(examples.dist.min()) >= 4
    near = subject_number_examples(corpus.train, corpus.vocab, min_dist=1)
    assert (near.dist == 1).any() and len(near) > len(examples)


def test_a_hand_made_stream_gives_the_expected_examples(corpus):
    vocab = corpus.vocab
    ids = _stream(vocab, "the dog near the cats sleeps . some birds sing . two cats with the big dog see a bird .")
    ex = subject_number_examples(ids, vocab)
    assert [vocab.decode(p) for p in ex.prefixes] == ["the dog near the cats", "two cats with the big dog"]
    assert ex.labels.tolist() == [SINGULAR, PLURAL]
    assert ex.dist.tolist() == [4, 5]


def test_max_len_drops_longer_prefixes(corpus):
    vocab = corpus.vocab
    ids = _stream(vocab, "the dog near the cats sleeps . two cats with the big dog see a bird .")
    assert [vocab.decode(p) for p in subject_number_examples(ids, vocab, max_len=5).prefixes] == [
        "the dog near the cats"]


def test_last_noun_baseline_reads_the_last_noun(corpus):
    vocab = corpus.vocab
    prefixes = [vocab.encode("the dog near the cats"), vocab.encode("two cats with the big dog"),
                vocab.encode("some birds"), vocab.encode("the old")]
    assert last_noun_baseline(prefixes, vocab).tolist() == [PLURAL, SINGULAR, PLURAL, SINGULAR]


def test_balanced_subset_has_half_of_each_label_without_repeats(examples):
    sub = balanced_subset(examples, 40, seed=1)
    assert len(sub) == 40 and int(sub.labels.sum()) == 20
    assert len({tuple(p) for p in sub.prefixes}) >= 30  # drawn without replacement (a few prefixes recur)
    assert balanced_subset(examples, 40, seed=1).prefixes == sub.prefixes
    with pytest.raises(ValueError):
        balanced_subset(examples, 41)


def _task(corpus, examples, n=32):
    V = len(corpus.vocab)
    sub = balanced_subset(examples, n, seed=0)
    return [format_single(p, V, V + 2) for p in sub.prefixes], sub.labels


def _classifier(corpus, seed=0):
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=len(corpus.vocab) + 3, block_size=32, n_layer=1, n_head=2, d_model=16)
    return GPTClassifier(GPT(cfg), 2)


def test_finetuning_reduces_the_training_loss(corpus, examples):
    seqs, labels = _task(corpus, examples)
    losses = finetune(_classifier(corpus), seqs, labels, steps=40, lr=3e-3)
    assert len(losses) == 40
    assert losses[-1] < 0.5 * losses[0]


def test_finetuning_a_copy_leaves_the_pretrained_weights_alone(corpus, examples):
    seqs, labels = _task(corpus, examples)
    pretrained = _classifier(corpus).gpt
    before = copy.deepcopy(pretrained.state_dict())
    clf = GPTClassifier(copy.deepcopy(pretrained), 2)
    finetune(clf, seqs, labels, steps=5, lr=1e-2)
    assert all(torch.equal(before[k], v) for k, v in pretrained.state_dict().items())
    assert any(not torch.equal(before[k], v) for k, v in clf.gpt.state_dict().items())


def test_a_linear_probe_trains_the_head_only(corpus, examples):
    seqs, labels = _task(corpus, examples)
    clf = _classifier(corpus)
    body, head = copy.deepcopy(clf.gpt.state_dict()), copy.deepcopy(clf.head.state_dict())
    losses = finetune(clf, seqs, labels, steps=30, lr=1e-2, train_body=False)
    assert all(torch.equal(body[k], v) for k, v in clf.gpt.state_dict().items())
    assert not torch.equal(head["weight"], clf.head.weight)
    assert losses[-1] < losses[0]


def test_accuracy_is_the_share_of_argmax_predictions_equal_to_the_label(corpus, examples):
    seqs, labels = _task(corpus, examples, n=10)
    clf = _classifier(corpus)
    with torch.no_grad():
        clf.head.weight.zero_()
        clf.head.bias.copy_(torch.tensor([1.0, 0.0]))  # always SINGULAR
    assert accuracy(clf, seqs, labels) == pytest.approx((labels == SINGULAR).float().mean().item())
