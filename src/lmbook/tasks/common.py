"""Helpers the exercises' task modules share: inputs drawn the same on every device, weights loaded
into torch's own modules (the references), and the names of torch's ready-made layers."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def randn(shape: Sequence[int], g: torch.Generator, device: torch.device, scale: float = 1.0,
          offset: float = 0.0) -> torch.Tensor:
    """Random normal floats, generated on the CPU (same numbers on every device) then moved."""
    return (torch.randn(*shape, generator=g) * scale + offset).to(device)


def load_weights(module: torch.nn.Module, weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    """``module`` holding the given tensors as its parameters (dotted names reach submodules), in their dtype."""
    module = module.to(dtype=next(iter(weights.values())).dtype)
    with torch.no_grad():
        for name, value in weights.items():
            module.get_parameter(name).copy_(value)
    return module


# torch's recurrent layers and cells, by every name a notebook can reach them (a task that asks for a cell
# forbids them all)
TORCH_RNN_NAMES = ("RNN", "RNNCell", "LSTM", "LSTMCell", "GRU", "GRUCell", "rnn_tanh", "rnn_tanh_cell",
                   "rnn_relu_cell", "lstm_cell", "gru_cell", "_VF")
