"""Checks for exercise 2 (chapter 2: recurrent language models).

References are torch's own modules given the student's weights (``nn.RNN`` over a
packed sequence, ``nn.LSTMCell``, ``nn.GRUCell``, ``clip_grad_norm_``), or plain
loops over one sequence at a time, never the course's answers in ``lmbook.rnn``.
Sampling is checked exactly on the filtered distribution and statistically on the
draws. Usage in a notebook: ``from lmbook.tasks.ch02 import check``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .. import decoding as lmbook_decoding
from .. import rnn as lmbook_rnn
from ..grading.checks import Case, Check, Mutant, Registry
from ..grading.compare import compare_parts, describe_scalar_mismatch, describe_tensor_mismatch, describe_value
from .common import TORCH_RNN_NAMES, load_weights
from .common import randn as _randn


def _tensor(rtol: float = 1e-4, atol: float = 1e-5):
    return lambda out, ref: describe_tensor_mismatch(out, ref, rtol=rtol, atol=atol, dim=None)


def _f64(make):
    """The same case in float64: the statement asks for the inputs' dtype back (keep_dtype)."""
    def conv(a):
        if isinstance(a, torch.Tensor):
            return a.double() if a.is_floating_point() else a
        return tuple(conv(x) for x in a) if isinstance(a, tuple) else a

    def made(g, device):
        args, kwargs = make(g, device)
        return conv(args), kwargs
    return made


# ----------------------------------------------------------------------------- Task 1: the RNN cell, unrolled

def _rnn_cell_case(B, D, H, scale=0.5):
    def make(g, device):
        x, h = _randn((B, D), g, device), _randn((B, H), g, device)
        W_x, W_h, b = _randn((H, D), g, device, scale), _randn((H, H), g, device, scale), _randn((H,), g, device)
        return ((x, h, W_x, W_h, b), {})
    return make


def _rnn_cell_ref(x, h, W_x, W_h, b):
    H, D = W_x.shape
    cell = load_weights(nn.RNNCell(D, H), {"weight_ih": W_x, "weight_hh": W_h, "bias_ih": b,
                                      "bias_hh": torch.zeros_like(b)})
    return cell(x, h)


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
    compare=_tensor(),
    cases=[Case("batch 4, input size 3, hidden size 5", _rnn_cell_case(4, 3, 5)),
           Case("input size = hidden size = 4", _rnn_cell_case(3, 4, 4))],
    hidden_cases=[Case("a batch of one", _rnn_cell_case(1, 6, 2)),
                  Case("input size = hidden size = 8, large weights", _rnn_cell_case(5, 8, 8, scale=2.0)),
                  Case("hidden size 1", _rnn_cell_case(4, 3, 1)),
                  # pre-activations in the hundreds: exp(z) overflows in a hand-written tanh, clamps show
                  Case("huge weights: pre-activations in the hundreds", _rnn_cell_case(3, 5, 4, scale=60.0)),
                  Case("float64 inputs", _f64(_rnn_cell_case(2, 3, 4)))],
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
    rnn = load_weights(nn.RNN(D, H, batch_first=True), {"weight_ih_l0": W_x, "weight_hh_l0": W_h, "bias_ih_l0": b,
                                                   "bias_hh_l0": torch.zeros_like(b)})
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    out, h_n = rnn(packed, h0.unsqueeze(0))
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
    compare=compare_parts("outputs", "h_n"),
    cases=[Case("batch 3, lengths (5, 2, 4), input 3, hidden 4", _rnn_seq_case(3, 5, 3, 4, lengths=[5, 2, 4])),
           Case("no padding: every sequence has length 6", _rnn_seq_case(2, 6, 2, 3, lengths=[6, 6]))],
    hidden_cases=[Case("a batch of one", _rnn_seq_case(1, 4, 3, 3, lengths=[4])),
                  Case("sequences of length 1 among longer ones", _rnn_seq_case(4, 7, 3, 5, lengths=[1, 7, 1, 3])),
                  Case("batch 8, random lengths up to 12", _rnn_seq_case(8, 12, 4, 6)),
                  Case("40 steps, hidden size 16", _rnn_seq_case(3, 40, 5, 16, scale=0.3)),
                  Case("every sequence has length 1", _rnn_seq_case(3, 1, 2, 3, lengths=[1, 1, 1])),
                  Case("float64 inputs", _f64(_rnn_seq_case(3, 5, 2, 3, lengths=[2, 5, 3])))],
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


