"""Comparisons a task's check uses: each returns None when the answer is right, and otherwise says what
differs in the student's terms: where (which index, which rows and columns), by how much, and in what pattern.

The most specific diagnosis comes first (a transposition, the right numbers in another order, a constant
shift, a factor, a flipped sign), then what a mask or an overflow leaves (NaN, inf, a finite value where the
answer is -inf), then the plain difference: a message never blames a mask or an overflow for what a transpose
explains. Equal infinities are equal (``-inf`` where ``-inf`` is expected is right, and no difference of
``inf - inf`` is ever printed).

A float64 answer is held to float64's precision when the case's inputs are float64 (:func:`float64_inputs`):
an answer computed in float32 and returned as float64 is told so.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import torch

# float64 answers are compared at this relative precision (float32 rounding is about 6e-8, float64's 1e-16)
FLOAT64_RTOL = 1e-9
_FLOAT64_INPUTS: ContextVar[bool] = ContextVar("float64_inputs", default=False)

OVERFLOW_HINT = ("in float32, exp of a number above about 88 overflows to inf (and inf / inf is NaN), and a "
                 "probability below about 1e-45 underflows to 0 (and log 0 is -inf): subtract the maximum before "
                 "exp, and take log-probabilities as x - logsumexp(x) (torch.log_softmax), not as log(softmax(x))")
ATTENTION_NAN_HINT = ("NaN comes from 0/0 or inf/inf: a softmax over a row that is all -inf (a softmax over the "
                      "wrong dimension, or a mask that leaves a query no key it may see), or exp overflowing to "
                      "inf for large scores (torch.softmax subtracts each row's maximum first)")
SOFTMAX_NAN_HINT = ("a softmax over entries that are all -inf gives NaN (0/0): is the softmax over the right "
                    "dimension, and does the mask leave every row a key it may see?")


@contextmanager
def float64_inputs(on: bool) -> Iterator[None]:
    """While on, a float64 answer is compared at float64 precision (the case's inputs are float64)."""
    token = _FLOAT64_INPUTS.set(on)
    try:
        yield
    finally:
        _FLOAT64_INPUTS.reset(token)


def tensors_in(x) -> list[torch.Tensor]:
    """Every tensor in x and its tuples, lists and dicts."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, tuple | list | dict):
        return [t for v in (x.values() if isinstance(x, dict) else x) for t in tensors_in(v)]
    return []


def to_reference(x):
    """Move a result to CPU float64 so references and answers are compared on equal terms (also the tensors
    inside tuples, lists and dicts: a dict of weights left on a GPU beside CPU inputs fails the reference)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        return x.double() if x.is_floating_point() else x
    if isinstance(x, tuple | list):
        return type(x)(to_reference(v) for v in x)
    if isinstance(x, dict):
        return type(x)((k, to_reference(v)) for k, v in x.items())
    return x


def describe_value(x) -> str:
    """What a student returned, in a few words: 'a tensor of shape (2, 3)', 'a list'."""
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)}"
    if type(x).__name__ == "ndarray":
        return "a NumPy array (make a torch tensor: torch.from_numpy(...), or torch's own functions)"
    if type(x).__module__ == "numpy":
        return f"a numpy.{type(x).__name__}"
    if x is None:  # the commonest wrong answer of all: the function's last line computes but never returns
        return "None (a function that ends without a return statement gives None)"
    name = type(x).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _shape_hint(got: tuple[int, ...], want: tuple[int, ...]) -> str:
    if sorted(got) == sorted(want):
        return " (the same sizes in another order: are dimensions transposed or permuted?)"
    if [n for n in got if n != 1] == [n for n in want if n != 1]:
        return " (a dimension of size 1 too many or too few: squeeze, unsqueeze or keepdim)"
    if math.prod(got) == math.prod(want):
        return " (the same number of values in another shape: a reshape in the wrong order?)"
    return ""


def index_of(flat: int, shape: torch.Size) -> tuple[int, ...]:
    """The index of entry ``flat`` of a tensor of ``shape`` (torch.unravel_index would import sympy, seconds)."""
    out = []
    for size in reversed(tuple(shape)):
        flat, i = divmod(flat, size)
        out.append(i)
    return tuple(reversed(out))


