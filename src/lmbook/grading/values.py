"""Values as they cross the sandbox's wall: the one encoding used by the student's kernel and by the grader.

A case's inputs reach the student's function, and its result reaches the decision, through
:func:`encode` and :func:`decode`: in the grader the arrays travel as ``.npy`` bytes inside the messages
between the trusted side and the sandbox (:func:`to_wire`, :func:`wire_loader`); in Jupyter they are kept
in memory. Either way the student's function receives the same
objects (fresh tensors, fresh strings, lists as lists and tuples as tuples) and the decision sees the same
result (a NumPy float32 stays a NumPy float32, an int stays an int), so a verdict cannot differ between
the notebook and the grader. Only plain data crosses: arrays are read without pickle, and anything else the
student returns becomes a stand-in that carries its type's name.
"""

from __future__ import annotations

import base64
import io
import linecache
import re
import sysconfig
import traceback
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import numpy as np
import torch

from . import gradients
from .earlier import EarlierTasks
from .readymade import FENCE_FILE

# What is kept of a student's result (a bound on what their code can make the grader read); the grader's own
# inputs cross whole (``inputs=True``).
MAX_DEPTH = 4  # lists of lists of lists of lists
MAX_ITEMS = 4096  # items of a tuple, list or dict
MAX_STR = 10_000
NUMPY_SCALARS = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool_"}

Spec = dict
Arrays = dict[str, np.ndarray]


def encode(value, name: str, arrays: Arrays, depth: int = 0, *, inputs: bool = False) -> Spec:
    """Describe ``value`` as JSON-able data, with each tensor's array put in ``arrays`` under a file name.

    A result beyond the bounds (nesting, items, string length) is cut there; ``inputs=True`` keeps all.
    """
    max_depth, max_items, max_str = (10**6, None, None) if inputs else (MAX_DEPTH, MAX_ITEMS, MAX_STR)
    if isinstance(value, torch.Tensor) and depth <= max_depth:
        t = value.detach().cpu()
        dtype = str(t.dtype).removeprefix("torch.")
        if t.dtype == torch.bfloat16:  # NumPy has no bfloat16: carried as float32, restored on decoding
            t = t.float()
        spec = {"tensor": f"{name}.npy", "dtype": dtype, "device": value.device.type,
                "grad": bool(value.requires_grad)}
        if inputs and not value.is_contiguous() and value.numel() > 0:
            # a case's input laid out as a statement allows (a slice, a transpose) crosses with its layout: the
            # memory it spans, flat, and its sizes and strides
            span = 1 + sum((n - 1) * s for n, s in zip(value.shape, value.stride(), strict=True))
            t = value.detach().as_strided((span,), (1,), value.storage_offset()).cpu()
            t = t.float() if t.dtype == torch.bfloat16 else t
            spec |= {"size": list(value.shape), "stride": list(value.stride())}
        arrays[f"{name}.npy"] = t.resolve_conj().resolve_neg().numpy().copy()  # never the caller's memory
        return spec
    if type(value) in (bool, int, float):
        if type(value) is int and not -2**63 <= value < 2**63:
            return {"object": "int (too large)"}
        return {"number": value, "type": type(value).__name__}
    if isinstance(value, np.generic) and type(value).__name__ in NUMPY_SCALARS:
        return {"number": value.item(), "type": f"numpy.{type(value).__name__}"}
    if type(value) is str:
        return {"str": value[:max_str]}
    if value is None:
        return {"none": True}
    if type(value) is dict and depth < max_depth and all(type(k) is str for k in value):
        return {"dict": {k: encode(v, f"{name}_{k}"[:80], arrays, depth + 1, inputs=inputs)
                         for k, v in list(value.items())[:max_items]}}
    if type(value) in (tuple, list) and depth < max_depth:
        return {"seq": [encode(v, f"{name}_{i}", arrays, depth + 1, inputs=inputs)
                        for i, v in enumerate(value[:max_items])], "type": type(value).__name__}
    return {"object": type(value).__name__[:60]}


