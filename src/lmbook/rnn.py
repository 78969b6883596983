"""Recurrent networks from their equations: the vanilla RNN, the LSTM and the GRU.

The cells keep torch's parameter layout (``weight_ih`` stacks the input
weights of every gate, ``weight_hh`` the recurrent ones, gates in torch's
order), so a cell here and ``torch.nn.LSTMCell`` given the same weights
compute the same thing; the tests check exactly that.

    vanilla RNN  h_t = tanh(W_x x_t + b_x + W_h h_{t-1} + b_h)
    LSTM         i, f, g, o = σ, σ, tanh, σ of (W_x x_t + b_x + W_h h_{t-1} + b_h), split in four
                 c_t = f ⊙ c_{t-1} + i ⊙ g          h_t = o ⊙ tanh(c_t)
    GRU          r, z = σ(W_xr x_t + b_xr + W_hr h_{t-1} + b_hr), σ(... z ...)
                 n = tanh(W_xn x_t + b_xn + r ⊙ (W_hn h_{t-1} + b_hn))
                 h_t = (1 - z) ⊙ n + z ⊙ h_{t-1}
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn


class _Cell(nn.Module):
    """Parameters shaped like torch's cells, initialised like them: U(-1/sqrt(H), 1/sqrt(H))."""

    gates = 1

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight_ih = nn.Parameter(torch.empty(self.gates * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(self.gates * hidden_size, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(self.gates * hidden_size))
        self.bias_hh = nn.Parameter(torch.empty(self.gates * hidden_size))
        bound = 1 / math.sqrt(hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def zero_state(self, batch: int, device=None, dtype=None):
        return torch.zeros(batch, self.hidden_size, device=device, dtype=dtype)


class RNNCell(_Cell):
    """h_t = tanh(W_x x_t + b_x + W_h h_{t-1} + b_h)."""

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ self.weight_ih.T + self.bias_ih + h @ self.weight_hh.T + self.bias_hh)


class LSTMCell(_Cell):
    """The LSTM: a cell state c carried by addition, read and written through gates. State is (h, c)."""

    gates = 4

    def zero_state(self, batch: int, device=None, dtype=None):
        return (torch.zeros(batch, self.hidden_size, device=device, dtype=dtype),) * 2

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        h, c = state
        i, f, g, o = (x @ self.weight_ih.T + self.bias_ih + h @ self.weight_hh.T + self.bias_hh).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)  # forget some, write some
        h = torch.sigmoid(o) * torch.tanh(c)  # expose some
        return h, c


class GRUCell(_Cell):
    """The GRU: one state, an update gate z that interpolates old and new, a reset gate r."""

    gates = 3

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        xr, xz, xn = (x @ self.weight_ih.T + self.bias_ih).chunk(3, dim=-1)
        hr, hz, hn = (h @ self.weight_hh.T + self.bias_hh).chunk(3, dim=-1)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)  # the reset gate acts on the recurrent term, as in torch
        return (1 - z) * n + z * h


def unroll(cell: nn.Module, x: torch.Tensor, lengths: torch.Tensor | None = None, state=None):
    """Run ``cell`` over ``x`` of shape (B, T, D); return all hidden states (B, T, H) and the final state.

    With ``lengths``, a sequence's state stops changing after its last real step, so the final state is the
    state at position ``lengths - 1`` and padding never leaks into it.
    """
    B, T, _ = x.shape
    state = cell.zero_state(B, x.device, x.dtype) if state is None else state
    outputs = []
    for t in range(T):
        new = cell(x[:, t], state)
        if lengths is not None:
            keep = (t < lengths).to(x.device).unsqueeze(-1)  # (B, 1): which sequences are still running
            new = tuple(torch.where(keep, n, s) for n, s in zip(new, state, strict=True)) \
                if isinstance(new, tuple) else torch.where(keep, new, state)
        state = new
        outputs.append(state[0] if isinstance(state, tuple) else state)
    return torch.stack(outputs, dim=1), state


