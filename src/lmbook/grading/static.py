"""Read a student's code (never run it) for tampering and for use of the ready-made answer.

This runs in the grader's own process, on the notebook's text, so nothing the
student's code does at run time can hide from it (and in the student's kernel, on
the cells run so far, so Jupyter refuses what the grader refuses). Two questions:

* :func:`find_tampering`: does the notebook reach for the grader's machinery:
  IPython's shell and hooks, patching a library module, the interpreter's import
  system, frames and tracebacks, files, processes or the network, torch's function
  hooks, or code built at run time (``exec``, ``getattr`` with a computed name)
  that would hide any of those? Each finding carries the cell, line and code as
  evidence. Honest habits are not tampering: printing (to stdout or stderr),
  warnings, logging, progress bars, ``os.cpu_count()``, ``%matplotlib inline``,
  ``%config InlineBackend....``, and the timing magics ``%time``, ``%%time``,
  ``%timeit`` and ``%%timeit``, whose code is read (and run) as any other code.
* :func:`find_forbidden_use`: does the function graded for a task use that
  task's ready-made answer (torch's op by any of its names, or lmbook's own),
  directly or through the student's helpers and aliases? Only what the function
  can reach counts: its own locals (a variable named like a scratch cell's) do not.
"""

from __future__ import annotations
import __future__

import ast
import functools
import re
import symtable
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from .checks import Check
from .reach import modules_on_the_way, raw_reach
from .readymade import is_torch_name, torch_match


@dataclass(frozen=True)
class Finding:
    cell: int  # index of the notebook cell
    line: int
    code: str
    reason: str

    def __str__(self) -> str:
        return f"cell {self.cell}, line {self.line}: `{self.code}`: {self.reason}"


def tampering_message(finding: Finding | str) -> str:
    """What every test of a tampering notebook says, in the grader and in Jupyter."""
    return ("not graded: this notebook reaches for the grader's machinery, so none of its answers can be trusted "
            f"({finding}). Your instructor has been told and will review it.")


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
    "_thread": "background threads", "atexit": "exit hooks", "runpy": "running other code",
    "code": "running other code", "pty": "terminals", "mmap": "shared memory", "resource": "the sandbox's limits",
    "sys": None,  # sys itself is fine; its hooks are not (below)
    "IPython": None, "lmbook": None, "torch": None, "numpy": None,
}
SUSPECT_SYS = {"getprofile", "gettrace", "modules", "meta_path", "path_hooks", "path", "settrace", "setprofile",
               "displayhook", "excepthook", "_getframe", "_current_frames", "addaudithook", "setrecursionlimit", "exit",
               "argv", "orig_argv", "stdin", "__stdin__", "setswitchinterval", "monitoring", "audit",
               "_clear_type_cache", "set_asyncgen_hooks", "unraisablehook", "breakpointhook"}
# A library's own layer over starting processes (``torch.multiprocessing``): other processes, like the original
PROCESS_PACKAGES = {"multiprocessing", "subprocess"}
# timeit's functions whose ``stmt`` and ``setup`` may be code in a string (compiled and run unread); a callable
# (a lambda, a function) is what honest timing passes
TIMEIT_CODE = {"timeit", "repeat", "Timer", "autorange"}
# Functions that turn a string into an object anywhere in the program (the import system's own lookup)
NAME_RESOLVERS = {"pkgutil.resolve_name", "pydoc.locate", "pydoc.resolve", "importlib.import_module"}
# Built-ins that reach names or run code given at run time: handed to other code (``functools.reduce(getattr,
# ...)``, ``map(eval, ...)``), what they are given is not in the notebook's text
HANDED_OVER = {"getattr", "setattr", "delattr", "vars", "eval", "exec", "compile", "__import__", "globals"}
# Reading and writing files through numpy and torch: how a notebook would reach the grader's inputs.
FILE_FUNCTIONS = {"load", "save", "savez", "savez_compressed", "fromfile", "tofile", "loadtxt", "savetxt",
                  "genfromtxt", "memmap", "from_file", "ctypeslib"}
SUSPECT_CALLS = {"exec": "runs code built at run time", "eval": "runs code built at run time",
                 "compile": "builds code at run time", "__import__": "imports a module by a computed name",
                 "open": "opens a file", "globals": "reaches the notebook's namespace as a dict",
                 "breakpoint": "starts a debugger"}