def decode(spec, load: Callable[[str], np.ndarray], device: torch.device | str = "cpu", depth: int = 0, *,
           inputs: bool = False):
    """The value a spec describes; tensors are loaded with ``load(file name)`` and moved to ``device``."""
    max_depth, max_items = (10**6, None) if inputs else (MAX_DEPTH, MAX_ITEMS)
    if not isinstance(spec, dict) or depth > max_depth:
        return stand_in("unknown")()
    if "tensor" in spec:
        name = str(spec["tensor"])
        if not re.fullmatch(r"[\w.-]+\.npy", name):
            return stand_in("missing output")()
        try:
            arr = load(name)
        except Exception:  # noqa: BLE001 - a missing or unreadable array is the student's wrong output
            return stand_in("unreadable output")()
        if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "biuf":
            return stand_in("array")()
        t = torch.from_numpy(np.ascontiguousarray(arr).reshape(arr.shape))  # ascontiguousarray makes 0-d 1-d
        if spec.get("dtype") == "bfloat16":
            t = t.to(torch.bfloat16)
        t = t.to(device)
        if inputs and "stride" in spec:  # the grader's own input, laid out as it was made (encode)
            t = t.as_strided(spec["size"], spec["stride"])
        if spec.get("grad") is True and t.is_floating_point():
            t.requires_grad_(True)  # what the student returned still tracked gradients
        return t
    if "number" in spec and type(spec["number"]) in (bool, int, float):
        kind = spec.get("type")
        if isinstance(kind, str) and kind.startswith("numpy.") and kind[6:] in NUMPY_SCALARS:
            return getattr(np, kind[6:])(spec["number"])
        return {"bool": bool, "int": int, "float": float}.get(kind, type(spec["number"]))(spec["number"])
    if "str" in spec and isinstance(spec["str"], str):
        return "".join(list(spec["str"]))  # a new object: `is` against a literal is False in both places
    if spec.get("none") is True:
        return None
    if "dict" in spec and isinstance(spec["dict"], dict):
        return {str(k): decode(v, load, device, depth + 1, inputs=inputs)
                for k, v in list(spec["dict"].items())[:max_items]}
    if "seq" in spec and isinstance(spec["seq"], list):
        items = [decode(s, load, device, depth + 1, inputs=inputs) for s in spec["seq"][:max_items]]
        return items if spec.get("type") == "list" else tuple(items)
    return stand_in(str(spec.get("object", "object")))()


def to_wire(arrays: Arrays) -> dict[str, str]:
    """Arrays as JSON-able text: each one's ``.npy`` bytes in base64 (no pickle, on either side)."""
    wire = {}
    for name, arr in arrays.items():
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        wire[name] = base64.b64encode(buf.getvalue()).decode("ascii")
    return wire


def wire_loader(wire) -> Callable[[str], np.ndarray]:
    """The ``load`` for :func:`decode` of arrays sent by :func:`to_wire` (whatever else was sent raises)."""
    def load(name: str) -> np.ndarray:
        text = wire.get(name) if isinstance(wire, dict) else None
        if not isinstance(text, str):
            raise KeyError(name)
        return np.load(io.BytesIO(base64.b64decode(text, validate=True)), allow_pickle=False)
    return load


def stand_in(type_name: str) -> type:
    """A stand-in class with the student's type name, so messages say 'returned a Foo'."""
    name = re.sub(r"\W", "_", type_name)[:60] or "object"
    return type(name if name.isidentifier() else "object", (), {})


def round_trip(value, device: torch.device | str = "cpu", *, inputs: bool = False):
    """``value`` as the other side of the wall receives it (encoded, then decoded from memory)."""
    arrays: Arrays = {}
    spec = encode(value, "v", arrays, inputs=inputs)
    return decode(spec, arrays.__getitem__, device, inputs=inputs)


def changed_in_place(before, after) -> bool:
    """Whether a tensor argument (or one inside a tuple, list or dict) now holds other values than it did, or a
    list or dict argument holds other items."""
    if isinstance(before, torch.Tensor):
        if not isinstance(after, torch.Tensor) or after.shape != before.shape or after.dtype != before.dtype:
            return True
        now = after.detach().cpu()
        if before.is_floating_point():  # NaN != NaN: compare where the NaNs are, then the rest
            return not (torch.equal(now.isnan(), before.isnan())
                        and torch.equal(now.nan_to_num(nan=0.0), before.nan_to_num(nan=0.0)))
        return not torch.equal(now, before)
    if isinstance(before, tuple | list):
        return not isinstance(after, tuple | list) or len(after) != len(before) or any(
            changed_in_place(b, a) for b, a in zip(before, after, strict=False))
    if isinstance(before, dict):
        return not isinstance(after, dict) or list(after) != list(before) or any(
            changed_in_place(before[k], after[k]) for k in before)
    return before != after if isinstance(before, int | float | str) else False


def snapshot(value):
    """A copy of an argument (its tensors' values, its lists' and dicts' items), to tell afterwards whether the
    student's code changed it."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, tuple | list):
        return type(value)(snapshot(v) for v in value)
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    return value


def _library(filename: str) -> bool:
    """Whether code in this file is a library's (Python's, torch's, lmbook's), not the student's."""
    return filename.startswith(_LIBRARY_PATHS) or filename.startswith("<frozen") or filename == FENCE_FILE


