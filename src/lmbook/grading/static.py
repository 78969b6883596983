"""Read a student's code (never run it) for tampering and for use of the ready-made answer.

This runs in the grader's own process, on the notebook's text, so nothing the
student's code does at run time can hide from it. Two questions:

* :func:`find_tampering`: does the notebook reach for the grader's machinery:
  IPython's hooks and input transformers, patching a library module, the
  interpreter's import system, files, processes or the network, or code built
  at run time (``exec``, ``getattr`` with a computed name) that would hide any
  of those? Each finding carries the cell, line and code as evidence.
* :func:`find_forbidden_use`: does the function graded for a task use that
  task's ready-made answer (torch's op, or lmbook's own), directly or through
  the student's helpers and aliases?
"""

from __future__ import annotations
import __future__

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .checks import Check


@dataclass(frozen=True)
class Finding:
    cell: int  # index of the notebook cell
    line: int
    code: str
    reason: str

    def __str__(self) -> str:
        return f"cell {self.cell}, line {self.line}: `{self.code}`: {self.reason}"


# Modules a course exercise never needs and a tampering notebook does.
SUSPECT_MODULES = {
    "os": "the operating system (files, processes, environment)",
    "subprocess": "running other programs", "shutil": "copying and deleting files",
    "socket": "the network", "urllib": "the network", "http": "the network", "requests": "the network",
    "ctypes": "raw memory", "signal": "the grader's timers", "sqlite3": "databases (the gradebook)",
    "importlib": "the import system", "builtins": "Python's built-in functions", "gc": "every live object",
    "inspect": "the caller's frames", "pathlib": "files", "glob": "files", "io": "files",
    "nbgrader": "the grader", "nbformat": "notebooks (the hidden tests)", "pickle": "loading arbitrary objects",
    "marshal": "loading code objects", "multiprocessing": "other processes", "threading": "background threads",
    "atexit": "exit hooks", "runpy": "running other code", "code": "running other code", "pty": "terminals",
    "resource": "the sandbox's limits", "sys": None,  # sys itself is fine; its hooks are not (below)
    "IPython": None, "lmbook": None, "torch": None, "numpy": None,
}
SUSPECT_SYS = {"modules", "meta_path", "path_hooks", "path", "settrace", "setprofile", "displayhook",
               "excepthook", "stdout", "stderr", "_getframe", "addaudithook", "setrecursionlimit", "exit",
               "argv", "orig_argv", "stdin", "__stdout__", "__stderr__", "__stdin__"}
# Reading and writing files through numpy and torch: how a notebook would reach the grader's inputs.
FILE_FUNCTIONS = {"load", "save", "savez", "savez_compressed", "fromfile", "tofile", "loadtxt", "savetxt",
                  "genfromtxt", "memmap", "from_file"}
SUSPECT_CALLS = {"exec": "runs code built at run time", "eval": "runs code built at run time",
                 "compile": "builds code at run time", "__import__": "imports a module by a computed name",
                 "open": "opens a file", "globals": "reaches the notebook's namespace as a dict",
                 "breakpoint": "starts a debugger"}
# The IPython magics a notebook may use, with the arguments they may have: none of these runs its
# argument as code or reaches a file or a process. (IPython expands {expressions} in a magic's argument,
# so the arguments are whole strings, not patterns with room for code.) `obj?` is `%pinfo obj`.
ALLOWED_MAGICS = {"matplotlib": r"(inline)?", "precision": r"\d{0,2}", "pprint": r"",
                  "pinfo": r"[A-Za-z_][\w.]*", "pinfo2": r"[A-Za-z_][\w.]*"}
TIMING_MAGICS = {"time", "timeit", "prun"}
# os.path's functions only compute with strings or look at a file's existence: what honest code uses os for.
OS_PATH = {"join", "dirname", "basename", "split", "splitext", "abspath", "normpath", "relpath", "exists",
           "isfile", "isdir", "expanduser", "sep"}
# Module settings an honest notebook may assign (reproducibility, precision), unlike functions.
ALLOWED_SETTINGS = {"deterministic", "benchmark", "allow_tf32", "enabled"}


