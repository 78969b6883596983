"""Which modules reach the operating system directly: derived from what they expose, not typed.

:mod:`.static` names the modules a course exercise never needs (``os``, ``subprocess``, ``socket``...) and
what each reaches. Python has more ways in than any list remembers: ``posix`` is ``os`` without its Python
layer (``posix.system``, ``posix.fork``), ``_posixsubprocess.fork_exec`` starts programs, ``_ctypes.dlopen``
and cffi's ``FFI.dlopen`` load C libraries into the process. So the rest are found from what they expose:

* a module written in C (built into the interpreter, or an extension module's shared library): imported,
  which runs no Python code, and read for the operating system's calls in :data:`RAW_CALLS`;
* a Python module or package (read, never imported, since importing runs its code in the grader): its
  source files (a package's own, not its subpackages') are read for an import of such a C module.

The C modules that only start threads (``_thread``), open files through Python's own layer (``_io``,
``builtins``) or set signal handlers (``_signal``) are found too, but do not spread to the Python modules
that import them: ``functools`` and ``dataclasses`` take a lock from ``_thread``, and the watch sees every
thread while an answer runs.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import re
import sys
import types
from pathlib import Path

# The operating system's calls a C module may expose, and what each one reaches.
RAW_CALLS = {
    "fork": "processes", "forkpty": "processes", "fork_exec": "processes", "posix_spawn": "processes",
    "execv": "other programs", "execve": "other programs", "system": "other programs (a shell)",
    "setsid": "processes", "kill": "processes", "dlopen": "C libraries and raw memory",
    "dlsym": "C libraries and raw memory", "load_library": "C libraries and raw memory",
    "socket": "the network", "mmap": "shared memory", "setrlimit": "the sandbox's limits",
    "create_dynamic": "the import system", "listdir": "files", "scandir": "files",
    "start_new_thread": "background threads", "open": "files", "setitimer": "the grader's timers",
}
# Found in a C module, but not held against the Python modules that import it (see the module's docstring).
# (mmap too: PIL and rich map image and terminal files with it.)
LOCAL_ONLY = {"start_new_thread", "open", "setitimer", "listdir", "scandir", "mmap"}
# The libraries a course notebook uses, whose attribute chains are followed (:func:`modules_on_the_way`)
COURSE_LIBRARIES = {"torch", "numpy", "matplotlib", "tqdm", "lmbook", "math", "random", "functools",
                    "itertools", "collections", "dataclasses", "typing"}
# Imports as a source file writes them (``import x``, ``from x import y``, ``__import__('x')``): read as
# text, which is fast enough for a package of a hundred files and errs towards finding more
IMPORTED = re.compile(r"^[ \t]*(?:import|from)[ \t]+([A-Za-z_]\w*)|__import__\(\s*['\"]([A-Za-z_]\w*)", re.MULTILINE)


def _is_c_module(name: str) -> bool:
    if name in sys.builtin_module_names:
        return True
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    origin = getattr(spec, "origin", None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


@functools.lru_cache(maxsize=1024)
def c_module_calls(name: str) -> frozenset[str]:
    """The raw calls a C module exposes (empty for any other module, or one that cannot be imported)."""
    if "." in name or not _is_c_module(name):
        return frozenset()
    try:
        module = importlib.import_module(name)  # C: importing it runs no Python code of anyone's
    except Exception:  # noqa: BLE001 - a module this interpreter lacks reaches nothing here
        return frozenset()
    return frozenset(RAW_CALLS) & set(dir(module))


def _sources(name: str) -> list[Path]:
    """A Python module's file, or a package's own files (not its subpackages'), found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a parent package whose import fails: nothing to read
        return []
    origin = getattr(spec, "origin", None)
    if not origin or not origin.endswith(".py"):
        return []
    path = Path(origin)
    return sorted(path.parent.glob("*.py")) if path.name == "__init__.py" else [path]


def _imported_modules(path: Path) -> set[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return set()
    return {a or b for a, b in IMPORTED.findall(text)}


@functools.lru_cache(maxsize=1024)
def raw_reach(name: str) -> str | None:
    """What importing the top-level module ``name`` reaches directly, in words, or None."""
    own = c_module_calls(name)
    if own:
        return ", ".join(sorted({RAW_CALLS[c] for c in own})) + f" ({', '.join(sorted(own)[:4])})"
    spread: dict[str, frozenset[str]] = {}
    for path in _sources(name):
        for imported in _imported_modules(path) - {name}:
            calls = c_module_calls(imported) - LOCAL_ONLY
            if calls:
                spread[imported] = calls
    if not spread:
        return None
    calls = sorted(set().union(*spread.values()))
    return (", ".join(sorted({RAW_CALLS[c] for c in calls}))
            + f" (through `{'`, `'.join(sorted(spread))}`: {', '.join(calls[:4])})")


def modules_on_the_way(path: list[str]) -> list[tuple[str, str | None]]:
    """The modules an attribute chain that starts at an imported module passes through, after its own package
    (``torch.serialization.os.fork``: ``os``), each with the attribute that follows it (or None), resolved
    in the grader's process for the libraries the course uses (imported here if need be; any other module is
    not imported, since importing runs its code: ``antigravity`` opens a browser); the walk stops at the
    first attribute that is not a module."""
    if path[0] not in COURSE_LIBRARIES:
        return []
    try:
        obj = importlib.import_module(path[0])
    except Exception:  # noqa: BLE001 - a library this machine lacks: nothing to name
        return []
    package = obj.__name__.split(".")[0]
    found = []
    for i, attr in enumerate(path[1:], start=1):
        try:
            obj = getattr(obj, attr)
        except Exception:  # noqa: BLE001 - a lazy attribute whose loading fails, or none by that name
            break
        if not isinstance(obj, types.ModuleType):
            break
        name = getattr(obj, "__name__", "")
        if isinstance(name, str) and name.split(".")[0] != package:
            found.append((name, path[i + 1] if i + 1 < len(path) else None))
    return found