_LIBRARY_PATHS = tuple({*(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
                        str(Path(__file__).resolve().parents[1]), str(Path(torch.__file__).resolve().parent)})


def students_lines(tb, limit: int = 3) -> list[str]:
    """The student's own frames of a traceback, innermost last: 'in masked_attention, line 4: scores = ...'
    (the line within their cell, or their file), at most ``limit`` of them."""
    lines = []
    for frame, lineno in traceback.walk_tb(tb):
        code = frame.f_code
        if _library(code.co_filename):
            continue
        source = linecache.getline(code.co_filename, lineno, frame.f_globals).strip()
        where = f"in {code.co_name}, line {lineno}" if code.co_name != "<module>" else f"line {lineno}"
        lines.append(f"{where}: {source[:100]}" if source else where)
    return lines[-limit:]


def _is_stub(e: NotImplementedError) -> bool:
    """The exercise's own ``raise NotImplementedError()`` (no message, raised by the student's own line), not one
    raised by a library inside the answer (torch's say which operator is missing)."""
    if str(e):
        return False
    tb = e.__traceback__
    last = None
    for frame, lineno in traceback.walk_tb(tb):
        last = frame, lineno
    if last is None:
        return True
    frame, lineno = last
    line = linecache.getline(frame.f_code.co_filename, lineno, frame.f_globals)
    return not _library(frame.f_code.co_filename) and "NotImplementedError" in line


def seed_all(seed: int) -> None:
    """``torch.manual_seed`` for the devices a course machine has (the CPU, CUDA, Apple's MPS). torch's own also
    queues a seed for each accelerator it was built for and has not started (XPU, MTIA, a CPU-only machine's
    CUDA), recording the Python stack each time: 13% of the time the checks of a LayerNorm task took on a CPU
    (sampled with py-spy), once per case and once per known mistake."""
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if torch.backends.mps.is_available():
        torch.mps.manual_seed(seed)


def call_once(fn, args: Sequence, kwargs: dict, seed: int, around: AbstractContextManager | None = None,
              device: torch.device | str = "cpu", grad_of: Sequence[int] = (),
              stand_ins: Sequence[tuple[str, Callable]] = (), trained_outputs: int = 1) -> dict:
    """Call a student's function as both the kernel and the grader do, with torch's RNG seeded first.

    Returns ``{"out": result}`` or ``{"raised": "TypeError: ...\\nin fn, line 3: ..."}`` (the exception, then the
    student's own lines it passed through), and ``"changed"``: the arguments the call modified in place (positions
    as strings, keywords by name). The exercise's ``raise NotImplementedError()`` stub and exceptions that are not
    ``Exception`` (the grader's time limit) pass through; a ``NotImplementedError`` raised by a library inside the
    answer is the answer's result like any other exception.
    The result is made plain (:func:`round_trip`, onto ``device``) inside ``around``: a tensor subclass that
    would compute its value only when it is read computes it under the watch.
    ``grad_of``: the arguments a gradient must reach; they are passed tracked by autograd, and ``"grads"`` holds
    the gradient the result gives each (None where none does), or the backward pass's error (:mod:`.gradients`);
    ``trained_outputs``: how many of the result's tensors it is taken through.
    ``stand_ins``: the earlier tasks' functions the answer may call, bound to right versions while it runs
    (:mod:`.earlier`).
    """
    before = [snapshot(a) for a in args], {k: snapshot(v) for k, v in kwargs.items()}
    args, leaves = gradients.tracked(args, grad_of) if grad_of else (args, [])
    seed_all(seed)  # a sampling answer draws the same numbers in Jupyter and in the grader
    try:
        with EarlierTasks(fn, stand_ins), around or nullcontext():  # around: e.g. the watch, around the call only
            out = fn(*args, **kwargs)
            result = {}
            if grad_of:  # the backward pass runs the answer's code too (a custom autograd.Function)
                try:
                    result["grads"] = [None if g is None else round_trip(g, device)
                                       for g in gradients.answer_grads(out, leaves, trained_outputs)]
                except Exception as e:  # noqa: BLE001 - the student's backward pass failing is their result
                    result["grads"] = _raised(e).splitlines()[0]
            result["out"] = round_trip(out, device)
    except NotImplementedError as e:
        if _is_stub(e):
            raise
        result = {"raised": _raised(e)}
    except Exception as e:  # noqa: BLE001 - whatever the student's code raises is their result
        result = {"raised": _raised(e)}
    positional = [str(i) for i, (b, a) in enumerate(zip(before[0], args, strict=True)) if changed_in_place(b, a)]
    result["changed"] = positional + [k for k, v in kwargs.items() if changed_in_place(before[1][k], v)]
    return result


def _raised(e: BaseException) -> str:
    """The exception in one line, then the student's lines it came through (under 600 characters in all)."""
    first = " ".join(f"{type(e).__name__}: {e}".split())[:300]
    return "\n".join([first, *students_lines(e.__traceback__)])[:590]
