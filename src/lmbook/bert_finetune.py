"""Fine-tuning BERT on two tasks whose answers the course's grammar defines (chapter 10).

**Is the sentence grammatical?** (:func:`agreement_examples`, sentence classification.) Sentences of the course's
toy English (:mod:`lmbook.corpus`) whose verb sits behind a prepositional phrase; in half of them, drawn at
random, the verb's number is flipped. The label says which half: 1 = grammatical. The phrase's own noun has a
number drawn independently of the subject's, so a reader who checks the verb against the nearest noun is right
half the time (:func:`nearest_noun_baseline`)::

    [CLS] the old dogs near the cat sleep . [SEP]    → 1 (grammatical)
    [CLS] the old dogs near the cat sleeps . [SEP]   → 0 (the verb agrees with "cat", not with "dogs")

**Who does it?** (:func:`who_examples`, span extraction.) A passage of two sentences, a question made of one of
their verbs, and the answer: the subject of that verb, the span from its sentence's first word to the sentence's
first noun::

    [CLS] sleep [SEP] the cat sees a dog . the old dogs near the cat sleep . [SEP]   → "the old dogs"

A reader who takes the noun phrase just before the verb (:func:`nearest_phrase_baseline`) answers "the cat" when
a phrase stands between subject and verb.

**The recipe** (:func:`finetune`): a new linear layer on the pretrained encoder (:class:`BertClassifier` on the
pooled [CLS] vector, :class:`BertSpanExtractor` on every position), every weight trained with AdamW at a small
rate decayed linearly to 0; all the labelled examples in every step when they are few.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .agreement import verb_sites
from .bert import BERT, best_span, build_inputs, span_loss
from .corpus import DETS_PL, DETS_SG, EOS, Vocab
from .finetune import noun_number, verb_number


@dataclass
class Examples:
    """Inputs built as [CLS] a [SEP] (b [SEP]), padded, and what a model must say about each."""

    ids: torch.Tensor  # (N, n) token ids, padded with pad_id
    segments: torch.Tensor  # (N, n) 0 for [CLS] a [SEP], 1 for b [SEP] and the padding after it
    attention_mask: torch.Tensor  # (N, n) True at real tokens
    target: torch.Tensor  # (N,) a class, or (N, 2) an answer's first and last positions
    passage: torch.Tensor  # (N, n) True where an answer may lie (span extraction); all False for classification

    def __len__(self) -> int:
        return len(self.ids)

    def subset(self, index: torch.Tensor) -> Examples:
        return Examples(self.ids[index], self.segments[index], self.attention_mask[index], self.target[index],
                        self.passage[index])


def _pack(rows: list[tuple[list[int], list[int]]], target: torch.Tensor, passage: list[list[bool]],
          pad_id: int) -> Examples:
    n = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), n), pad_id, dtype=torch.long)
    segments = torch.zeros((len(rows), n), dtype=torch.long)
    where = torch.zeros((len(rows), n), dtype=torch.bool)
    for i, ((row, seg), p) in enumerate(zip(rows, passage, strict=True)):
        ids[i, : len(row)], segments[i, : len(row)], where[i, : len(p)] = torch.tensor(row), torch.tensor(seg), \
            torch.tensor(p, dtype=torch.bool)
    return Examples(ids, segments, ids != pad_id, target, where)


def split_sentences(ids: torch.Tensor, eos: int) -> list[list[int]]:
    """The complete sentences of a token stream, each ending with its full stop (a cut-off last one is dropped, and
    so is a full stop with no words before it, as at the start of the corpus's stream)."""
    out, current = [], []
    for w in ids.tolist():
        current.append(w)
        if w == eos:
            if len(current) > 1:
                out.append(current)
            current = []
    return out


def agreement_examples(ids: torch.Tensor, vocab: Vocab, *, cls: int, sep: int, pad_id: int, min_dist: int = 4,
                       max_len: int = 32, seed: int = 0) -> Examples:
    """One example per sentence of ``ids`` whose verb is ``min_dist`` or more words from its subject (and that
    fits in ``max_len`` tokens with [CLS] and [SEP]); in a random half the verb's number is flipped (label 0), the
    others are kept as written (label 1)."""
    flip = {}
    for verb, number in verb_number(vocab).items():
        flip.setdefault(number, []).append(verb)
    pairs = dict(zip(flip[0], flip[1], strict=True)) | dict(zip(flip[1], flip[0], strict=True))
    g = torch.Generator().manual_seed(seed)
    rows, labels = [], []
    for sentence in split_sentences(ids, vocab.stoi[EOS]):
        sites = verb_sites(torch.tensor(sentence), vocab)
        if len(sites.pos) != 1 or sites.dist[0] < min_dist or len(sentence) + 2 > max_len:
            continue
        keep = bool(torch.rand((), generator=g) < 0.5)
        if not keep:
            p = int(sites.pos[0])
            sentence = sentence[:p] + [pairs[sentence[p]]] + sentence[p + 1 :]
        rows.append(build_inputs(sentence, cls=cls, sep=sep))
        labels.append(int(keep))
    return _pack(rows, torch.tensor(labels), [[] for _ in rows], pad_id)


def subject_span(sentence: list[int], vocab: Vocab) -> tuple[int, int]:
    """(0, k): the sentence's subject runs from its first word to its first noun, at k."""
    nouns = set(noun_number(vocab))
    return 0, next(k for k, w in enumerate(sentence) if w in nouns)


def who_examples(ids: torch.Tensor, vocab: Vocab, *, cls: int, sep: int, pad_id: int, min_dist: int = 1,
                 max_len: int = 32, seed: int = 0) -> Examples:
    """Passages of two consecutive sentences of ``ids`` with different verbs; the question is one of the two
    verbs (drawn at random), the answer the span of its subject in the passage. Kept only where that verb is
    ``min_dist`` or more words from its subject and the input fits in ``max_len`` tokens."""
    number = verb_number(vocab)
    sentences = split_sentences(ids, vocab.stoi[EOS])
    g = torch.Generator().manual_seed(seed)
    rows, targets, passages = [], [], []
    for a, b in zip(sentences[0::2], sentences[1::2], strict=False):
        verbs = [next(k for k, w in enumerate(s) if w in number) for s in (a, b)]
        which = int(torch.randint(2, (), generator=g))
        asked = (a, b)[which]
        start, end = subject_span(asked, vocab)
        if a[verbs[0]] == b[verbs[1]] or verbs[which] - end < min_dist or len(a) + len(b) + 4 > max_len:
            continue
        offset = 3 + (len(a) if which else 0)  # [CLS] verb [SEP] come first
        rows.append(build_inputs([asked[verbs[which]]], a + b, cls=cls, sep=sep))
        targets.append((offset + start, offset + end))
        passages.append([False] * 3 + [True] * (len(a) + len(b)))
    return _pack(rows, torch.tensor(targets), passages, pad_id)


def other_subject(ex: Examples, vocab: Vocab) -> torch.Tensor:
    """(N, 2) for examples of :func:`who_examples`: the subject of the passage's *other* sentence, the answer a
    model gives when it finds a subject but not the sentence of the question's verb."""
    eos = vocab.stoi[EOS]
    out = []
    for row, target, passage in zip(ex.ids.tolist(), ex.target.tolist(), ex.passage.tolist(), strict=True):
        first_end = next(k for k in range(3, len(row)) if passage[k] and row[k] == eos)
        other_start = first_end + 1 if target[0] < first_end else 3
        start, end = subject_span(row[other_start:], vocab)
        out.append((other_start + start, other_start + end))
    return torch.tensor(out)


def nearest_noun_baseline(ex: Examples, vocab: Vocab) -> torch.Tensor:
    """(N,) 1 where the verb agrees with the noun just before it: a reader who looks only at the nearest words."""
    nouns, verbs = noun_number(vocab), verb_number(vocab)
    out = []
    for row in ex.ids.tolist():
        v = next(k for k, w in enumerate(row) if w in verbs)
        last_noun = next(row[k] for k in range(v - 1, -1, -1) if row[k] in nouns)
        out.append(int(nouns[last_noun] == verbs[row[v]]))
    return torch.tensor(out)


def nearest_phrase_baseline(ex: Examples, vocab: Vocab) -> torch.Tensor:
    """(N, 2) the noun phrase just before the question's verb: from the determiner before the last noun (or the
    sentence's start) to that noun."""
    nouns = set(noun_number(vocab))
    dets = {vocab.stoi[w] for w in DETS_SG + DETS_PL}
    out = []
    for row, passage in zip(ex.ids.tolist(), ex.passage.tolist(), strict=True):
        verb = row[1]
        v = next(k for k in range(len(row)) if passage[k] and row[k] == verb)
        end = next(k for k in range(v - 1, -1, -1) if row[k] in nouns)
        start = next(k for k in range(end, -1, -1) if row[k] in dets)
        out.append((start, end))
    return torch.tensor(out)


class BertClassifier(nn.Module):
    """A linear layer on BERT's pooled [CLS] vector: logits (B, n_classes)."""

    def __init__(self, bert: BERT, n_classes: int = 2):
        super().__init__()
        self.bert = bert
        self.head = nn.Linear(bert.config.d_model, n_classes)

    def forward(self, ex: Examples) -> torch.Tensor:
        _, pooled = self.bert(ex.ids, ex.segments, ex.attention_mask)
        return self.head(pooled)

    def loss(self, ex: Examples) -> torch.Tensor:
        return F.cross_entropy(self(ex), ex.target)

    @torch.no_grad()
    def predict(self, ex: Examples) -> torch.Tensor:
        """(N,) the class with the highest logit."""
        return self(ex).argmax(-1)


class BertSpanExtractor(nn.Module):
    """Two vectors s and e on every hidden state: start and end logits (B, n),
    −inf at padding."""

    def __init__(self, bert: BERT):
        super().__init__()
        self.bert = bert
        self.head = nn.Linear(bert.config.d_model, 2)  # rows: s, e

    def forward(self, ex: Examples) -> tuple[torch.Tensor, torch.Tensor]:
        h, _ = self.bert(ex.ids, ex.segments, ex.attention_mask)  # (B, n, d)
        logits = self.head(h)  # (B, n, 2): h_i s^T and h_i e^T
        padding = ~ex.attention_mask[..., None]
        logits = logits.masked_fill(padding, float("-inf"))
        return logits[..., 0], logits[..., 1]

    def loss(self, ex: Examples) -> torch.Tensor:
        return span_loss(*self(ex), ex.target[:, 0], ex.target[:, 1])

    @torch.no_grad()
    def predict(self, ex: Examples) -> torch.Tensor:
        """(N, 2) the best span in the passage (:func:`lmbook.bert.best_span`)."""
        start, end = best_span(*self(ex), ex.passage)
        return torch.stack([start, end], dim=-1)


def to_device(ex: Examples, device: torch.device | str) -> Examples:
    return Examples(*(getattr(ex, f).to(device) for f in ("ids", "segments", "attention_mask", "target", "passage")))


def finetune(model: BertClassifier | BertSpanExtractor, ex: Examples, *, steps: int, lr: float, seed: int = 0,
             batch_size: int | None = None, weight_decay: float = 0.01) -> list[float]:
    """Train every weight of ``model`` on ``ex``; returns each step's loss. AdamW, the rate decayed linearly to 0,
    gradients clipped to norm 1; each step reads all the examples, or ``batch_size`` drawn at random."""
    device = next(model.parameters()).device
    ex = to_device(ex, device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / steps)
    g = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for _ in range(steps):
        batch = ex if batch_size is None or batch_size >= len(ex) else \
            ex.subset(torch.randperm(len(ex), generator=g)[:batch_size].to(device))
        loss = model.loss(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    return losses


def score(model: BertClassifier | BertSpanExtractor, ex: Examples, batch_size: int = 500) -> float:
    """Accuracy (classification) or exact match of the whole span (span extraction)."""
    device = next(model.parameters()).device
    model.eval()
    right = 0
    for i in range(0, len(ex), batch_size):
        part = to_device(ex.subset(torch.arange(i, min(i + batch_size, len(ex)))), device)
        right += (model.predict(part) == part.target).reshape(len(part), -1).all(-1).sum().item()
    return right / len(ex)