def to_python(source: str) -> str | None:
    """A cell's source as plain Python (IPython's %magics and !commands become get_ipython() calls);
    None where IPython cannot transform it (then the kernel does not run it either)."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - whatever IPython chokes on
        return None


def read_cells(cells: Iterable[tuple[int, str]]) -> tuple[list[tuple[int, ast.Module, list[str]]], dict[int, str]]:
    """Parse each cell as the kernel does; return the parsed cells, and why each other cell is unreadable.

    As IPython: after its transformations, with top-level ``await``, and with the ``__future__`` features
    earlier cells turned on (its compiler keeps them: after ``from __future__ import barry_as_FLUFL``,
    ``1 <> 2`` is valid). The grader must not run a cell it cannot read (:func:`unreadable_cells`)."""
    parsed, unreadable = [], {}
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    for index, source in cells:
        code = to_python(source)
        if code is None:
            unreadable[index] = "IPython cannot read it"
            continue
        try:
            tree = compile(code, f"<cell {index}>", "exec", flags, dont_inherit=True)
        except (SyntaxError, ValueError) as e:
            where = f" (line {e.lineno})" if getattr(e, "lineno", None) else ""
            unreadable[index] = f"{type(e).__name__}: {getattr(e, 'msg', e)}{where}"
            continue
        for node in tree.body:  # IPython compiles statement by statement: a late __future__ import counts
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                for a in node.names:
                    flags |= getattr(getattr(__future__, a.name, None), "compiler_flag", 0)
        parsed.append((index, tree, code.splitlines()))
    return parsed, unreadable


def parse_cells(cells: Iterable[tuple[int, str]]) -> list[tuple[int, ast.Module, list[str]]]:
    return read_cells(cells)[0]


def unreadable_cells(cells: Iterable[tuple[int, str]]) -> dict[int, str]:
    """The cells the analysis cannot read, and why: the grader runs none of them (failing closed). For the
    kernel they are syntax errors too, unless it reads Python differently: no code may hide there."""
    return read_cells(cells)[1]


def _dotted(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _imports(tree: ast.AST) -> dict[str, str]:
    """Local name -> full dotted path, for every import in the cell."""
    table = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                table[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                table[a.asname or a.name] = f"{node.module}.{a.name}"
    return table


def _evidence(lines: list[str], node: ast.AST) -> str:
    line = lines[node.lineno - 1].strip() if 0 < getattr(node, "lineno", 0) <= len(lines) else ""
    return line[:160]


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _magic(node: ast.Call, fn: ast.Attribute) -> tuple[str | None, str | None]:
    """For ``get_ipython().run_line_magic(name, arg)``: why it is refused (None: allowed), and its name."""
    args = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in node.args]
    name = args[0] if args else None
    if fn.attr == "run_line_magic" and name in ALLOWED_MAGICS and len(args) == 2 and args[1] is not None \
            and re.fullmatch(ALLOWED_MAGICS[name], args[1].strip()):
        return None, name
    if fn.attr in ("run_line_magic", "run_cell_magic") and name is not None:
        sign = "%" if fn.attr == "run_line_magic" else "%%"
        if name in TIMING_MAGICS:
            return (f"`{sign}{name}` runs the code it times in a way the grader cannot check: remove it (time "
                    "your code with time.perf_counter() instead)"), name
        return (f"uses the IPython magic `{sign}{name}`, which runs code, or reaches files or processes (only "
                "`%matplotlib inline`, `%precision`, `%pprint` and `obj?` are allowed)"), name
    return (f"uses IPython's `{fn.attr}`" + (f" (`{name}`)" if name else "")
            + ", which can run commands or change how later cells run"), name


def _static_value(node: ast.AST, imports: dict[str, str]) -> bool:
    """A constant, or os.path's functions of constants: a folder for sys.path that no code chooses."""
    if isinstance(node, ast.Constant):
        return True
    path = _dotted(node.func) if isinstance(node, ast.Call) else None
    full = ".".join([imports.get(path[0], path[0]), *path[1:]]) if path else ""
    return (full.startswith("os.path.") and full.split(".")[-1] in OS_PATH and not node.keywords
            and all(_static_value(a, imports) for a in node.args))


def _os_use_allowed(node: ast.Name, target: str, parents: dict[int, ast.AST]) -> bool:
    """``os.path.join(...)``, ``os.sep``: the parts of ``os`` that only compute with strings."""
    up = parents.get(id(node))
    if target == "os" and isinstance(up, ast.Attribute) and up.attr == "path":
        node, target, up = up, "os.path", parents.get(id(up))
    return isinstance(up, ast.Attribute) and (up.attr in OS_PATH if target == "os.path" else up.attr == "sep")


