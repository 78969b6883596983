"""What the notebook's own code may not do, however it reaches it: an audit hook (PEP 578) in the runner.

Reading the code (:mod:`.static`) flags processes, programs, raw memory and the garbage collector's lists of
live objects when it sees them; code can still reach them by a route no reading follows (a name computed at
run time, a function found through another object). CPython raises an *audit event* inside the C function
itself, so ``os.fork``, ``posix.fork`` and any alias of either are one event, whatever led there. The runner
installs :func:`refuse` in the notebook's process before any student code runs. Python has no call that
removes an audit hook, and the routes to one through memory (``ctypes``) or the garbage collector
(``gc.get_objects``) are among what it refuses.

Who asked decides: the first frame of the call stack, going outwards, that is neither the standard library
nor IPython (the student's shell: a ``!`` command or a magic is the student's own) is either a library's
(torch.compile running the C++ compiler, a DataLoader starting its workers, the runner forking a hidden test,
:mod:`.confine` loading libc) or the student's (a notebook cell, or code the notebook compiled). Only the
student's own requests are refused: the call raises ``PermissionError`` and the notebook is flagged, as the
README says of these kinds. A student's code that gives itself a library's file name is refused too.

The hook lives in the student's process, so its record of what it refused is a Python object the notebook
could reach; what cannot be undone is the refusal itself (the call never happens).
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig

# event -> what the student's code was about to do, in the README's words
REFUSED = {
    "os.fork": "start a process", "os.forkpty": "start a process", "os.exec": "run a program",
    "os.posix_spawn": "run a program", "os.spawn": "run a program", "os.system": "run a shell command",
    "subprocess.Popen": "run a program",
    "ctypes.dlopen": "load a C library (raw memory)", "ctypes.dlsym": "load a C library (raw memory)",
    "ctypes.dlsym/handle": "load a C library (raw memory)", "ctypes.cdata": "read raw memory",
    "ctypes.cdata/buffer": "read raw memory", "ctypes.string_at": "read raw memory",
    "ctypes.wstring_at": "read raw memory",
    "gc.get_objects": "list the garbage collector's live objects", "gc.get_referrers":
    "list the garbage collector's live objects", "gc.get_referents": "list the garbage collector's live objects",
    "sys.addaudithook": "add an audit hook",
}
NAMING = ("compile", "code.__new__")  # events whose second argument is a file name the code will carry

STUDENT, LIBRARY, PASS_THROUGH = "student", "library", "pass-through"


def _roots() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(the student's shell, the libraries, the standard library): folders, each ending in a separator."""
    def folders(paths) -> tuple[str, ...]:
        return tuple(sorted({os.path.join(os.path.realpath(p), "") for p in paths if p}))

    import IPython

    shell = [os.path.dirname(IPython.__file__)]
    try:
        import ipykernel

        shell.append(os.path.dirname(ipykernel.__file__))
    except ImportError:
        pass
    libraries = [*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["purelib"],
                 sysconfig.get_paths()["platlib"], os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    standard = [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]]
    return folders(shell), folders(libraries), folders(standard)


class _Refuser:
    def __init__(self):
        self.shell, self.libraries, self.standard = _roots()
        self.kinds: dict[str, str] = {}
        self.refused: list[str] = []

    def kind(self, filename) -> str:
        if not isinstance(filename, str):
            return STUDENT
        found = self.kinds.get(filename)
        if found is None:
            found = self.kinds[filename] = self._kind(filename)
        return found

    def _kind(self, filename: str) -> str:
        if filename.startswith("<frozen "):
            return PASS_THROUGH
        if not os.path.isabs(filename):
            return STUDENT  # a notebook cell (<ipython-input-…>), or code made from a string
        path = os.path.realpath(filename)
        if path.startswith(self.shell):
            return PASS_THROUGH
        if path.startswith(self.libraries):  # before the standard library: conda's site-packages is inside it
            return LIBRARY
        if path.startswith(self.standard):
            return PASS_THROUGH
        return STUDENT  # a file the notebook wrote

    def asked_by_student(self, frame) -> bool:
        while frame is not None:
            kind = self.kind(frame.f_code.co_filename)
            if kind != PASS_THROUGH:
                return kind == STUDENT
            frame = frame.f_back
        return False

    def judge(self, event: str, args: tuple) -> None:
        if event in REFUSED:
            what = REFUSED[event]
        elif len(args) > 1 and self.kind(_name(args[1])) != STUDENT:  # one of NAMING
            what = "give its own code a library's file name"
        else:
            return
        if not self.asked_by_student(sys._getframe(2)):
            return
        self.refused.append(f"the notebook tried to {what} (`{event}`), which the sandbox refuses")
        raise PermissionError(f"the grader's sandbox does not let a notebook {what} ({event})")

    def hook(self):
        """The function Python calls for every audit event. Most are of no concern (a profile hook reading a
        frame's code is one, for every call a training loop makes): a plain function turns them away with
        one lookup, and only the rest reach :meth:`judge`."""
        concern, judge = frozenset(REFUSED) | frozenset(NAMING), self.judge

        def hook(event: str, args: tuple) -> None:
            if event in concern:
                judge(event, args)

        return hook


def _name(value) -> str | None:
    if isinstance(value, bytes):
        return os.fsdecode(value)
    return value if isinstance(value, str) else None


_refuser: _Refuser | None = None


def refuse() -> None:
    """Install the hook in this process (for good: the runner's notebook process only, never a test runner's)."""
    global _refuser
    if _refuser is None:
        _refuser = _Refuser()
        sys.addaudithook(_refuser.hook())


def refused() -> str | None:
    """The first thing the hook refused the student's code, in words for the report; None if nothing."""
    return _refuser.refused[0] if _refuser is not None and _refuser.refused else None
