"""One rule: what every exercise notebook tells the student is what the grader does.

The rule lives in :mod:`lmbook.grading.rules`, derived from the magics :mod:`lmbook.grading.static` allows;
`make exercises` writes it into every notebook's introduction. These tests read the paragraph each notebook
states (what the student reads) and hold the grader to it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lmbook.grading import rules
from lmbook.grading.static import ALLOWED_MAGICS, CODE_MAGICS, find_tampering, to_python, unreadable_cells

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(str(p.relative_to(ROOT)) for folder in ("solutions", "exercises")
                   for p in (ROOT / folder).glob("ch*/*.ipynb"))
EXERCISES = [n for n in NOTEBOOKS if n.startswith("exercises/")]
# What the student chooses where the sentence has a placeholder, and the code a magic of code runs.
PLACEHOLDERS = {"<n>": "3", "<setting>": "figure_format", "<literal>": "'retina'", "obj": "torch.zeros"}
CODE = "y = torch.zeros(3).sum()"
ADDED = 1000  # the student's new cell, after the notebook's own


def _stated(path: str) -> str:
    paragraph = rules.stated_paragraph(json.loads((ROOT / path).read_text(encoding="utf-8")))
    assert paragraph is not None, f"{path}: no '**How it is graded.**' paragraph in its introduction"
    return paragraph


def _spans(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def _allowed(paragraph: str) -> list[str]:
    m = re.search(r"the only ones allowed are (.+?), and the code a magic runs", paragraph)
    assert m, f"the paragraph does not say which magics are allowed: {paragraph}"
    return _spans(m.group(1))


def _not_allowed(paragraph: str) -> list[str]:
    m = re.search(r"runs shell commands \((`[^)]+`)\).*IPython magics such as (.+?): the only", paragraph)
    assert m, f"the paragraph does not name magics and commands that are not allowed: {paragraph}"
    return _spans(m.group(1)) + _spans(m.group(2))


def _as_written(spelling: str, code: str = CODE) -> str:
    """A cell as a student writes it from the sentence's spelling of a magic."""
    cell = spelling
    for placeholder, value in PLACEHOLDERS.items():
        cell = re.sub(rf"\b{placeholder}\b" if placeholder.isidentifier() else re.escape(placeholder), value, cell)
    magic = cell.lstrip("%").split()[0]
    if cell.startswith("%%"):
        return f"{cell}\n{code}"
    if magic in CODE_MAGICS and cell.startswith("%"):
        return f"{cell} {code}"
    return cell


def _magic_name(cell: str) -> str:
    m = re.search(r"run_(?:line|cell)_magic\('(\w+)'", to_python(cell) or "")
    assert m, f"IPython does not read {cell!r} as a magic"
    return m.group(1)


def _notebook_cells(path: str) -> list[tuple[int, str]]:
    nb = json.loads((ROOT / path).read_text(encoding="utf-8"))
    return [(i, "".join(c["source"])) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]


def test_the_rule_names_exactly_the_magics_the_grader_allows():
    names = [_magic_name(_as_written(s)) for s in rules.allowed_magics()]
    assert set(names) == set(CODE_MAGICS) | set(ALLOWED_MAGICS)


def test_a_magic_the_grader_allows_with_no_words_in_the_rule_is_an_error(monkeypatch):
    # (static.py's dicts are left alone: their order is the paragraph's)
    unsaid = {k: v for k, v in rules.SPELLINGS.items() if k != "pprint"}
    monkeypatch.setattr(rules, "SPELLINGS", unsaid)
    with pytest.raises(LookupError, match="say how a student writes pprint"):
        rules.allowed_magics()
    monkeypatch.setattr(rules, "SPELLINGS", {**rules.SPELLINGS, "pprint": ("%pprint",), "who": ("%who",)})
    with pytest.raises(LookupError, match="no longer allows who"):
        rules.grading_paragraph()


def test_there_is_an_exercise_notebook_for_every_solution():
    assert [n.replace("solutions/", "", 1) for n in NOTEBOOKS if n.startswith("solutions/")] == [
        n.replace("exercises/", "", 1) for n in EXERCISES]
    assert len(EXERCISES) >= 11


@pytest.mark.parametrize("path", NOTEBOOKS)
def test_every_exercise_notebook_states_the_rule(path):
    assert _stated(path) == rules.grading_paragraph(), (
        f"{path} states another rule than the grader's: run `make exercises`")


def test_the_rewriting_tool_finds_nothing_stale(capsys):
    assert rules.main(["--check", str(ROOT / "solutions"), str(ROOT / "exercises")]) == 0, capsys.readouterr().err