# ----------------------------------------------------------------------------- Tasks 2-3: LSTM and GRU cells

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
    cell = load_weights(nn.LSTMCell(D, H), {"weight_ih": W_ih, "weight_hh": W_hh, "bias_ih": b_ih, "bias_hh": b_hh})
    return cell(x, (h, c))


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
    compare=compare_parts("h", "c"),
    cases=[Case("batch 3, input 4, hidden 5", _gated_case(3, 4, 5, 4, lstm=True)),
           Case("batch 2, input 6, hidden 2", _gated_case(2, 6, 2, 4, lstm=True))],
    hidden_cases=[Case("a batch of one", _gated_case(1, 3, 4, 4, lstm=True)),
                  Case("hidden size 1", _gated_case(4, 2, 1, 4, lstm=True)),
                  Case("large weights (saturated gates)", _gated_case(5, 7, 6, 4, lstm=True, scale=3.0)),
                  Case("batch 16, input 32, hidden 24", _gated_case(16, 32, 24, 4, lstm=True)),
                  Case("huge weights: pre-activations in the hundreds", _gated_case(3, 5, 4, 4, lstm=True,
                                                                                     scale=60.0)),
                  Case("float64 inputs", _f64(_gated_case(2, 3, 4, 4, lstm=True)))],
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
    cell = load_weights(nn.GRUCell(D, H), {"weight_ih": W_ih, "weight_hh": W_hh, "bias_ih": b_ih, "bias_hh": b_hh})
    return cell(x, h)


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
    compare=_tensor(),
    cases=[Case("batch 3, input 4, hidden 5", _gated_case(3, 4, 5, 3, lstm=False)),
           Case("batch 2, input 6, hidden 2", _gated_case(2, 6, 2, 3, lstm=False))],
    hidden_cases=[Case("a batch of one", _gated_case(1, 3, 4, 3, lstm=False)),
                  Case("hidden size 1", _gated_case(4, 2, 1, 3, lstm=False)),
                  Case("large weights (saturated gates)", _gated_case(5, 7, 6, 3, lstm=False, scale=3.0)),
                  Case("batch 16, input 32, hidden 24", _gated_case(16, 32, 24, 3, lstm=False)),
                  Case("huge weights: pre-activations in the hundreds", _gated_case(3, 5, 4, 3, lstm=False,
                                                                                     scale=60.0)),
                  Case("float64 inputs", _f64(_gated_case(2, 3, 4, 3, lstm=False)))],
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


# ----------------------------------------------------------------------------- Task 4: gradient clipping

def _grads_case(shapes, scale, max_norm, zeros=False):
    def make(g, device):
        grads = tuple(_randn(s, g, device, scale) * (0.0 if zeros else 1.0) for s in shapes)
        return ((grads, max_norm), {})
    return make


def _clip_ref(grads, max_norm):
    params = [nn.Parameter(torch.zeros_like(gr)) for gr in grads]
    for p, gr in zip(params, grads, strict=True):
        p.grad = gr.clone()
    total = nn.utils.clip_grad_norm_(params, max_norm)
    return tuple(p.grad for p in params), total


def _clip_compare(out, ref) -> str | None:
    clipped_ref, total_ref = ref
    if not isinstance(out, tuple | list) or len(out) != 2:
        return f"returned {describe_value(out)}, expected a tuple (clipped_grads, total_norm)"
    clipped, total = out
    # the statement allows a 0-d tensor or a Python number for the norm (torch returns a tensor)
    problem = describe_scalar_mismatch(total, total_ref, rtol=1e-4, atol=1e-6, accept=("tensor", "number"))
    if problem:
        return f"total_norm: {problem}"
    if not isinstance(clipped, tuple | list) or len(clipped) != len(clipped_ref):
        return (f"clipped_grads: returned {describe_value(clipped)}, expected {len(clipped_ref)} tensors, "
                "one per gradient")
    for i, (o, r) in enumerate(zip(clipped, clipped_ref, strict=True)):
        problem = describe_tensor_mismatch(o, r, rtol=1e-4, atol=1e-6, dim=None)
        if problem:
            return f"clipped_grads[{i}]: {problem}"
    return None


