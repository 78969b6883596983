"""Task 1 of exercise 2: the RNN cell, and the RNN unrolled over a padded batch."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ... import rnn as lmbook_rnn
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import OVERFLOW_HINT, compare_parts
from .. import earlier
from ..common import TORCH_RNN_NAMES, call_with_weights
from ..common import randn as _randn
from .inputs import f64, tensor_compare


def _rnn_cell_case(B, D, H, scale=0.5):
    def make(g, device):
        x, h = _randn((B, D), g, device), _randn((B, H), g, device)
        W_x, W_h, b = _randn((H, D), g, device, scale), _randn((H, H), g, device, scale), _randn((H,), g, device)
        return ((x, h, W_x, W_h, b), {})
    return make


def _rnn_cell_ref(x, h, W_x, W_h, b):
    H, D = W_x.shape
    return call_with_weights(nn.RNNCell(D, H), {"weight_ih": W_x, "weight_hh": W_h, "bias_ih": b,
                                                "bias_hh": torch.zeros_like(b)}, x, h)


def _cell_with(act=torch.tanh, recur=True, bias=True, swap=False, bias_after=False, no_t=False):
    def fn(x, h, W_x, W_h, b):
        if swap:
            W_x, W_h = W_h, W_x
        if no_t:  # fails on shapes for D != H, as the student's code does
            return act(x @ W_x + h @ W_h + b)
        if bias_after:
            return act(x @ W_x.T + h @ W_h.T) + b
        return act(x @ W_x.T + (h @ W_h.T if recur else 0) + (b if bias else 0))
    return fn


def _exp_tanh(z):
    return (torch.exp(z) - torch.exp(-z)) / (torch.exp(z) + torch.exp(-z))


RNN_CELL = Check(
    task="rnn_cell",
    what="h_t = tanh(W_x x_t + W_h h_{t-1} + b)",
    reference=_rnn_cell_ref,
    grad_of=(0, 1, 2, 3, 4),  # x, h and the weights: an RNN is trained through its cell
    compare=tensor_compare(),
    cases=[Case("batch 4, input size 3, hidden size 5", _rnn_cell_case(4, 3, 5)),
           Case("input size = hidden size = 4", _rnn_cell_case(3, 4, 4))],
    hidden_cases=[Case("a batch of one", _rnn_cell_case(1, 6, 2)),
                  Case("input size = hidden size = 8, large weights", _rnn_cell_case(5, 8, 8, scale=2.0)),
                  Case("hidden size 1", _rnn_cell_case(4, 3, 1)),
                  # pre-activations in the hundreds: exp(z) overflows in a hand-written tanh, clamps show
                  Case("huge weights: pre-activations in the hundreds", _rnn_cell_case(3, 5, 4, scale=60.0)),
                  Case("float64 inputs", f64(_rnn_cell_case(2, 3, 4)))],
    keep_dtype=True,
    mutants=[
        Mutant(_cell_with(act=lambda z: z), "left out the tanh non-linearity"),
        Mutant(_cell_with(act=torch.relu), "used ReLU; this RNN uses tanh"),
        Mutant(_cell_with(act=torch.sigmoid), "used a sigmoid; this RNN uses tanh"),
        Mutant(_cell_with(recur=False), "left out the recurrent term W_h h_{t-1}: without it the cell has no memory"),
        Mutant(_cell_with(bias=False), "left out the bias b"),
        Mutant(_cell_with(bias_after=True), "added the bias after the tanh: it belongs inside, "
                                            "tanh(W_x x + W_h h + b)"),
        Mutant(_cell_with(no_t=True), "multiplied by W_x and W_h instead of their transposes: rows of x are "
                                      "vectors, so W_x x_t for every row is x @ W_x.T"),
        Mutant(_cell_with(act=_exp_tanh), "wrote tanh with exp: exp overflows for large pre-activations and gives "
                                          "NaN; use torch.tanh"),
        Mutant(_cell_with(swap=True), "swapped W_x and W_h: W_x multiplies the input x_t, W_h the previous state"),
    ],
    forbidden=(lmbook_rnn.RNNCell, lmbook_rnn.unroll),
    forbidden_attrs=TORCH_RNN_NAMES,
)


def _rnn_seq_case(B, T, D, H, lengths=None, scale=0.5):
    def make(g, device):
        lens = torch.tensor(lengths) if lengths is not None else torch.randint(1, T + 1, (B,), generator=g)
        lens[int(torch.randint(0, B, (1,), generator=g))] = T  # the longest sequence fills the batch
        x = _randn((B, T, D), g, device)  # padded positions hold garbage: they must not matter
        h0 = _randn((B, H), g, device)
        W_x, W_h, b = _randn((H, D), g, device, scale), _randn((H, H), g, device, scale), _randn((H,), g, device)
        return ((x, lens.to(device), h0, W_x, W_h, b), {})
    return make


def _rnn_forward_ref(x, lengths, h0, W_x, W_h, b):
    B, T, D = x.shape
    H = W_h.shape[0]
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    out, h_n = call_with_weights(nn.RNN(D, H, batch_first=True),
                                 {"weight_ih_l0": W_x, "weight_hh_l0": W_h, "bias_ih_l0": b,
                                  "bias_hh_l0": torch.zeros_like(b)}, packed, h0.unsqueeze(0))
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=T)  # zeros after each sequence's end
    return out, h_n[0]


def _forward_with(through_padding=False, zero_pad=True, use_h0=True, recur=True, reverse=False, le=False,
                  hn_last=False):
    def fn(x, lengths, h0, W_x, W_h, b):
        B, T, _ = x.shape
        h = h0 if use_h0 else torch.zeros_like(h0)
        outs = []
        steps = range(T - 1, -1, -1) if reverse else range(T)
        for t in steps:
            new = torch.tanh(x[:, t] @ W_x.T + (h if recur else h0) @ W_h.T + b)
            real = ((t <= lengths) if le else (t < lengths)).unsqueeze(1)
            h = new if through_padding else torch.where(real, new, h)
            outs.append(torch.where(real, h, torch.zeros_like(h)) if zero_pad else h)
        out = torch.stack(outs[::-1] if reverse else outs, dim=1)
        return out, (out[:, -1] if hn_last else h)
    return fn


RNN_FORWARD = Check(
    task="rnn_forward",
    what="all states (0 at padding) and each sequence's state at its last real step",
    reference=_rnn_forward_ref,
    grad_of=(0, 2, 3, 4, 5),  # x, h0 and the weights, through the states: an RNN LM is trained through them
    builds_on=(("rnn_cell", earlier.rnn_cell),),
    compare=compare_parts("outputs", "h_n", nan_hint=OVERFLOW_HINT),
    cases=[Case("batch 3, lengths (5, 2, 4), input 3, hidden 4", _rnn_seq_case(3, 5, 3, 4, lengths=[5, 2, 4])),
           Case("no padding: every sequence has length 6", _rnn_seq_case(2, 6, 2, 3, lengths=[6, 6]))],
    hidden_cases=[Case("a batch of one", _rnn_seq_case(1, 4, 3, 3, lengths=[4])),
                  Case("sequences of length 1 among longer ones", _rnn_seq_case(4, 7, 3, 5, lengths=[1, 7, 1, 3])),
                  Case("batch 8, random lengths up to 12", _rnn_seq_case(8, 12, 4, 6)),
                  Case("40 steps, hidden size 16", _rnn_seq_case(3, 40, 5, 16, scale=0.3)),
                  Case("every sequence has length 1", _rnn_seq_case(3, 1, 2, 3, lengths=[1, 1, 1])),
                  Case("float64 inputs", f64(_rnn_seq_case(3, 5, 2, 3, lengths=[2, 5, 3])))],
    keep_dtype=True,
    mutants=[
        Mutant(_forward_with(through_padding=True, zero_pad=False),
               "ran the recurrence through the padding: stop each sequence at its length (h_n is the state after "
               "its last real token) and return 0 at padded positions"),
        Mutant(_forward_with(through_padding=True),
               "h_n kept changing over the padding: h_n must be each sequence's state after its last real token"),
        Mutant(_forward_with(zero_pad=False),
               "outputs at padded positions must be 0 (you repeated the last state there)"),
        Mutant(_forward_with(use_h0=False), "ignored the initial state h0: start the recurrence from it, not zeros"),
        Mutant(_forward_with(recur=False), "fed h0 to every step instead of the previous state h_{t-1}"),
        Mutant(_forward_with(reverse=True), "ran over time backwards: start at t = 0"),
        Mutant(_forward_with(le=True), "took one step too many: position t is real when t < lengths[i] "
                                       "(t = lengths[i] is already padding)"),
        Mutant(_forward_with(hn_last=True), "took h_n from the last column of outputs, which is 0 for shorter "
                                            "sequences: h_n is each sequence's state after its last real token"),
    ],
    forbidden=(lmbook_rnn.RNNCell, lmbook_rnn.unroll),
    forbidden_attrs=TORCH_RNN_NAMES,
)
