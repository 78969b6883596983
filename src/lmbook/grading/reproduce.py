"""A failure the student can reproduce: the smallest failing input of a visible case, as Python to paste.

A visible case can carry smaller versions of itself (:func:`sized` builds them from the case's sizes: fewer rows,
positions, heads, dimensions), with their floats rounded to two significant digits of their spread, so that
the code printed for them is the exact input. When a visible case fails, :func:`reproduction` picks the smallest
of its smaller versions that fails too and prints it in full: the inputs as Python, the call, and the expected
and returned values side by side. Hidden cases keep their inputs secret: they are never shrunk or printed.

The smaller versions are fixed in advance (not searched for while the answer runs), so that the kernel and
the grader, which runs every case in its sandbox before deciding, show the same one.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Sequence

import torch

from .compare import to_reference

# How many numbers of an expected value are printed before it is cut (its first rows are shown).
MAX_SHOWN = 240
HEADER = "the smallest input found that fails (paste it into a cell to see for yourself):"


# ----------------------------------------------------------------------------- smaller cases


def _quantize(x):
    """Floats rounded to two significant digits of their spread (their standard deviation), so that printing
    them in decimal gives the very same input."""
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel():
        finite = x.detach()[torch.isfinite(x.detach())].double()
        spread = float(finite.std()) if finite.numel() > 1 else float(finite.abs().max()) if finite.numel() else 0.0
        if spread > 0:
            k = math.floor(math.log10(spread)) - 1  # the step is 10^k: divide by 10^-k, exactly, when k < 0
            steps = torch.round(x.detach().double() / 10.0 ** k)
            y = torch.where(torch.isfinite(x.detach()), steps / 10.0 ** -k if k < 0 else steps * 10.0 ** k,
                            x.detach().double())
            return y.to(x.dtype).detach().requires_grad_(x.requires_grad)
        return x
    if isinstance(x, tuple | list):
        return type(x)(_quantize(v) for v in x)
    if isinstance(x, dict):
        return {k: _quantize(v) for k, v in x.items()}
    return x


def quantized(make: Callable) -> Callable:
    """``make`` with every float input rounded to two significant digits of its spread (see :func:`_quantize`)."""
    def made(g, device):
        args, kwargs = make(g, device)
        return _quantize(tuple(args)), {k: _quantize(v) for k, v in kwargs.items()}
    return made


def _candidates(params: dict, floors: dict) -> list[dict]:
    """Smaller versions of ``params``, about the smallest first: every size at its floor, then one above it, two
    above it; one size larger (one above its floor, half its size, its size) with the others at their floor; every
    size halved; one size at its floor with the others as they are. No repeats, never ``params`` itself."""
    names = [k for k in floors if params[k] > floors[k]]
    low = {k: floors[k] for k in names}
    out = [low]
    out += [{k: min(params[k], floors[k] + step) for k in names} for step in (1, 2)]
    for value in (lambda k: floors[k] + 1, lambda k: (params[k] + 1) // 2, lambda k: params[k]):
        out += [{**low, k: max(floors[k], min(params[k], value(k)))} for k in names]
    out += [{k: max(floors[k], (params[k] + 1) // 2) for k in names}]
    out += [{k: floors[k]} for k in names]
    seen, unique = set(), []
    for change in out:
        p = {**params, **change}
        key = tuple(sorted((k, str(v)) for k, v in p.items()))
        if key not in seen and p != params:
            seen.add(key)
            unique.append(p)
    return unique


def _label(params: dict, floors: dict) -> str:
    return ", ".join(f"{k}={params[k]}" for k in floors)


def sized(name: str, build: Callable[..., Callable], *, floors: dict[str, int],
          fit: Callable[[dict], dict | None] | None = None, limit: int = 10, **params):
    """A :class:`~lmbook.grading.checks.Case` ``build(**params)`` that knows its smaller versions.

    ``floors``: the sizes that may shrink and their smallest values (``{"B": 1, "n": 1}``); ``fit`` adjusts a
    smaller version's other parameters to its sizes (the lengths of a batch, say), or returns None where the
    version makes no sense; ``limit``: how many smaller versions at most (each is a call of the answer)."""
    from .checks import Case  # the case type lives with the checks

    smaller, seen = [], [params]
    for p in _candidates(params, floors):
        p = fit(dict(p)) if fit is not None else p
        if p is not None and p not in seen:
            seen.append(p)
            smaller.append(Case(_label(p, floors), quantized(build(**p))))
        if len(smaller) == limit:
            break
    return Case(name, build(**params), tuple(smaller))


# ----------------------------------------------------------------------------- Python the student can paste


def _float(v: float, dtype: torch.dtype = torch.float64) -> str:
    """``v`` in the fewest digits that give the very same number in ``dtype``."""
    if math.isnan(v):
        return "float('nan')"
    if math.isinf(v):
        return "float('inf')" if v > 0 else "float('-inf')"
    if v == 0:
        return "0.0"  # not "-0.0"
    for digits in (4, 8, 12):
        short = repr(round(v, digits))
        if torch.tensor(float(short), dtype=dtype).item() == torch.tensor(v, dtype=dtype).item():
            return short
    return repr(v)


def _nested(t: torch.Tensor, fmt: Callable) -> str:
    if t.dim() == 0:
        return fmt(t.item())
    if t.dim() == 1:
        return "[" + ", ".join(fmt(v) for v in t.tolist()) + "]"
    return "[" + ", ".join(_nested(s, fmt) for s in t) + "]"


def _block(t: torch.Tensor, fmt: Callable) -> list[str]:
    """A tensor as torch prints it: a row a line, nested brackets, a blank line between matrices."""
    if t.dim() <= 1:
        return [_nested(t, fmt)]
    lines: list[str] = []
    for i, sub in enumerate(t):
        part = [" " + line if line else line for line in _block(sub, fmt)]
        part[0] = ("[" if i == 0 else " ") + part[0][1:]
        part[-1] += "]" if i == len(t) - 1 else ","
        lines += part + ([""] if t.dim() > 2 and i < len(t) - 1 else [])
    return lines


def _element(t: torch.Tensor) -> Callable:
    if t.dtype == torch.bool:
        return lambda v: "True" if v else "False"
    if t.is_floating_point():
        return lambda v: _float(v, t.dtype)
    return lambda v: str(int(v))


def _layout_code(t: torch.Tensor) -> str | None:
    """Python that makes ``t`` again with its memory layout, for an input that is not contiguous: a transpose
    (``torch.tensor(...).transpose(1, 2)``) or a slice of a larger tensor (``torch.tensor(...)[:, :3]``), or
    else ``as_strided`` over the memory it spans; None for a contiguous ``t``."""
    if t.is_contiguous() or t.numel() == 0:
        return None
    order = sorted(range(t.dim()), key=lambda d: -t.stride(d))  # outermost in memory first
    stored = t.permute(order)
    back = tuple(order.index(d) for d in range(t.dim()))
    permute = "" if order == sorted(order) else (
        f".transpose{tuple(d for d in range(t.dim()) if back[d] != d)}" if sum(b != d for d, b in enumerate(back)) == 2
        else f".permute{back}")
    # the larger contiguous tensor ``stored`` is a corner of, if it is one
    whole = [stored.shape[0]] + [stored.stride(d - 1) // max(stored.stride(d), 1) for d in range(1, t.dim())]
    if stored.stride(-1) == 1 and all(stored.stride(d - 1) == whole[d] * stored.stride(d) for d in range(1, t.dim())):
        try:  # fails when the larger tensor would reach past the memory there is
            strides = [math.prod(whole[d + 1:]) for d in range(len(whole))]  # a contiguous tensor's
            base = stored.as_strided(whole, strides, stored.storage_offset())
        except RuntimeError:
            base = None
        cut = ", ".join(":" if w == n else f":{n}" for w, n in zip(whole, stored.shape, strict=True)).rstrip(", :")
        if base is not None:
            return tensor_code(base) + (f"[{cut}]" if cut else "") + permute
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
    flat = t.as_strided((span,), (1,), t.storage_offset())
    return f"{tensor_code(flat.contiguous())}.as_strided({tuple(t.shape)}, {t.stride()})"


def tensor_code(t: torch.Tensor) -> str:
    """``torch.tensor([...])`` that makes ``t`` again (its values, shape and dtype, and the layout of an input
    that is not contiguous)."""
    tracks = t.requires_grad
    t = t.detach().cpu()
    laid_out = _layout_code(t)
    if laid_out is not None:
        return laid_out + (".requires_grad_()" if tracks and t.is_floating_point() else "")
    dtype = {torch.float32: "", torch.int64: "", torch.bool: ""}.get(t.dtype, f", dtype={t.dtype}")
    if t.numel() == 0:
        return f"torch.zeros({tuple(t.shape)}{dtype or ', dtype=torch.' + str(t.dtype).split('.')[-1]})"
    body = _nested(t, _element(t))
    grad = ", requires_grad=True" if tracks and t.is_floating_point() else ""
    return f"torch.tensor({body}{dtype}{grad})"


def value_code(v) -> str:
    """Python that makes ``v``: tensors, numbers, strings, None, and lists, tuples and dicts of them."""
    if isinstance(v, torch.Tensor):
        return tensor_code(v)
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {value_code(x)}" for k, x in v.items()) + "}"
    if isinstance(v, tuple):
        return "(" + ", ".join(value_code(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, list):
        return "[" + ", ".join(value_code(x) for x in v) + "]"
    return repr(v)


def call_code(fn_name: str, reference: Callable, args: Sequence, kwargs: dict) -> str:
    """The inputs as assignments, one a line, then the call: what the student pastes into a cell."""
    try:
        names = list(inspect.signature(reference).parameters)
    except (TypeError, ValueError):
        names = []
    lines, passed = [], []
    for i, a in enumerate(args):
        simple = isinstance(a, bool | int | float | str) or a is None
        if simple or i >= len(names):
            passed.append(value_code(a))
        else:
            lines.append(f"{names[i]} = {value_code(a)}")
            passed.append(names[i])
    for k, v in kwargs.items():
        lines.append(f"{k} = {value_code(v)}")
        passed.append(f"{k}={k}")
    lines.append(f"out = {fn_name}({', '.join(passed)})")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- expected and returned, side by side


def _lines(v, digits: int = 4) -> list[str]:
    """A value as text lines, a matrix a row a line."""
    if isinstance(v, torch.Tensor):
        t = v.detach().cpu()
        fmt = (lambda x: _float(round(x, digits) + 0.0) if math.isfinite(x) else _float(x)) \
            if t.is_floating_point() else _element(t)  # + 0.0: no "-0.0" shown
        if t.numel() > MAX_SHOWN:
            return [f"a tensor of shape {tuple(t.shape)} (too large to show)"]
        return _block(t, fmt)
    if isinstance(v, tuple | list) and all(isinstance(x, bool | int | float | str) for x in v):
        return [value_code(v)]
    if isinstance(v, tuple | list):
        out = []
        for i, x in enumerate(v):
            out.append(f"[{i}]:")
            out += ["  " + line for line in _lines(x, digits)]
        return out
    if isinstance(v, dict):
        out = []
        for k, x in v.items():
            out.append(f"[{k!r}]:")
            out += ["  " + line for line in _lines(x, digits)]
        return out
    return [value_code(v) if isinstance(v, bool | int | float | str) or v is None else f"a {type(v).__name__}"]


def side_by_side(left: list[str], right: list[str], titles: tuple[str, str]) -> list[str]:
    width = max(len(titles[0]), *(len(s) for s in left)) + 4
    if width > 70:  # too wide to stand side by side: one after the other
        return [titles[0], *("  " + s for s in left), titles[1], *("  " + s for s in right)]
    rows = [titles[0].ljust(width) + titles[1]]
    for a, b in itertools.zip_longest(left, right, fillvalue=""):
        rows.append(a.ljust(width) + b)
    return rows


def _same(a, b) -> bool:
    """Whether two parts of an answer are the same to the digits shown (such a part is not printed)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.isclose(a.double(), b.double(), rtol=1e-12,
                                                                                atol=0.0, equal_nan=True).all())
    if isinstance(a, dict) and isinstance(b, dict):  # a cache {"k": K, "v": V}: compared part by part
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor) and a == b