def test_the_rewriting_tool_changes_only_the_paragraph(tmp_path):
    source = ROOT / "solutions" / "ch05" / "ch05_self_attention.ipynb"  # keys in an order of its own
    old = source.read_text(encoding="utf-8")
    stale = old.replace(json.dumps(rules.grading_paragraph())[1:-1],
                        "**How it is graded.** Only `%matplotlib inline` and `%precision` are allowed.")
    assert stale != old
    copy = tmp_path / "ch05" / source.name
    copy.parent.mkdir()
    copy.write_text(stale, encoding="utf-8")
    assert rules.main(["--check", str(tmp_path)]) == 1
    assert rules.main([str(tmp_path)]) == 0
    assert copy.read_text(encoding="utf-8") == old
    assert rules.rewrite(copy) is False


@pytest.mark.parametrize("path", EXERCISES)
def test_every_magic_the_notebook_allows_is_not_flagged(path):
    allowed = _allowed(_stated(path))
    assert allowed == rules.allowed_magics()
    cells = _notebook_cells(path)
    for spelling in allowed:
        written = _as_written(spelling)
        assert find_tampering([*cells, (ADDED, written)]) == [], f"{path}: the notebook allows {written!r}"
    everything = [(ADDED + i, _as_written(s)) for i, s in enumerate(allowed)]
    assert find_tampering([*cells, *everything]) == []


@pytest.mark.parametrize("path", EXERCISES)
def test_what_the_notebook_does_not_allow_is_flagged(path):
    paragraph = _stated(path)
    cells = _notebook_cells(path)
    named = _not_allowed(paragraph)
    assert "!ls" in named and len(named) >= 3
    others = ["%run helper.py", "%env SECRET=1", "%%bash\nls", "%load helper.py", "%%writefile helper.py\nx = 1",
              "%sx ls", "%cd /", "%store y", "%capture", "%load_ext helper", "%config IPCompleter.greedy = True"]
    for cell in [*(_as_written(s, "ls") if s.startswith("%%") else s for s in named), *others]:
        findings = find_tampering([*cells, (ADDED, cell)])
        assert findings and findings[0].cell == ADDED, f"{path}: {cell!r} is not flagged, though not allowed"


@pytest.mark.parametrize("path", EXERCISES)
def test_the_code_a_magic_runs_is_held_to_the_same_rules(path):
    paragraph = _stated(path)
    assert "the code a magic runs (the `f(x)` of `%time f(x)`) is held to the same rules as any other code" \
        in paragraph
    cells = _notebook_cells(path)
    for spelling in _allowed(paragraph):
        written = _as_written(spelling, "data = open('data.txt').read()")
        if _magic_name(written) not in CODE_MAGICS:
            continue
        findings = find_tampering([*cells, (ADDED, written)])
        assert findings and "open" in str(findings[0]), f"{path}: {written!r} is not flagged"


# What the sentence says costs nothing, and code of each kind.
COSTS_NOTHING = {
    "Printing (to stdout or stderr)": "import sys\nprint('epoch', 1)\nprint('loss', 2.5, file=sys.stderr)\n"
                                      "sys.stderr.write('50%\\r')\nsys.stdout.flush()",
    "warnings": "import warnings\nwarnings.warn('the loss went up')",
    "logging": "import logging\nlogging.basicConfig(level=logging.INFO)\nlogging.info('step %d', 3)",
    "progress bars": "from tqdm.auto import tqdm\nfor step in tqdm(range(3)):\n    pass",
}


@pytest.mark.parametrize("path", EXERCISES)
def test_printing_warnings_logging_and_progress_bars_cost_nothing(path):
    paragraph = _stated(path)
    m = re.search(r"([^.]*) cost nothing, in your answers or anywhere else\.", paragraph)
    assert m, paragraph
    for said in COSTS_NOTHING:
        assert said in m.group(1), f"{path} does not say that {said} costs nothing"
    cells = _notebook_cells(path)
    # in a cell of its own, and inside an answer (the first answer cell, in place of its stub)
    answer = next(k for k, (_, src) in enumerate(cells) if "raise NotImplementedError()" in src)
    for code in COSTS_NOTHING.values():
        assert find_tampering([*cells, (ADDED, code)]) == [], code
        indented = re.sub(r"(?m)^([ \t]*)raise NotImplementedError\(\)",
                          lambda m, code=code: "\n".join(m.group(1) + line for line in code.splitlines()),
                          cells[answer][1])
        assert indented != cells[answer][1]
        inside = [(i, indented if i == cells[answer][0] else src) for i, src in cells]
        assert unreadable_cells(inside) == {}, (path, code)
        assert find_tampering(inside) == [], (path, code)


def test_the_readme_says_the_same():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (line,) = [ln for ln in readme.splitlines() if ln.startswith("What costs a student points, and what is flagged")]
    named = set(_spans(line))
    missing = [s for s in rules.allowed_magics() if s not in named]
    assert not missing, f"README's rule does not name {missing}"
    for said in ("printing (to stdout or stderr), warnings, logging and progress bars",
                 "shell commands and other magics"):
        assert said in line
