"""lmbook.instruct: the tasks' answers judged by the true model (every answer of every task is grammatical), the
parser against the corpus, the loss on response tokens against torch's cross-entropy with ignored labels, and
the vocabulary extension that leaves the old tokens' predictions unchanged."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from lmbook.corpus import Vocab, load_corpus
from lmbook.gpt import GPT, GPTConfig
from lmbook.instruct import (
    ANSWER,
    SPECIAL,
    TASKS,
    Example,
    encode,
    extend_vocab,
    is_correct,
    is_grammatical,
    make_example,
    make_plural,
    make_singular,
    parse,
    respond,
    response_loss,
    sentences,
)


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(n_train=6000, n_val=10, n_test=10)


@pytest.fixture(scope="module")
def sents(corpus):
    return sentences(corpus.train, corpus.vocab)


def test_every_corpus_sentence_parses_back_to_itself(sents):
    assert len(sents) > 500
    for s in sents:
        assert parse(s).words() == s


def test_every_answer_of_every_task_is_a_sentence_the_true_model_can_produce(corpus, sents):
    rng = random.Random(0)
    for s in sents[:400]:
        for task in TASKS[:3]:
            ex = make_example(task, s, rng)
            assert is_grammatical(ex.response, corpus.hmm), (task, s, ex.response)


def test_plural_changes_the_subject_and_the_verb_only():
    s = parse("a red dog near the cats sees the bird .".split())
    assert make_plural(s).words() == "some red dogs near the cats see the bird .".split()
    assert make_singular(make_plural(s)) == s
    plural = parse("two cats sleep .".split())
    assert make_plural(plural) == plural and make_singular(plural).words() == "one cat sleeps .".split()


def test_plain_drops_every_adjective():
    ex = make_example("<plain>", "the big red dog with the old cat likes a quiet bird .".split(), random.Random(0))
    assert ex.response == "the dog with the cat likes a bird .".split()


def test_continue_cuts_the_sentence_and_accepts_any_grammatical_ending(corpus):
    words = "the dogs near the cat run .".split()
    ex = make_example("<continue>", words, random.Random(3))
    assert ex.prompt[0] == "<continue>" and ex.prompt[-1] == ANSWER
    assert ex.prompt[1:-1] + ex.response == words
    cut = Example("<continue>", ["<continue>", "the", "dogs", "near", ANSWER], [])
    assert is_correct(cut, "the cat sing .".split(), corpus.hmm)  # plural verb: agrees with "dogs"
    assert not is_correct(cut, "the cat sings .".split(), corpus.hmm)  # agrees with the wrong noun
    assert not is_correct(cut, "the cat sing".split(), corpus.hmm)  # never ends


def test_parse_refuses_what_the_grammar_cannot_produce():
    for bad in ("the dog .", "dog runs .", "the dog runs", "the dog runs the ."):
        with pytest.raises(ValueError):
            parse(bad.split())


def test_encode_marks_the_response_tokens_only():
    vocab = Vocab(["<pad>", "<plural>", "<answer>", "a", "b", "."])
    ids, mask = encode([Example("<plural>", ["<plural>", "a", "<answer>"], ["b", "."]),
                        Example("<plural>", ["<plural>", "a", "b", "<answer>"], ["a", "b", "."])], vocab)
    assert ids.tolist() == [[1, 3, 2, 4, 5, 0, 0], [1, 3, 4, 2, 3, 4, 5]]
    assert mask.int().tolist() == [[0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 1]]


def test_response_loss_equals_cross_entropy_with_the_prompt_labels_ignored():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 11, generator=g)
    targets = torch.randint(0, 11, (3, 6), generator=g)
    mask = torch.rand(3, 6, generator=g) > 0.4
    labels = targets.masked_fill(~mask, -100)  # Hugging Face's convention for tokens the loss skips
    expected = F.cross_entropy(logits.reshape(-1, 11), labels.reshape(-1), ignore_index=-100)
    assert torch.allclose(response_loss(logits, targets, mask), expected, atol=1e-6)
    every = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1))
    assert not torch.allclose(response_loss(logits, targets, mask), every)  # the prompt's tokens change the mean


def test_extend_vocab_keeps_the_old_tokens_predictions_and_ties():
    torch.manual_seed(0)
    model = GPT(GPTConfig(12, 16, 1, 2, 16)).eval()
    ids = torch.randint(0, 12, (2, 9))
    with torch.no_grad():
        before = torch.log_softmax(model(ids), -1)
        extend_vocab(model, len(SPECIAL))
        after = torch.log_softmax(model(ids), -1)
    assert model.config.vocab_size == 12 + len(SPECIAL) and model.lm_head.weight is model.wte.weight
    assert after.shape[-1] == 12 + len(SPECIAL)
    # the new rows share the old mean: the old tokens keep their order and their odds against each other
    assert torch.allclose(before - before.logsumexp(-1, keepdim=True),
                          after[..., :12] - after[..., :12].logsumexp(-1, keepdim=True), atol=1e-5)


def test_respond_stops_at_the_first_full_stop():
    vocab = Vocab(["<pad>", "x", "y", "."])

    class Writes(torch.nn.Module):  # always predicts "x y . x y . ...": after x comes y, after y ".", after "." x
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.config = GPTConfig(4, 64, 1, 1, 2)

        def forward(self, ids, cache=None):
            nxt = torch.tensor([1, 2, 3, 1])[ids]
            return F.one_hot(nxt, 4).float() * 10 + self.w

    out = respond(Writes(), [["x"], ["y", "y"]], vocab, max_new_tokens=5)
    assert out == [["y", "."], ["."]]


def test_instruction_data_asks_every_task_of_every_sentence(sents):
    from lmbook.instruct import instruction_data

    data = instruction_data(sents[:50], seed=0)
    assert len(data) == 4 * 50
    assert [e.task for e in data[:8]] == [*TASKS, *TASKS]
    assert all(e.prompt[1:-1] == sents[i // 4] or e.task == "<continue>" for i, e in enumerate(data))


def test_instruction_tuned_gpt_is_the_same_from_the_same_seed_and_leaves_the_pretrained_model_alone(corpus):
    from lmbook.instruct import instruction_tuned_gpt

    runs = [instruction_tuned_gpt(corpus, seed, pretrain_steps=3, tune_steps=2) for seed in (1, 1, 2)]
    a, b, c = (dict(r.tuned.named_parameters()) for r in runs)
    assert all(torch.equal(a[k], b[k]) for k in a), "the same seed gave different weights"
    assert not all(torch.equal(a[k], c[k]) for k in a), "another seed gave the same weights"
    pre, tuned = dict(runs[0].pretrained.named_parameters()), a
    assert not all(torch.equal(pre[k], tuned[k]) for k in pre), "fine-tuning changed nothing"
    assert pre["wte.weight"].shape[0] == len(corpus.vocab) + len(SPECIAL)
    assert runs[0].vocab.itos[-len(SPECIAL):] == list(SPECIAL)


def test_instruction_tuned_gpt_keeps_its_models_in_the_cache_and_reads_them_back(corpus, tmp_path):
    from lmbook.instruct import instruction_tuned_gpt

    built = instruction_tuned_gpt(corpus, 3, pretrain_steps=3, tune_steps=2, cache=tmp_path)
    files = list(tmp_path.glob("*.pt"))
    assert len(files) == 1, files
    loaded = instruction_tuned_gpt(corpus, 3, pretrain_steps=3, tune_steps=2, cache=tmp_path)
    for a, b in ((built.tuned, loaded.tuned), (built.pretrained, loaded.pretrained)):
        sa, sb = a.state_dict(), b.state_dict()
        assert all(torch.equal(sa[k], sb[k]) for k in sa), "the cached model differs from the one built"
    assert loaded.tune_log.loss == built.tune_log.loss and loaded.vocab.itos == built.vocab.itos
    instruction_tuned_gpt(corpus, 4, pretrain_steps=3, tune_steps=2, cache=tmp_path)
    assert len(list(tmp_path.glob("*.pt"))) == 2, "another seed must be another entry, not the same one"
