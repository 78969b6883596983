"""Declarative checks: one definition serves the visible test, the hidden test and the autograder.

A :class:`Check` is data: the cases to try (input generators), an independent
reference (torch's own op where one exists), a comparison, and the common
wrong answers (:class:`Mutant`) it recognises by name. :func:`run_check`
executes one against a student's function and raises :class:`CheckFailed`
with a message in the student's terms, never a bare ``AssertionError``.
"""

from __future__ import annotations

import dis
import functools
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

from ..device import get_device
from . import values
from .verdict import Outcome, decide, forbidden_message, not_implemented

Inputs = tuple[tuple, dict]


@dataclass(frozen=True)
class Case:
    """One input to try. ``make(generator, device)`` returns ``(args, kwargs)``.

    ``smaller``: smaller versions of a visible case (fewer rows, positions, dimensions; see
    :func:`~lmbook.grading.reproduce.sized`); when the case fails, the smallest of them that fails too is shown to
    the student as Python to paste.
    """

    name: str
    make: Callable[[torch.Generator, torch.device], Inputs]
    smaller: tuple[Case, ...] = ()


@dataclass(frozen=True)
class Mutant:
    """A known wrong implementation, and what the student most likely misunderstood."""

    fn: Callable
    misconception: str


@dataclass(frozen=True)
class Check:
    """What a task's function must do, as data.

    ``compare(out, ref)`` returns None when ``out`` is acceptable and otherwise
    a sentence saying what differs. ``forbidden`` lists objects the answer may
    not use (the graded answer in lmbook, or torch's ready-made op);
    ``forbidden_attrs`` lists attribute names that reach them (``torch.log_softmax``,
    ``x.log_softmax()``).
    """

    task: str
    what: str
    reference: Callable
    cases: Sequence[Case]
    hidden_cases: Sequence[Case]
    compare: Callable[[object, object], str | None]
    mutants: Sequence[Mutant] = ()
    forbidden: Sequence[object] = ()
    forbidden_attrs: Sequence[str] = ()
    forbidden_modules: Sequence[str] = ()
    # What the statement also specifies of the result: no gradient tracking; the inputs' floating dtype.
    no_grad: bool = False
    keep_dtype: bool = False
    # The statement asks that the gradient flow back into the inputs that track one (a learned table, say).
    needs_grad: bool = False
    # Whether the answer must leave its inputs as they were (the exercises say so, unless a task works in place).
    inputs_kept: bool = True
    run: Callable | None = None  # custom runner (e.g. a training task); default: call and compare
    # A training task, graded outside the student's kernel: the kernel calls the answer on
    # ``train_args()`` and the model it returns on ``eval_set(hidden, seed).contexts``; then
    # ``judge_model(eval_set, logits, window, seconds)`` returns (passed, message).
    probe: str = "call"
    train_args: Callable | None = None
    eval_set: Callable | None = None
    judge_model: Callable | None = None


class CheckFailed(Exception):
    """A check failed; the message says what is wrong in the student's terms."""

    def _render_traceback_(self) -> list[str]:
        # IPython calls this instead of printing a traceback: the student (and the
        # feedback) sees the diagnosis, not the grading code or hidden inputs.
        return [f"\x1b[31m✗ {line}\x1b[0m" if i == 0 else line for i, line in enumerate(str(self).splitlines())]


# ----------------------------------------------------------------------------- using the answer


def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _unwrap(obj):
    """What a decorated function or a partial really runs (``@torch.no_grad()`` keeps it in ``__wrapped__``)."""
    for _ in range(20):
        inner = obj.func if isinstance(obj, functools.partial) else getattr(obj, "__wrapped__", None)
        if inner is None or inner is obj:
            break
        obj = inner
    return obj


def _captured(fn: types.FunctionType) -> list:
    """The objects a function holds besides its code: default arguments and closure cells."""
    held = list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
    for cell in fn.__closure__ or ():
        try:
            held.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    return held