# The internals of other code: frames (the grader's, under the student's), code objects, namespaces.
INTERNALS = {"__globals__", "__code__", "__closure__", "__subclasses__", "__builtins__", "__dict__",
             "__getattribute__", "__traceback__", "__self__", "__defaults__", "__kwdefaults__", "tb_frame",
             "tb_next", "f_back", "f_locals", "f_globals", "f_builtins", "f_code", "gi_frame", "cr_frame",
             "ag_frame", "gi_code", "cr_code", "co_code", "co_consts", "__wrapped__", "cell_contents"}
# IPython's shell: what runs cells, transforms them or holds the namespace.
SHELL = {"run_cell", "run_line_magic", "run_cell_magic", "run_code", "run_ast_nodes", "input_transformers_cleanup",
         "input_transformers_post", "ast_transformers", "magics_manager", "register_magic_function",
         "set_custom_exc", "user_ns", "user_global_ns", "safe_execfile", "safe_run_module", "system_piped",
         "system_raw", "getoutput", "define_macro", "run_cell_async", "transform_cell"}
# torch's hooks on every call, which the grader's watch over the answer uses.
TORCH_HOOKS = re.compile(r"(?i)torch_?function|torch_?dispatch|python_dispatch|disable_current_modes|"
                         r"_?DisableTorch|CompilationUnit")

# Magics whose argument or cell is code, run by IPython in the notebook's namespace: the analysis reads that
# code in place of the magic (``%%time`` followed by a cell is that cell). The argument's leading options
# are not code; none of these expands {expressions} in it (IPython's no_var_expand).
# ``%%capture``'s line is options and a variable's name, no code.
CODE_MAGICS = {"time": r"(--no-raise-error\s+)?", "timeit": r"((-[nrp]\s*\d+|-[tcqov])\s+)*",
               "capture": r"((--no-stdout|--no-stderr|--no-display)\s+)*([A-Za-z_]\w*\s+)?"}
# Magics that run no code of their own and reach no file or process, with the arguments they may have (whole
# arguments, with no `{`, `}` or `$`: IPython expands those in a line magic's argument). `obj?` is `%pinfo obj`.
ALLOWED_MAGICS = {"matplotlib": r"(inline)?", "precision": r"\d{0,2}", "pprint": r"", "pinfo": r"[A-Za-z_][\w.]*",
                  "pinfo2": r"[A-Za-z_][\w.]*", "load_ext": r"autoreload", "autoreload": r"[0-3]?",
                  "config": r"InlineBackend\.\w+\s*=\s*(?P<value>.+)"}
# os's functions that only compute with strings, look at a file's existence or count the cores.
OS_PATH = {"join", "dirname", "basename", "split", "splitext", "abspath", "normpath", "relpath", "exists",
           "isfile", "isdir", "expanduser", "sep"}
OS_ALLOWED = {"cpu_count", "getcwd", "sep", "linesep", "pathsep", "curdir", "pardir", "extsep", "name"}
# Module settings an honest notebook may assign (reproducibility, precision), unlike functions.
ALLOWED_SETTINGS = {"deterministic", "benchmark", "allow_tf32", "enabled"}


@functools.lru_cache(maxsize=4096)
def to_python(source: str) -> str | None:
    """A cell's source as plain Python (IPython's %magics and !commands become get_ipython() calls);
    None where IPython cannot transform it (then the kernel does not run it either)."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - whatever IPython chokes on
        return None


def _magic_call(node: ast.AST) -> tuple[str, str, list[str | None]] | None:
    """For ``get_ipython().run_line_magic(...)`` or ``run_cell_magic(...)``: (method, name, str args)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("run_line_magic", "run_cell_magic") and isinstance(node.func.value, ast.Call)
            and isinstance(node.func.value.func, ast.Name) and node.func.value.func.id == "get_ipython"
            and not node.func.value.args and not node.keywords):
        return None
    args = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in node.args]
    return node.func.attr, args[0] if args else None, args[1:]


class Unreadable(ValueError):
    pass


