"""The exercise notebooks: in sync with their sources, runnable, and graded as intended."""

import filecmp
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
pytestmark = pytest.mark.slow


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _execute(path: Path, tmp_path: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


def _errors(nb) -> dict[str, str]:
    return {c.metadata.get("nbgrader", {}).get("grade_id", c.get("id")): f"{o['ename']}: {o['evalue']}"
            for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_exercises_are_generated_from_solutions_unchanged(assignment, tmp_path):
    r = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment, "--force",
                        f"--CourseDirectory.release_directory={tmp_path / 'release'}",
                        f"--CourseDirectory.db_url=sqlite:///{tmp_path / 'gradebook.db'}", "--log-level=ERROR"],
                       cwd=ROOT / "autograder", env=_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    fresh = tmp_path / "release" / assignment
    committed = ROOT / "exercises" / assignment
    names = sorted(p.name for p in fresh.iterdir())
    # JupyterLab's checkpoints (git-ignored) appear wherever a student opened a notebook; they are not ours.
    ours = sorted(p.name for p in committed.iterdir() if p.name != ".ipynb_checkpoints")
    assert names == ours, "exercises/ has other files than nbgrader makes"
    for name in names:
        assert filecmp.cmp(fresh / name, committed / name, shallow=False), (
            f"exercises/{assignment}/{name} differs from what solutions/ generates: run `make exercises`")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solution_notebook_runs_and_passes_every_test(assignment, tmp_path, monkeypatch):
    """On the pretend accelerator (the same numbers as on the CPU, and an error wherever a GPU or a Mac would
    meet tensors on two devices), unless LMBOOK_DEVICE names a real device (make gpu-check: cuda)."""
    if not os.environ.get("LMBOOK_DEVICE"):
        monkeypatch.setenv("LMBOOK_DEVICE", "pretend")
    (path,) = (ROOT / "solutions" / assignment).glob("*.ipynb")
    nb = _execute(path, tmp_path)
    assert _errors(nb) == {}, (f"the solution notebook failed its own tests on {os.environ['LMBOOK_DEVICE']}: "
                               f"{_errors(nb)}")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_unmodified_exercise_runs_and_every_test_says_not_implemented(assignment, tmp_path):
    (path,) = (ROOT / "exercises" / assignment).glob("*.ipynb")
    nb = _execute(path, tmp_path)
    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and "check(" in c.source]
    assert tests, "no visible test cells found"
    errors = _errors(nb)
    for cell in tests:
        gid = cell.metadata["nbgrader"]["grade_id"]
        assert gid in errors and "not implemented yet" in errors[gid], f"{gid}: {errors.get(gid)}"
    answer_cells = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells
                    if c.metadata.get("nbgrader", {}).get("solution")}
    assert not (set(errors) - {c.metadata["nbgrader"]["grade_id"] for c in tests} - answer_cells), (
        f"cells other than tests failed in the blank exercise: {errors}")


def test_student_notebook_contains_no_solution_or_hidden_test():
    for path in (ROOT / "exercises").rglob("*.ipynb"):
        text = path.read_text()
        for marker in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "hidden=True"):
            assert marker not in text, f"{path.name} leaks {marker!r}"
