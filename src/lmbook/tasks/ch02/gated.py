"""Tasks 2-3 of exercise 2: the LSTM and GRU cells."""

from __future__ import annotations

import torch
from torch import nn

from ... import rnn as lmbook_rnn
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import OVERFLOW_HINT, compare_parts
from ..common import TORCH_RNN_NAMES, call_with_weights
from ..common import randn as _randn
from .inputs import f64, tensor_compare


def _gated_case(B, D, H, gates, lstm, scale=0.5):
    def make(g, device):
        x, h = _randn((B, D), g, device), _randn((B, H), g, device)
        c = (_randn((B, H), g, device),) if lstm else ()
        weights = (_randn((gates * H, D), g, device, scale), _randn((gates * H, H), g, device, scale),
                   _randn((gates * H,), g, device, scale), _randn((gates * H,), g, device, scale))
        return ((x, h, *c, *weights), {})
    return make


def _lstm_ref(x, h, c, W_ih, W_hh, b_ih, b_hh):
    H, D = W_hh.shape[1], x.shape[1]
    return call_with_weights(nn.LSTMCell(D, H), {"weight_ih": W_ih, "weight_hh": W_hh, "bias_ih": b_ih,
                                                 "bias_hh": b_hh}, x, (h, c))


def _exp_sigmoid(z):
    return torch.exp(z) / (1 + torch.exp(z))


def _lstm_with(order="ifgo", tanh_c=True, input_gate=True, g_act=torch.tanh, swap_out=False, b_hh=True,
               sig=torch.sigmoid):
    def fn(x, h, c, W_ih, W_hh, b_ih, b_hh_):
        z = x @ W_ih.T + b_ih + h @ W_hh.T + (b_hh_ if b_hh else 0)
        parts = dict(zip(order, z.chunk(4, dim=-1), strict=True))
        i, f, g, o = sig(parts["i"]), sig(parts["f"]), g_act(parts["g"]), sig(parts["o"])
        c2 = f * c + (i * g if input_gate else g)
        h2 = o * (torch.tanh(c2) if tanh_c else c2)
        return (c2, h2) if swap_out else (h2, c2)
    return fn


LSTM_CELL = Check(
    task="lstm_cell",
    what="the LSTM cell, equal to torch.nn.LSTMCell given the same weights",
    reference=_lstm_ref,
    grad_of=(0, 1, 2, 3, 4, 5, 6),  # x, h, c and the weights: an LSTM is trained through its cell
    trained_outputs=2,  # through h and c: the cell state carries the gradient across time steps
    compare=compare_parts("h", "c", nan_hint=OVERFLOW_HINT),
    cases=[Case("batch 3, input 4, hidden 5", _gated_case(3, 4, 5, 4, lstm=True)),
           Case("batch 2, input 6, hidden 2", _gated_case(2, 6, 2, 4, lstm=True))],
    hidden_cases=[Case("a batch of one", _gated_case(1, 3, 4, 4, lstm=True)),
                  Case("hidden size 1", _gated_case(4, 2, 1, 4, lstm=True)),
                  Case("large weights (saturated gates)", _gated_case(5, 7, 6, 4, lstm=True, scale=3.0)),
                  Case("batch 16, input 32, hidden 24", _gated_case(16, 32, 24, 4, lstm=True)),
                  Case("huge weights: pre-activations in the hundreds", _gated_case(3, 5, 4, 4, lstm=True,
                                                                                     scale=60.0)),
                  Case("float64 inputs", f64(_gated_case(2, 3, 4, 4, lstm=True)))],
    keep_dtype=True,
    mutants=[
        Mutant(_lstm_with(order="ifog"), "split the gates in the wrong order: torch stacks them as input i, "
                                         "forget f, candidate g, output o"),
        Mutant(_lstm_with(order="figo"), "swapped the input and forget gates: torch's order is i, f, g, o"),
        Mutant(_lstm_with(tanh_c=False), "h = o ⊙ c: the output gate reads tanh(c_t), not c_t"),
        Mutant(_lstm_with(input_gate=False), "left out the input gate: c_t = f ⊙ c_{t-1} + i ⊙ g"),
        Mutant(_lstm_with(g_act=torch.sigmoid), "used a sigmoid for the candidate g; it is tanh (values in [-1, 1])"),
        Mutant(_lstm_with(swap_out=True), "returned (c, h): return the new hidden state first, (h, c)"),
        Mutant(_lstm_with(sig=_exp_sigmoid), "wrote the sigmoid as exp(z) / (1 + exp(z)): exp overflows for large "
                                             "pre-activations and gives NaN; use torch.sigmoid"),
        Mutant(_lstm_with(b_hh=False), "left out the recurrent bias b_hh (torch's cell has both b_ih and b_hh)"),
    ],
    forbidden=(lmbook_rnn.LSTMCell, lmbook_rnn.unroll),
    forbidden_attrs=TORCH_RNN_NAMES,
)