def _shown(ref):
    """What the reference's answer looks like to the student (a reference may hold more, to judge with)."""
    shown = getattr(ref, "shown", None)
    return shown() if callable(shown) else to_reference(ref)


def reproduction(fn_name: str, reference: Callable, args: Sequence, kwargs: dict, ref, out, problem: str, *,
                 raised: bool = False) -> str:
    """The message part that reproduces a failure: the call as Python, what it does, and the values (the
    expected ones alone when the answer raised)."""
    code = call_code(fn_name, reference, args, kwargs)
    expected = _shown(ref)
    lines = [HEADER, *("    " + line for line in code.splitlines()),
             "  it fails: " + problem.replace("\n", "\n  ")]
    if raised:
        return "\n".join([*lines, "  expected:", *("    " + line for line in _lines(expected))])
    got = to_reference(out)
    digits = 4 if _apart(expected, got) else 12  # a difference in the last digits is shown in full
    if isinstance(expected, tuple) and isinstance(got, tuple | list) and len(got) == len(expected):
        pairs = [(f"expected out[{i}]", f"you returned out[{i}]", e, g) for i, (e, g) in
                 enumerate(zip(expected, got, strict=True)) if not _same(e, g)]
    else:
        pairs = [("expected", "you returned", expected, got)]
    for left, right, e, g in pairs:
        lines += ["  " + row for row in side_by_side(_lines(e, digits), _lines(g, digits), (left, right))]
    return "\n".join(lines)


def _apart(a, b) -> bool:
    """Whether the expected and returned values differ in their first four decimals somewhere (else the
    difference is in the last digits, and more of them are shown)."""
    if isinstance(a, tuple | list) and isinstance(b, tuple | list) and len(a) == len(b):
        return any(_apart(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape \
            and a.is_floating_point() and b.is_floating_point():
        return not bool(torch.isclose(a.double(), b.double(), rtol=1e-4, atol=1e-4, equal_nan=True).all())
    return True