def _clip_with(per_tensor=False, always=False, by_value=False, norm="l2", after=False, no_eps=False):
    def fn(grads, max_norm):
        if no_eps:  # normalise to length 1, then stretch: 0 / 0 for all-zero gradients
            joint = torch.sqrt(sum((gr ** 2).sum() for gr in grads))
            return tuple(gr / joint * torch.clamp(joint, max=max_norm) for gr in grads), joint
        joint = torch.sqrt(sum((gr ** 2).sum() for gr in grads))
        if norm == "squared":
            joint = joint ** 2
        if by_value:
            return tuple(gr.clamp(-max_norm, max_norm) for gr in grads), joint
        if per_tensor:
            return tuple(gr * min(1.0, max_norm / (float(gr.norm()) + 1e-6)) for gr in grads), joint
        total = sum(gr.norm() for gr in grads) if norm == "sum" else joint
        scale = max_norm / (total + 1e-6) if always else torch.clamp(max_norm / (total + 1e-6), max=1.0)
        out = tuple(gr * scale for gr in grads)
        if after:
            total = torch.sqrt(sum((gr ** 2).sum() for gr in out))
        return out, total
    return fn


CLIP_GRAD_NORM = Check(
    task="clip_grad_norm",
    what="scale all gradients by min(1, max_norm / ‖g‖), ‖g‖ their joint L2 norm; equal to clip_grad_norm_",
    reference=_clip_ref,
    compare=_clip_compare,
    cases=[Case("three gradients, joint norm above max_norm = 1", _grads_case([(3, 4), (4,), (2, 2)], 1.0, 1.0)),
           Case("joint norm below max_norm = 100: nothing changes", _grads_case([(5,), (3, 3)], 1.0, 100.0))],
    hidden_cases=[Case("a single gradient tensor", _grads_case([(6, 5)], 2.0, 0.5)),
                  Case("exploding gradients (norm ~ 1e4)", _grads_case([(10, 10), (10,), (1,)], 1000.0, 5.0)),
                  Case("all-zero gradients (norm 0: nothing changes, no NaN)", _grads_case([(3,), (2, 2)], 1.0, 1.0,
                                                                                         zeros=True)),
                  Case("many small tensors, each under max_norm, jointly over it",
                       _grads_case([(4,)] * 9, 0.5, 2.0)),
                  Case("joint norm near max_norm", _grads_case([(2, 3), (3,)], 1.0, 2.5)),
                  Case("float64 gradients", _f64(_grads_case([(3, 2), (5,)], 3.0, 1.0))),
                  Case("max_norm = 0.01: gradients shrink a lot", _grads_case([(4, 4)], 1.0, 0.01))],
    keep_dtype=True,
    mutants=[
        Mutant(_clip_with(per_tensor=True), "clipped each gradient tensor on its own: the norm is the norm of all "
                                            "gradients together, and one scale applies to all"),
        Mutant(_clip_with(always=True), "rescaled even when the norm was already below max_norm: the scale is "
                                        "min(1, max_norm / ‖g‖)"),
        Mutant(_clip_with(by_value=True), "clipped each value to [-max_norm, max_norm] (clip_grad_value_); "
                                          "norm clipping rescales the whole gradient, keeping its direction"),
        Mutant(_clip_with(norm="sum"), "added up the tensors' norms: the joint norm is sqrt of the sum of all "
                                       "squared entries"),
        Mutant(_clip_with(norm="squared"), "forgot the square root: ‖g‖ is the square root of the sum of all "
                                           "squared entries"),
        Mutant(_clip_with(no_eps=True), "divided by the norm without the ε: all-zero gradients give 0 / 0 = NaN; "
                                        "scale by min(1, max_norm / (‖g‖ + ε))"),
        Mutant(_clip_with(after=True), "returned the norm after clipping; return the norm before (as torch does)"),
    ],
    forbidden=(lmbook_rnn.clip_grad_norm,),
    forbidden_attrs=("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "clip_grads_with_norm_",
                     "get_total_norm"),
)


