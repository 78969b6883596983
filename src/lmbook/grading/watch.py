"""What an answer is and calls: the objects it holds, and, while it runs, every call it makes, in every thread.

:func:`find_forbidden_use` reads a function object (its code, and what it holds: decorators' wrapped functions,
default arguments, closures, the student's helpers) for a task's ready-made answer. :class:`CallWatch` sees
the calls themselves while the answer runs, three ways at once:

* ``sys.setprofile``: Python calls (a forbidden function known by its code, even a clone of it; anything of a
  module that holds ready-made answers: lmbook's tasks, a task's forbidden modules, the grader's own code
  called from the student's) and C calls (a forbidden built-in by identity, or one of torch's by name);
* a :class:`~torch.overrides.TorchFunctionMode`: every torch function and tensor method, even called from C
  (``map``, ``operator.methodcaller``), by identity or name;
* a :class:`~torch.utils._python_dispatch.TorchDispatchMode`: every operator the dispatcher runs, whatever
  route reached it (``torch.ops.aten``, a private C kernel, code compiled by ``torch.jit``, torch's function
  hooks switched off, a tensor subclass), against the operators that compute the task's forbidden ops
  (:func:`lmbook.grading.readymade.forbidden_aten`, listed from torch's own registry).

Threads: :func:`install_thread_hooks` makes every thread started afterwards (``threading``,
``concurrent.futures``, ``_thread``) run under the same three hooks, forwarding to the watch in force, so work
handed to another thread is watched too. What the watch cannot certify is reported as ``tampered``: its
hooks switched off or replaced, or a thread it did not start running beside the answer.

The names torch gives the forbidden ops, at every level, come from :mod:`.readymade`.
"""

from __future__ import annotations

import _thread
import dis
import functools
import sys
import threading
import types
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from .readymade import FENCE_FILE, forbidden_aten, torch_match

if TYPE_CHECKING:
    from .checks import Check

# The grader's own code (the engine, and the tasks' references and mutants) is never an answer.
GRADER_MODULES = ("lmbook.grading", "lmbook.tasks")
TASK_MODULES = ("lmbook.tasks",)  # references and mutants: the ready-made answer of every task
# The grader's own code that the student's code reaches by doing ordinary things (printing goes to the
# runner's stream, a figure to its display hook, the time limit's signal to its handler): never an answer.
PLUMBING: set[types.CodeType] = set()


def plumbing(*functions: Callable) -> None:
    """Declare grader functions that student code may call without reaching for the grader (output hooks)."""
    for f in functions:
        while f is not None:  # torch wraps a mode's handler (torch._disable_dynamo): the code that runs is inside
            PLUMBING.add(f.__code__)
            f = getattr(f, "__wrapped__", None)


# ----------------------------------------------------------------------------- what an answer holds


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


@functools.lru_cache(maxsize=1 << 14)
def _in_modules(module: str, modules: tuple[str, ...]) -> bool:
    """Whether ``module`` is one of ``modules`` or inside one. Remembered: asked at every torch call."""
    return any(module == m or module.startswith(m + ".") for m in modules)


def _is_lmbook_or_banned(obj, check: Check) -> bool:
    if any(obj is f for f in check.forbidden):
        return True
    module = getattr(obj, "__module__", None) or ""
    return _in_modules(module, (*GRADER_MODULES, *check.forbidden_modules))


def _library_object(obj) -> bool:
    """A module, or an object of a library's class (torch's tensors, lmbook's corpus): not the student's own."""
    if isinstance(obj, types.ModuleType):
        return True
    module = getattr(type(obj), "__module__", "") or ""
    return module not in ("__main__", "builtins") and not isinstance(obj, types.FunctionType | type)