def _code_of_magic(method: str, name: str | None, args: list[str | None], flags: int) -> list[ast.stmt] | None:
    """The statements a code magic runs (None: not a code magic); raises :class:`Unreadable`."""
    if name not in CODE_MAGICS or None in args:
        return None
    if method == "run_line_magic" and len(args) == 1 and name != "capture":
        m = re.match(CODE_MAGICS[name], args[0].lstrip() + " ")
        return _parse_magic_code(args[0].lstrip()[m.end():] if m else args[0], flags)
    if method == "run_cell_magic" and len(args) == 2:
        line, body = args
        if name in ("time", "capture") and line.strip() and not re.fullmatch(CODE_MAGICS[name], line.strip() + " "):
            raise Unreadable(f"IPython does not run code on the line of `%%{name}`")
        m = re.match(CODE_MAGICS[name], line.lstrip() + " ")
        setup = line.lstrip()[m.end():] if m else line  # %%timeit's line is set-up code
        return _parse_magic_code(setup, flags) + _parse_magic_code(body, flags)
    return None


def _parse_magic_code(code: str, flags: int) -> list[ast.stmt]:
    python = to_python(code)
    if python is None:
        raise Unreadable("IPython cannot read the code of a timing magic")
    try:
        tree = compile(python, "<magic>", "exec", flags, dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        raise Unreadable(f"the code of a timing magic: {type(e).__name__}: {getattr(e, 'msg', e)}") from None
    return _inline_code_magics(tree, flags).body


def _inline_code_magics(tree: ast.Module, flags: int) -> ast.Module:
    """The tree with every timing magic replaced by the code it runs (``x = %timeit -o f()`` becomes ``f()``
    then ``x = None``): the analysis reads that code as if it were written there."""
    class Inline(ast.NodeTransformer):
        def generic_visit(self, node):
            for field, value in ast.iter_fields(node):
                if isinstance(value, list) and value and all(isinstance(v, ast.stmt) for v in value):
                    new: list[ast.stmt] = []
                    for stmt in value:
                        stmt = self.visit(stmt)
                        call = stmt.value if isinstance(stmt, ast.Expr | ast.Assign) else None
                        magic = _magic_call(call) if call is not None else None
                        code = _code_of_magic(*magic, flags) if magic else None
                        if code is None:
                            new.append(stmt)
                            continue
                        new.extend(code or [ast.Pass()])
                        if isinstance(stmt, ast.Assign):
                            stmt.value = ast.Constant(None)
                            new.append(stmt)
                    setattr(node, field, new)
                elif isinstance(value, ast.AST):
                    setattr(node, field, self.visit(value))
                elif isinstance(value, list):
                    setattr(node, field, [self.visit(v) if isinstance(v, ast.AST) else v for v in value])
            return node

    if not any(_magic_call(n) and _magic_call(n)[1] in CODE_MAGICS for n in ast.walk(tree)):
        return tree
    return ast.fix_missing_locations(Inline().visit(tree))


@functools.lru_cache(maxsize=4096)
def _read_cell(source: str, flags: int) -> tuple[ast.Module | None, str, str | None]:
    """(tree, code, why unreadable) of one cell, timing magics read as the code they run."""
    code = to_python(source)
    if code is None:
        return None, "", "IPython cannot read it"
    try:
        tree = compile(code, "<cell>", "exec", flags, dont_inherit=True)
        had_magic = any(_magic_call(n) and _magic_call(n)[1] in CODE_MAGICS for n in ast.walk(tree))
        inlined = _inline_code_magics(tree, flags)
    except (SyntaxError, ValueError) as e:
        where = f" (line {e.lineno})" if getattr(e, "lineno", None) else ""
        return None, code, f"{type(e).__name__}: {getattr(e, 'msg', e)}{where}"
    except Unreadable as e:
        return None, code, str(e)
    if had_magic:
        code = ast.unparse(inlined)  # line numbers of the evidence: the code as read
        tree = compile(code, "<cell>", "exec", flags, dont_inherit=True)
    return tree, code, None


def read_cells(cells: Iterable[tuple[int, str]]) -> tuple[list[tuple[int, ast.Module, list[str]]], dict[int, str]]:
    """Parse each cell as the kernel does; return the parsed cells, and why each other cell is unreadable.

    As IPython: after its transformations, with top-level ``await``, and with the ``__future__`` features
    earlier cells turned on (its compiler keeps them: after ``from __future__ import barry_as_FLUFL``,
    ``1 <> 2`` is valid). The grader must not run a cell it cannot read (:func:`unreadable_cells`)."""
    parsed, unreadable = [], {}
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    for index, source in cells:
        tree, code, why = _read_cell(source, flags)
        if tree is None:
            unreadable[index] = why
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
    """For ``get_ipython().run_line_magic(name, arg)``: why it is refused (None: allowed), and its name.
    (Timing magics never get here: the analysis reads them as the code they run.)"""
    args = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in node.args]
    name = args[0] if args else None
    if fn.attr == "run_line_magic" and name in ALLOWED_MAGICS and len(args) == 2 and args[1] is not None \
            and _expands_to_itself(args[1]):
        m = re.fullmatch(ALLOWED_MAGICS[name], args[1].strip())
        if m and (not m.groupdict().get("value") or _is_literal(m.group("value"))):
            return None, name
    if fn.attr in ("run_line_magic", "run_cell_magic") and name is not None:
        sign = "%" if fn.attr == "run_line_magic" else "%%"
        return (f"uses the IPython magic `{sign}{name}`, which runs code, or reaches files or processes (only "
                "`%matplotlib inline`, `%config InlineBackend...`, `%precision`, `%pprint`, `%load_ext autoreload`, "
                "`%autoreload`, `obj?`, `%%capture` and the timing magics `%time`, `%%time`, `%timeit`, "
                "`%%timeit` are allowed)"), name
    return (f"uses IPython's `{fn.attr}`" + (f" (`{name}`)" if name else "")
            + ", which can run commands or change how later cells run"), name


