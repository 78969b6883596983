"""Honest submissions the grader repairs instead of costing the student points.

* A test cell a student copied to run it early (above its answer) or late (below): the copy is graded as an
  ordinary cell, the cell in the assignment's place keeps its role, wherever the copy sits.
* Malformed ``lmbook`` metadata (the grader's own namespace) of the notebook or of a cell: ignored, noted,
  and the notebook graded as any other.

The repairs are tested on :class:`Hygiene` itself, with the assignment's cells taken from the released
notebook instead of a gradebook; one end-to-end run of ``lmbook-grade`` checks the grades.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from grading_outputs import rows as _rows
from grading_outputs import section as _section
from hostile_corpus import FULL, GOOD, NOTEBOOK, ROOT, _cells_of, fill

from lmbook.grading import nbgrader_plugin
from lmbook.grading.nbgrader_plugin import Hygiene

TASKS = ("log_softmax", "cross_entropy", "ffnn_forward", "sgns_loss", "train_lm")


def _assignment_cells() -> list[dict]:
    """What :func:`nbgrader_plugin._source_cells` reads from the gradebook, read from the released notebook."""
    nb = nbformat.read(ROOT / "exercises" / "ch01" / NOTEBOOK, as_version=4)
    cells = []
    for c in nb.cells:
        meta = c.metadata.get("nbgrader")
        if meta:
            cells.append({"name": meta["grade_id"], "cell_type": c.cell_type, "source": c.source,
                          "locked": bool(meta.get("locked")), "metadata": dict(meta)})
    return cells


@pytest.fixture
def hygiene(monkeypatch):
    monkeypatch.setattr(nbgrader_plugin, "_source_cells", lambda resources: _assignment_cells())

    def run(nb):
        resources = {"nbgrader": {"student": "s", "assignment": "ch01", "notebook": NOTEBOOK[:-6], "db_url": ""}}
        nb, _ = Hygiene().preprocess(nb, resources)
        return nb

    return run


def _with_copy(where: str):
    """The solution with a copy of the test cell of log_softmax, ``above`` or ``below`` its answer (and its
    test cells), or at the ``top`` or ``end`` of the notebook; the copy and the original."""
    nb = fill(GOOD)
    original = _cells_of(nb, "test_log_softmax")[0]
    test = copy.deepcopy(original)
    test["id"] = "student-copy"
    test.source += "\n# run early"  # a copy the student touched: which cell was kept is told by its text
    at = {"above": nb.cells.index(_cells_of(nb, "log_softmax")[0]),
          "below": nb.cells.index(_cells_of(nb, "hidden_log_softmax")[0]) + 1,
          "top": 0, "end": len(nb.cells)}[where]
    nb.cells.insert(at, test)
    return nb, test, original


@pytest.mark.parametrize("where", ["above", "below", "top", "end"])
def test_a_copied_test_cell_is_demoted_and_the_one_in_its_place_is_kept(hygiene, where):
    nb, test, original = _with_copy(where)
    nb = hygiene(nb)
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_log_softmax"]
    assert graded == [original], \
        f"copy {where}: the cells kept as test_log_softmax are at {[nb.cells.index(c) for c in graded]}, " \
        f"expected only the original at {nb.cells.index(original)} (the copy is at {nb.cells.index(test)})"
    assert "nbgrader" not in test.metadata, f"copy {where}: the copy is still a test cell: {test.metadata}"
    answer = nb.cells.index(_cells_of(nb, "log_softmax")[0])
    assert nb.cells.index(original) > answer, f"copy {where}: the kept test cell runs before its answer"
    notes = nb.metadata["lmbook"]["hygiene"]
    assert any(f"cell {nb.cells.index(test)}: a second copy of the cell 'test_log_softmax'" in n for n in notes), \
        f"copy {where}: the notes do not name the copy: {notes}"


def test_a_copied_answer_cell_keeps_the_one_in_the_assignments_place(hygiene):
    nb = fill(GOOD)
    answer = _cells_of(nb, "log_softmax")[0]
    scratch = copy.deepcopy(answer)
    scratch["id"] = "scratch"
    scratch.source = "# trying things out\n" + scratch.source
    nb.cells.insert(1, scratch)  # above the set-up cell: not the answer's place
    nb = hygiene(nb)
    kept = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "log_softmax"]
    assert kept == [answer], f"kept as the answer: {[c.source[:40] for c in kept]}, expected the one in place"


@pytest.mark.parametrize("value", [["x"], "x", 3, 2.5, True, None], ids=repr)
def test_notebook_lmbook_metadata_of_any_type_is_ignored_and_noted(hygiene, value):
    nb = fill(GOOD)
    nb.metadata["lmbook"] = value
    nb = hygiene(nb)
    own = nb.metadata["lmbook"]
    assert isinstance(own, dict) and set(own) == {"hygiene"}, f"lmbook metadata after hygiene: {own!r}"
    noted = [n for n in own["hygiene"] if "malformed lmbook metadata" in n]
    if value is None:
        assert not noted, f"a null lmbook entry is not worth a note: {own['hygiene']}"
    else:
        assert noted, f"{value!r}: the repair is not noted: {own['hygiene']}"


@pytest.mark.parametrize("value", [{"hygiene": "x"}, {"flagged": 5}, {"hygiene": [1, 2]}, {"other": {"a": 1}}],
                         ids=repr)
def test_notebook_lmbook_metadata_with_wrong_typed_entries_is_ignored_and_noted(hygiene, value):
    nb = fill(GOOD)
    nb.metadata["lmbook"] = value
    nb = hygiene(nb)
    notes = nb.metadata["lmbook"]["hygiene"]
    assert isinstance(notes, list) and all(isinstance(n, str) for n in notes), f"hygiene notes: {notes!r}"
    assert set(nb.metadata["lmbook"]) == {"hygiene"}, f"the student's entries were kept: {nb.metadata['lmbook']}"
    assert any(f"{next(iter(value))!r}" in n and "malformed lmbook metadata" in n for n in notes), \
        f"{value!r}: the repair is not noted: {notes}"


def test_a_well_formed_notebook_gets_no_metadata_note(hygiene):
    nb = fill(GOOD)
    nb.metadata["lmbook"] = {"hygiene": ["from an earlier grading"], "flagged": []}  # an autograded copy
    nb = hygiene(nb)
    assert nb.metadata["lmbook"]["hygiene"] == [], f"notes for an honest notebook: {nb.metadata['lmbook']}"


def test_cell_lmbook_metadata_of_any_type_leaves_the_cells_roles_alone(hygiene):
    nb = fill(GOOD)
    roles = [copy.deepcopy(c.metadata.get("nbgrader")) for c in nb.cells]
    for c in nb.cells:
        c.metadata["lmbook"] = [1]
    nb = hygiene(nb)
    assert [c.metadata.get("nbgrader") for c in nb.cells] == roles, "a cell's lmbook metadata changed its role"


def test_sandboxed_execute_writes_its_flags_whatever_the_lmbook_metadata_was():
    nb = nbformat.v4.new_notebook()
    for value in (["x"], "x", 3):
        nb.metadata["lmbook"] = value
        nbgrader_plugin._own_metadata(nb)["flagged"] = []
        assert nb.metadata["lmbook"] == {"flagged": []}, f"{value!r}: {nb.metadata['lmbook']!r}"


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_honest_oddities_get_full_marks_from_lmbook_grade(tmp_path):
    subs = tmp_path / "subs"
    notebooks = {"copy_above": _with_copy("above")[0]}
    for name, value in {"nb_list": ["x"], "nb_str": "x", "nb_number": 3}.items():
        notebooks[name] = fill(GOOD)
        notebooks[name].metadata["lmbook"] = value
    notebooks["cell_list"] = fill(GOOD)
    for c in notebooks["cell_list"].cells:
        c.metadata["lmbook"] = [1]
    for name, nb in notebooks.items():
        (subs / name).mkdir(parents=True)
        nbformat.write(nb, subs / name / NOTEBOOK)
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    r = subprocess.run([sys.executable, "-m", "lmbook.autograde", str(subs), "--out", str(tmp_path / "out"),
                        "--course", str(ROOT / "autograder"), "--timeout", "15"],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = _rows(tmp_path / "out")
    report = (tmp_path / "out" / "report.md").read_text()
    for name in notebooks:
        got = [float(rows[name][t]) for t in TASKS]
        assert got == FULL, f"{name}: got {got}, expected {FULL} ({rows[name]['status']})"
        assert rows[name]["status"] == "graded", f"{name}: {rows[name]['status']}"
    assert "a second copy of the cell 'test_log_softmax'" in _section(report, "copy_above"), \
        _section(report, "copy_above")
    assert "malformed lmbook metadata" in _section(report, "nb_list"), _section(report, "nb_list")
