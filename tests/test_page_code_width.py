"""The code a page shows fits its column: no line longer than 88 characters.

The browser tests (``test_browser.py``) measure the built pages and find a code block cut off at the page's
width, but only after the whole book has been built, an hour into ``make test``. These read the same code
from the sources in a second: the page's own code cells, and the library's functions a page shows with
``literalinclude`` (``:pyobject:``, ``:lines:``), where a docstring line grown past the width is easy to miss.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from page_source import markdown_lines

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "book").glob("*.md"))
WIDTH = 88  # the longest code line that fits the column at a laptop's 1,366 pixels (test_browser.VIEWPORT)
INCLUDE = re.compile(r"^(`{3,})\{literalinclude\}\s+(\S+)\n((?::[\w-]+:.*\n)*)", re.MULTILINE)


def _named(tree: ast.Module, dotted: str) -> ast.AST:
    """The class or function ``A.b`` names, as Sphinx's ``:pyobject:`` finds it."""
    body, node = tree.body, None
    for part in dotted.split("."):
        node = next(n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                    and n.name == part)
        body = node.body
    return node


def _selected(lines: list[str], spec: str) -> list[str]:
    """``:lines: 1-2,9-`` applied to ``lines`` (1-based, inclusive, open-ended ranges allowed)."""
    out: list[str] = []
    for part in spec.split(","):
        first, dash, last = part.strip().partition("-")
        stop = (int(last) if last else len(lines)) if dash else int(first)
        out += lines[int(first) - 1:stop]
    return out


def included_code(page: Path) -> list[tuple[str, list[str]]]:
    """Each ``literalinclude`` of ``page``: a label and the lines it shows."""
    found = []
    for match in INCLUDE.finditer(page.read_text()):
        target, options = match.group(2), dict(re.findall(r":([\w-]+):\s*(.*)", match.group(3)))
        # Sphinx reads a leading "/" as the book's root, which is the repository's
        source = ROOT / target.lstrip("/") if target.startswith("/") else page.parent / target
        text = source.read_text()
        lines = text.splitlines()
        if "pyobject" in options:
            node = _named(ast.parse(text), options["pyobject"])
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = lines[start - 1:node.end_lineno]
        if "lines" in options:
            lines = _selected(lines, options["lines"])
        found.append((f"{target} {options.get('pyobject', '')}".strip(), lines))
    return found


def test_the_include_reader_finds_what_the_pages_show():
    shown = {label for page in PAGES for label, _ in included_code(page)}
    assert "../src/lmbook/dpo.py sequence_log_probs" in shown, sorted(shown)
    assert len(shown) >= 20, f"only {len(shown)} included objects found: {sorted(shown)}"


def test_line_selection_follows_sphinx():
    lines = [str(k) for k in range(1, 11)]
    assert _selected(lines, "1-2,9-") == ["1", "2", "9", "10"]
    assert _selected(lines, "1,7-8") == ["1", "7", "8"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_the_code_cells_fit_the_column(page):
    long = [f"{line.where}: {len(line.text)} characters: {line.text.strip()[:60]}"
            for line in markdown_lines(page, f"book/{page.name}")
            if line.kind == "code" and len(line.text) > WIDTH]
    assert not long, f"code lines wider than {WIDTH} characters are cut off on the page:\n" + "\n".join(long)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_the_library_code_a_page_shows_fits_the_column(page):
    long = [f"{label}: {len(text)} characters: {text.strip()[:60]}"
            for label, lines in included_code(page) for text in lines if len(text) > WIDTH]
    assert not long, (f"book/{page.name} shows library lines wider than {WIDTH} characters "
                      "(cut off on the page):\n" + "\n".join(long))
