"""Before grading anyone, the grader grades the reference solution in the same sandbox and configuration."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lmbook.grading import judge, sandbox

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))

pytestmark = pytest.mark.slow


def test_a_sandbox_that_cannot_import_lmbook_stops_the_grader_with_one_line_before_anyone_is_graded(
        tmp_path, monkeypatch, capsys):
    import nbformat
    from make_samples import NOTEBOOK, fill, solution_answers

    import lmbook
    from lmbook import autograde
    package_root = str(Path(lmbook.__file__).resolve().parent.parent)
    roots = sandbox._readable_roots
    monkeypatch.setattr(sandbox, "_readable_roots", lambda: [r for r in roots() if r != package_root])
    if str(Path(lmbook.__file__).resolve()).startswith(tuple(sandbox._readable_roots())):
        pytest.skip("lmbook is installed where the sandbox sees it anyway (site-packages)")
    subs = tmp_path / "subs"
    (subs / "ann").mkdir(parents=True)
    nbformat.write(fill(solution_answers()), subs / "ann" / NOTEBOOK)
    with pytest.raises(SystemExit) as stop:
        autograde.grade(subs, tmp_path / "out", "ch01", ROOT / "autograder", ROOT / "solutions", timeout=60,
                        workers=1, progress=False)
    message = str(stop.value)
    assert len(message.splitlines()) == 1, message
    assert "reference solution" in message and "nobody was graded" in message, message
    assert "lmbook" in message, f"the line does not say what is wrong: {message}"
    assert not (tmp_path / "out" / "grades.csv").exists()
    assert not (tmp_path / "out" / "course" / "autograded").exists(), "someone was graded"


def test_the_reference_solution_earns_full_marks_and_is_timed(tmp_path):
    seconds = judge.preflight(ROOT / "solutions" / "ch01" / "ch01_feedforward_lm.ipynb", timeout=300, cache=tmp_path)
    assert seconds > 0
    assert list(tmp_path.glob("reference-*.json")), "a passing reference run is kept for the next run"
    # the whole notebook's limit follows from it: one cell's limit on the clock (that of a cell that waits, three
    # times its CPU time) and ten times the reference's time
    assert judge.notebook_time_limit(300, seconds) == 3 * 300 + max(120.0, 10 * seconds)
