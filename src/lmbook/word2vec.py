"""Word embeddings from context prediction: skip-gram with negative sampling (SGNS).

Skip-gram predicts each context word o from a centre word c. Instead of a
softmax over the whole vocabulary, negative sampling scores the true pair
against k "noise" words drawn from the unigram distribution raised to 3/4:

    loss = -log sigma(u_o . v_c) - sum_k log sigma(-u_k . v_c)

v are the centre ("input") vectors, u the context ("output") vectors.
CBOW is the mirror image: predict the centre word from the mean of its
context's vectors.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def sgns_loss(v_c: torch.Tensor, u_o: torch.Tensor, u_neg: torch.Tensor) -> torch.Tensor:
    """Mean SGNS loss. v_c: (B, d) centre vectors, u_o: (B, d) true context vectors, u_neg: (B, k, d) noise vectors."""
    pos = (u_o * v_c).sum(-1)  # (B,)
    neg = torch.einsum("bkd,bd->bk", u_neg, v_c)  # (B, k)
    # logsigmoid is the stable form of log(sigma(x)) for large |x|
    return -(F.logsigmoid(pos) + F.logsigmoid(-neg).sum(-1)).mean()


def skipgram_pairs(ids: torch.Tensor, radius: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All (centre, context) pairs with the context at most ``radius`` positions away."""
    centres, contexts = [], []
    for off in range(1, radius + 1):
        centres += [ids[:-off], ids[off:]]
        contexts += [ids[off:], ids[:-off]]
    return torch.cat(centres), torch.cat(contexts)


def noise_distribution(ids: torch.Tensor, vocab_size: int, power: float = 0.75) -> torch.Tensor:
    """Unigram frequencies raised to ``power`` and renormalised (flattens the head of the Zipf curve)."""
    counts = torch.bincount(ids, minlength=vocab_size).double()
    p = counts.pow(power)
    return (p / p.sum()).float()


class SkipGram(nn.Module):
    """Two embedding tables: v (centre words) and u (context words)."""

    def __init__(self, vocab_size: int, dim: int = 16):
        super().__init__()
        self.v = nn.Embedding(vocab_size, dim)
        self.u = nn.Embedding(vocab_size, dim)
        nn.init.normal_(self.v.weight, std=0.1)
        nn.init.zeros_(self.u.weight)  # word2vec's choice: context vectors start at zero

    def loss(self, centre: torch.Tensor, context: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
        return sgns_loss(self.v(centre), self.u(context), self.u(negatives))


def train_skipgram(ids: torch.Tensor, vocab_size: int, *, dim: int = 16, radius: int = 2, k: int = 5,
                   epochs: int = 2, batch_size: int = 512, lr: float = 1e-2, seed: int = 0,
                   device: torch.device | str = "cpu") -> tuple[SkipGram, list[float]]:
    """Train SGNS on a stream of word ids; return the model and its per-step losses."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = SkipGram(vocab_size, dim).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    centre, context = skipgram_pairs(ids, radius)
    noise = noise_distribution(ids, vocab_size)
    losses = []
    for _ in range(epochs):
        order = torch.randperm(len(centre), generator=g)
        for i in range(0, len(order), batch_size):
            idx = order[i : i + batch_size]
            neg = torch.multinomial(noise, len(idx) * k, replacement=True, generator=g).view(len(idx), k)
            loss = model.loss(centre[idx].to(device), context[idx].to(device), neg.to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return model, losses


def nearest_neighbours(emb: torch.Tensor, word_id: int, k: int = 5) -> list[tuple[int, float]]:
    """The ``k`` words whose vectors have the highest cosine similarity to ``word_id``'s (itself excluded)."""
    e = F.normalize(emb.detach().float(), dim=-1)
    sims = e @ e[word_id]
    sims[word_id] = -float("inf")
    top = sims.topk(k)
    return [(int(i), float(s)) for s, i in zip(top.values, top.indices, strict=True)]