# ----------------------------------------------------------------------------- Task 5: pooled classifier

def _pool_case(B, T, H, C, how, lengths=None, negative=False):
    def make(g, device):
        lens = torch.tensor(lengths) if lengths is not None else torch.randint(1, T + 1, (B,), generator=g)
        lens[int(torch.randint(0, B, (1,), generator=g))] = T
        mask = torch.arange(T).unsqueeze(0) < lens.unsqueeze(1)  # True at real tokens, padding at the end
        states = _randn((B, T, H), g, device) - (3.0 if negative else 0.0)
        garbage = _randn((B, T, H), g, device, 5.0).abs() + 1.0  # padding states are large: they must not count
        states = torch.where(mask.to(device).unsqueeze(-1), states, garbage)
        W, b = _randn((C, H), g, device), _randn((C,), g, device)
        return ((states, mask.to(device), W, b, how), {})
    return make


def _classify_ref(states, mask, W, b, how):
    # one sequence at a time, keeping only its real positions: no masking arithmetic to get wrong
    pooled = []
    for s, m in zip(states, mask.bool(), strict=True):
        real = s[m]
        pooled.append({"last": lambda r: r[-1], "mean": lambda r: r.mean(0), "max": lambda r: r.amax(0)}[how](real))
    return F.linear(torch.stack(pooled), W, b)


def _classify_with(last="real", mean="real", max_="real", bias=True):
    def fn(states, mask, W, b, how):
        mask = mask.bool()
        m = mask.unsqueeze(-1).to(states.dtype)
        if how == "last":
            idx = {"real": mask.sum(1) - 1, "end": torch.full_like(mask.sum(1), mask.shape[1] - 1),
                   "length": mask.sum(1).clamp(max=mask.shape[1] - 1),
                   "first": torch.zeros_like(mask.sum(1))}[last]
            v = states[torch.arange(states.shape[0]), idx]
        elif how == "mean":
            v = {"real": (states * m).sum(1) / m.sum(1), "all": states.mean(1),
                 "divide_T": (states * m).sum(1) / states.shape[1]}[mean]
        else:
            v = states.amax(1) if max_ == "all" else (states * m).amax(1) if max_ == "zeroed" else \
                states.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(1)
        return v @ W.T + (b if bias else 0)
    return fn


def _pool_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case(f"how='{how}', batch 3, lengths (4, 1, 6)", _pool_case(3, 6, 5, 2, how, lengths=[4, 1, 6]))
                for how in ("last", "mean", "max")]
    return [Case("how='last', a batch of one without padding", _pool_case(1, 5, 4, 3, "last", lengths=[5])),
            Case("how='mean', batch 8, random lengths", _pool_case(8, 9, 6, 4, "mean")),
            Case("how='max', all states negative (a zero at padding would win the max)",
                 _pool_case(4, 7, 5, 2, "max", lengths=[2, 7, 3, 1], negative=True)),
            Case("how='last', batch 8, random lengths", _pool_case(8, 10, 3, 5, "last")),
            Case("how='max', batch 6, random lengths", _pool_case(6, 8, 7, 3, "max")),
            Case("how='mean', sequences of length 1", _pool_case(3, 4, 4, 2, "mean", lengths=[1, 1, 4])),
            Case("how='last', every sequence fills the batch", _pool_case(3, 5, 4, 2, "last", lengths=[5, 5, 5])),
            Case("how='max', float64 inputs", _f64(_pool_case(3, 6, 4, 2, "max", lengths=[6, 2, 4], negative=True))),
            Case("how='mean', float64 inputs", _f64(_pool_case(3, 6, 4, 2, "mean", lengths=[3, 6, 1])))]


