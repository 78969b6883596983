"""Fine-tuning a pretrained GPT on a classification task (chapter 9, GPT-1's recipe), and a task to try it on.

**The task: subject number.** In the course's toy English (:mod:`lmbook.corpus`) the first noun of a sentence is
its subject and the verb agrees with it in number, however long the prepositional phrase between them. An example
is a sentence cut just before a verb; its label is the number the verb must have, read off the verb the corpus
actually wrote there (``sleeps`` → singular, ``sleep`` → plural):

    "the old dogs near the cat"  →  plural          (the corpus went on: "... sleep .")

With a phrase between subject and verb (distance ≥ 4), the last noun of the prefix is the phrase's own noun, whose
number the grammar draws independently: the last words alone do not give the answer.

**The recipe** (:func:`finetune`): the input becomes [start] words [extract] (:func:`lmbook.gpt.format_single`), a
new linear layer reads the final hidden state of [extract] (:class:`lmbook.gpt.GPTClassifier`), and AdamW trains
the whole network, or only that layer (``train_body=False``: a *linear probe* of the frozen representation), on
the labelled examples, all of them in every step when they are few.
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


def balanced_subset(examples: NumberExamples, n: int, seed: int = 0) -> NumberExamples:
    """``n`` examples (n even), n/2 of each number, drawn at random without replacement and shuffled."""
    if n % 2:
        raise ValueError(f"a balanced subset needs an even number of examples, got {n}")
    g = torch.Generator().manual_seed(seed)
    picks = []
    for label in (SINGULAR, PLURAL):
        pool = (examples.labels == label).nonzero().flatten()
        if len(pool) < n // 2:
            raise ValueError(f"only {len(pool)} {LABEL_NAMES[label]} examples, asked for {n // 2}")
        picks.append(pool[torch.randperm(len(pool), generator=g)[: n // 2]])
    index = torch.cat(picks)
    return examples.subset(index[torch.randperm(n, generator=g)])


def last_noun_baseline(prefixes: Sequence[Sequence[int]], vocab: Vocab) -> torch.Tensor:
    """(N,) the number of each prefix's *last* noun: the guess of a reader who looks only at the nearest words.
    A prefix with no noun gets SINGULAR."""
    number = noun_number(vocab)
    return torch.tensor([next((number[w] for w in reversed(p) if w in number), SINGULAR) for p in prefixes],
                        dtype=torch.long)


def finetune(clf: GPTClassifier, seqs: Sequence[Sequence[int]], labels: torch.Tensor, *, steps: int, lr: float,
             batch_size: int | None = None, train_body: bool = True, weight_decay: float = 0.01, seed: int = 0,
             pad_id: int = 0) -> list[float]:
    """Train ``clf`` on formatted sequences and their labels; returns every step's training loss.

    AdamW, learning rate decayed linearly to 0, gradients clipped to norm 1. Each step reads all the examples, or
    ``batch_size`` of them drawn at random. ``train_body=False`` trains the head only (a linear probe): the body's
    states are computed once, without gradients, and the body is left untouched.
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
        rows = (torch.randperm(len(labels), generator=g)[:batch_size].to(device) if batch_size
                else torch.arange(len(labels), device=device))
        logits = clf(ids[rows], lengths[rows]) if train_body else clf.head(features[rows])
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