def _functions_of(obj) -> list[types.FunctionType]:
    """The Python functions that make up ``obj``: itself, or a class's (or instance's) methods."""
    obj = _unwrap(obj)
    if isinstance(obj, types.MethodType):
        obj = obj.__func__
    if isinstance(obj, types.FunctionType):
        return [obj]
    cls = obj if isinstance(obj, type) else type(obj)
    # only classes the student wrote (in the notebook) are looked into; torch's own are trusted
    return [f for c in cls.__mro__ if c.__module__ == "__main__"
            for f in vars(c).values() if isinstance(f, types.FunctionType)]


# The grader's own code (the engine, and the tasks' references and mutants) is never an answer.
GRADER_MODULES = ("lmbook.grading", "lmbook.tasks")


def _in_modules(module: str, modules: Sequence[str]) -> bool:
    return any(module == m or module.startswith(m + ".") for m in modules)


def _is_lmbook_or_banned(obj, check: Check) -> bool:
    if any(obj is f for f in check.forbidden):
        return True
    module = getattr(obj, "__module__", None) or ""
    return _in_modules(module, (*GRADER_MODULES, *check.forbidden_modules))


def find_forbidden_use(answer, check: Check) -> str | None:
    """Name the forbidden object an answer is, or calls, if any (following the student's own helpers, and what
    their functions hold: decorators' wrapped functions, default arguments, closures)."""
    answer = _unwrap(answer)
    if _is_lmbook_or_banned(answer, check):
        return f"`{getattr(answer, '__qualname__', answer)}` is the ready-made implementation, not yours"
    module = getattr(answer, "__module__", None) or ""
    if getattr(answer, "__name__", None) in check.forbidden_attrs and (module.startswith("torch") or not module):
        return f"is torch's own `{answer.__name__}`, not yours"
    seen: set[int] = set()
    todo = _functions_of(answer)
    while todo:
        fn = todo.pop()
        if id(fn.__code__) in seen:
            continue
        seen.add(id(fn.__code__))
        for obj in map(_unwrap, _captured(fn)):
            if _is_lmbook_or_banned(obj, check):
                return f"holds `{getattr(obj, '__qualname__', obj)}`, the ready-made answer"
            if isinstance(obj, types.FunctionType | type) and getattr(obj, "__module__", "") == "__main__":
                todo.extend(_functions_of(obj))
        for code in _code_objects(fn.__code__):
            for ins in dis.get_instructions(code):
                if ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and ins.argval in check.forbidden_attrs:
                    return f"calls `.{ins.argval}`, a ready-made implementation of what this task asks you to write"
                if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                    obj = fn.__globals__.get(ins.argval)
                    if obj is None:
                        continue
                    if _is_lmbook_or_banned(obj, check):
                        return f"uses `{ins.argval}` ({getattr(obj, '__module__', '')}), the ready-made answer"
                    if isinstance(obj, types.FunctionType | type) and getattr(obj, "__module__", "") == "__main__":
                        todo.extend(_functions_of(obj))  # a helper of the student's: look inside it too
                    if isinstance(obj, types.ModuleType) and _in_modules(
                            obj.__name__, (*GRADER_MODULES, *check.forbidden_modules)):
                        return f"uses the module `{obj.__name__}`, which contains the ready-made answer"
    return None