CLASSIFY = Check(
    task="classify",
    what="logits = W pool(states) + b, pooling only real positions (last / mean / max)",
    reference=_classify_ref,
    compare=_tensor(),
    cases=_pool_cases(hidden=False),
    hidden_cases=_pool_cases(hidden=True),
    keep_dtype=True,
    mutants=[
        Mutant(_classify_with(last="end"), "how='last' took the state at the final position, which is padding for "
                                           "shorter sequences: take each sequence's last real position"),
        Mutant(_classify_with(last="length"), "how='last' took position lengths[i], one past the last real "
                                              "token (padding): the last real token is at lengths[i] - 1"),
        Mutant(_classify_with(last="first"), "how='last' took the first position"),
        Mutant(_classify_with(mean="all"), "how='mean' averaged over padding too: average only real positions"),
        Mutant(_classify_with(mean="divide_T"), "how='mean' summed the real positions but divided by the padded "
                                                "length T; divide by each sequence's own length"),
        Mutant(_classify_with(max_="all"), "how='max' let padded positions win the maximum: exclude them "
                                           "(fill them with -inf first)"),
        Mutant(_classify_with(max_="zeroed"), "how='max' zeroed padded positions before the maximum: a 0 beats "
                                              "negative states; fill padding with -inf instead"),
        Mutant(_classify_with(bias=False), "left out the classifier's bias b"),
        # one mistake behind all three: the mask was never used
        Mutant(_classify_with(last="end", mean="all", max_="all"),
               "ignored the mask in every pooling: how='last' took the final (padded) position, how='mean' averaged "
               "over padding too and how='max' let padding win; pool only each sequence's real positions"),
    ],
    forbidden=(lmbook_rnn.pool,),
    forbidden_attrs=("pool",),
)


# ----------------------------------------------------------------------------- Task 6: sampling

def _nucleus_margin_ok(logits: torch.Tensor, temperature: float, top_k, top_p) -> bool:
    """True unless a row's cumulative probability lands within 1e-3 of top_p (float32 could then disagree)."""
    if top_p is None or top_p >= 1:
        return True
    for row in logits.double() / temperature:
        keep = row.sort(descending=True).values
        if top_k:
            keep = keep[keep >= keep[min(top_k, len(keep)) - 1]]  # ties at the k-th place are kept
        cum = torch.softmax(keep, 0).cumsum(0)
        if (cum - top_p).abs().min() < 1e-3:
            return False
    return True


def _logits_case(B, V, temperature=1.0, top_k=None, top_p=None, scale=2.0, n=None, ints=False, spread=0.0,
                 dtype=torch.float32):
    """Random logits; ``ints``: small integers (many ties); ``spread``: rows shifted by up to ±spread."""
    def make(g, device):
        while True:  # draw again if a top-p boundary is a rounding error away from top_p
            logits = torch.randn(B, V, generator=g) * scale
            if ints:
                logits = logits.round()
            logits = logits + torch.linspace(-spread, spread, B).unsqueeze(1)
            logits = logits.to(dtype)
            if _nucleus_margin_ok(logits, temperature, top_k, top_p):
                break
        args = (logits.to(device),) + ((n,) if n is not None else ())
        return (args, {"temperature": temperature, "top_k": top_k, "top_p": top_p})
    return make


def _fixed_logits(rows, n=None, **kwargs):
    """Given logits (ties on purpose), on the device."""
    def make(g, device):
        args = (torch.tensor(rows, dtype=torch.float32, device=device),) + ((n,) if n is not None else ())
        return (args, kwargs)
    return make


def _filter_ref(logits, temperature=1.0, top_k=None, top_p=None):
    """Row by row, in plain Python: sort, keep the k best, then the shortest prefix reaching top_p, renormalised
    over the top-k tokens. Ties are never split: a token tied with the last kept one is kept too."""
    probs = torch.zeros_like(logits, dtype=torch.float64)
    for b, row in enumerate(logits.double() / temperature):
        order = sorted(range(len(row)), key=lambda i: -float(row[i]))
        keep = order
        if top_k is not None:
            kth = float(row[order[min(top_k, len(order)) - 1]])
            keep = [i for i in order if float(row[i]) >= kth]
        if top_p is not None and top_p < 1:
            p = torch.softmax(row[keep], 0)  # the nucleus is taken from the distribution over the top-k tokens
            total, n = 0.0, 0
            while total < top_p and n < len(keep):
                total += float(p[n])
                n += 1
            keep = [i for i, pi in zip(keep, p, strict=True) if pi >= p[n - 1]]
        probs[b, keep] = torch.softmax(row[keep], 0)
    return probs


