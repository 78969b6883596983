"""Fine-tuning a pretrained GPT on a classification task (chapter 9, GPT-1's recipe), and tasks to try it on.

**The task: subject number.** In the course's toy English (:mod:`lmbook.corpus`) the first noun of a sentence is
its subject and the verb agrees with it in number, however long the prepositional phrase between them. An example
is a sentence cut just before a verb; its label is the number the verb must have, read off the verb the corpus
actually wrote there (``sleeps`` → singular, ``sleep`` → plural):

    "the old dogs near the cat"  →  plural          (the corpus went on: "... sleep .")

With a phrase between subject and verb (distance ≥ 4), the last noun of the prefix is the phrase's own noun, whose
number the grammar draws independently: the last words alone do not give the answer.

**The pair task: does b agree with a?** (:func:`agreement_pairs`) GPT-1's pair input, [start] a [delim] b
[extract] (:func:`lmbook.gpt.format_pair`): a is a sentence cut before its verb, b one verb, the one the corpus
wrote there (label AGREES) or the same verb in the other number (DISAGREES); every prefix gives both, so the
classes are balanced and the verb alone says nothing. Only prefixes whose subject has the determiner "the"
are kept, the one determiner that goes with both numbers, so the first word says nothing either; with a
phrase before the verb (distance ≥ 4), neither does the last noun (:func:`last_noun_agrees`). What decides is
the number of the first noun, which the examples never name.

**The recipe** (:func:`finetune`): the input becomes one sequence (:func:`lmbook.gpt.format_single` or
``format_pair``), a new linear layer reads the final hidden state of [extract]
(:class:`lmbook.gpt.GPTClassifier`), and AdamW trains the whole network, or only that layer
(``train_body=False``: a *linear probe* of the frozen representation), on the labelled examples, all of them in
every step when they are few.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .agreement import verb_sites
from .corpus import EOS, NOUNS_PL, NOUNS_SG, VERBS_INTRANS, VERBS_TRANS, Vocab
from .gpt import GPTClassifier, last_token_state, pad_batch

SINGULAR, PLURAL = 0, 1
LABEL_NAMES = ("singular", "plural")
DISAGREES, AGREES = 0, 1


@dataclass
class NumberExamples:
    """Sentence prefixes that end just before a verb, and the number that verb must have."""

    prefixes: list[list[int]]  # word ids, from the sentence's first word up to the word before the verb
    labels: torch.Tensor  # (N,) SINGULAR or PLURAL: the number of the verb written next
    verbs: torch.Tensor  # (N,) the id of that verb
    dist: torch.Tensor  # (N,) its distance from the subject, in words

    def __len__(self) -> int:
        return len(self.prefixes)

    def subset(self, index: torch.Tensor | Sequence[int]) -> NumberExamples:
        """The examples at ``index``, in that order."""
        index = torch.as_tensor(index, dtype=torch.long)
        return NumberExamples([self.prefixes[int(i)] for i in index], self.labels[index], self.verbs[index],
                              self.dist[index])


def verb_number(vocab: Vocab) -> dict[int, int]:
    """Every verb's id → SINGULAR or PLURAL (the grammar writes each verb as a (singular, plural) pair)."""
    out = {}
    for sg, pl in VERBS_INTRANS + VERBS_TRANS:
        out[vocab.stoi[sg]], out[vocab.stoi[pl]] = SINGULAR, PLURAL
    return out


def other_number(vocab: Vocab) -> dict[int, int]:
    """Every verb's id → the id of the same verb in the other number (``sleeps`` ↔ ``sleep``)."""
    out = {}
    for sg, pl in VERBS_INTRANS + VERBS_TRANS:
        out[vocab.stoi[sg]], out[vocab.stoi[pl]] = vocab.stoi[pl], vocab.stoi[sg]
    return out


def noun_number(vocab: Vocab) -> dict[int, int]:
    """Every noun's id → SINGULAR or PLURAL."""
    return {**{vocab.stoi[n]: SINGULAR for n in NOUNS_SG}, **{vocab.stoi[n]: PLURAL for n in NOUNS_PL}}


