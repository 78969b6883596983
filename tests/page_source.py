"""What a reader sees of a page's source, line by line: its prose, and the code it shows.

A book page is MyST Markdown (``book/*.md``): code cells (```` ```{code-cell} ````, with tags in a ``---`` YAML
block or ``:tags:`` lines), other fenced blocks, and prose. An exercise page is a notebook. A cell tagged
``remove-input`` or ``remove-cell`` shows no code; ``hide-input`` code is one click away, so it is shown.
Lines are numbered as in the file (for a notebook: cell number and line in the cell), so that a message
can send an author straight to them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

HIDDEN_CODE_TAGS = {"remove-input", "remove-cell"}
FENCE = re.compile(r"^(`{3,}|~{3,})\s*(.*)$")
# fenced blocks that display code (a language name, none, or a code directive); others hold prose or math
CODE_INFO = re.compile(r"^(\{code-cell\}.*|\{code-block\}.*|\{code\}.*|[\w+-]*)$")


@dataclass(frozen=True)
class Line:
    where: str  # "book/ch01_feedforward_lm.md:42" or "exercises/ch01/x.ipynb cell 3 line 2"
    text: str
    kind: str  # "prose", "code" (shown code), "hidden-code"


def _tags_of(options: dict) -> set[str]:
    tags = options.get("tags", [])
    return set(tags if isinstance(tags, list) else [tags])


def markdown_lines(path: Path, name: str) -> list[Line]:
    lines = path.read_text().splitlines()
    out: list[Line] = []
    i = 0
    if lines and lines[0].strip() == "---":  # the page's front matter (jupytext, kernel): not shown
        i = next((k for k in range(1, len(lines)) if lines[k].strip() == "---"), 0) + 1
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if not lines[i].lstrip().startswith("%"):  # a MyST comment is not rendered
                out.append(Line(f"{name}:{i + 1}", lines[i], "prose"))
            i += 1
            continue
        fence, info = m.group(1), m.group(2).strip()
        i += 1
        options: dict = {}
        if info.startswith("{code-cell}"):
            if i < len(lines) and lines[i].strip() == "---":
                end = next(k for k in range(i + 1, len(lines)) if lines[k].strip() == "---")
                options = yaml.safe_load("\n".join(lines[i + 1:end])) or {}
                i = end + 1
            while i < len(lines) and re.match(r"^:\w[\w-]*:", lines[i]):
                key, _, value = lines[i][1:].partition(":")
                options[key] = yaml.safe_load(value) if value.strip() else ""
                i += 1
        start = i
        while i < len(lines) and not (lines[i].startswith(fence[0] * len(fence))
                                      and lines[i].strip() == lines[i].strip()[0] * len(lines[i].strip())):
            i += 1
        is_code = bool(CODE_INFO.match(info))
        kind = ("hidden-code" if _tags_of(options) & HIDDEN_CODE_TAGS else "code") if is_code else "prose"
        out += [Line(f"{name}:{k + 1}", lines[k], kind) for k in range(start, i)]
        i += 1  # the closing fence
    return out


def notebook_lines(path: Path, name: str) -> list[Line]:
    nb = json.loads(path.read_text())
    out = []
    for c, cell in enumerate(nb["cells"], start=1):
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code":
            kind = "hidden-code" if _tags_of(cell.get("metadata", {})) & HIDDEN_CODE_TAGS else "code"
        else:
            kind = "prose"
        out += [Line(f"{name} cell {c} line {k}", text, kind) for k, text in enumerate(source.splitlines(), start=1)]
    return out


def page_lines(root: Path, page: str) -> list[Line]:
    """The lines of ``page`` (a path under ``root``: "book/ch01_feedforward_lm.md", "exercises/ch01/x.ipynb")."""
    path = root / page
    return notebook_lines(path, page) if path.suffix == ".ipynb" else markdown_lines(path, page)
