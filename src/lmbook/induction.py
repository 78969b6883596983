"""In-context learning in its simplest form: copying from earlier in the context, and the heads that do it
(chapter 11; Olsson et al., 2022).

A sequence of random tokens is written twice, x_1 … x_L x_1 … x_L. The first half cannot be predicted (every token
is a fresh draw, ln V nats); the second can be, perfectly, by a model that finds where the current token
occurred before and copies the token that followed it. That two-step rule is an **induction head**:

    layer 1, "previous-token head":  position j attends to j − 1 and writes "x_{j−1} came before me" into j
    layer 2, "induction head":       at position i, the query (x_i) matches the key of j = i − L + 1, which
                                     holds "x_{j−1} = x_i came before me"; it copies x_j, the next token

One layer cannot do it: its keys hold only each position's own token, not the token before it. Olsson et al.
found such heads in every Transformer of two layers or more they studied, forming abruptly during training
at the same time as the loss on late positions falls below the loss on early ones.

:func:`repeated_sequences` writes the task; :func:`induction_score` and :func:`previous_token_score` measure, in
a head's attention weights, how much each position puts where these rules say.

The same rule on the course's language (:func:`same_subject_documents`): documents whose sentences all share
their subject noun, as real text keeps returning to what it is about. After one sentence, the next subject
noun can be copied from the context; the true model of independent sentences (:mod:`lmbook.corpus`) gives
the loss of a reader that does not look back, exactly.
"""

from __future__ import annotations

import random

import torch

from .corpus import ADJS, EOS, Vocab
from .instruct import parse, sentences


def repeated_sequences(n: int, length: int, vocab_size: int, seed: int = 0, min_length: int | None = None,
                       first: int = 0) -> torch.Tensor:
    """(n, 2 · length) token ids drawn uniformly from ``first`` … vocab_size − 1, each row ending with a segment
    written twice: x_1 … x_L x_1 … x_L, with L = ``length`` or, given ``min_length``, drawn per row from
    min_length … length, after 2 (length − L) random tokens.

    A fixed L lets a model copy by position alone (the token L − 1 places back); varying it leaves content, an
    induction head, as the only way to find the earlier copy."""
    min_length = length if min_length is None else min_length
    if not 2 <= min_length <= length or vocab_size - first < 2:
        raise ValueError(f"need 2 ≤ min_length ≤ length and at least 2 tokens to draw from, got min_length="
                         f"{min_length}, length={length} and {vocab_size - first} tokens")
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(first, vocab_size, (n, 2 * length), generator=g)
    L = torch.randint(min_length, length + 1, (n,), generator=g)
    for r in range(n):  # the row's last L tokens repeat the L before them
        ids[r, 2 * length - L[r]:] = ids[r, 2 * length - 2 * L[r]: 2 * length - L[r]]
    return ids


def prefix_match_mask(ids: torch.Tensor) -> torch.Tensor:
    """(B, n, n) True at (i, j) when key j ≤ i follows an earlier occurrence of query i's token: ids[j − 1] = ids[i].
    Where an induction head looks (Olsson et al.'s "prefix matching")."""
    n = ids.shape[1]
    match = torch.zeros(ids.shape[0], n, n, dtype=torch.bool, device=ids.device)
    match[:, :, 1:] = ids[:, :, None] == ids[:, None, :-1]  # (i, j) for j ≥ 1: ids[i] == ids[j − 1]
    return match & torch.ones(n, n, dtype=torch.bool, device=ids.device).tril()


def induction_score(weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean over queries that have one of the weight each puts on the keys :func:`prefix_match_mask` marks.

    weights (B, ..., n, n) of the sequences ids (B, n) → (...): 1 for a perfect induction head, about 1/i for a
    head that spreads its weight evenly."""
    match = prefix_match_mask(ids)
    match = match.view(match.shape[0], *([1] * (weights.dim() - 3)), *match.shape[1:]).to(weights.dtype)
    on_match = (weights * match).sum(-1)  # (B, ..., n)
    has = match.sum(-1) > 0
    return (on_match * has).sum(dim=(0, -1)) / has.sum(dim=(0, -1))


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean weight that each query i ≥ 1 puts on key i − 1, over the batch too: weights (B, ..., n, n) → (...)."""
    i = torch.arange(1, weights.shape[-1])
    return weights[..., i, i - 1].mean(dim=(0, -1))


def loss_by_position(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of −ln P(ids[:, t+1] | ids[:, ≤t]) for each t: logits (B, n, V) for ids (B, n + 1)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -logp.gather(-1, ids[:, 1:, None])[..., 0].mean(0)


def same_subject_documents(ids: torch.Tensor, vocab: Vocab, count: int, length: int,
                           seed: int = 0) -> tuple[torch.Tensor, list[str]]:
    """(count, length) documents of the course's language, each "." then sentences of ``ids`` (a token stream)
    that share one subject noun, cut at ``length`` words; and each document's noun.

    A document's first sentence is drawn from all of the stream's sentences, so its noun is as frequent as in
    the language; the others are drawn from the sentences whose subject is that noun."""
    rng = random.Random(seed)
    pool = sentences(ids, vocab)
    by_noun: dict[str, list[list[str]]] = {}
    for words in pool:
        by_noun.setdefault(parse(words).subject.noun, []).append(words)
    docs, nouns = [], []
    for _ in range(count):
        first = rng.choice(pool)
        noun = parse(first).subject.noun
        words = [EOS, *first]
        while len(words) < length:
            words += rng.choice(by_noun[noun])
        docs.append(vocab.encode(words[:length]))
        nouns.append(noun)
    return torch.tensor(docs), nouns


def subject_positions(doc: torch.Tensor | list[int], vocab: Vocab) -> list[tuple[int, int]]:
    """(k, t) for each sentence of a document whose subject noun is in it: the noun sits at position t, after
    k earlier sentences (a sentence starts after a "." with a determiner and its adjectives)."""
    words = [vocab.itos[int(i)] for i in doc]
    adjs, out = set(ADJS), []
    for i, w in enumerate(words[:-1]):
        if w == EOS:
            t = i + 2  # the determiner, then the adjectives
            while t < len(words) and words[t] in adjs:
                t += 1
            if t < len(words):
                out.append((len(out), t))
    return out