def _expands_to_itself(arg: str) -> bool:
    """IPython evaluates ``{expression}`` and ``$name`` in a line magic's argument: only literals may be there."""
    if "$" in arg:
        return False
    fields = re.findall(r"\{([^{}]*)\}", arg)
    return all(_is_literal(f) for f in fields) and not re.search(r"[{}]", re.sub(r"\{[^{}]*\}", "", arg))


def _is_literal(text: str) -> bool:
    try:
        ast.literal_eval(text.strip())
        return True
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def _static_value(node: ast.AST, imports: dict[str, str]) -> bool:
    """A constant, or os.path's functions of constants: a folder for sys.path that no code chooses."""
    if isinstance(node, ast.Constant):
        return True
    path = _dotted(node.func) if isinstance(node, ast.Call) else None
    full = ".".join([imports.get(path[0], path[0]), *path[1:]]) if path else ""
    return (full.startswith("os.path.") and full.split(".")[-1] in OS_PATH and not node.keywords
            and all(_static_value(a, imports) for a in node.args))


def _os_use_allowed(node: ast.Name, target: str, parents: dict[int, ast.AST]) -> bool:
    """``os.path.join(...)``, ``os.sep``, ``os.cpu_count()``: the parts of ``os`` that only compute with
    strings or count the cores."""
    up = parents.get(id(node))
    if target == "os" and isinstance(up, ast.Attribute) and up.attr == "path":
        node, target, up = up, "os.path", parents.get(id(up))
    if target == "os.path":
        return isinstance(up, ast.Attribute) and up.attr in OS_PATH
    return (isinstance(up, ast.Attribute) and up.attr in OS_ALLOWED) or target == "os.cpu_count"


def _sys_path_tweak(node: ast.AST, parents: dict[int, ast.AST], imports: dict[str, str]) -> bool:
    """``sys.path.insert(0, '..')`` and ``sys.path.append(...)`` of a fixed folder, as notebooks run from a
    checkout do. (In the sandbox there is nothing to import from there.)"""
    method, call = parents.get(id(node)), None
    if isinstance(method, ast.Attribute) and method.attr in ("insert", "append"):
        call = parents.get(id(method))
    return isinstance(call, ast.Call) and call.func is method and not call.keywords \
        and all(_static_value(a, imports) for a in call.args)


def _code_string_given(node: ast.Call) -> bool:
    """Whether a timeit call is given code that is not a callable: a string, or anything computed (a name may
    hold a string); a lambda or a function's name is a callable."""
    given = [*node.args[:2], *(k.value for k in node.keywords if k.arg in ("stmt", "setup"))]
    return any(not isinstance(g, ast.Lambda | ast.Name | ast.Attribute) for g in given)


