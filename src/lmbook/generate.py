"""Autoregressive generation from a language model that carries a state (an RNN LM).

The prompt is read once; after that each new token costs one recurrent step, because the
state h_t already summarises everything before it:

    logits, state = model(prompt)                    # read the prompt
    repeat: y ~ p(· | state)  (greedy, or sampled after temperature / top-k / top-p)
            logits, state = model(y, state)           # one step: feed the choice back in

``model(ids, state)`` must return ``(logits (B, T, V), state)``, like :class:`lmbook.rnn.RNNLM`.
Draws are made on the CPU with the caller's ``torch.Generator``, so a seeded run gives the same
text on every device.
"""

from __future__ import annotations

import torch
from torch import nn

from .decoding import sample_next


@torch.no_grad()
def generate(model: nn.Module, prompt, n_tokens: int, *, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, greedy: bool = False,
             generator: torch.Generator | None = None) -> torch.Tensor:
    """Continue ``prompt`` by ``n_tokens`` tokens; return only the new ones.

    ``prompt``: token ids, shape (T0,) or (B, T0) with T0 >= 1 (B prompts continued in parallel).
    Returns ids of shape (n_tokens,) or (B, n_tokens), on the CPU. ``greedy=True`` takes the argmax
    at every step (temperature, top-k and top-p are then irrelevant); otherwise each token is drawn
    from ``softmax(filter_logits(logits, temperature, top_k, top_p))``. The model's train/eval mode
    is restored afterwards.
    """
    prompt = torch.as_tensor(prompt, dtype=torch.long)
    single = prompt.dim() == 1
    if single:
        prompt = prompt[None]
    if prompt.dim() != 2 or prompt.shape[1] == 0:
        raise ValueError(f"prompt must have shape (T0,) or (B, T0) with T0 >= 1, got {tuple(prompt.shape)}")
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        logits, state = model(prompt.to(device))  # read the whole prompt once
        new = []
        for step in range(n_tokens):
            last = logits[:, -1].float().cpu()  # (B, V): scores for the next token
            y = last.argmax(-1) if greedy else sample_next(last, generator, temperature, top_k, top_p)
            new.append(y)
            if step + 1 < n_tokens:
                logits, state = model(y[:, None].to(device), state)  # one recurrent step
    finally:
        model.train(was_training)
    out = torch.stack(new, dim=1) if new else torch.empty(prompt.shape[0], 0, dtype=torch.long)
    return out[0] if single else out


__all__ = ["generate"]
