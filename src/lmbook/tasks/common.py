"""Helpers the exercises' task modules share: inputs drawn the same on every device, weights loaded
into torch's own modules (the references), and the names of torch's ready-made layers."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..grading.compare import describe_tensor_mismatch, describe_value, to_reference


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


def call_with_weights(module: torch.nn.Module, weights: dict[str, torch.Tensor], *args, **kwargs):
    """``module(*args, **kwargs)`` with the given tensors as its parameters (dotted names reach submodules), in
    their dtype: unlike :func:`load_weights`'s copies, they stay in autograd's graph, so a gradient reaches them."""
    module = module.to(dtype=next(iter(weights.values())).dtype)
    return torch.func.functional_call(module, weights, args, kwargs)


# torch's recurrent layers and cells, by every name a notebook can reach them (a task that asks for a cell
# forbids them all)
TORCH_RNN_NAMES = ("RNN", "RNNCell", "LSTM", "LSTMCell", "GRU", "GRUCell", "rnn_tanh", "rnn_tanh_cell",
                   "rnn_relu_cell", "lstm_cell", "gru_cell", "_VF")

NEG_INF = float("-inf")
NAN = float("nan")

# The course's attention answers (exercises 5 to 9 refuse them) and torch's ready-made attention, by object and by
# every name a notebook can reach them through.
COURSE = ("lmbook.self_attention", "lmbook.multihead", "lmbook.causal_lm", "lmbook.attention")
COURSE_ATTRS = ("self_attention", "multihead", "causal_lm", "attention")
TORCH_ATTENTION = (F.scaled_dot_product_attention, nn.MultiheadAttention, F.multi_head_attention_forward,
                   nn.Transformer, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, nn.TransformerEncoder,
                   nn.TransformerDecoder)
TORCH_ATTENTION_ATTRS = ("scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward",
                         "Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder",
                         "TransformerDecoder")


def lengths_of(B: int, n: int, g: torch.Generator, lengths: Sequence[int] | None = None) -> torch.Tensor:
    """(B,) sequence lengths: ``lengths`` as given, or drawn from 1 … n with one sequence (drawn too) filling the
    batch, so that a batch always holds a sequence of full length."""
    if lengths is not None:
        return torch.tensor(lengths)
    lens = torch.randint(1, n + 1, (B,), generator=g)
    lens[int(torch.randint(0, B, (1,), generator=g))] = n
    return lens


def real_mask(B: int, n: int, g: torch.Generator, lengths: Sequence[int] | None = None) -> torch.Tensor:
    """(B, n) bool, True at the real tokens of right-padded sequences (lengths as :func:`lengths_of` gives)."""
    return torch.arange(n).unsqueeze(0) < lengths_of(B, n, g, lengths).unsqueeze(1)


def padding_mask(B: int, n: int, g: torch.Generator, lengths: Sequence[int] | None = None) -> torch.Tensor:
    """(B, n) bool, True at padding (torch's convention): the complement of :func:`real_mask`."""
    return ~real_mask(B, n, g, lengths)


def made_up_at_padding(x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    """``x`` (B, n, d) with large made-up vectors where ``pad`` (B, n) is True: an answer that attends to padding
    gets a very different result."""
    return torch.where(pad.to(x.device).unsqueeze(-1), 3.0 * x.abs() + 2.0, x)


def fit_lengths(p: dict, batch: str = "B", size: str = "n") -> dict:
    """A smaller version's ``lengths`` (see :func:`~lmbook.grading.reproduce.sized`): the first ``p[batch]`` of
    them, scaled to ``p[size]`` positions, at least 1 each, the longest filling the batch."""
    if p.get("lengths") is not None:
        old, n = list(p["lengths"]), p[size]
        lengths = [max(1, min(n, round(length * n / max(old)))) for length in old][: p[batch]]
        lengths[lengths.index(max(lengths))] = n
        p["lengths"] = lengths
    return p


def in_dtype(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` (drawn in float32) in ``dtype``; in float64 with digits below float32's precision added (a relative
    change of about 1e-8, deterministic), so that an answer that goes through float32 cannot give the float64
    answer back."""
    if dtype != torch.float64 or not x.is_floating_point():
        return x.to(dtype)
    x = x.double()
    return x + x * 2.0 ** -25 * torch.cos(x * 7919.0)


def sliced(x: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """``x``'s values, held as the first positions of a tensor one longer along ``dim`` (as ``logits[:, :-1]`` is):
    not contiguous in memory, so ``.view`` across ``dim`` refuses it where ``.reshape`` copies."""
    longer = list(x.shape)
    longer[dim] += 1
    whole = torch.zeros(longer, dtype=x.dtype, device=x.device)
    whole.narrow(dim, 0, x.shape[dim]).copy_(x)
    return whole.narrow(dim, 0, x.shape[dim])


def stored_transposed(x: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
    """``x``'s values, stored with ``dim0`` and ``dim1`` swapped in memory (as ``split_heads`` returns its heads)."""
    return x.transpose(dim0, dim1).contiguous().transpose(dim0, dim1)


def as_int(out) -> int | None:
    """A whole-number answer as a Python int: an int, a whole float, a one-element integer tensor (never a bool);
    None for anything else (the questions that ask for a count compare it with this)."""
    if isinstance(out, torch.Tensor) and out.numel() == 1 and not out.is_floating_point():
        out = out.item()
    if isinstance(out, float) and out.is_integer():
        out = int(out)
    if isinstance(out, bool) or not isinstance(out, numbers.Integral):
        return None
    return int(out)


def compare_whole_number(unit: str):
    """A compare for a question whose answer is a count of ``unit`` (parameters, bytes, positions): the answer
    read with :func:`as_int`, and when it is wrong, by how many and by what factor (a forgotten factor of 2
    shows as "2 times the expected")."""
    def compare(out, ref) -> str | None:
        value = as_int(out)
        if value is None:
            return f"returned {describe_value(out)}, expected a whole number of {unit}"
        want = int(ref)
        if value == want:
            return None
        how = f"{abs(value - want):,} too {'few' if value < want else 'many'}"
        if value and want and (value % want == 0 or want % value == 0):  # a factor forgotten or doubled
            how += f"; {value / want:.4g} times the expected"
        return f"returned {value:,} {unit}, expected {want:,} ({how})"
    return compare


def compare_whole_numbers(names: tuple[str, ...], form: str, unit: str):
    """A compare for an answer that is a tuple of counts of ``unit``, one per name (``form`` spells the tuple
    as the task asks for it, e.g. "(with_cache, without_cache)"): each count as :func:`compare_whole_number`
    compares it, the first wrong one named."""
    one = compare_whole_number(unit)

    def compare(out, ref) -> str | None:
        if not isinstance(out, tuple | list) or len(out) != len(names):
            return f"returned {describe_value(out)}, expected a tuple {form} of {len(names)} whole numbers"
        for name, o, r in zip(names, out, ref, strict=True):
            message = one(o, r)
            if message is not None:
                return f"{name}: {message}"
        return None
    return compare


def compare_step_and_cache(out, ref, *, kv_heads: bool = False) -> str | None:
    """What differs between a cached attention step's ``(y_new, cache)`` and the reference's, the first thing
    a student should fix first: the container, then y_new, then each of cache['k'] and cache['v'] (its number
    of positions, with ``kv_heads`` its number of key/value heads, then its values).

    A reference cache of None stands for a mistake that returns none (its student must return none too).
    """
    if isinstance(out, list) and len(out) == 2:
        return "returned a list [y_new, cache], expected a tuple (y_new, cache): return y_new, cache"
    if not isinstance(out, tuple) or len(out) != 2:
        return f"returned {describe_value(out)}, expected a tuple (y_new, cache)"
    y, cache = out
    problem = describe_tensor_mismatch(y, ref[0], rtol=1e-4, atol=1e-4, dim=None)
    if problem:
        return f"y_new: {problem}"
    if ref[1] is None:
        return None if cache is None else f"cache: returned {describe_value(cache)}, expected None"
    if not isinstance(cache, dict) or not {"k", "v"} <= set(cache):
        return f"cache: returned {describe_value(cache)}, expected a dict {{'k': K, 'v': V}}"
    for name in ("k", "v"):
        want = to_reference(ref[1][name])  # inside a dict: to_reference does not reach it
        got = cache[name]
        if isinstance(got, torch.Tensor) and got.dim() == 4:
            if kv_heads and got.shape[1] != want.shape[1] and got.shape[0] == want.shape[0]:
                return (f"cache['{name}']: holds {got.shape[1]} heads, expected n_kv_head = {want.shape[1]}: the "
                        "cache keeps each key/value head once, before it is repeated for its group (that is what "
                        "makes it smaller)")
            if got.shape[2] != want.shape[2] and tuple(got.shape[:2]) == tuple(want.shape[:2]):
                return (f"cache['{name}']: holds {got.shape[2]} positions, expected {want.shape[2]} (the t cached "
                        "ones and the n_new new ones)")
        problem = describe_tensor_mismatch(got, want, rtol=1e-4, atol=1e-4, dim=None)
        if problem:
            return f"cache['{name}']: {problem}"
    return None
