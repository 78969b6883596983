"""Inputs shared by exercise 1's tasks: logits of chosen scales, and the scalar-tensor comparison."""

from __future__ import annotations

import torch

from ...grading.compare import OVERFLOW_HINT, describe_scalar_mismatch
from ..common import randn as _randn


def logits_case(shape, scale=1.0, offset=0.0, dim=None, dtype=torch.float32, row_offsets=None, tie_row=False):
    def make(g, device):
        x = _randn(shape, g, device, scale, offset).to(dtype)
        if row_offsets is not None:  # rows far apart: one maximum for the whole tensor underflows the others
            x = x + torch.tensor(row_offsets, dtype=dtype, device=device).reshape(-1, *[1] * (len(shape) - 1))
        if tie_row:  # a row of equal logits: every class gets log(1/V)
            x[0] = 3.0
        return ((x,), {} if dim is None else {"dim": dim})
    return make


def scalar_tensor(rtol: float, atol: float):
    """The statement asks for a tensor holding one value: a Python float is not one. (Its shape is not checked:
    a 0-dimensional tensor crosses the sandbox's wall as shape (1,) today.)"""
    return lambda out, ref: describe_scalar_mismatch(out, ref, rtol=rtol, atol=atol, accept=("tensor",),
                                                       nan_hint=OVERFLOW_HINT)