def find_forbidden_use(answer, check: Check) -> str | None:
    """Name the forbidden object an answer is, or calls, if any (following the student's own helpers, and what
    their functions hold: decorators' wrapped functions, default arguments, closures). An attribute name
    counts where it is read from a library (``torch.log_softmax``, ``corpus.hmm``), not from the student's own
    objects (``self.fit``): what those call is seen by :class:`CallWatch` as it happens."""
    answer = _unwrap(answer)
    attrs = tuple(check.forbidden_attrs)
    if _is_lmbook_or_banned(answer, check):
        return "is the ready-made implementation of this task (the course's own or the grader's), not yours"
    module = getattr(answer, "__module__", None) or ""
    name = getattr(answer, "__name__", None) or ""
    if (module.startswith("torch") or not module) and (name in attrs or torch_match(name, attrs)):
        return f"is torch's own `{name if name in attrs else torch_match(name, attrs)}`, not yours"
    seen: set[int] = set()
    todo = _functions_of(answer)
    while todo:
        fn = todo.pop()
        if id(fn.__code__) in seen:
            continue
        seen.add(id(fn.__code__))
        for obj in map(_unwrap, _captured(fn)):
            if _is_lmbook_or_banned(obj, check):
                return "holds the ready-made implementation of this task (the course's own), not yours"
            if isinstance(obj, types.FunctionType | type) and getattr(obj, "__module__", "") == "__main__":
                todo.extend(_functions_of(obj))
        for code in _code_objects(fn.__code__):
            root = None  # the library object a chain of attribute loads starts from
            for ins in dis.get_instructions(code):
                if ins.opname in ("LOAD_ATTR", "LOAD_METHOD"):
                    if root is not None and (ins.argval in attrs or (
                            getattr(root, "__name__", "").startswith("torch") or isinstance(root, torch.Tensor))
                            and torch_match(ins.argval, attrs)):
                        named = ins.argval if ins.argval in attrs else torch_match(ins.argval, attrs)
                        return (f"calls `.{named}`, a ready-made implementation of what this task asks you "
                                "to write")
                    continue
                root = None
                if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                    obj = fn.__globals__.get(ins.argval)
                    if obj is None:
                        continue
                    if _is_lmbook_or_banned(obj, check):
                        return "uses the ready-made implementation of this task (the course's own), not yours"
                    if isinstance(obj, types.FunctionType | type) and getattr(obj, "__module__", "") == "__main__":
                        todo.extend(_functions_of(obj))  # a helper of the student's: look inside it too
                    if isinstance(obj, types.ModuleType) and _in_modules(
                            obj.__name__, (*GRADER_MODULES, *check.forbidden_modules)):
                        return "uses a module of the course's that contains the ready-made answer"
                    if _library_object(obj):
                        root = obj
    return None


# ----------------------------------------------------------------------------- the watch, in every thread

_current: CallWatch | None = None  # the watch in force, seen from every thread
_trusted: set[int] = set()  # the threads already there when the hooks were installed
_hooked: dict[tuple[object, str], Callable] = {}  # (module, name) -> the hook put there


def _profile_any(frame, event, arg):
    w = _current
    if w is not None:
        w._profile(frame, event, arg)


class _ForwardFunctions(TorchFunctionMode):
    """Reports each torch function a thread calls to the watch in force (not the calls torch makes inside it:
    the mode is off there)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        w = _current
        if w is not None:
            # The Python code that made the call, past torch's own dispatch layers (for a call from C, such as
            # map(), the code that called that).
            frame, own = sys._getframe(1), getattr(_unwrap(func), "__code__", None)
            while frame.f_back is not None and (frame.f_globals.get("__name__") in _DISPATCH or frame.f_code is own):
                frame = frame.f_back  # a Python torch function hands itself to the mode from its own first line
            w._torch_call(func, str(frame.f_globals.get("__name__", "")))
        return func(*args, **(kwargs or {}))


class _ForwardDispatch(TorchDispatchMode):
    """Reports each operator the dispatcher runs in a thread to the watch in force."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # else torch wraps the handler in torch._dynamo, whose import doubles torch's start-up time

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        w = _current
        if w is not None:
            w._aten_call(func)
        return func(*args, **(kwargs or {}))


_DISPATCH = {"torch.overrides", "torch._tensor"}
plumbing(_ForwardFunctions.__torch_function__, _ForwardDispatch.__torch_dispatch__)


def _thread_main(function, *args, **kwargs):
    """The first frame of every thread started under the hooks: the watch in force sees what it calls."""
    sys.setprofile(_profile_any)
    with _ForwardFunctions(), _ForwardDispatch():
        return function(*args, **kwargs)


