"""lmbook.bert_finetune: the two tasks read off the course's grammar, their shortcut baselines, the heads and the
fine-tuning loop."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lmbook.bert import BERT, BertConfig, span_loss
from lmbook.bert_finetune import (
    BertClassifier,
    BertSpanExtractor,
    Examples,
    agreement_examples,
    finetune,
    nearest_noun_baseline,
    nearest_phrase_baseline,
    other_subject,
    score,
    split_sentences,
    who_examples,
)
from lmbook.corpus import DETS_PL, DETS_SG, NOUNS_PL, NOUNS_SG, VERBS_INTRANS, VERBS_TRANS, load_corpus

SG_VERBS = {sg for sg, _ in VERBS_INTRANS + VERBS_TRANS}
PL_VERBS = {pl for _, pl in VERBS_INTRANS + VERBS_TRANS}
NUMBER = {**{w: 0 for w in NOUNS_SG + list(SG_VERBS)}, **{w: 1 for w in NOUNS_PL + list(PL_VERBS)}}


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(n_train=4000, n_val=10, n_test=10, seed=5)


@pytest.fixture(scope="module")
def specials(corpus):
    v = len(corpus.vocab)
    return {"pad_id": v, "cls": v + 2, "sep": v + 3}


@pytest.fixture(scope="module")
def agreement(corpus, specials):
    return agreement_examples(corpus.train, corpus.vocab, **specials, seed=1)


@pytest.fixture(scope="module")
def who(corpus, specials):
    return who_examples(corpus.train, corpus.vocab, **specials, seed=1)


def _words(vocab, row, specials) -> list[str]:
    return [vocab.itos[w] for w in row if w < len(vocab)]


def _subject_and_verb(words: list[str]) -> tuple[str, str]:
    subject = next(w for w in words if w in NOUNS_SG + NOUNS_PL)
    verb = next(w for w in words if w in SG_VERBS | PL_VERBS)
    return subject, verb


def test_split_sentences_ends_each_with_its_full_stop_and_drops_a_cut_off_one(corpus):
    ids = torch.tensor(corpus.vocab.encode(". the cat sleeps . two dogs run . the bird"))
    assert [corpus.vocab.decode(s) for s in split_sentences(ids, corpus.vocab.stoi["."])] == \
        ["the cat sleeps .", "two dogs run ."]


def test_agreement_label_1_rows_are_sentences_of_the_corpus_and_agree(corpus, agreement, specials):
    text = " " + corpus.vocab.decode(corpus.train) + " "
    rows = agreement.ids[agreement.target == 1]
    assert len(rows) > 50
    for row in rows.tolist():
        words = _words(corpus.vocab, row, specials)
        assert " " + " ".join(words) + " " in text
        subject, verb = _subject_and_verb(words)
        assert NUMBER[subject] == NUMBER[verb], words


def test_agreement_label_0_rows_have_the_verb_flipped_and_nothing_else(corpus, agreement, specials):
    text = " " + corpus.vocab.decode(corpus.train) + " "
    rows = agreement.ids[agreement.target == 0]
    assert len(rows) > 50
    for row in rows.tolist():
        words = _words(corpus.vocab, row, specials)
        subject, verb = _subject_and_verb(words)
        assert NUMBER[subject] != NUMBER[verb], words
        k = words.index(verb)
        pair = next(p for p in VERBS_INTRANS + VERBS_TRANS if verb in p)
        fixed = words[:k] + [pair[0] if verb == pair[1] else pair[1]] + words[k + 1 :]
        assert " " + " ".join(fixed) + " " in text


def test_agreement_keeps_only_verbs_behind_a_phrase(corpus, agreement, specials):
    for row in agreement.ids.tolist():
        words = _words(corpus.vocab, row, specials)
        subject, verb = _subject_and_verb(words)
        assert words.index(verb) - words.index(subject) >= 4, words


def test_agreement_inputs_are_cls_sentence_sep_then_padding(agreement, specials):
    for row, mask in zip(agreement.ids.tolist(), agreement.attention_mask.tolist(), strict=True):
        n = sum(mask)
        assert row[0] == specials["cls"] and row[n - 1] == specials["sep"]
        assert all(w == specials["pad_id"] for w in row[n:]) and not any(mask[n:])
    assert (agreement.segments == 0).all()


def test_agreement_labels_are_balanced_within_binomial_bounds(agreement):
    n, ones = len(agreement), int(agreement.target.sum())
    assert abs(ones - n / 2) < 4 * (n / 4) ** 0.5, f"{ones} grammatical of {n}"


def test_nearest_noun_reader_is_right_about_half_the_time(agreement, corpus):
    right = (nearest_noun_baseline(agreement, corpus.vocab) == agreement.target).float().mean().item()
    n = len(agreement)
    assert abs(right - 0.5) < 4 * (0.25 / n) ** 0.5, f"nearest-noun accuracy {right:.3f} over {n}"


def test_nearest_noun_reader_on_a_sentence_written_out(corpus, specials):
    v = corpus.vocab
    ids = torch.tensor(v.encode("the old dogs near the cat sleeps . the old dogs near the cat sleep ."))
    ex = agreement_examples(ids, v, **specials, seed=0)
    for row, guess in zip(ex.ids.tolist(), nearest_noun_baseline(ex, v).tolist(), strict=True):
        verb = v.itos[row[7]]  # [CLS] the old dogs near the cat VERB
        assert verb in ("sleeps", "sleep")
        assert guess == (verb == "sleeps"), f"the nearest noun is 'cat': its reader says {guess} to {verb!r}"


def test_who_answer_is_the_subject_of_the_sentence_holding_the_question_verb(corpus, who, specials):
    v = corpus.vocab
    dets = set(DETS_SG + DETS_PL)
    for row, (s, e), passage in zip(who.ids.tolist(), who.target.tolist(), who.passage.tolist(), strict=True):
        assert row[0] == specials["cls"] and row[2] == specials["sep"]
        verb = row[1]
        assert [w for k, w in enumerate(row) if passage[k]].count(verb) == 1  # the question names one verb
        assert passage[s] and passage[e] and s <= e
        span = [v.itos[w] for w in row[s : e + 1]]
        assert span[0] in dets and span[-1] in NOUNS_SG + NOUNS_PL
        assert all(w not in NOUNS_SG + NOUNS_PL for w in span[:-1])  # the first noun ends it
        assert row[s - 1] in (specials["sep"], v.stoi["."])  # it starts its sentence
        rest = row[e + 1 :]
        assert verb in rest[: rest.index(v.stoi["."])]  # and the question's verb is in that sentence


def test_who_segments_and_passage_mark_the_two_sentences(who, specials):
    for row, seg, passage, mask in zip(who.ids.tolist(), who.segments.tolist(), who.passage.tolist(),
                                       who.attention_mask.tolist(), strict=True):
        n = sum(mask)
        assert seg[:3] == [0, 0, 0] and all(x == 1 for x in seg[3:n])
        assert passage[:3] == [False] * 3 and all(passage[3 : n - 1]) and not any(passage[n - 1 :])
        assert row[n - 1] == specials["sep"]


def test_inputs_fit_in_max_len(corpus, specials):
    for make in (agreement_examples, who_examples):
        ex = make(corpus.train, corpus.vocab, **specials, max_len=20)
        assert ex.attention_mask.sum(1).max() <= 20 and ex.ids.shape[1] <= 20, make.__name__


def test_who_with_min_dist_asks_only_about_verbs_behind_a_phrase(corpus, specials):
    ex = who_examples(corpus.train, corpus.vocab, **specials, min_dist=4, seed=2)
    assert len(ex) > 30
    for row, (_, e) in zip(ex.ids.tolist(), ex.target.tolist(), strict=True):
        assert row.index(row[1], 3) - e >= 4  # the question's verb, in the passage, 4 or more words after the noun
    assert (nearest_phrase_baseline(ex, corpus.vocab) == ex.target).all(-1).sum() == 0


def test_who_asks_about_either_sentence(who):
    first_sentence = (who.target[:, 0] == 3).float().mean().item()
    assert 0.35 < first_sentence < 0.65, first_sentence


def test_nearest_phrase_reader_on_a_passage_written_out(corpus, specials):
    v = corpus.vocab
    ids = torch.tensor(v.encode("the cat sees a dog . the old dogs near the cat sleep ."))
    for seed in range(20):
        ex = who_examples(ids, v, **specials, seed=seed)
        if v.itos[int(ex.ids[0, 1])] == "sleep":
            break
    row = ex.ids[0].tolist()
    s, e = ex.target[0].tolist()
    assert " ".join(v.itos[w] for w in row[s : e + 1]) == "the old dogs"
    s, e = nearest_phrase_baseline(ex, v)[0].tolist()
    assert " ".join(v.itos[w] for w in row[s : e + 1]) == "the cat"


def test_other_subject_is_the_subject_of_the_sentence_not_asked_about(corpus, who):
    v = corpus.vocab
    other = other_subject(who, v)
    for row, (s, e), (os_, oe), passage in zip(who.ids.tolist(), who.target.tolist(), other.tolist(),
                                               who.passage.tolist(), strict=True):
        assert passage[os_] and passage[oe] and (os_, oe) != (s, e)
        assert row[os_ - 1] in (row[2], v.stoi["."]) and (os_ == 3) != (s == 3)  # the other sentence's start
        span = [v.itos[w] for w in row[os_ : oe + 1]]
        assert span[-1] in NOUNS_SG + NOUNS_PL and all(w not in NOUNS_SG + NOUNS_PL for w in span[:-1])


def _bert(corpus, seed=0):
    torch.manual_seed(seed)
    return BERT(BertConfig(vocab_size=len(corpus.vocab) + 4, n_layer=1, n_head=2, d_model=32, max_position=32))


def test_classifier_ignores_padding(corpus, agreement):
    clf = BertClassifier(_bert(corpus)).eval()
    few = agreement.subset(torch.arange(8))
    with torch.no_grad():
        together = clf(few)
        alone = torch.cat([clf(few.subset(torch.tensor([i]))) for i in range(8)])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)


def test_span_logits_are_minus_infinity_at_padding_and_the_loss_is_span_loss(corpus, who):
    ext = BertSpanExtractor(_bert(corpus)).eval()
    few = who.subset(torch.arange(6))
    start, end = ext(few)
    assert torch.isneginf(start[~few.attention_mask]).all() and torch.isneginf(end[~few.attention_mask]).all()
    assert torch.isfinite(start[few.attention_mask]).all()
    torch.testing.assert_close(ext.loss(few), span_loss(start, end, few.target[:, 0], few.target[:, 1]))


def test_span_predictions_lie_in_the_passage_start_before_end(corpus, who):
    ext = BertSpanExtractor(_bert(corpus, seed=3)).eval()
    pred = ext.predict(who.subset(torch.arange(40)))
    passage = who.passage[:40]
    assert (pred[:, 0] <= pred[:, 1]).all()
    assert passage.gather(1, pred).all()


@pytest.mark.parametrize("head", [BertClassifier, BertSpanExtractor])
def test_finetuning_fits_a_few_examples(corpus, agreement, who, head):
    ex = (agreement if head is BertClassifier else who).subset(torch.arange(16))
    model = head(_bert(corpus, seed=1))
    before = score(model, ex)
    losses = finetune(model, ex, steps=150, lr=3e-3, seed=0)
    assert losses[-1] < 0.2 * losses[0], (losses[0], losses[-1])
    assert score(model, ex) == 1.0, f"training-set score {score(model, ex)} (was {before})"


class _Fixed(nn.Module):
    def __init__(self, answer: torch.Tensor):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.answer = answer

    def predict(self, ex: Examples) -> torch.Tensor:
        return self.answer[: len(ex)]


def test_score_needs_both_ends_of_a_span_right(who):
    ex = who.subset(torch.arange(4))
    answer = ex.target.clone()
    answer[1, 0] += 1  # start wrong
    answer[2, 1] += 1  # end wrong
    assert score(_Fixed(answer), ex) == 0.5