def subject_number_examples(ids: torch.Tensor, vocab: Vocab, min_dist: int = 4,
                            max_len: int | None = None) -> NumberExamples:
    """One example per verb of the token stream ``ids`` at distance ≥ ``min_dist`` from its subject (and with a
    prefix of at most ``max_len`` words): the sentence up to the verb, labelled with the verb's number."""
    sites = verb_sites(ids, vocab)
    number = verb_number(vocab)
    eos = vocab.stoi[EOS]
    ends = (ids == eos).nonzero().flatten()
    # the sentence of the verb at p starts after the last "." before p (at 0 when there is none)
    n_before = torch.searchsorted(ends, sites.pos)
    starts = torch.where(n_before > 0, ends[(n_before - 1).clamp(min=0)] + 1, 0) if len(ends) else 0 * n_before
    prefixes, keep = [], []
    for i, (p, d, start) in enumerate(zip(sites.pos.tolist(), sites.dist.tolist(), starts.tolist(), strict=True)):
        if d < min_dist or (max_len is not None and p - start > max_len):
            continue
        prefixes.append(ids[start:p].tolist())
        keep.append(i)
    keep_t = torch.tensor(keep, dtype=torch.long)
    verbs = sites.right[keep_t]
    labels = torch.tensor([number[int(v)] for v in verbs], dtype=torch.long)
    return NumberExamples(prefixes, labels, verbs, sites.dist[keep_t])


@dataclass
class PairExamples:
    """Pairs (a, b) for GPT-1's pair input: a sentence cut before its verb, and one verb."""

    a: list[list[int]]  # word ids: the sentence's first word up to the word before the verb
    b: list[list[int]]  # one word: a verb, in the number the corpus wrote or in the other one
    labels: torch.Tensor  # (N,) AGREES or DISAGREES: does b's number match a's subject's?
    subject: torch.Tensor  # (N,) SINGULAR or PLURAL: the number of a's subject

    def __len__(self) -> int:
        return len(self.a)

    def subset(self, index: torch.Tensor | Sequence[int]) -> PairExamples:
        """The pairs at ``index``, in that order."""
        index = torch.as_tensor(index, dtype=torch.long)
        return PairExamples([self.a[int(i)] for i in index], [self.b[int(i)] for i in index],
                            self.labels[index], self.subject[index])


def agreement_pairs(examples: NumberExamples, vocab: Vocab, first_word: str | None = "the",
                    seed: int = 0) -> PairExamples:
    """Two pairs per prefix of ``examples`` (those that start with ``first_word``; all when None): (prefix, the
    verb the corpus wrote) → AGREES, then (prefix, the same verb in the other number) → DISAGREES, so pairs
    2i and 2i + 1 come from the same sentence (:func:`sentence_subset` draws them together).

    As many singular subjects as plural ones are kept (the commoner number's prefixes are drawn at random, with
    ``seed``): "the" comes before plural subjects more often than before singular ones, and with unequal numbers
    the verb alone would say something (a plural verb would agree more often than not)."""
    other = other_number(vocab)
    first = None if first_word is None else vocab.stoi[first_word]
    kept = [i for i, p in enumerate(examples.prefixes) if first is None or p[0] == first]
    by_number = [[i for i in kept if int(examples.labels[i]) == n] for n in (SINGULAR, PLURAL)]
    size = min(len(ids) for ids in by_number)
    g = torch.Generator().manual_seed(seed)
    chosen = sorted(i for ids in by_number for i in torch.tensor(ids, dtype=torch.long)[
        torch.randperm(len(ids), generator=g)[:size]].tolist())
    a, b, labels, subject = [], [], [], []
    for i in chosen:
        prefix, verb, number = examples.prefixes[i], int(examples.verbs[i]), int(examples.labels[i])
        for shown, label in ((verb, AGREES), (other[verb], DISAGREES)):
            a.append(list(prefix))
            b.append([shown])
            labels.append(label)
            subject.append(number)
    return PairExamples(a, b, torch.tensor(labels, dtype=torch.long), torch.tensor(subject, dtype=torch.long))