def _watched_start(start: Callable) -> Callable:
    """``_thread.start_new_thread`` (or 3.13's ``start_joinable_thread``), running the thread under the hooks."""
    def start_watched(function, *args, **kwargs):
        return start(functools.partial(_thread_main, function), *args, **kwargs)
    # Not functools.wraps: its __wrapped__ would hand the unwatched original to anyone who asks.
    start_watched.__name__, start_watched.__doc__ = start.__name__, start.__doc__
    return start_watched


def install_thread_hooks() -> None:
    """From now on every new thread runs under the watch in force. The threads already running are trusted
    (in Jupyter, the kernel's own; in the grader, none runs student code yet). Idempotent: once installed,
    it trusts no new thread."""
    if _hooked:
        return
    _trusted.update(sys._current_frames())
    _trusted.update(t.ident for t in threading.enumerate() if t.ident is not None)  # started, not yet running
    for module, name in [(_thread, "start_new_thread"), (_thread, "start_joinable_thread"),
                         (threading, "_start_new_thread"), (threading, "_start_joinable_thread")]:
        original = getattr(module, name, None)
        if original is None or _hooked.get((module, name)) is original:
            continue
        hooked = _watched_start(original)
        setattr(module, name, hooked)
        _hooked[(module, name)] = hooked
        plumbing(hooked)  # starting a thread (tqdm's monitor, a pool's worker) is not calling the grader


def _called_by_import_system(frame, depth: int = 12) -> bool:
    """Whether this call is part of an import in progress (a finder, a module's body, what they call)."""
    back = frame.f_back
    while back is not None and depth > 0:
        if back.f_code.co_filename.startswith("<frozen importlib"):
            return True
        back, depth = back.f_back, depth - 1
    return False


def _strangers() -> list[int]:
    """Threads running Python that the hooks did not start and were not there when they were installed."""
    found = []
    for ident, frame in sys._current_frames().items():
        if ident in _trusted:
            continue
        while frame.f_back is not None:
            frame = frame.f_back
        if frame.f_code is not _thread_main.__code__:
            found.append(ident)
    return found


def _hooks_in_place() -> bool:
    return all(getattr(module, name, None) is hook for (module, name), hook in _hooked.items())


# ----------------------------------------------------------------------------- the watch


def _code_key(code: types.CodeType) -> tuple:
    """What a code object computes, whatever it is called: its bytecode and constants (a clone of a function,
    ``types.FunctionType(f.__code__, ...)`` or ``code.replace(co_name=...)``, has the same)."""
    return code.co_code, code.co_names, tuple(c for c in code.co_consts if not isinstance(c, types.CodeType))


def _defined_in(fn: types.FunctionType, cls: type) -> bool:
    """Whether a class's method is written in the class's own file. A dataclass's ``__repr__`` is a wrapper
    whose code is dataclasses' own, shared by every dataclass (torch.compile calls some): not the class's."""
    module = sys.modules.get(getattr(cls, "__module__", ""), None)
    return fn.__code__.co_filename == getattr(module, "__file__", None)


_GRADER_CODE, _OTHER_CODE, _UNSEEN = object(), object(), object()  # kinds of code, for the profile hook's memo


def _substantial(code: types.CodeType) -> bool:
    """Code that is someone's work, not generated (dataclasses' methods) or a one-liner anyone would write."""
    return not code.co_filename.startswith("<") and len(code.co_code) >= 24


def forbidden_functions(check: Check) -> list[types.FunctionType]:
    """The Python functions of a task's ready-made answers: each forbidden function (past its decorators), and
    the methods a forbidden class defines in its own file."""
    found: dict[int, types.FunctionType] = {}
    for f in check.forbidden:
        for fn in [v for v in vars(f).values() if isinstance(v, types.FunctionType)] if isinstance(f, type) \
                else [_unwrap(f)]:
            if isinstance(fn, types.FunctionType) and (not isinstance(f, type) or _defined_in(fn, f)):
                found[id(fn)] = fn
    return list(found.values())