def _ranges(indices: Sequence[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0–2, 5, 7–8'."""
    parts, start = [], None
    for k, i in enumerate(indices):
        if start is None:
            start = i
        if k + 1 == len(indices) or indices[k + 1] != i + 1:
            parts.append(str(start) if start == i else f"{start}–{i}")
            start = None
    return ", ".join(parts)


def _pair(got: float, want: float) -> tuple[str, str]:
    """Two numbers with as many digits as it takes to see that they differ."""
    for digits in (6, 10, 17):
        a, b = f"{got:.{digits}g}", f"{want:.{digits}g}"
        if a != b:
            break
    return a, b


def _equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Entries that are the same value: equal numbers, equal infinities, or both NaN."""
    return (a == b) | (a.isnan() & b.isnan())


def _permutation(out: torch.Tensor, ref: torch.Tensor, close, dim: int) -> list[int] | None:
    """A reordering ``p`` of the slices along ``dim`` with out[..., i, ...] == ref[..., p[i], ...] for every i,
    if there is one other than the identity."""
    n = ref.shape[dim]
    if n < 2 or n > 32 or ref.numel() > 4096:
        return None
    o, r = out.movedim(dim, 0).reshape(n, -1), ref.movedim(dim, 0).reshape(n, -1)
    perm = []
    for i in range(n):
        match = [j for j in range(n) if close(o[i], r[j]).all()]
        if not match:
            return None
        perm.append(i if i in match else match[0])
    return perm if perm != list(range(n)) and sorted(perm) == list(range(n)) else None


def _pattern(out: torch.Tensor, ref: torch.Tensor, close, dim: int | None) -> str | None:
    """A simple relation between a wrong answer and the right one, if there is one: the most specific first."""
    if ref.dim() >= 2 and ref.shape[-1] == ref.shape[-2] > 1 and close(out, ref.transpose(-1, -2)).all():
        return "is the transpose of the expected matrix (the last two dimensions swapped: rows and columns)"
    for k in range(ref.dim()):
        perm = _permutation(out, ref, close, k)
        if perm is not None:
            moved = [(i, j) for i, j in enumerate(perm) if i != j]
            shown = ", ".join(f"{i} holds what {j} should" for i, j in moved[:4]) + (", …" if len(moved) > 4 else "")
            return (f"has the right values in another order along dimension {k}: at index {shown} (an index, "
                    "a reshape or a transpose in the wrong order?)")
    fin = torch.isfinite(out) & torch.isfinite(ref)
    if not _equal(out, ref)[~fin].all():  # the infinities and NaNs differ: no simple relation
        return None
    diff = torch.where(fin, out - ref, torch.zeros_like(ref))
    if ref.dim() > 0 and dim is not None and ref.shape[dim] > 1:
        high = torch.where(fin, out - ref, torch.full_like(ref, -math.inf)).amax(dim=dim)
        low = torch.where(fin, out - ref, torch.full_like(ref, math.inf)).amin(dim=dim)
        spread = torch.where(high >= low, high - low, torch.zeros_like(high))
        if close(spread, torch.zeros_like(spread)).all():
            first = float(diff[fin & ~close(out, ref)][0]) if (fin & ~close(out, ref)).any() else 0.0
            return ("off by a constant along the last dimension: every entry is shifted by the same amount "
                    f"(e.g. {first:.4g}); a normalising term is missing or wrong")
    f_out, f_ref = out[fin], ref[fin]
    scale = float((f_ref * f_ref).sum())
    if scale > 0 and f_ref.numel() > 1:
        r = float((f_out * f_ref).sum()) / scale
        if close(f_out, r * f_ref).all() and abs(r - 1) > 1e-3:
            if abs(r + 1) < 1e-3:
                return "has the opposite sign of the expected values everywhere (a minus sign is missing or extra)"
            return (f"every value is {r:.4g} times the expected one: a scale factor is missing or extra "
                    "(a division by a size, a square root, a sum where a mean is asked, or the reverse)")
    return None


def describe_pattern(out: torch.Tensor, ref: torch.Tensor, *, rtol: float = 1e-4, atol: float = 1e-5,
                     dim: int | None = None) -> str | None:
    """The simple relation between a wrong answer and the right one (same shape, floating), if any: for a
    comparison of a task's own that checks the most specific first, before its masks."""
    out, ref = to_reference(out), to_reference(ref)

    def close(a, b):
        return torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    return None if close(out, ref).all() else _pattern(out, ref, close, dim)


def _nonfinite(out: torch.Tensor, ref: torch.Tensor, hint: str | None) -> str | None:
    """What a mask or an overflow left: NaN or inf where the answer is a number, a number where it is -inf."""
    nan = out.isnan() & ~ref.isnan()
    if nan.any():
        first = index_of(int(nan.flatten().nonzero()[0]), ref.shape)
        return (f"returned NaN at {int(nan.sum())} of {ref.numel()} entries where the answer is a number, the first "
                f"at index {first} (expected {float(ref[first]):.6g})" + (f"; {hint}" if hint else ""))
    inf = out.isinf() & ~_equal(out, ref)
    if inf.any():
        first = index_of(int(inf.flatten().nonzero()[0]), ref.shape)
        return (f"returned {float(out[first])} at {int(inf.sum())} of {ref.numel()} entries where the answer is "
                f"{'a number' if torch.isfinite(ref[first]) else float(ref[first])}, the first at index {first} "
                f"(expected {float(ref[first]):.6g})" + (f"; {hint}" if hint and torch.isfinite(ref[first]) else ""))
    masked = ref.isinf() & ~_equal(out, ref)
    if masked.any():
        first = index_of(int(masked.flatten().nonzero()[0]), ref.shape)
        return (f"returned {float(out[first]):.6g} at index {first}, where the answer is {float(ref[first])} "
                f"({int(masked.sum())} such entries): those entries are masked and must be exactly "
                f"{float(ref[first])} (float('{'-' if ref[first] < 0 else ''}inf'))")
    return None


def where_wrong(wrong: torch.Tensor) -> str:
    """Which indices of each dimension hold the wrong entries, where that is not all of them: 'only at index 1 of
    dimension 0; indices 2–5 of dimension 1 (0–1 are right)'."""
    parts = []
    for k in range(wrong.dim()):
        n = wrong.shape[k]
        if n < 2:
            continue
        hit = wrong.movedim(k, 0).reshape(n, -1).any(dim=1).nonzero().flatten().tolist()
        if len(hit) < n:
            right = [i for i in range(n) if i not in hit]
            parts.append(f"{'index' if len(hit) == 1 else 'indices'} {_ranges(hit)} of dimension {k} "
                         f"({_ranges(right)} {'is' if len(right) == 1 else 'are'} right)")
    return "only at " + "; ".join(parts) if parts else ""


def describe_tensor_mismatch(out, ref: torch.Tensor, *, rtol: float = 1e-4, atol: float = 1e-5,
                             dim: int | None = -1, nan_hint: str | None = None) -> str | None:
    """None if ``out`` matches ``ref``; otherwise the first thing a student should fix.

    ``nan_hint``: what to say after a NaN or inf where the answer is a number, for a task where that has a
    likely cause (``OVERFLOW_HINT`` where the task exponentiates, ``SOFTMAX_NAN_HINT`` where it masks a
    softmax); none by default.
    """
    if not isinstance(out, torch.Tensor):
        return f"returned {describe_value(out)}, expected a torch.Tensor"
    if tuple(out.shape) != tuple(ref.shape):
        return f"returned shape {tuple(out.shape)}, expected {tuple(ref.shape)}" + _shape_hint(
            tuple(out.shape), tuple(ref.shape))
    float64 = out.dtype == torch.float64
    out, ref = to_reference(out), to_reference(ref)
    if not out.is_floating_point():
        return f"returned dtype {out.dtype}, expected floating point values"
    precise = float64 and _FLOAT64_INPUTS.get()
    if precise:  # float64 inputs: an answer with float32's rounding is wrong
        finite = ref[torch.isfinite(ref)]
        size = float(finite.abs().max()) if finite.numel() else 1.0
        rtol, atol = min(rtol, FLOAT64_RTOL), min(atol, FLOAT64_RTOL * max(size, 1e-3))

    def close(a, b):
        return torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)

    wrong = ~close(out, ref)
    if not wrong.any():
        return None
    described = _pattern(out, ref, close, dim) or _nonfinite(out, ref, nan_hint)
    if described:
        return described
    first = index_of(int(wrong.flatten().nonzero()[0]), ref.shape)
    diff = (out - ref).abs().masked_fill(_equal(out, ref), 0.0)
    worst = index_of(int(diff.flatten().argmax()), ref.shape)
    if ref.numel() == 1:
        got, want = _pair(float(out.flatten()[0]), float(ref.flatten()[0]))
        return f"you returned {got}, expected {want}"
    where = where_wrong(wrong)
    count = (f"at all {ref.numel()} entries" if wrong.all() else
             f"at {int(wrong.sum())} of {ref.numel()} entries" + (f", {where}" if where else ""))
    got, want = _pair(float(out[first]), float(ref[first]))
    message = f"values differ {count}; the first at index {first}: you returned {got}, expected {want}"
    if worst != first:
        message += f"; the largest difference is {float(diff[worst]):.3g}, at index {worst}"
    if precise and float(diff.max()) < 1e-4 * max(1.0, float(ref[torch.isfinite(ref)].abs().max())):
        message += (" (float64 inputs: your answer is off by float32's rounding; compute in the inputs' dtype, "
                    "float64, throughout)")
    return message


def compare_parts(*names: str, rtol: float = 1e-4, atol: float = 1e-5, order: Sequence[int] | None = None,
                  tuple_only: bool = False, nan_hint: str | None = None):
    """A comparison for a tuple of tensors, naming the first part that differs.

    ``order``: the indices in the order to look at them (the order they are computed in, so the part
    named is the first stage that went wrong, not a later one that inherits the error). ``tuple_only``: the
    statement asks for a tuple, and a list is refused.
    """
    def compare(out, ref) -> str | None:
        if tuple_only and isinstance(out, list) and len(out) == len(names):
            return (f"returned a list [{', '.join(names)}], expected a tuple ({', '.join(names)}): "
                    f"return {', '.join(names)} (a tuple), not [{', '.join(names)}]")
        if not isinstance(out, tuple | list) or len(out) != len(names):
            return f"returned {describe_value(out)}, expected a tuple ({', '.join(names)})"
        for i in order or range(len(names)):
            problem = describe_tensor_mismatch(out[i], ref[i], rtol=rtol, atol=atol, dim=None, nan_hint=nan_hint)
            if problem:
                return f"{names[i]}: {problem}"
        return None
    return compare


def distinct_pair(out: float, ref: float) -> tuple[str, str]:
    """Two numbers written with as many significant digits as it takes to tell them apart (6 to 17), so a
    message never reads "returned 5.7735e+06, expected 5.7735e+06"."""
    for digits in range(6, 18):
        a, b = f"{out:.{digits}g}", f"{ref:.{digits}g}"
        if a != b:
            break
    return a, b


def how_far(out: float, ref: float) -> str:
    """How far a number is from the expected one: a ratio where it says something, else the difference."""
    if ref != 0 and out != 0 and f"{out / ref:.4g}" != "1":
        return f"{out / ref:.4g} times it"
    return f"off by {out - ref:+.3g}"


def describe_scalar_mismatch(out, ref, *, rtol: float = 1e-4, atol: float = 1e-6,
                             accept: Sequence[str] = ("tensor", "number"), nan_hint: str | None = None) -> str | None:
    """Compare a scalar answer. ``accept``: the forms the statement allows, "tensor" (a tensor holding one
    value) and "number" (a real number: a Python or NumPy float or int, not a bool)."""
    forms = " or ".join({"tensor": "a one-element tensor", "number": "a number (float)"}[a] for a in accept)
    float64 = False
    if isinstance(out, torch.Tensor) and "tensor" in accept:
        if out.numel() != 1:
            return f"returned a tensor of shape {tuple(out.shape)}, expected a single number (a scalar)"
        if not out.is_floating_point():
            return f"returned a tensor of dtype {out.dtype}, expected a floating-point number"
        float64 = out.dtype == torch.float64
        out = out.detach().cpu().item()
    elif isinstance(out, numbers.Real) and not isinstance(out, bool) and "number" in accept:
        out = float(out)
    else:
        return f"returned {describe_value(out)}, expected {forms}"
    ref = float(ref)
    if not math.isfinite(out) and math.isfinite(ref):
        return f"returned {out}, expected a finite number near {ref:.6g}" + (f"; {nan_hint}" if nan_hint else "")
    if float64 and _FLOAT64_INPUTS.get():
        rtol, atol = min(rtol, FLOAT64_RTOL), min(atol, FLOAT64_RTOL)
    if math.isclose(out, ref, rel_tol=rtol, abs_tol=atol):
        return None
    ratio = f"; {out / ref:.4g} times the expected value" if ref != 0 and out != 0 else ""
    note = (" (float64 inputs: your answer is off by float32's rounding; compute in float64 throughout)"
            if float64 and abs(out - ref) < 1e-4 * max(1.0, abs(ref)) else "")
    return f"returned {out:.10g}, expected {ref:.10g}{ratio}{note}"