def _file_name(text: str) -> bool:
    """A string that names the grader's files or /proc (a path: no spaces), not a sentence about them."""
    return "lmbook-grade" in text or (not any(c.isspace() for c in text) and (
        text.startswith("/proc") or ".npy" in text))


def _suspect_on_the_way(chain: list[str]) -> str | None:
    """What an attribute chain from a library module reaches through a module that library imported
    (``torch.serialization.os.fork``: the operating system), in words; None when it reaches nothing so."""
    dotted = ".".join(chain)
    for name, then in modules_on_the_way(chain):
        top = name.split(".")[0]
        what = SUSPECT_MODULES.get(top) or ("other processes" if top in PROCESS_PACKAGES else raw_reach(top))
        if top == "sys" and then in SUSPECT_SYS:
            what = "part of the interpreter the grader relies on"
        if what:
            return f"reaches `{name}` through `{dotted}`: {what}"
    return None


def _ipython_path_allowed(path: str) -> bool:
    return path == "IPython" or path == "IPython.display" or path.startswith("IPython.display.")


def find_tampering(cells: Iterable[tuple[int, str]]) -> list[Finding]:
    """Evidence that a notebook reaches for the grader's machinery (empty for an honest notebook)."""
    parsed = parse_cells(cells)
    imports: dict[str, str] = {}
    for _, tree, _ in parsed:
        imports.update(_imports(tree))
    # a library module under another name (``F = torch.nn.functional``): what is refused on it by its import
    # name is refused on the alias too (setattr, replacing its functions)
    aliases = {t.id: ".".join([imports[path[0]], *path[1:]])
               for _, tree, _ in parsed for node in ast.walk(tree)
               if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(t := node.targets[0], ast.Name)
               and (path := _dotted(node.value)) and path[0] in imports and t.id not in imports}
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
        allowed: set[int] = set()  # get_ipython names and attributes inside allowed magics (parents come first)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    names = [f"{node.module}.{a.name}" if node.module in ("os", "os.path", "IPython")
                             or (node.module or "").split(".")[0] == "torch" else node.module or ""
                             for a in node.names]
                for name in names:
                    top = name.split(".")[0]
                    if top == "os":
                        if (name in ("os", "os.path") and os_misused) or name not in (
                                "os", "os.path", "os.cpu_count", *(f"os.path.{f}" for f in OS_PATH)):
                            flag(node, f"imports `{name}`, which reaches {SUSPECT_MODULES['os']}")
                    elif SUSPECT_MODULES.get(top):
                        flag(node, f"imports `{name}`, which reaches {SUSPECT_MODULES[top]}")
                    elif PROCESS_PACKAGES & set(name.split(".")[1:]):
                        flag(node, f"imports `{name}`, which reaches other processes")
                    elif top not in SUSPECT_MODULES and raw_reach(top):
                        flag(node, f"imports `{name}`, which reaches {raw_reach(top)}")
                    elif name.startswith(("lmbook.grading", "lmbook.tasks", "IPython.core")) and not (
                            isinstance(node, ast.ImportFrom) and [a.name for a in node.names] == ["check"]):
                        flag(node, f"imports the grader's internals (`{name}`)")
                    elif top == "IPython" and not _ipython_path_allowed(name):
                        flag(node, f"imports `{name}`, IPython's shell, which can change how later cells run")
                    elif name == "torch._C" or name.startswith(("torch._C.", "torch.overrides")) \
                            or TORCH_HOOKS.search(name):
                        flag(node, f"imports `{name}`, torch's internals, which the grader's watch relies on")
            elif isinstance(node, ast.Call):
                fn = node.func
                path = _dotted(fn)
                full = ".".join([imports.get(path[0], path[0]), *path[1:]]) if path else ""
                if isinstance(fn, ast.Name) and fn.id in SUSPECT_CALLS and fn.id not in imports:
                    flag(node, f"calls `{fn.id}`, which {SUSPECT_CALLS[fn.id]}")
                elif isinstance(fn, ast.Name) and fn.id in ("getattr", "setattr", "delattr", "vars"):
                    target = _dotted(node.args[0]) if node.args else None
                    if not node.args or (target and (target[0] in imports or (
                            target[0] in aliases and fn.id != "getattr"))):
                        flag(node, f"`{fn.id}` on a library module reaches it by a name the grader cannot see"
                             if node.args else "`vars()` reaches the notebook's namespace as a dict")
                elif full.split(".")[0] == "timeit" and full.split(".")[-1] in TIMEIT_CODE and _code_string_given(node):
                    flag(node, f"`{full}` runs code given as a string, which the grader cannot read")
                elif full in NAME_RESOLVERS:
                    flag(node, f"`{full}` reaches an object by a name computed at run time, which the grader "
                               "cannot see")
                elif full in ("operator.attrgetter", "operator.methodcaller") and not (
                        node.args and isinstance(node.args[0], ast.Constant)):
                    flag(node, f"`{full}` reaches an attribute by a name computed at run time, which the grader "
                               "cannot see")
                elif (isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Call)
                      and isinstance(fn.value.func, ast.Name) and fn.value.func.id == "get_ipython"):
                    allowed.update((id(fn.value.func), id(fn)))  # %matplotlib inline, or flagged once, here
                    refused, _ = _magic(node, fn)
                    if refused:
                        flag(node, refused)
            elif isinstance(node, ast.Name) and node.id == "get_ipython" and id(node) not in allowed:
                flag(node, "uses IPython's shell object (`get_ipython()`), which can change how later cells run")
            elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__", "__spec__"):
                flag(node, f"reaches `{node.id}`")
            elif isinstance(node, ast.Name) and node.id in HANDED_OVER and node.id not in imports \
                    and isinstance(node.ctx, ast.Load) and not (
                        isinstance(up.get(id(node)), ast.Call) and up[id(node)].func is node):
                flag(node, f"hands `{node.id}` to other code, which then reaches names or code the grader "
                           "cannot see")
            elif isinstance(node, ast.Name) and imports.get(node.id) in ("os", "os.path") \
                    and not _os_use_allowed(node, imports[node.id], up):
                flag(node, f"reaches `{imports[node.id]}` beyond its path functions: {SUSPECT_MODULES['os']}")
            elif isinstance(node, ast.Name) and imports.get(node.id, "").startswith("IPython") \
                    and not _ipython_path_allowed(imports[node.id]):
                flag(node, f"uses `{imports[node.id]}`, IPython's shell, which can change how later cells run")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in bare:
                if _file_name(node.value):
                    flag(node, "names the grader's files or the process table")
                elif node.value in INTERNALS or node.value in SHELL:
                    flag(node, f"names `{node.value}`, the internals of other code")
            elif isinstance(node, ast.Attribute) and id(node) not in allowed:
                path = _dotted(node)
                root = imports.get(path[0], path[0]).split(".") if path else []
                full = ".".join([*root, *path[1:]]) if path else ""
                if path and len(path) == 2 and root[0] == "sys" \
                        and path[1] in SUSPECT_SYS and not (path[1] == "path" and _sys_path_tweak(node, up, imports)):
                    flag(node, f"reaches `sys.{path[1]}`, part of the interpreter the grader relies on")
                elif full.startswith(("lmbook.grading", "lmbook.tasks.")) and not isinstance(
                        up.get(id(node)), ast.Attribute) and path[-1] != "check":
                    flag(node, f"reaches `{full}`, the grader's internals")
                elif full.startswith("torch.library") and not isinstance(up.get(id(node)), ast.Attribute):
                    flag(node, f"uses `{full}`, which registers operators with torch's dispatcher, the grader's "
                               "watch over the answer relies on it")
                elif path and len(path) > 1 and root[0] in ("numpy", "torch") and path[-1] in FILE_FUNCTIONS:
                    flag(node, f"`{'.'.join(path)}` reads or writes files, or raw memory")
                elif node.attr in INTERNALS:
                    flag(node, f"reaches `{node.attr}`, the internals of other code")
                elif node.attr in SHELL:
                    flag(node, f"uses IPython's `{node.attr}`, which runs code or changes how later cells run")
                elif path and path[0] in imports and root[0] == "IPython" and not _ipython_path_allowed(full) \
                        and not isinstance(up.get(id(node)), ast.Attribute):
                    flag(node, f"uses `{full}`, IPython's shell, which can change how later cells run")
                elif TORCH_HOOKS.search(node.attr) or (path and root[0] == "torch" and "_C" in full.split(".")
                                                       and not isinstance(up.get(id(node)), ast.Attribute)):
                    flag(node, f"reaches `{full or node.attr}`, torch's internals or the hooks on its calls, which "
                               "the grader's watch over the answer relies on")
                elif path and (path[0] in imports or path[0] in aliases) \
                        and not isinstance(up.get(id(node)), ast.Attribute) \
                        and (through := _suspect_on_the_way([*(imports.get(path[0]) or aliases[path[0]]).split("."),
                                                             *path[1:]])):
                    flag(node, through)
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
                targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
                for t in targets:
                    for sub in (t.elts if isinstance(t, ast.Tuple | ast.List) else [t]):
                        path = _dotted(sub) if isinstance(sub, ast.Attribute) else None
                        module = imports.get(path[0]) or aliases.get(path[0]) if path else None
                        if module and path[-1] not in ALLOWED_SETTINGS:
                            flag(node, f"replaces `{module}{'.' + '.'.join(path[1:])}` "
                                       "in a library module (monkeypatching)")
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if node.name in ("__eq__", "__ne__", "__bool__", "__float__"):
                    flag(node, f"defines `{node.name}`, which can make a wrong answer compare as right")
                elif TORCH_HOOKS.search(node.name):
                    flag(node, f"defines `{node.name}`, which changes what torch's calls compute and when")
    return sorted(findings, key=lambda f: (f.cell, f.line))