class CallWatch:
    """Notes, while the answer runs, the first call of a ready-made answer, found by what is called.

    ``found``: what was seen (the task gets no credit), or ``None``. ``tampered``: why the watch cannot vouch
    for the run (its hooks switched off or replaced, a thread it did not start running), or ``None``. Use as a
    context manager around the call and what makes its result (:func:`values.call_once`). ``strict``: a
    thread the watch did not start counts as tampering (the grader's sandbox, where every thread of the
    student's starts under the hooks).
    """

    def __init__(self, check: Check, strict: bool = False, torch_calls: bool = True):
        self.found: str | None = None
        self.tampered: str | None = None
        self.strict = strict
        self.torch_calls = torch_calls  # training runs without the torch modes' overhead: Python calls only
        # the forbidden functions' code, and its fingerprint (for clones); names are never reported (see _kind_of)
        self._codes: set = set()
        for fn in forbidden_functions(check):
            self._codes.add(fn.__code__)
            if _substantial(fn.__code__):  # its clones too (not a generated or one-line method's lookalikes)
                self._codes.add(_code_key(fn.__code__))
        self._objects = {id(f): f for f in check.forbidden}  # by identity: built-ins, functions, classes
        # The C functions among them by their names, which cannot change: the profile sees every C call a
        # training loop makes, and id() there would be an audit event each (see .audit)
        self._c_objects: dict[str, tuple] = {}
        for f in check.forbidden:
            if isinstance(f, types.BuiltinFunctionType | types.MethodDescriptorType | types.WrapperDescriptorType):
                self._c_objects[f.__name__] = (*self._c_objects.get(f.__name__, ()), f)
        self._modules = (*TASK_MODULES, *check.forbidden_modules)
        self._attrs = tuple(check.forbidden_attrs)
        self._aten = forbidden_aten(self._attrs)
        self._aten_seen: dict[object, bool] = {}
        self._kinds: dict[types.CodeType, object] = {}
        self._c_names: dict[str, object] = {}
        # the right versions of earlier tasks' functions this task's answer is given in place of the student's
        # own (:mod:`.earlier`): the grader's code, called by the answer, and no ready-made answer of this task
        from .earlier import in_place_of

        rights = [f for _, f in getattr(check, "builds_on", ())]
        for right in [in_place_of, *rights] if rights else []:
            for code in _code_objects(right.__code__):
                self._kinds[code] = _OTHER_CODE

    # what each hook reports

    def _profile(self, frame, event, arg) -> None:
        # Called for every call in every watched thread (training loops make millions): each code object and
        # each C function's name is judged once, then looked up.
        if self.found is not None:
            return
        if event == "call":
            code = frame.f_code
            kind = self._kinds.get(code)
            if kind is None:
                kind = self._kinds[code] = self._kind_of(code, frame)
            if kind is _OTHER_CODE:  # nearly every call: decided without looking up the stack
                return
            # A finder or a module's body, run by an import (torch's optimizers import torch._dynamo when first
            # made: millions of calls), is not a call the answer made. Asked only of the calls that would count,
            # not at every call an import makes.
            if _called_by_import_system(frame):
                return
            if kind is _GRADER_CODE:
                if not _called_by_grader(frame.f_back):
                    self.found = "called the grader's own code while it ran, which is not part of an answer"
            else:
                self.found = kind
        elif event == "c_call":
            name = getattr(arg, "__name__", "")
            hit = self._c_names.get(name, _UNSEEN)
            if hit is _UNSEEN:
                hit = self._c_names[name] = torch_match(name, self._attrs)
            same_name = self._c_objects.get(name)
            if same_name and any(arg is f for f in same_name):
                self.found = "called the ready-made implementation of this task while it ran"
            elif hit and _from_torch(arg):
                self.found = f"called torch's `{hit}` while it ran, a ready-made implementation of this task"

    def _kind_of(self, code, frame):
        """What calling this code is: the ready-made answer (the message), the grader's own, or anything else."""
        if code in PLUMBING:
            return _OTHER_CODE
        if code.co_filename == FENCE_FILE:  # a ready-made answer's code, replaced by the fence's refusal
            return "called the ready-made implementation of this task while it ran"
        module = str(frame.f_globals.get("__name__", ""))
        if code in self._codes or _code_key(code) in self._codes:
            return "called the ready-made implementation of this task (or a copy of its code) while it ran"
        if _in_modules(module, self._modules):
            return "called code of a module that holds the ready-made answer while it ran"
        if _in_modules(module, GRADER_MODULES) and code.co_name not in _DESCRIBING:
            return _GRADER_CODE
        return _OTHER_CODE

    def _torch_call(self, func, caller: str) -> None:
        if self.found is not None or _in_modules(caller, GRADER_MODULES):  # the grader's own code
            return
        name = getattr(func, "__name__", "")
        if self._objects.get(id(func)) is func:
            self.found = "called the ready-made implementation of this task while it ran"
        elif torch_match(name, self._attrs):
            self.found = (f"called torch's `{torch_match(name, self._attrs)}` while it ran, a ready-made "
                          "implementation of this task")

    def _aten_call(self, func) -> None:
        if self.found is not None or not self._aten:
            return
        hit = self._aten_seen.get(func)
        if hit is None:
            hit = self._aten_seen[func] = getattr(getattr(func, "_schema", None), "name", "") in self._aten
        if hit:
            self.found = ran_op(func._schema.name, self._attrs)

    # entering and leaving

    def __enter__(self) -> CallWatch:
        global _current
        install_thread_hooks()
        self._modes = [_ForwardFunctions(), _ForwardDispatch()] if self.torch_calls else []
        for mode in self._modes:
            mode.__enter__()
        self._before = sys.getprofile()
        self._outer = _current
        _current = self
        sys.setprofile(_profile_any)
        return self

    def __exit__(self, *exc) -> None:
        global _current
        # Read before anything is restored: what the answer left of the hooks.
        profile = sys.getprofile()
        stack_ok = True
        if self._modes:
            stack_ok = (torch._C._len_torch_function_stack() > 0
                        and torch._C._get_function_stack_at(torch._C._len_torch_function_stack() - 1) is self._modes[0]
                        and any(m is self._modes[1] for m in _get_current_dispatch_mode_stack()))
        strangers = _strangers() if self.strict else []
        in_force = _current is self
        sys.setprofile(self._before)
        _current = self._outer
        for mode in reversed(self._modes):
            try:
                mode.__exit__(*exc)
            except Exception:  # noqa: BLE001 - a mode the answer popped already: reported below
                stack_ok = False
        if self.tampered is None:
            # Python drops a profile hook that raises, and the hook raises what any call may raise at that
            # depth: an answer that recursed too deep or ran out of memory, or a time limit's interrupt. Then
            # the answer's exception is its result (the task fails with it), not tampering.
            dropped_by_error = (profile is None and exc and exc[0] is not None
                                and (issubclass(exc[0], (RecursionError, MemoryError))
                                     or not issubclass(exc[0], Exception)))  # interrupts, time limits
            if profile is not _profile_any and not dropped_by_error:
                self.tampered = "switched off the grader's watch over the calls it makes (sys.setprofile)"
            elif not in_force:
                self.tampered = "switched off the grader's watch from inside it (the watch in force was replaced)"
            elif not stack_ok:
                self.tampered = ("switched off the grader's watch over torch's calls (torch's function or "
                                 "dispatch modes)")
            elif not _hooks_in_place():
                self.tampered = "replaced the grader's hook on new threads (_thread.start_new_thread)"
            elif strangers:
                self.tampered = ("ran beside a thread the grader did not start, whose calls it could not watch "
                                 f"({len(strangers)} thread(s))")