class CallWatch:
    """Notes, while the answer runs, the first call of a ready-made answer, found by what is called.

    The static analysis and :func:`find_forbidden_use` read names and the objects a function holds; this
    sees the calls themselves, so an alias, a default argument, a lambda bound later, code compiled at run
    time or a module named at run time are caught all the same. Two hooks: ``sys.setprofile`` sees Python
    calls (a forbidden function or method known by its code object, a built-in by identity, and from the
    student's own code, ``__main__``, a call into the grader's or a forbidden module or of a torch built-in
    by a forbidden name); a :class:`~torch.overrides.TorchFunctionMode` sees every torch function and tensor
    method the answer calls, even from C (``operator.methodcaller``, ``map``), by identity or forbidden
    name. ``found`` is ``None`` when nothing was seen. Use as a context manager around the call only.
    """

    def __init__(self, check: Check):
        self.found: str | None = None
        self._codes: dict[types.CodeType, str] = {}
        for f in check.forbidden:
            for fn in [v for v in vars(f).values() if isinstance(v, types.FunctionType)] if isinstance(f, type) \
                    else [_unwrap(f)]:
                if isinstance(fn, types.FunctionType):
                    self._codes[fn.__code__] = getattr(f, "__qualname__", fn.__qualname__)
        self._objects = {id(f): f for f in check.forbidden}  # by identity: built-ins, functions, classes
        self._modules = (*GRADER_MODULES, *check.forbidden_modules)
        self._attrs = set(check.forbidden_attrs)

    def _profile(self, frame, event, arg) -> None:
        if self.found is not None:
            return
        student = frame.f_globals.get("__name__") == "__main__"
        if event == "c_call":
            name = getattr(arg, "__name__", "")
            if self._objects.get(id(arg)) is arg:
                self.found = f"called `{name}` while it ran, the ready-made answer"
            elif student and name in self._attrs and _from_torch(arg):
                self.found = f"called torch's `{name}` while it ran, a ready-made implementation of this task"
        elif event == "call":
            caller = frame.f_back
            if frame.f_code in self._codes:
                self.found = f"called `{self._codes[frame.f_code]}` while it ran, the ready-made answer"
            elif caller is not None and caller.f_globals.get("__name__") == "__main__" and _in_modules(
                    str(frame.f_globals.get("__name__", "")), self._modules) and frame.f_code is not _HANDLER:
                self.found = (f"called `{frame.f_globals['__name__']}.{frame.f_code.co_name}` while it ran, "
                              "from a module that holds the ready-made answer")

    def _torch_call(self, func, caller: str) -> None:
        if self.found is not None or _in_modules(caller, GRADER_MODULES):  # the grader's own code (its mutants)
            return
        name = getattr(func, "__name__", "")
        if self._objects.get(id(func)) is func:
            self.found = f"called `{name}` while it ran, the ready-made answer"
        elif name in self._attrs:
            self.found = f"called torch's `{name}` while it ran, a ready-made implementation of this task"

    def __enter__(self) -> CallWatch:
        self._mode = _TorchCalls(self._torch_call)
        self._mode.__enter__()
        self._before = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc) -> None:
        if sys.getprofile() != self._profile and self.found is None:  # bound methods: == not `is`
            self.found = "switched off the grader's watch over the calls it makes (sys.setprofile)"
        sys.setprofile(self._before)
        self._mode.__exit__(*exc)


class _TorchCalls(TorchFunctionMode):
    """Reports each torch function the code calls (not the calls torch makes inside it: the mode is off there)."""

    def __init__(self, report: Callable):
        super().__init__()
        self.report = report

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # The Python code that made the call, past torch's own dispatch layers (for a call from C, such as
        # map(), the code that called that).
        frame, own = sys._getframe(1), getattr(_unwrap(func), "__code__", None)
        while frame.f_back is not None and (frame.f_globals.get("__name__") in _DISPATCH or frame.f_code is own):
            frame = frame.f_back  # a Python torch function hands itself to the mode from its own first line
        self.report(func, str(frame.f_globals.get("__name__", "")))
        return func(*args, **(kwargs or {}))


_DISPATCH = {"torch.overrides", "torch._tensor"}
_HANDLER = _TorchCalls.__torch_function__.__code__  # the watch's own frame, entered from the student's calls


def _from_torch(fn) -> bool:
    owner = getattr(fn, "__self__", None)
    module = getattr(fn, "__module__", None) or getattr(owner, "__module__", None) or getattr(owner, "__name__", "")
    return isinstance(owner, torch.Tensor) or str(module).startswith("torch")


# ----------------------------------------------------------------------------- running


def case_seed(seed: int, i: int) -> int:
    """The seed of case ``i`` of a check run with ``seed``: its inputs' and, before the call, torch's global RNG."""
    return seed * 1009 + i


# The inputs are drawn from a stream of their own: were it seeded as torch's global generator is before the call,
# an answer's random draws would repeat the draws that made its inputs (a "random" token would be one of the batch's).
INPUT_STREAM = 0x5DEECE66D


