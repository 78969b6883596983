"""Inputs and comparisons shared by exercise 4's tasks."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ...grading.compare import describe_tensor_mismatch, describe_value, index_of, to_reference
from ..common import randn as _randn
from ..common import real_mask

COURSE = ("lmbook.attention", "lmbook.seq2seq")
# `lmbook.attention.attend` reached through the package: flag the attribute on the way
COURSE_ATTRS = ("attention", "seq2seq")
TORCH_ATTENTION = (F.scaled_dot_product_attention, nn.MultiheadAttention, F.multi_head_attention_forward)
TORCH_ATTENTION_ATTRS = ("scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward")
TORCH_BILINEAR = (F.bilinear, nn.Bilinear, torch.bilinear)


def _pos(flat_index: int, shape) -> tuple[int, ...]:
    return index_of(flat_index, shape)


def scores_compare(out, ref) -> str | None:
    """(B, T) scores: exactly -inf where ``ref`` is (padding), close to ``ref`` elsewhere."""
    if not isinstance(out, torch.Tensor):
        return f"returned {describe_value(out)}, expected a (B, T) torch.Tensor of scores"
    if tuple(out.shape) != tuple(ref.shape):
        return f"returned shape {tuple(out.shape)}, expected {tuple(ref.shape)}: one score per (sequence, position)"
    out = to_reference(out)
    if not out.is_floating_point():
        return f"returned dtype {out.dtype}, expected floating point scores"
    pad = torch.isneginf(ref)
    wrong_pad = pad & ~torch.isneginf(out)
    if wrong_pad.any():
        b, j = _pos(int(wrong_pad.flatten().nonzero()[0]), ref.shape)
        got = float(out[b, j])
        if math.isfinite(got) and got < -1e3:
            return (f"position {j} of sequence {b} is padding and you gave it {got:.4g}: return exactly -inf "
                    "(float('-inf')) at padded positions, not a large negative number")
        return (f"position {j} of sequence {b} is padding (mask False): its score must be -inf, "
                f"you returned {got:.6g}; {int(wrong_pad.sum())} padded position(s) in all")
    wrong_real = ~pad & ~torch.isfinite(out)
    if wrong_real.any():
        b, j = _pos(int(wrong_real.flatten().nonzero()[0]), ref.shape)
        return (f"position {j} of sequence {b} is a real position (mask True), but you returned {float(out[b, j])} "
                f"there (expected {float(ref[b, j]):.6g}); {int(wrong_real.sum())} such position(s) in all")
    # float32 sums of large products: allow an error relative to the largest score
    scale = float(ref[~pad].abs().max()) if (~pad).any() else 1.0
    problem = describe_tensor_mismatch(out.masked_fill(pad, 0.0), ref.masked_fill(pad, 0.0), rtol=1e-4,
                                       atol=1e-5 * max(1.0, scale), dim=None)
    return None if problem is None else f"at real positions, {problem}"


def real_mask_of(B: int, T: int, g: torch.Generator, lengths=None, left: bool = False) -> torch.Tensor:
    """(B, T) bool, True at real positions; the longest sequence fills the batch. ``left``: padding first."""
    mask = real_mask(B, T, g, lengths)
    return mask.flip(1) if left else mask


def encoder_states(B: int, T: int, d_h: int, mask: torch.Tensor, g: torch.Generator, device, scale: float = 1.0):
    """Encoder states; padded positions hold large made-up states: they must not matter."""
    H = _randn((B, T, d_h), g, device, scale)
    garbage = _randn((B, T, d_h), g, device, 5.0).abs() + 2.0
    return torch.where(mask.to(device).unsqueeze(-1), H, garbage)


def in_dtype(dtype, make):
    """``make``'s inputs with every floating tensor in ``dtype`` (the statement: the result keeps the inputs' dtype)."""
    def made(g, device):
        args, kwargs = make(g, device)
        return tuple(a.to(dtype) if a.is_floating_point() else a for a in args), kwargs
    return made
