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
"""

from __future__ import annotations

import torch


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