# ----------------------------------------------------------------------------- the task's own answer


@dataclass
class _Binding:
    cell: int
    kind: str  # "import" (payload: the dotted path), "def" (a def or class node), "value" (an expression)
    payload: object
    globals_: frozenset[str]  # the names its code reads from the notebook's namespace


def _scope_globals(table: symtable.SymbolTable) -> set[str]:
    """The names a scope (and the scopes inside it) reads from the module's namespace."""
    names = {s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced()}
    for child in table.get_children():
        names |= _scope_globals(child)
    return names


def _module_names(node: ast.AST) -> set[str]:
    """Names an expression evaluated in the module's scope reads (not a lambda's or comprehension's own)."""
    own: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Lambda):
            own |= {a.arg for a in (*sub.args.posonlyargs, *sub.args.args, *sub.args.kwonlyargs,
                                    *filter(None, (sub.args.vararg, sub.args.kwarg)))}
        elif isinstance(sub, ast.comprehension):
            own |= {n.id for n in ast.walk(sub.target) if isinstance(n, ast.Name)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id not in own}


def _bindings(parsed, before: int | None) -> dict[str, _Binding]:
    """The binding of each top-level name in force at cell ``before`` (the last one made before it)."""
    found: dict[str, _Binding] = {}
    for index, tree, lines in parsed:
        if before is not None and index >= before:
            continue
        try:
            tables = {(t.get_name(), t.get_lineno()): t
                      for t in symtable.symtable("\n".join(lines), "<cell>", "exec").get_children()}
        except (SyntaxError, ValueError):
            tables = {}
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                for name, path in _imports(node).items():
                    found[name] = _Binding(index, "import", path, frozenset())
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                table = tables.get((node.name, node.lineno))
                outer = [*node.decorator_list, *(getattr(node, "bases", []) or []),
                         *(getattr(getattr(node, "args", None), "defaults", []) or []),
                         *(getattr(getattr(node, "args", None), "kw_defaults", []) or [])]
                names = set().union(*(_module_names(e) for e in outer if e is not None)) if outer else set()
                if table is not None:
                    names |= _scope_globals(table)
                else:  # no scope information: every name it mentions
                    names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                found[node.name] = _Binding(index, "def", node, frozenset(names))
            elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for sub in ast.walk(t):
                        if isinstance(sub, ast.Name):
                            found[sub.id] = _Binding(index, "value", node.value, frozenset(_module_names(node.value)))
    return found


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
    top, last = path.split(".")[0], path.split(".")[-1]
    # re-exports (lmbook.FeedforwardLM, torch.nn.functional.log_softmax): same name, same libraries; and torch's
    # other names for the same op (torch._log_softmax, torch._C._nn.cross_entropy_loss)
    return top in ("lmbook", "torch") and (last in short or (top == "torch" and torch_match(last, short) is not None))