def _filter_compare(out, ref) -> str | None:
    if isinstance(out, torch.Tensor) and out.shape == ref.shape:
        o = out.detach().cpu().double()
        extra = ((o > 1e-6) & (ref == 0)).nonzero()
        if len(extra):
            b, v = (int(i) for i in extra[0])
            return (f"token {v} of row {b} has probability {float(o[b, v]):.4g}, but top-k/top-p removes it "
                    f"(it should be 0); {len(extra)} such token(s) in all")
        missing = ((o <= 1e-9) & (ref > 1e-6)).nonzero()
        if len(missing):
            b, v = (int(i) for i in missing[0])
            return (f"token {v} of row {b} was removed, but it belongs to the kept set "
                    f"(probability {float(ref[b, v]):.4g})")
    return describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-6, dim=None)


def _filter_with(temp_after=False, multiply=False, strict_p=False, k_extra=0, renorm=True, p_before_k=False,
                 exact_k=False):
    """The reference with one mistake; ties are kept together as in the reference unless ``exact_k``."""
    def fn(logits, temperature=1.0, top_k=None, top_p=None):
        z = logits.double() * temperature if multiply else logits.double() / (1.0 if temp_after else temperature)
        probs = torch.zeros_like(z)
        for b, row in enumerate(z):
            order = row.argsort(descending=True, stable=True).tolist()
            keep = order
            if top_k is not None:
                k = max(1, min(top_k + k_extra, len(order)))
                keep = order[:k] if exact_k else [i for i in order if row[i] >= row[order[k - 1]]]
            if top_p is not None and top_p < 1:
                # p_before_k: the nucleus is read off the distribution before top-k removed anything
                p = torch.softmax(row, 0)[keep] if p_before_k else torch.softmax(row[keep], 0)
                n = int((p.cumsum(0) < top_p).sum()) + (0 if strict_p else 1)
                n = max(1, min(n, len(keep)))
                keep = [i for i, pi in zip(keep, p, strict=True) if pi >= p[n - 1]]
            r = row / temperature if temp_after else row
            probs[b, keep] = torch.softmax(r[keep], 0) if renorm else torch.softmax(r, 0)[keep]
        return probs
    return fn


def _exp_filter(global_max=False):
    """The right kept set, but the softmax by hand: exp(z) overflows (or, shifted by the batch's maximum,
    underflows) when a row's logits are in the hundreds."""
    def fn(logits, temperature=1.0, top_k=None, top_p=None):
        z = logits / temperature
        e = torch.exp(z - z.max() if global_max else z) * (_filter_ref(logits, temperature, top_k, top_p) > 0)
        return e / e.sum(-1, keepdim=True)
    return fn


def _sample_ref(logits, n, temperature=1.0, top_k=None, top_p=None):
    return _filter_ref(logits, temperature, top_k, top_p), n


def _sample_compare(out, ref) -> str | None:
    """The draws follow ``probs``: never a removed token, and every token's count within 5.5 standard errors."""
    probs, n = ref
    B, V = probs.shape
    if not isinstance(out, torch.Tensor):
        return f"returned {describe_value(out)}, expected a (B, n) tensor of token ids"
    if tuple(out.shape) != (B, n):
        return f"returned shape {tuple(out.shape)}, expected ({B}, {n}): n draws per row"
    ids = out.detach().cpu()
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:  # the statement asks for integer ids
        return f"returned a {ids.dtype} tensor; return integer token ids (torch.long, as torch.multinomial gives)"
    ids = ids.long()
    if ids.min() < 0 or ids.max() >= V:
        return f"returned token ids outside 0..{V - 1}"
    counts = torch.stack([torch.bincount(row, minlength=V) for row in ids]).double()
    removed = (counts > 0) & (probs == 0)
    if removed.any():
        b, v = (int(i) for i in removed.nonzero()[0])
        return (f"drew token {v} in row {b} {int(counts[b, v])} time(s), but top-k/top-p removes it "
                "(its probability is 0)")
    sd = (n * probs * (1 - probs)).sqrt()
    z = torch.where(sd > 0, (counts - n * probs) / sd.clamp(min=1e-12), (counts - n * probs).abs() * 1e9)
    b, v = (int(i) for i in torch.unravel_index(z.abs().argmax(), z.shape))
    if z[b, v].abs() > 5.5:
        return (f"row {b}: token {v} was drawn {int(counts[b, v])} times in {n}; its probability "
                f"{float(probs[b, v]):.3f} gives about {n * float(probs[b, v]):.0f} ± {float(sd[b, v]):.0f}: "
                "the draws do not follow softmax(filtered logits / temperature)")
    return None