def sentence_subset(pairs: PairExamples, n: int, seed: int = 0) -> PairExamples:
    """``n`` pairs (n even) from n/2 sentences of :func:`agreement_pairs` drawn at random without replacement,
    each with both of its verbs: a minimal pair per sentence, the two classes balanced."""
    if n % 2 or n // 2 > len(pairs) // 2:
        raise ValueError(f"{n} pairs need an even number of at most {len(pairs) // 2 * 2}")
    g = torch.Generator().manual_seed(seed)
    sentences = torch.randperm(len(pairs) // 2, generator=g)[: n // 2]
    return pairs.subset(torch.stack([2 * sentences, 2 * sentences + 1], dim=1).flatten())


def last_noun_agrees(pairs: PairExamples, vocab: Vocab) -> torch.Tensor:
    """(N,) AGREES where a's *last* noun has the number of the verb b: the guess of a reader who checks the verb
    against the nearest noun. A prefix with no noun counts as singular."""
    nouns, verbs = noun_number(vocab), verb_number(vocab)
    last = [next((nouns[w] for w in reversed(a) if w in nouns), SINGULAR) for a in pairs.a]
    return torch.tensor([int(n == verbs[b[0]]) for n, b in zip(last, pairs.b, strict=True)], dtype=torch.long)


def balanced_subset(examples: NumberExamples | PairExamples, n: int, seed: int = 0) -> NumberExamples | PairExamples:
    """``n`` examples (n even), n/2 of each label, drawn at random without replacement and shuffled."""
    if n % 2:
        raise ValueError(f"a balanced subset needs an even number of examples, got {n}")
    g = torch.Generator().manual_seed(seed)
    picks = []
    for label in (SINGULAR, PLURAL):
        pool = (examples.labels == label).nonzero().flatten()
        if len(pool) < n // 2:
            raise ValueError(f"only {len(pool)} examples labelled {label}, asked for {n // 2}")
        picks.append(pool[torch.randperm(len(pool), generator=g)[: n // 2]])
    index = torch.cat(picks)
    return examples.subset(index[torch.randperm(n, generator=g)])


def last_noun_baseline(prefixes: Sequence[Sequence[int]], vocab: Vocab) -> torch.Tensor:
    """(N,) the number of each prefix's *last* noun: the guess of a reader who looks only at the nearest words.
    A prefix with no noun gets SINGULAR."""
    number = noun_number(vocab)
    return torch.tensor([next((number[w] for w in reversed(p) if w in number), SINGULAR) for p in prefixes],
                        dtype=torch.long)


def finetune(clf: GPTClassifier, seqs: Sequence[Sequence[int]], labels: torch.Tensor,
             *, steps: int, lr: float, batch_size: int | None = None,
             train_body: bool = True, weight_decay: float = 0.01, seed: int = 0,
             pad_id: int = 0) -> list[float]:
    """Train ``clf`` on formatted sequences and their labels; returns every step's
    training loss.

    AdamW, learning rate decayed linearly to 0, gradients clipped to norm 1. Each
    step reads all the examples, or ``batch_size`` of them drawn at random.
    ``train_body=False`` trains the head only (a linear probe): the body's states
    are computed once, without gradients, and the body is left untouched.
    """
    device = next(clf.parameters()).device
    ids, lengths = pad_batch(seqs, pad_id)
    ids, lengths, labels = ids.to(device), lengths.to(device), labels.to(device)
    if train_body:
        params = list(clf.parameters())
    else:
        params = list(clf.head.parameters())
        clf.gpt.eval()
        with torch.no_grad():
            features = last_token_state(clf.gpt.hidden_states(ids), lengths)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / steps)
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        clf.train()
        if batch_size:
            rows = torch.randperm(len(labels), generator=g)[:batch_size].to(device)
        else:
            rows = torch.arange(len(labels), device=device)
        if train_body:
            logits = clf(ids[rows], lengths[rows])
        else:
            logits = clf.head(features[rows])
        loss = F.cross_entropy(logits, labels[rows])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    clf.eval()
    return losses


@torch.no_grad()
def predict(clf: GPTClassifier, seqs: Sequence[Sequence[int]], batch_size: int = 500, pad_id: int = 0) -> torch.Tensor:
    """(N,) the class with the highest logit for each formatted sequence (on the CPU)."""
    clf.eval()
    device = next(clf.parameters()).device
    out = []
    for i in range(0, len(seqs), batch_size):
        ids, lengths = pad_batch(seqs[i : i + batch_size], pad_id)
        out.append(clf(ids.to(device), lengths.to(device)).argmax(-1).cpu())
    return torch.cat(out)


def accuracy(clf: GPTClassifier, seqs: Sequence[Sequence[int]], labels: torch.Tensor) -> float:
    """The share of sequences whose predicted class is their label."""
    return (predict(clf, seqs) == labels.cpu()).float().mean().item()