def ran_op(op: str, forbidden: Sequence[str]) -> str:
    """What running a forbidden operator (``aten::_log_softmax``, any overload) is, in the task's own words."""
    bare = op.removeprefix("aten::").split(".")[0]
    return (f"ran torch's `{torch_match(bare, forbidden) or bare}` while it ran, a ready-made implementation of "
            "this task")


_DESCRIBING = {"__repr__", "__str__", "__format__"}  # printing the grader's objects computes nothing


def _called_by_grader(frame) -> bool:
    """Whether the nearest caller that is the grader's or the student's (past libraries: torch's decorators,
    a C function's Python caller) is the grader's."""
    for _ in range(64):
        if frame is None:
            return False
        module = str(frame.f_globals.get("__name__", ""))
        if module == "__main__":
            return False
        if _in_modules(module, GRADER_MODULES):
            return True
        frame = frame.f_back
    return False


def _from_torch(fn) -> bool:
    owner = getattr(fn, "__self__", None)
    module = getattr(fn, "__module__", None) or getattr(owner, "__module__", None) or getattr(owner, "__name__", "")
    return isinstance(owner, torch.Tensor) or str(module).startswith("torch")


# entering and leaving the watch, and a watched thread's first frame, are the grader's
plumbing(CallWatch.__enter__, CallWatch.__exit__, _strangers, _hooks_in_place, _thread_main)