def _sample_mutant(dist):
    def fn(logits, n, temperature=1.0, top_k=None, top_p=None):
        return dist(logits, temperature, top_k, top_p), n
    return fn


def _argmax_dist(logits, temperature, top_k, top_p):
    return F.one_hot(logits.argmax(-1), logits.shape[-1]).double()


def _uniform_dist(logits, temperature, top_k, top_p):
    kept = (_filter_ref(logits, temperature, top_k, top_p) > 0).double()
    return kept / kept.sum(-1, keepdim=True)


FILTER_PROBS = Check(
    task="filter_probs",
    what="softmax(z / T), then top-k, then top-p, renormalised",
    reference=_filter_ref,
    compare=_filter_compare,
    cases=[Case("temperature 0.5", _logits_case(3, 8, temperature=0.5)),
           Case("top_k=3", _logits_case(3, 8, top_k=3)),
           Case("top_p=0.8", _logits_case(3, 8, top_p=0.8)),
           Case("temperature 2, top_k=5, top_p=0.7", _logits_case(2, 10, temperature=2.0, top_k=5, top_p=0.7)),
           Case("top_k=2 with a tie at the 2nd place: both tied tokens are kept",
                _fixed_logits([[2.0, 1.0, 1.0, 0.0]], top_k=2))],
    hidden_cases=[Case("top_k=1 (greedy)", _logits_case(4, 9, top_k=1)),
                  Case("ties at the k-th place and at the top-p boundary",
                       _fixed_logits([[2.0, 1.0, 1.0, 0.0], [0.0, 3.0, 3.0, 3.0], [1.0, 1.0, 1.0, 1.0],
                                      [5.0, 0.0, 5.0, 0.0]], top_k=2, top_p=0.3)),
                  # a seeded search: many small rows of small integers give ties and every kind of boundary
                  Case("300 rows of small integer logits (many ties), top_k=3, top_p=0.6",
                       _logits_case(300, 6, top_k=3, top_p=0.6, scale=1.5, ints=True)),
                  Case("300 random rows, top_k=2, top_p=0.5 (the nucleus is taken over the top-k tokens)",
                       _logits_case(300, 7, top_k=2, top_p=0.5)),
                  Case("rows on very different scales (logits from -100 to +100)",
                       _logits_case(4, 6, top_p=0.9, spread=100.0)),
                  Case("float64 logits, temperature 0.8, top_k=4", _logits_case(3, 8, temperature=0.8, top_k=4,
                                                                                dtype=torch.float64)),
                  Case("top_p=0.01 (only the most likely token)", _logits_case(3, 7, top_p=0.01)),
                  Case("top_k larger than the vocabulary", _logits_case(2, 5, top_k=20)),
                  Case("top_p=1.0 keeps everything", _logits_case(2, 6, temperature=0.7, top_p=1.0)),
                  Case("temperature 0.1 (very sharp)", _logits_case(3, 6, temperature=0.1, scale=0.5)),
                  Case("temperature 3, top_p=0.9: the nucleus is taken after the temperature",
                       _logits_case(3, 12, temperature=3.0, top_p=0.9)),
                  Case("a batch of one, V=500, top_k=50, top_p=0.95",
                       _logits_case(1, 500, top_k=50, top_p=0.95, scale=3.0))],
    mutants=[
        Mutant(_filter_with(temp_after=True), "applied the temperature after top-p: divide the logits by T first, "
                                              "then pick the nucleus from those probabilities"),
        Mutant(_filter_with(multiply=True), "multiplied the logits by T; divide by it (T < 1 sharpens)"),
        Mutant(_filter_with(strict_p=True), "dropped the token that makes the total reach top_p: keep the smallest "
                                            "set whose probability is at least top_p"),
        Mutant(_filter_with(k_extra=1), "kept top_k + 1 tokens"),
        Mutant(_filter_with(k_extra=-1), "kept top_k - 1 tokens"),
        Mutant(_filter_with(renorm=False), "did not renormalise: after removing tokens, divide the kept "
                                           "probabilities by their sum (softmax over the kept logits)"),
        Mutant(_filter_with(p_before_k=True), "took the nucleus from the probabilities before top-k: renormalise "
                                              "over the top-k tokens first, then add up those probabilities"),
        Mutant(_filter_with(renorm=False, p_before_k=True),
               "never renormalised after top-k: the nucleus and the result used the full softmax's probabilities; "
               "rescale the kept ones to sum to 1 after each step"),
        Mutant(_exp_filter(), "computed the softmax as exp(z) / sum(exp(z)): exp overflows for logits in the "
                              "hundreds; subtract each row's maximum first (or use torch.softmax)"),
        Mutant(_exp_filter(global_max=True), "subtracted one maximum for the whole batch before exp: rows far below "
                                             "it underflow to 0 / 0; subtract each row's own maximum"),
        Mutant(_filter_with(exact_k=True), "kept exactly top_k tokens when several tie at the k-th place: every "
                                           "token tied with the k-th largest logit is kept"),
    ],
    keep_dtype=True,
    forbidden=(lmbook_decoding.filter_logits, lmbook_decoding.sample_next),
    forbidden_attrs=("filter_logits", "sample_next"),
)