SETUP_DATA = "the set-up's data"  # the root of a name the set-up cell binds to a value: data, not code


def _root_binding(name: str, bindings: dict[str, _Binding], setup: Collection[int] = ()) -> str | None:
    """The library path a global's value comes from (``corpus = load_corpus()`` -> lmbook.corpus.load_corpus);
    for a value the set-up cell made, :data:`SETUP_DATA`."""
    b = bindings.get(name)
    if b is None:
        return None
    if b.kind == "value" and b.cell in setup:
        return SETUP_DATA
    if b.kind == "import":
        return str(b.payload)
    if b.kind == "value":
        node = b.payload
        while isinstance(node, ast.Call | ast.Subscript):
            node = node.func if isinstance(node, ast.Call) else node.value
        path = _dotted(node)
        if path and path[0] != name:
            root = bindings.get(path[0])
            if root is not None and root.kind == "import":
                return ".".join([str(root.payload), *path[1:]])
    return None


def setup_cells(cells: Iterable[tuple[int, str]]) -> set[int]:
    """The cells that look like an exercise's set-up: they import its ``check`` from ``lmbook.tasks`` (in
    Jupyter, where cells carry no metadata; the grader knows them as the assignment's locked cells)."""
    return {i for i, source in cells if re.search(r"^from lmbook\.tasks\.\w+ import check\b", source, re.MULTILINE)}


