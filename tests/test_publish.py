"""lmbook.publish, and the rule it serves: the reader of a chapter sees at most one line of bookkeeping per cell."""

import ast
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from lmbook.publish import publish

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "book").glob("ch[0-9][0-9]_*.md")) + sorted((ROOT / "book").glob("appendix*.md"))


@pytest.fixture
def glue_calls(monkeypatch) -> list:
    """Replace myst_nb.glue by a recorder (publish imports it when called) and return the recorded calls."""
    calls = []
    fake = types.ModuleType("myst_nb")
    fake.glue = lambda name, variable, display=True: calls.append((name, variable, display))
    monkeypatch.setitem(sys.modules, "myst_nb", fake)
    return calls


def test_publish_glues_every_keyword_without_displaying_it(glue_calls):
    publish(best_ppl=6.38, best_m=6, by_window={1: 8.19})
    assert glue_calls == [("best_ppl", 6.38, False), ("best_m", 6, False), ("by_window", {1: 8.19}, False)]


def test_publish_accepts_names_built_at_run_time(glue_calls):
    publish(**{f"em_{key}": i for i, key in enumerate(["greedy", "beam"])})
    assert glue_calls == [("em_greedy", 0, False), ("em_beam", 1, False)]


def test_publish_glues_numpy_and_torch_scalars_as_python_numbers(glue_calls):
    import numpy as np
    import torch

    publish(a=np.float64(1.5), b=np.int64(3), c=torch.tensor(2.5), d=np.array([1.0, 2.0]))
    values = [v for _, v, _ in glue_calls]
    assert [type(v) for v in values[:3]] == [float, int, float] and values[:3] == [1.5, 3, 2.5]
    assert isinstance(values[3], np.ndarray), "an array is not a scalar: it is glued as it is"


def test_publish_with_nothing_to_publish_glues_nothing(glue_calls):
    publish()
    assert glue_calls == []


def test_publish_refuses_a_value_without_a_name(glue_calls):
    with pytest.raises(TypeError):
        publish("best_ppl", 6.38)
    assert glue_calls == []


def test_importing_lmbook_does_not_import_myst_nb():
    code = "import sys, lmbook, lmbook.publish; assert 'myst_nb' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def code_cells(text: str) -> list[tuple[int, list[str], str]]:
    """(line number, tags, source) of each ```{code-cell} of a MyST notebook, option lines removed."""
    cells, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if not lines[i].startswith("```{code-cell}"):
            i += 1
            continue
        start, i, body = i + 1, i + 1, []
        while not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        tags, options = [], []
        if body and body[0].strip() == "---":  # options as a YAML block between --- lines
            end = body.index("---", 1)
            options, body = body[1:end], body[end + 1 :]
        else:  # options as :key: value lines
            while body and body[0].startswith(":"):
                options.append(body.pop(0).lstrip(":"))
        for option in options:
            if match := re.match(r"\s*tags\s*:\s*\[(.*)\]", option):
                tags += [t.strip().strip("'\"") for t in match.group(1).split(",")]
        cells.append((start, tags, "\n".join(body)))
    return cells


def bookkeeping_lines(source: str) -> set[int]:
    """Line numbers of the source that belong to a call of glue(...) or publish(...), every line of a long call."""
    lines = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in ("glue", "publish"):
                lines.update(range(node.lineno, node.end_lineno + 1))
    return lines


def test_bookkeeping_lines_counts_every_line_of_a_call():
    source = 'x = 1\npublish(a=x)\nfor k in "ab":\n    glue(k, 1,\n         display=False)\nprint(x)\n'
    assert bookkeeping_lines(source) == {2, 4, 5}


def test_code_cells_reads_tags_in_either_syntax():
    text = ("```{code-cell} ipython3\n:tags: [remove-cell]\n\npublish(a=1)\n```\n\ntext\n\n"
            "```{code-cell} ipython3\n---\ntags: [hide-input, remove-output]\n---\nx = 1\n```\n")
    assert [(tags, source.strip()) for _, tags, source in code_cells(text)] == [
        (["remove-cell"], "publish(a=1)"), (["hide-input", "remove-output"], "x = 1")]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_no_visible_cell_shows_more_than_one_line_of_bookkeeping(chapter):
    """Numbers for the text are published in one short line, or in a remove-cell cell the reader never sees."""
    offenders = []
    for line, tags, source in code_cells(chapter.read_text()):
        if "remove-cell" in tags:
            continue
        n = len(bookkeeping_lines(source))
        if n > 1:
            offenders.append(f"{chapter.name}:{line}: {n} lines of glue/publish")
    assert not offenders, ("move these into one publish(...) call in a cell tagged remove-cell right after:\n"
                           + "\n".join(offenders))


def test_the_chapters_are_found():
    assert len(CHAPTERS) >= 4