SAMPLE = Check(
    task="sample",
    what="n draws per row from the filtered distribution",
    reference=_sample_ref,
    compare=_sample_compare,
    cases=[Case("4000 draws at temperature 1.5", _logits_case(2, 6, temperature=1.5, n=4000)),
           Case("4000 draws with top_k=3, top_p=0.9", _logits_case(2, 8, top_k=3, top_p=0.9, n=4000))],
    hidden_cases=[Case("20000 draws, temperature 0.7, top_p=0.8", _logits_case(3, 10, temperature=0.7, top_p=0.8,
                                                                                n=20_000)),
                  Case("5000 draws with top_k=1", _logits_case(2, 5, top_k=1, n=5000)),
                  Case("10000 draws, V=50, top_k=10", _logits_case(2, 50, top_k=10, n=10_000)),
                  Case("6000 draws, top_k=2 with ties at the 2nd place",
                       _fixed_logits([[2.0, 1.0, 1.0, 0.0], [0.0, 3.0, 3.0, 3.0]], n=6000, top_k=2)),
                  Case("8000 draws, rows on very different scales, temperature 2",
                       _logits_case(3, 5, temperature=2.0, spread=90.0, n=8000))],
    mutants=[
        Mutant(_sample_mutant(_argmax_dist), "always took the most likely token (greedy decoding), not a random draw"),
        Mutant(_sample_mutant(lambda lg, t, k, p: _filter_ref(lg, 1.0, k, p)), "ignored the temperature"),
        Mutant(_sample_mutant(lambda lg, t, k, p: _filter_ref(lg)),
               "drew from softmax(logits), ignoring temperature, top_k and top_p"),
        Mutant(_sample_mutant(lambda lg, t, k, p: _filter_ref(lg, t, k)), "ignored top_p: after top-k, keep only "
                                                                           "the nucleus"),
        Mutant(_sample_mutant(_uniform_dist), "drew uniformly among the kept tokens; draw each with its "
                                              "probability (torch.multinomial)"),
    ],
    forbidden=(lmbook_decoding.filter_logits, lmbook_decoding.sample_next),
    forbidden_attrs=("filter_logits", "sample_next"),
)

CHECKS = [RNN_CELL, RNN_FORWARD, LSTM_CELL, GRU_CELL, CLIP_GRAD_NORM, CLASSIFY, FILTER_PROBS, SAMPLE]

from .questions.ch02 import QUESTIONS  # noqa: E402 (the thinking questions, after the code tasks)

check = Registry(CHECKS + QUESTIONS)