def find_forbidden_use(cells: Iterable[tuple[int, str]], fn_name: str, check: Check,
                       before: int | None = None, setup: Collection[int] = ()) -> str | None:
    """Name what the answer ``fn_name`` uses of the task's ready-made answer, following its helpers.

    ``before``: the cell of the test (the names in force there are those bound in the cells before it).
    ``setup``: the cells of the exercise's own set-up: the values they bind (``corpus = load_corpus()``) are
    data the exercise hands every student, so reading one is not using the function that made it; a forbidden
    attribute read from it still is (``corpus.hmm``, the true model).
    Attribute names (``.log_softmax``) count on what comes from a library (``torch.log_softmax``,
    ``corpus.hmm``), not on the student's own objects (``self.fit``, a tensor's ``x.logsumexp()``: what those
    call is seen while the answer runs)."""
    parsed = parse_cells(cells)
    bindings = _bindings(parsed, before)
    full, short = _forbidden_paths(check)
    torch_short = {s for s in short if is_torch_name(s)}
    start = bindings.get(fn_name)
    if start is not None and start.kind == "import" and _is_forbidden(str(start.payload), check, full, short):
        return f"is `{start.payload}`, the ready-made implementation, not yours"
    seen: set[str] = set()
    todo = [fn_name]
    while todo:
        name = todo.pop()
        if name in seen or name not in bindings or bindings[name].kind == "import" or (
                bindings[name].kind == "value" and bindings[name].cell in setup):
            continue
        seen.add(name)
        b = bindings[name]
        reads = b.globals_
        for sub in ast.walk(b.payload):
            if isinstance(sub, ast.Attribute):
                path = _dotted(sub)
                if not path or path[0] not in reads:
                    continue  # rooted in a local, a parameter or an expression: the run-time watch sees it
                library = _root_binding(path[0], bindings, setup)
                if library is None:
                    continue
                chain = [*library.split("."), *path[1:]]
                for attr in path[1:]:
                    if attr in short or (chain[0] == "torch" and torch_match(attr, torch_short)):
                        return f"calls `.{attr}`, a ready-made implementation of what this task asks you to write"
                if library != SETUP_DATA and _is_forbidden(".".join(chain), check, full, short):
                    return f"uses `{'.'.join(chain)}`, the ready-made answer"
            elif isinstance(sub, ast.Name) and sub.id in reads and sub.id in bindings:
                if bindings[sub.id].kind == "import":
                    if _is_forbidden(str(bindings[sub.id].payload), check, full, short):
                        return f"uses `{bindings[sub.id].payload}`, the ready-made answer"
                elif sub.id not in seen:
                    todo.append(sub.id)  # a helper of the student's: look inside it too
    return None
