"""Which cells of a built page draw a figure, and which image of the page each one left.

Two independent readings of one executed notebook (``_build/jupyter_execute/<page>.ipynb``):

- the *source* says whether a cell draws: a statement outside any function body creates a matplotlib figure
  (``plt.subplots``, ``plt.figure``, ...), calls a function of the page that does (a ``draw`` helper), calls
  a library function that does (``plot_history``), builds a ``Diagram`` or calls a function of a module of
  diagrams (``lmbook.diagram_examples``, ``lmbook.diagram_seq``, ...); a cell that draws only inside a
  function it hands to ``interactive_figure`` draws no static figure (its images live in the widget);
- the *outputs* say what the reader gets: each ``image/png`` (or SVG) output, which myst-nb writes to
  ``_images/<sha256 of its bytes>.<ext>`` and links from the page.

A cell tagged ``remove-output`` or ``remove-cell`` shows no output by the author's choice and is left out.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

# pyplot calls that create a figure
FIGURE_MAKERS = {"subplots", "figure", "subplot", "subplot_mosaic"}
# lmbook functions that create a figure of their own: plot_history (when given no axes), a Diagram
LIBRARY_DRAWERS = {"plot_history", "Diagram"}
# modules of ready-made diagrams, every function of which returns a Diagram (lmbook.diagram itself holds the
# primitives): lmbook.diagram_seq, lmbook.diagram_modern, lmbook.attention_diagrams, lmbook.pretraining_diagrams
DIAGRAM_MODULE = re.compile(r"lmbook\.(diagram_\w+|\w+_diagrams)")
HIDDEN_OUTPUT_TAGS = {"remove-output", "remove-cell"}
IMAGE_MIMES = {"image/png": "png", "image/svg+xml": "svg", "image/jpeg": "jpg"}


@dataclass
class DrawingCell:
    index: int  # among the notebook's cells
    first_line: str  # of the cell's source, to name it in a message
    images: list[str] = field(default_factory=list)  # the file names myst-nb gives its image outputs


def _calls(node: ast.AST):
    """(owner, name) of every call under ``node``: ``plt.subplots(...)`` is ("plt", "subplots")."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Attribute):
                yield (f.value.id if isinstance(f.value, ast.Name) else None), f.attr
            elif isinstance(f, ast.Name):
                yield None, f.id


def _makes_figure(owner: str | None, name: str, drawers: set[str]) -> bool:
    # drawers: function names, and the aliases of modules every function of which draws (lmbook.diagram_examples)
    return (owner in ("plt", "pyplot") and name in FIGURE_MAKERS) or name in drawers or owner in drawers


def _code(source: str) -> ast.Module | None:
    # IPython magics and shell lines are not Python
    lines = [("pass" if line.lstrip().startswith(("%", "!")) else line) for line in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _image_name(output: dict) -> str | None:
    for mime, ext in IMAGE_MIMES.items():
        data = output.get("data", {}).get(mime)
        if data is not None:
            raw = base64.b64decode(data) if ext != "svg" else \
                ("".join(data) if isinstance(data, list) else data).encode()
            return f"{hashlib.sha256(raw).hexdigest()}.{ext}"
    return None


def drawing_cells(notebook: Path) -> list[DrawingCell]:
    """The cells of an executed notebook that draw a static figure, each with the images it output."""
    nb = json.loads(notebook.read_text())
    drawers = set(LIBRARY_DRAWERS)
    found = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        tree = _code(source)
        if tree is None:
            continue
        for node in ast.walk(tree):  # helpers this cell defines, for the cells below
            if isinstance(node, ast.FunctionDef) and any(_makes_figure(o, n, drawers) for o, n in _calls(node)):
                drawers.add(node.name)
            # a module of diagrams (lmbook.diagram_examples, a chapter's lmbook.diagram_seq, ...): each function draws
            if isinstance(node, ast.ImportFrom) and DIAGRAM_MODULE.fullmatch(node.module or ""):
                drawers.update(a.asname or a.name for a in node.names)
            if isinstance(node, ast.ImportFrom) and node.module == "lmbook":
                drawers.update(a.asname or a.name for a in node.names if DIAGRAM_MODULE.fullmatch(f"lmbook.{a.name}"))
            if isinstance(node, ast.Import):
                drawers.update(a.asname for a in node.names if DIAGRAM_MODULE.fullmatch(a.name) and a.asname)
        top = [s for s in tree.body if not isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
        if not any(_makes_figure(o, n, drawers) for s in top for o, n in _calls(s)):
            continue
        if HIDDEN_OUTPUT_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        first = next((line for line in source.splitlines() if line.strip()), "")
        images = [name for out in cell.get("outputs", []) if (name := _image_name(out))]
        found.append(DrawingCell(i, first, images))
    return found


def has_outputs(notebook: Path) -> bool:
    """Whether any cell of the notebook has an output (myst-nb writes a page it took from its execution cache
    without any; the book's extension, book/_ext, merges them back)."""
    return any(cell.get("outputs") for cell in json.loads(notebook.read_text())["cells"])


def executed_notebook(site: Path, page: str) -> Path:
    """The executed notebook behind ``page`` (e.g. "book/ch01_feedforward_lm") of the site in ``site``."""
    return site.parent / "jupyter_execute" / f"{page}.ipynb"


def linked_images(html: str) -> set[str]:
    """File names of the images a built page links from its ``_images`` folder."""
    return set(re.findall(r'<img[^>]*\bsrc="[^"]*_images/([^"/]+)"', html))