def _sys_path_tweak(node: ast.AST, parents: dict[int, ast.AST], imports: dict[str, str]) -> bool:
    """``sys.path.insert(0, '..')`` and ``sys.path.append(...)`` of a fixed folder, as notebooks run from a
    checkout do. (In the sandbox there is nothing to import from there.)"""
    method, call = parents.get(id(node)), None
    if isinstance(method, ast.Attribute) and method.attr in ("insert", "append"):
        call = parents.get(id(method))
    return isinstance(call, ast.Call) and call.func is method and not call.keywords \
        and all(_static_value(a, imports) for a in call.args)


def _file_name(text: str) -> bool:
    """A string that names the grader's files or /proc (a path: no spaces), not a sentence about them."""
    return "lmbook-grade" in text or (not any(c.isspace() for c in text) and (
        text.startswith("/proc") or ".npy" in text))


def find_tampering(cells: Iterable[tuple[int, str]]) -> list[Finding]:
    """Evidence that a notebook reaches for the grader's machinery (empty for an honest notebook)."""
    parsed = parse_cells(cells)
    imports: dict[str, str] = {}
    for _, tree, _ in parsed:
        imports.update(_imports(tree))
    findings: list[Finding] = []
    # os beyond os.path (listdir, system, environ...), anywhere in the notebook, makes its import suspect too
    parents = {index: _parents(tree) for index, tree, _ in parsed}
    os_misused = any(isinstance(n, ast.Name) and imports.get(n.id) in ("os", "os.path")
                     and not _os_use_allowed(n, imports[n.id], parents[index])
                     for index, tree, _ in parsed for n in ast.walk(tree))

    for index, tree, lines in parsed:
        def flag(node: ast.AST, reason: str, index: int = index, lines: list[str] = lines) -> None:
            findings.append(Finding(index, getattr(node, "lineno", 0), _evidence(lines, node), reason))

        up = parents[index]
        # bare strings (docstrings) run nothing: they may mention any file
        bare = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        allowed: set[int] = set()  # get_ipython names inside allowed magics (ast.walk visits parents first)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    names = [f"{node.module}.{a.name}" if node.module in ("os", "os.path") else node.module or ""
                             for a in node.names]
                for name in names:
                    top = name.split(".")[0]
                    if top == "os":
                        if (name in ("os", "os.path") and os_misused) or name not in (
                                "os", "os.path", *(f"os.path.{f}" for f in OS_PATH)):
                            flag(node, f"imports `{name}`, which reaches {SUSPECT_MODULES['os']}")
                    elif SUSPECT_MODULES.get(top):
                        flag(node, f"imports `{name}`, which reaches {SUSPECT_MODULES[top]}")
                    elif name.startswith(("lmbook.grading", "lmbook.tasks", "IPython.core")) and not (
                            isinstance(node, ast.ImportFrom) and [a.name for a in node.names] == ["check"]):
                        flag(node, f"imports the grader's internals (`{name}`)")
            elif isinstance(node, ast.Call):
                fn = node.func
                if isinstance(fn, ast.Name) and fn.id in SUSPECT_CALLS and fn.id not in imports:
                    flag(node, f"calls `{fn.id}`, which {SUSPECT_CALLS[fn.id]}")
                elif isinstance(fn, ast.Name) and fn.id in ("getattr", "setattr", "delattr", "vars"):
                    target = _dotted(node.args[0]) if node.args else None
                    if not node.args or (target and target[0] in imports):
                        flag(node, f"`{fn.id}` on a library module reaches it by a name the grader cannot see"
                             if node.args else "`vars()` reaches the notebook's namespace as a dict")
                elif (isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Call)
                      and isinstance(fn.value.func, ast.Name) and fn.value.func.id == "get_ipython"):
                    allowed.add(id(fn.value.func))  # %matplotlib inline, or flagged once, here
                    refused, _ = _magic(node, fn)
                    if refused:
                        flag(node, refused)
            elif isinstance(node, ast.Name) and node.id == "get_ipython" and id(node) not in allowed:
                flag(node, "uses IPython's shell object (`get_ipython()`), which can change how later cells run")
            elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__", "__spec__"):
                flag(node, f"reaches `{node.id}`")
            elif isinstance(node, ast.Name) and imports.get(node.id) in ("os", "os.path") \
                    and not _os_use_allowed(node, imports[node.id], up):
                flag(node, f"reaches `{imports[node.id]}` beyond its path functions: {SUSPECT_MODULES['os']}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in bare \
                    and _file_name(node.value):
                flag(node, "names the grader's files or the process table")
            elif isinstance(node, ast.Attribute):
                path = _dotted(node)
                if path and len(path) == 2 and imports.get(path[0], path[0]).split(".")[0] == "sys" \
                        and path[1] in SUSPECT_SYS and not (path[1] == "path" and _sys_path_tweak(node, up, imports)):
                    flag(node, f"reaches `sys.{path[1]}`, part of the interpreter the grader relies on")
                elif path and len(path) > 1 and imports.get(path[0], "").split(".")[0] in ("numpy", "torch") \
                        and path[-1] in FILE_FUNCTIONS:
                    flag(node, f"`{'.'.join(path)}` reads or writes files")
                elif node.attr.startswith("__") and node.attr.endswith("__") and node.attr in (
                        "__globals__", "__code__", "__closure__", "__subclasses__", "__builtins__", "__dict__"):
                    flag(node, f"reaches `{node.attr}`, the internals of other code")
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
                targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
                for t in targets:
                    for sub in (t.elts if isinstance(t, ast.Tuple | ast.List) else [t]):
                        path = _dotted(sub) if isinstance(sub, ast.Attribute) else None
                        if path and path[0] in imports and path[-1] not in ALLOWED_SETTINGS:
                            flag(node, f"replaces `{imports[path[0]]}{'.' + '.'.join(path[1:])}` "
                                       "in a library module (monkeypatching)")
            if isinstance(node, ast.FunctionDef) and node.name in ("__eq__", "__ne__", "__bool__", "__float__"):
                flag(node, f"defines `{node.name}`, which can make a wrong answer compare as right")
    return sorted(findings, key=lambda f: (f.cell, f.line))


# ----------------------------------------------------------------------------- the task's own answer


def _definitions(parsed) -> tuple[dict[str, list[ast.AST]], dict[str, str]]:
    """Every top-level binding of each name (defs, classes, assignments), and the import table."""
    defs: dict[str, list[ast.AST]] = {}
    imports: dict[str, str] = {}
    for _, tree, _ in parsed:
        imports.update(_imports(tree))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                defs.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for sub in ast.walk(t):
                        if isinstance(sub, ast.Name) and node.value is not None:
                            defs.setdefault(sub.id, []).append(node.value)
    return defs, imports


def _forbidden_paths(check: Check) -> tuple[set[str], set[str]]:
    full, short = set(), set(check.forbidden_attrs)
    for obj in check.forbidden:
        name = getattr(obj, "__name__", None)
        if name:
            full.add(f"{getattr(obj, '__module__', '')}.{name}")
            short.add(name)
    return full, short


def _is_forbidden(path: str, check: Check, full: set[str], short: set[str]) -> bool:
    if path in full or any(path == m or path.startswith(m + ".") for m in check.forbidden_modules):
        return True
    # re-exports (lmbook.FeedforwardLM, torch.nn.functional.log_softmax): same name, same libraries
    return path.split(".")[0] in ("lmbook", "torch") and path.split(".")[-1] in short


def find_forbidden_use(cells: Iterable[tuple[int, str]], fn_name: str, check: Check) -> str | None:
    """Name what the answer ``fn_name`` uses of the task's ready-made answer, following its helpers."""
    parsed = parse_cells(cells)
    defs, imports = _definitions(parsed)
    full, short = _forbidden_paths(check)
    if fn_name in imports and _is_forbidden(imports[fn_name], check, full, short):
        return f"is `{imports[fn_name]}`, the ready-made implementation, not yours"
    seen: set[str] = set()
    todo = [fn_name]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in defs.get(name, []):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and sub.attr in short:
                    return f"calls `.{sub.attr}`, a ready-made implementation of what this task asks you to write"
                if isinstance(sub, ast.Attribute | ast.Name):
                    path = _dotted(sub)
                    if path and path[0] in imports:
                        full_path = ".".join([imports[path[0]], *path[1:]])
                        if _is_forbidden(full_path, check, full, short):
                            return f"uses `{full_path}`, the ready-made answer"
                    if isinstance(sub, ast.Name) and sub.id in defs and sub.id not in seen:
                        todo.append(sub.id)  # a helper of the student's: look inside it too
    return None