def case_inputs(case: Case, seed: int, i: int, device: torch.device) -> Inputs:
    """The inputs of case ``i`` for a check run with ``seed`` (the same numbers on every device)."""
    return case.make(torch.Generator().manual_seed(case_seed(seed, i) ^ INPUT_STREAM), device)


def planned(check: Check, hidden: bool) -> list[tuple[Case, int, int | None]]:
    """Every case one ``check(...)`` call runs, as (case, its index for :func:`case_seed`, its parent): the
    visible or hidden cases (parent None), then, for a visible call, each visible case's smaller versions (their
    parent's index, and its seed: the same stream of numbers, fewer of them)."""
    cases = list(check.hidden_cases if hidden else check.cases)
    out: list[tuple[Case, int, int | None]] = [(c, i, None) for i, c in enumerate(cases)]
    if not hidden:
        out += [(s, i, i) for i, c in enumerate(cases) for s in c.smaller]
    return out


def run_check(check: Check, answer: Callable, *, hidden: bool = False, seed: int = 0,
              device: torch.device | None = None, verbose: bool = True) -> int:
    """Run ``check`` on ``answer``; return the number of cases passed, or raise :class:`CheckFailed`.

    The answer gets each case's inputs, and the decision its result, as they would cross the grader's
    sandbox (:func:`values.round_trip`), and the decision is the grader's own (:func:`verdict.decide`).
    """
    device = device or get_device()
    reason = find_forbidden_use(answer, check)
    if reason:
        raise CheckFailed(forbidden_message(check, reason))
    if check.run is not None:
        return check.run(check, answer, hidden=hidden, seed=seed, device=device, verbose=verbose)
    plan = planned(check, hidden)
    main = [p for p in plan if p[2] is None]

    def run(case: Case, i: int, parent: int | None) -> Outcome:
        args, kwargs = case_inputs(case, seed, i, device)
        passed_in = (values.round_trip(tuple(args), device, inputs=True),
                     {k: values.round_trip(v, device, inputs=True) for k, v in kwargs.items()})
        watch = CallWatch(check)
        try:
            result = values.call_once(answer, passed_in[0], passed_in[1], case_seed(seed, i), around=watch)
        except NotImplementedError:
            raise CheckFailed(not_implemented(check)) from None
        if watch.found:
            raise CheckFailed(forbidden_message(check, watch.found))
        out = values.round_trip(result["out"], device) if "out" in result else None
        return Outcome(case, case_seed(seed, i), args, kwargs, out, result.get("raised"), result["changed"], parent)

    outcomes = [run(*p) for p in main]
    ok, message = decide(check, outcomes, hidden)
    if not ok and len(plan) > len(main):
        # the smaller versions of the visible cases, run only now that one failed: the grader runs them all
        # beforehand, and the decision (the same function) shows the same one
        outcomes += [run(*p) for p in plan[len(main):]]
        ok, message = decide(check, outcomes, hidden)
    if not ok:
        raise CheckFailed(message)
    if verbose:
        print(message)
    return len(main)


@torch.no_grad()
def model_logits(model, window: int, contexts: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A trained model's (N, V) logits, on the CPU, for the last ``window`` words of each context, in batches."""
    if isinstance(model, torch.nn.Module):
        model.eval()
    chunks = [model(contexts[i:i + 4096, contexts.shape[1] - window:].to(device)).float().cpu()
              for i in range(0, len(contexts), 4096)]
    return torch.cat(chunks)


class Registry:
    """The checks of one exercise notebook, looked up by task name."""

    def __init__(self, checks: Sequence[Check]):
        self.checks = {c.task: c for c in checks}

    def __call__(self, task: str, answer: Callable, *, hidden: bool = False, seed: int = 0) -> None:
        # Returns None on purpose: nbgrader reads a number displayed by a grade cell as partial credit.
        if task not in self.checks:
            raise KeyError(f"no check named {task!r}; known: {', '.join(self.checks)}")
        run_check(self.checks[task], answer, hidden=hidden, seed=seed)

    def __repr__(self) -> str:
        return f"Registry({', '.join(self.checks)})"
