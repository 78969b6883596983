"""The feedforward neural language model of Bengio et al. (2003).

Given the previous ``window`` words w_{t-n}, ..., w_{t-1}:

    e_i = E[w_i]                      (look up a dense embedding, = E^T x_i for one-hot x_i)
    x   = [e_{t-n}; ...; e_{t-1}]     (concatenate: position in the window matters)
    h   = tanh(W x + b)
    logits = U h + c                  (softmax(logits) = P(w_t | context))

With ``dropout=p > 0`` (chapter 1's section on dropout), the inputs of both learned layers, x and
h, are passed through ``nn.Dropout(p)``: in training mode each entry is zeroed with probability p
and the others are scaled by 1 / (1 - p); in evaluation mode (``model.eval()``) nothing changes.
"""

from __future__ import annotations

import torch
from torch import nn


class FeedforwardLM(nn.Module):
    def __init__(self, vocab_size: int, window: int, d_emb: int = 32, d_hidden: int = 128,
                 dropout: float = 0.0):
        super().__init__()
        self.window = window
        self.drop = nn.Dropout(dropout)  # no parameters: the same module serves both places
        self.E = nn.Embedding(vocab_size, d_emb)
        self.hidden = nn.Linear(window * d_emb, d_hidden)  # W, b
        self.out = nn.Linear(d_hidden, vocab_size)  # U, c

    def forward(self, context: torch.Tensor) -> torch.Tensor:
        """context: (B, window) word ids -> logits (B, V) for the next word."""
        if context.shape[-1] != self.window:
            raise ValueError(f"expected contexts of {self.window} words, got shape {tuple(context.shape)}")
        x = self.drop(self.E(context).flatten(start_dim=-2))  # (B, window * d_emb)
        h = self.drop(torch.tanh(self.hidden(x)))
        return self.out(h)
