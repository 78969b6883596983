"""The rule a student is told, said once: what costs nothing, and what gets a notebook flagged.

The grader's reading of a notebook (:mod:`.static`) decides which IPython magics are allowed: those whose code
it reads as any other code (``CODE_MAGICS``) and those that run no code (``ALLOWED_MAGICS``). This module
turns those names into the words every exercise notebook's introduction says, its "How it is graded."
paragraph, so that no notebook can state another rule than the grader applies.

``python -m lmbook.grading.rules solutions`` writes the paragraph into every notebook under ``solutions/``
(``make exercises`` runs it before nbgrader copies the notebooks to ``exercises/``); ``--check`` only says
which notebooks are out of date. tests/test_one_rule.py checks that every exercise notebook says it, and that
the grader allows each magic the paragraph allows and flags the ones it names as not allowed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .static import ALLOWED_MAGICS, CODE_MAGICS

# How a student writes each magic the grader allows, by the name IPython runs it under (static.py's keys):
# the words only. Which magics are allowed is static.py's decision; a name there with no spelling here, or a
# spelling here for a name static.py no longer allows, is an error (:func:`allowed_magics`).
# `<n>`, `<setting>` and `<literal>` stand for what the student chooses; `obj` for any name.
SPELLINGS = {
    "time": ("%time", "%%time"),
    "timeit": ("%timeit", "%%timeit"),
    "capture": ("%%capture",),
    "matplotlib": ("%matplotlib inline",),
    "config": ("%config InlineBackend.<setting> = <literal>",),
    "precision": ("%precision <n>",),
    "pprint": ("%pprint",),
    "pinfo": ("obj?",),
    "pinfo2": ("obj??",),
    "load_ext": ("%load_ext autoreload",),
    "autoreload": ("%autoreload 2",),
}
# Magics and commands the paragraph names as not allowed (examples: every magic not allowed is flagged).
NOT_ALLOWED_EXAMPLES = ("%run", "%env", "%%bash")
SHELL_EXAMPLE = "!ls"

MARKER = "**How it is graded.**"


def allowed_magics() -> list[str]:
    """The magics a student may use, as they write them: the grader's code magics first, then the others,
    each in static.py's order."""
    names = [*CODE_MAGICS, *ALLOWED_MAGICS]
    unsaid = [n for n in names if n not in SPELLINGS]
    stale = [n for n in SPELLINGS if n not in names]
    if unsaid or stale:
        raise LookupError(
            "lmbook.grading.rules.SPELLINGS must name exactly the magics lmbook.grading.static allows: "
            + "; ".join(filter(None, [unsaid and f"say how a student writes {', '.join(unsaid)}",
                                      stale and f"static.py no longer allows {', '.join(stale)}"])))
    return [spelling for n in names for spelling in SPELLINGS[n]]


def _listed(items: list[str] | tuple[str, ...], last: str = "and") -> str:
    code = [f"`{i}`" for i in items]
    return code[0] if len(code) == 1 else f"{', '.join(code[:-1])} {last} {code[-1]}"


def rule_sentences() -> str:
    """What the student reads about magics, printing and what gets a notebook flagged."""
    return ("A notebook that reads or writes files, runs shell commands "
            f"(`{SHELL_EXAMPLE}`), or changes IPython, Python's import system or a library's functions gets no "
            "credit for any task, and is shown to your instructor with the lines concerned. The same goes for "
            f"IPython magics such as {_listed(NOT_ALLOWED_EXAMPLES, 'or')}: the only ones allowed are "
            f"{_listed(allowed_magics())}, and the code a magic runs (the `f(x)` of `%time f(x)`) is held to the "
            "same rules as any other code. "
            "Printing (to stdout or stderr), warnings, logging and progress bars cost nothing, in your answers "
            "or anywhere else.")


def grading_paragraph() -> str:
    """The "How it is graded." paragraph of every exercise notebook's introduction (one line of markdown)."""
    return (f"{MARKER} The grader takes only this notebook from your submission (no other files) and runs it in a "
            "sandbox, without network access or files; the hidden tests are decided outside it, on what your "
            "functions return. Each task is graded on its own: where a later task calls your function of an earlier "
            "one by the name the earlier task gives it, the tests of the later task put a right version in its "
            f"place, so one mistake costs one task. {rule_sentences()} A cell that runs for more than five minutes "
            "is stopped.")


def stated_paragraph(notebook: dict) -> str | None:
    """The "How it is graded." paragraph a notebook's introduction states (None: it has none)."""
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        if MARKER in source:
            return source[source.index(MARKER):].split("\n\n")[0].rstrip("\n")
    return None


def rewrite(path: Path) -> bool:
    """Write :func:`grading_paragraph` into the notebook at ``path`` in place of the one it states; only that
    line of the file changes (the rest keeps its bytes). Returns whether the file changed."""
    raw = path.read_text(encoding="utf-8")
    notebook = json.loads(raw)
    new = grading_paragraph()
    for cell in notebook["cells"]:
        lines = cell["source"] if isinstance(cell["source"], list) else [cell["source"]]
        for line in lines if cell["cell_type"] == "markdown" else []:
            if MARKER not in line:
                continue
            old = line[line.index(MARKER):].rstrip("\n")
            if "\n" in old:
                raise ValueError(f"{path}: the paragraph starting {MARKER!r} must be one line of its cell")
            if old == new:
                return False
            found = [enc for enc in (json.dumps(line, ensure_ascii=False), json.dumps(line)) if raw.count(enc) == 1]
            if not found:
                raise ValueError(f"{path}: cannot find the line of the paragraph starting {MARKER!r} once in the file")
            changed = raw.replace(found[0], json.dumps(line.replace(old, new), ensure_ascii=found[0].isascii()), 1)
            assert stated_paragraph(json.loads(changed)) == new
            path.write_text(changed, encoding="utf-8")
            return True
    raise ValueError(f"{path}: its introduction has no paragraph starting {MARKER!r}: add one (one line), "
                     f"then run `python -m lmbook.grading.rules`")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lmbook.grading.rules", description=(
        "Write the grader's rule (the 'How it is graded.' paragraph) into exercise notebooks."))
    parser.add_argument("folders", nargs="*", default=["solutions"],
                        help="folders of assignments (each a folder of notebooks); default: solutions")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook is stale")
    args = parser.parse_args(argv)
    paths = sorted(p for folder in args.folders for p in Path(folder).glob("*/*.ipynb"))
    if not paths:
        print(f"no notebooks in {', '.join(args.folders)}", file=sys.stderr)
        return 1
    stale = []
    for path in paths:
        if args.check:
            if stated_paragraph(json.loads(path.read_text(encoding="utf-8"))) != grading_paragraph():
                stale.append(path)
        elif rewrite(path):
            print(f"{path}: wrote the grader's rule into its introduction")
    for path in stale:
        print(f"{path}: its introduction does not state the grader's rule: run `python -m lmbook.grading.rules`",
              file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
