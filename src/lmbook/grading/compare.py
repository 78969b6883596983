"""Comparisons a task's check uses: each returns None when the answer is right, and otherwise says what
differs in the student's terms: where (which index, which row), by how much, and in what pattern (a
constant shift, a factor, a flipped sign, a transposition, rows of the batch), so the student can tell
what to look at before any named mistake is guessed."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch


def to_reference(x):
    """Move a result to CPU float64 so references and answers are compared on equal terms."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        return x.double() if x.is_floating_point() else x
    if isinstance(x, tuple | list):
        return type(x)(to_reference(v) for v in x)
    return x


def describe_value(x) -> str:
    """What a student returned, in a few words: 'a tensor of shape (2, 3)', 'a list'."""
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)}"
    return f"a {type(x).__name__}"


def _shape_hint(got: tuple[int, ...], want: tuple[int, ...]) -> str:
    if sorted(got) == sorted(want):
        return " (the same sizes in another order: are dimensions transposed or permuted?)"
    if [n for n in got if n != 1] == [n for n in want if n != 1]:
        return " (a dimension of size 1 too many or too few: squeeze, unsqueeze or keepdim)"
    if math.prod(got) == math.prod(want):
        return " (the same number of values in another shape: a reshape in the wrong order?)"
    return ""


def _index(flat: int, shape: torch.Size) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape)) if len(shape) else ()


def _pattern(out: torch.Tensor, ref: torch.Tensor, close, dim: int | None) -> str | None:
    """A simple relation between a wrong answer and the right one, if there is one."""
    diff = out - ref
    if ref.dim() > 0 and dim is not None and ref.shape[dim] > 1:
        spread = diff.amax(dim=dim) - diff.amin(dim=dim)
        if close(spread, torch.zeros_like(spread)).all():
            return ("off by a constant along the last dimension: every entry is shifted by the same amount "
                    f"(e.g. {float(diff.flatten()[0]):.4g}); a normalising term is missing or wrong")
    scale = float((ref * ref).sum())
    if scale > 0 and ref.numel() > 1:
        r = float((out * ref).sum()) / scale
        if close(out, r * ref).all() and abs(r - 1) > 1e-3:
            if abs(r + 1) < 1e-3:
                return "has the opposite sign of the expected values everywhere (a minus sign is missing or extra)"
            return (f"every value is {r:.4g} times the expected one: a scale factor is missing or extra "
                    "(a division by a size, a square root, a sum where a mean is asked, or the reverse)")
    if ref.dim() >= 2 and ref.shape[-1] == ref.shape[-2] > 1 and close(out, ref.transpose(-1, -2)).all():
        return "is the transpose of the expected matrix (rows and columns swapped)"
    if ref.dim() >= 2 and ref.shape[0] > 1:
        bad_rows = [i for i in range(ref.shape[0]) if not close(out[i], ref[i]).all()]
        if len(bad_rows) < ref.shape[0]:
            rows = ", ".join(map(str, bad_rows[:8])) + (", ..." if len(bad_rows) > 8 else "")
            return f"only some rows of the batch are wrong: row(s) {rows} of {ref.shape[0]} (the others are right)"
    return None


def describe_tensor_mismatch(out, ref: torch.Tensor, *, rtol: float = 1e-4, atol: float = 1e-5,
                             dim: int | None = -1) -> str | None:
    """None if ``out`` matches ``ref``; otherwise the first thing a student should fix."""
    if not isinstance(out, torch.Tensor):
        return f"returned {describe_value(out)}, expected a torch.Tensor"
    if tuple(out.shape) != tuple(ref.shape):
        return f"returned shape {tuple(out.shape)}, expected {tuple(ref.shape)}" + _shape_hint(
            tuple(out.shape), tuple(ref.shape))
    out = to_reference(out)
    if not out.is_floating_point():
        return f"returned dtype {out.dtype}, expected floating point values"
    bad = ~torch.isfinite(out) & torch.isfinite(ref)
    if bad.any():
        first = _index(int(bad.flatten().nonzero()[0]), ref.shape)
        return (f"returned {int(bad.sum())} NaN/inf value(s) where the answer is finite, the first at index {first} "
                "(exp of a large number overflows to inf in float32, of a very negative one underflows to 0)")

    def close(a, b):
        return torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)

    wrong = ~close(out, ref)
    if not wrong.any():
        return None
    pattern = _pattern(out, ref, close, dim)
    if pattern:
        return pattern
    first = int(wrong.flatten().nonzero()[0])
    worst = float((out - ref).abs().nan_to_num(nan=math.inf).max())
    return (f"values differ at {int(wrong.sum())} of {ref.numel()} positions; the first at index "
            f"{_index(first, ref.shape)}: you returned {float(out.flatten()[first]):.6g}, expected "
            f"{float(ref.flatten()[first]):.6g} (largest difference {worst:.3g})")


def compare_parts(*names: str, rtol: float = 1e-4, atol: float = 1e-5, order: Sequence[int] | None = None):
    """A comparison for a tuple of tensors, naming the first part that differs.

    ``order``: the indices in the order to look at them (the order they are computed in, so the part
    named is the first stage that went wrong, not a later one that inherits the error).
    """
    def compare(out, ref) -> str | None:
        if not isinstance(out, tuple | list) or len(out) != len(names):
            return f"returned {describe_value(out)}, expected a tuple ({', '.join(names)})"
        for i in order or range(len(names)):
            problem = describe_tensor_mismatch(out[i], ref[i], rtol=rtol, atol=atol, dim=None)
            if problem:
                return f"{names[i]}: {problem}"
        return None
    return compare


def describe_scalar_mismatch(out, ref, *, rtol: float = 1e-4, atol: float = 1e-6,
                             accept: Sequence[str] = ("tensor", "number")) -> str | None:
    """Compare a scalar answer. ``accept``: the forms the statement allows, "tensor" (a tensor holding one
    value) and "number" (a real number: a Python or NumPy float or int, not a bool)."""
    forms = " or ".join({"tensor": "a one-element tensor", "number": "a number (float)"}[a] for a in accept)
    if isinstance(out, torch.Tensor) and "tensor" in accept:
        if out.numel() != 1:
            return f"returned a tensor of shape {tuple(out.shape)}, expected a single number (a scalar)"
        out = out.detach().cpu().item()
    elif isinstance(out, numbers.Real) and not isinstance(out, bool) and "number" in accept:
        out = float(out)
    else:
        return f"returned {describe_value(out)}, expected {forms}"
    ref = float(ref)
    if not math.isfinite(out) and math.isfinite(ref):
        return f"returned {out}, expected a finite number near {ref:.6g} (an overflow or log(0))"
    if math.isclose(out, ref, rel_tol=rtol, abs_tol=atol):
        return None
    ratio = f"; {out / ref:.4g} times the expected value" if ref != 0 and out != 0 else ""
    return f"returned {out:.6g}, expected {ref:.6g}{ratio}"