def _gru_ref(x, h, W_ih, W_hh, b_ih, b_hh):
    H, D = W_hh.shape[1], x.shape[1]
    return call_with_weights(nn.GRUCell(D, H), {"weight_ih": W_ih, "weight_hh": W_hh, "bias_ih": b_ih,
                                                "bias_hh": b_hh}, x, h)


def _gru_with(order="rzn", swap_z=False, reset="torch"):
    def fn(x, h, W_ih, W_hh, b_ih, b_hh):
        xs = dict(zip(order, (x @ W_ih.T + b_ih).chunk(3, dim=-1), strict=True))
        hs = dict(zip(order, (h @ W_hh.T + b_hh).chunk(3, dim=-1), strict=True))
        r, z = torch.sigmoid(xs["r"] + hs["r"]), torch.sigmoid(xs["z"] + hs["z"])
        W_hn = dict(zip(order, W_hh.chunk(3, dim=0), strict=True))["n"]
        b_hn = dict(zip(order, b_hh.chunk(3, dim=0), strict=True))["n"]
        if reset == "torch":
            n = torch.tanh(xs["n"] + r * hs["n"])
        elif reset == "outside_bias":
            n = torch.tanh(xs["n"] + r * (h @ W_hn.T) + b_hn)
        elif reset == "before_matmul":
            n = torch.tanh(xs["n"] + (r * h) @ W_hn.T + b_hn)
        else:
            n = torch.tanh(xs["n"] + hs["n"])
        return z * n + (1 - z) * h if swap_z else (1 - z) * n + z * h
    return fn


GRU_CELL = Check(
    task="gru_cell",
    what="the GRU cell, equal to torch.nn.GRUCell given the same weights",
    reference=_gru_ref,
    grad_of=(0, 1, 2, 3, 4, 5),  # x, h and the weights: a GRU is trained through its cell
    compare=tensor_compare(),
    cases=[Case("batch 3, input 4, hidden 5", _gated_case(3, 4, 5, 3, lstm=False)),
           Case("batch 2, input 6, hidden 2", _gated_case(2, 6, 2, 3, lstm=False))],
    hidden_cases=[Case("a batch of one", _gated_case(1, 3, 4, 3, lstm=False)),
                  Case("hidden size 1", _gated_case(4, 2, 1, 3, lstm=False)),
                  Case("large weights (saturated gates)", _gated_case(5, 7, 6, 3, lstm=False, scale=3.0)),
                  Case("batch 16, input 32, hidden 24", _gated_case(16, 32, 24, 3, lstm=False)),
                  Case("huge weights: pre-activations in the hundreds", _gated_case(3, 5, 4, 3, lstm=False,
                                                                                     scale=60.0)),
                  Case("float64 inputs", f64(_gated_case(2, 3, 4, 3, lstm=False)))],
    keep_dtype=True,
    mutants=[
        Mutant(_gru_with(swap_z=True), "swapped the update gate's roles: h_t = (1 − z) ⊙ n + z ⊙ h_{t-1} "
                                       "(z near 1 keeps the old state)"),
        Mutant(_gru_with(order="zrn"), "split the gates in the wrong order: torch stacks them as reset r, update z, "
                                       "new n"),
        Mutant(_gru_with(reset="outside_bias"), "the reset gate multiplies (W_hn h + b_hn), bias included: "
                                                "n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))"),
        Mutant(_gru_with(reset="before_matmul"), "applied the reset gate to h before the matrix product, as in the "
                                                 "original paper; torch applies it after: r ⊙ (W_hn h + b_hn)"),
        Mutant(_gru_with(reset="none"), "left out the reset gate r in the candidate n"),
    ],
    forbidden=(lmbook_rnn.GRUCell, lmbook_rnn.unroll),
    forbidden_attrs=TORCH_RNN_NAMES,
)