def pool(states: torch.Tensor, mask: torch.Tensor, how: str = "last") -> torch.Tensor:
    """One vector per sequence from states (B, T, H) and a padding mask (B, T), True at real tokens.

    ``last``: the state at the last real token; ``mean``: the mean over real tokens; ``max``: the
    element-wise maximum over real tokens (padding is never chosen).
    """
    mask = mask.bool()
    if how == "last":
        last = mask.sum(1) - 1
        return states[torch.arange(states.shape[0], device=states.device), last]
    if how == "mean":
        m = mask.unsqueeze(-1).to(states.dtype)
        return (states * m).sum(1) / m.sum(1)
    if how == "max":
        return states.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(1)
    raise ValueError(f"how must be 'last', 'mean' or 'max', not {how!r}")


def clip_grad_norm(parameters: Iterable[nn.Parameter], max_norm: float) -> torch.Tensor:
    """Scale all gradients by min(1, max_norm / ‖g‖), ‖g‖ the norm of all of them together; return ‖g‖."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)  # the same epsilon as torch's
    for g in grads:
        g.mul_(scale)
    return total


def gradient_by_distance(cell: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """‖∂(Σ h_T)/∂x_t‖ for each t, averaged over the batch: how much the last state still feels input t.

    For a vanilla RNN this shrinks (or grows) geometrically with the distance T - t; the LSTM's additive
    cell state keeps it alive for longer.
    """
    x = x.detach().requires_grad_(True)
    states, _ = unroll(cell, x)
    states[:, -1].sum().backward()
    return x.grad.norm(dim=-1).mean(0)


class RNNLM(nn.Module):
    """Embedding → recurrent cell unrolled over time → linear layer to next-word logits."""

    def __init__(self, vocab_size: int, d_emb: int = 32, hidden_size: int = 128, cell: str = "lstm"):
        super().__init__()
        cells = {"rnn": RNNCell, "lstm": LSTMCell, "gru": GRUCell}
        self.emb = nn.Embedding(vocab_size, d_emb)
        self.cell = cells[cell](d_emb, hidden_size)
        self.out = nn.Linear(hidden_size, vocab_size)

    def forward(self, ids: torch.Tensor, state=None):
        """ids (B, T) → logits (B, T, V) and the final state (to carry across chunks in truncated BPTT)."""
        states, state = unroll(self.cell, self.emb(ids), state=state)
        return self.out(states), state


def detach_state(state):
    """Cut the graph between chunks (truncated BPTT): keep the values, drop the history."""
    return tuple(s.detach() for s in state) if isinstance(state, tuple) else state.detach()


def train_tbptt(model: RNNLM, ids: torch.Tensor, n_streams: int = 32, chunk: int = 32, epochs: int = 6,
                lr: float = 3e-3, clip: float = 1.0) -> list[float]:
    """Chapter 2's truncated BPTT with Adam, for later chapters' baselines; returns the loss of every chunk.

    The text is cut into ``n_streams`` parallel streams (one per row); each epoch reads them in chunks of
    ``chunk`` words, carrying the state from chunk to chunk, clipping the gradient's total norm to ``clip``
    and detaching the state after each update.
    """
    device = next(model.parameters()).device
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    n = len(ids) // n_streams
    data = ids[: n * n_streams].view(n_streams, n).to(device)
    losses = []
    for _ in range(epochs):
        model.train()
        state = None  # h_0 = 0 at the start of each pass over the text
        for start in range(0, data.shape[1] - 1, chunk):
            y = data[:, start + 1 : start + chunk + 1]  # next words (B, T)
            logits, state = model(data[:, start : start + y.shape[1]], state)
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            clip_grad_norm(model.parameters(), clip)
            opt.step()
            state = detach_state(state)
            losses.append(loss.item())
    return losses


__all__ = ["RNNCell", "LSTMCell", "GRUCell", "unroll", "pool", "clip_grad_norm", "gradient_by_distance", "RNNLM",
           "detach_state", "train_tbptt"]
