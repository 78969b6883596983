"""The fence: while an answer runs, the task's ready-made answers refuse to compute.

The watch (:mod:`.watch`) sees what an answer calls, but it lives in the answer's own process: code that
switches it off and on again between two of its checks is not seen calling anything. The fence does not
depend on being watched. For as long as the answer runs:

* every operator that computes the task's forbidden ops (``aten::_log_softmax``, ``aten::nll_loss_forward``...,
  every overload, listed by :func:`.readymade.forbidden_aten`) has its CPU, CUDA and MPS kernels replaced in
  torch's dispatcher by one that raises, whatever name or route reaches it (a computed name, an alias kept
  from an earlier cell, ``torch.ops.aten``, a thread);
* every Python function of the task's ready-made answers (the course's own implementation, the methods of a
  forbidden class such as ``nn.MultiheadAttention``) has its code replaced by code that raises, so an alias
  or a reference kept in a closure runs that code too.

Both are undone when the answer returns (``__exit__``), whatever it raised. Undoing them earlier takes the
dispatcher's registry (``torch.library``, ``torch._C``) or a function's ``__code__``, which the reading of the
code flags, and a function whose code is found changed back is reported as ``lifted``. So an answer that
reaches a ready-made answer gets an error, never its result, even with the watch switched off.
:class:`Guarded` puts the watch and the fence around a call together: the fence lives in the caller's
frame, not in the watch in force, which the answer's code could reach.
"""

from __future__ import annotations

import functools
import types
import warnings
from typing import TYPE_CHECKING

import torch

from .readymade import FENCE_FILE, forbidden_overloads
from .watch import CallWatch, forbidden_functions, plumbing, ran_op

if TYPE_CHECKING:
    from .checks import Check

# the dispatch keys of the devices a student computes on; a kernel registered for a device torch was not
# built for is never reached, and costs nothing
DEVICE_KEYS = ("CPU", "CUDA", "MPS")
REFUSAL = "a ready-made answer of this task, switched off while the answer runs"


class ReadyMadeRefused(RuntimeError):
    """Raised by a ready-made answer called while the fence is up."""


@functools.cache
def refusing_code(free: int) -> types.CodeType:
    """Code that raises, for a function with ``free`` closure variables (``__code__`` must keep their number:
    a method that calls ``super()`` has one, ``__class__``)."""
    names = [f"v{i}" for i in range(free)]
    source = ("def outer():\n"
              + "".join(f"    {n} = None\n" for n in names)
              + "    def refused(*args, **kwargs):\n"
              + "".join(f"        {n}\n" for n in names)  # used, so they are the inner function's free variables
              + f"        raise RuntimeError({REFUSAL!r})\n"
              + "    return refused\n")
    space: dict = {}
    exec(compile(source, FENCE_FILE, "exec"), space)  # noqa: S102 - the grader's own fixed source
    return space["outer"]().__code__


def _refuser(op: str, fence: Fence):
    def refuse(*args, **kwargs):
        fence.hit = fence.hit or op
        raise ReadyMadeRefused(f"torch's {op.removeprefix('aten::')}: {REFUSAL}")
    return refuse


plumbing(_refuser(None, None))  # the kernel is the grader's code, run from the student's: not a call of theirs


def _library():
    """A registration handle of torch's own (not ``torch.library.Library``, which allows one Python kernel per
    operator and key, so a fence inside another's would fail); releasing it restores the kernels it replaced."""
    try:
        return torch._C._dispatch_library("IMPL", "aten", "", __file__, 0)
    except TypeError:  # torch before 2.1 takes no file and line
        return torch._C._dispatch_library("IMPL", "aten", "")


class Fence:
    """While in force, the ready-made answers of ``check`` raise instead of computing (see the module).

    ``hit``: the first forbidden operator that was refused (``None``: none was). ``lifted``: why the fence
    cannot vouch for the run (a function's refusing code replaced while it was up), or ``None``.
    ``torch_ops=False`` keeps torch's operators as they are (training tasks, which forbid none of them).
    """

    def __init__(self, check: Check, torch_ops: bool = True):
        self.hit: str | None = None
        self.lifted: str | None = None
        self._functions = forbidden_functions(check)
        self._ops = forbidden_overloads(tuple(check.forbidden_attrs)) if torch_ops else ()
        self._handle = None
        self._swapped: list[tuple[types.FunctionType, types.CodeType, types.CodeType]] = []

    def __enter__(self) -> Fence:
        for fn in self._functions:
            refusing = refusing_code(len(fn.__code__.co_freevars))
            self._swapped.append((fn, fn.__code__, refusing))
            fn.__code__ = refusing
        if self._ops:
            with warnings.catch_warnings():  # torch warns that a kernel is overridden: the point of the fence
                warnings.simplefilter("ignore")
                self._handle = _library()
                for op in self._ops:
                    refuse = _refuser(op, self)
                    for key in DEVICE_KEYS:
                        self._handle.impl(op.removeprefix("aten::"), key, refuse, False)
        return self

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.reset()  # the dispatcher's own kernels again
            self._handle = None
        for fn, original, refusing in reversed(self._swapped):
            if fn.__code__ is not refusing and self.lifted is None:
                self.lifted = "switched off the grader's fence around the ready-made answers (a function's code)"
            fn.__code__ = original
        self._swapped.clear()


class Guarded:
    """The watch and the fence around one call of an answer: what it calls is seen, and what it may not use
    does not compute. ``found`` and ``tampered`` as :class:`~.watch.CallWatch` reports them, or the fence's
    refusal and lifting when the watch saw nothing."""

    def __init__(self, check: Check, strict: bool = False, torch_calls: bool = True):
        self.watch = CallWatch(check, strict=strict, torch_calls=torch_calls)
        self._fence = Fence(check, torch_ops=torch_calls)
        self._attrs = tuple(check.forbidden_attrs)

    def __enter__(self) -> Guarded:
        self._fence.__enter__()
        try:
            self.watch.__enter__()
        except BaseException:
            self._fence.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.watch.__exit__(*exc)
        finally:
            self._fence.__exit__(*exc)

    @property
    def found(self) -> str | None:
        if self.watch.found:
            return self.watch.found
        return ran_op(self._fence.hit, self._attrs) if self._fence.hit else None

    @property
    def tampered(self) -> str | None:
        return self.watch.tampered or self._fence.lifted


plumbing(Fence.__enter__, Fence.__exit__, Guarded.__enter__, Guarded.__exit__)
