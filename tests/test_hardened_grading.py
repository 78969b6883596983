"""The hardened grader on a class of hostile, broken, wrong and unusual-but-correct submissions.

One batch grades them all (tests/hostile_corpus.py says what each must get);
then nbgrader's own commands are run on the same course and must agree.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from grading_outputs import digest as _digest
from grading_outputs import rows as _rows
from grading_outputs import section as _section
from hostile_corpus import (
    BROKEN,
    CORPUS,
    LEAK_MARK,
    MAX_TOTAL,
    OLD_FORMAT,
    RENAMED,
    VARIANTS,
    WRONG_SETS,
    write_corpus,
    write_implementations,
)

ROOT = Path(__file__).resolve().parent.parent
TASKS = ["log_softmax", "cross_entropy", "ffnn_forward", "sgns_loss", "train_lm"]
MAX = [3, 3, 3, 3, 4]
TIMEOUT = "15"  # seconds per cell: the hanging submissions cost this much, not the default 300

pytestmark = pytest.mark.slow


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _grade(subs: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lmbook.autograde", str(subs), "--out", str(out), "--course",
                           str(ROOT / "autograder"), "--timeout", TIMEOUT, *extra],
                          capture_output=True, text=True, env=_env(), cwd=ROOT)


def _nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={course}",
                           f"--CourseDirectory.source_directory={ROOT / 'solutions'}",
                           "--CourseDirectory.release_directory=release", "--log-level=ERROR"],
                          capture_output=True, text=True, env=_env(), cwd=ROOT / "autograder")


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hardened")
    subs = tmp / "subs"
    expected = write_corpus(subs)
    write_implementations(subs)
    before = _digest(subs)
    start = time.perf_counter()
    r = _grade(subs, tmp / "out")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return {"expected": expected, "subs": subs, "before": before, "out": tmp / "out", "stdout": r.stdout,
            "rows": _rows(tmp / "out"), "report": (tmp / "out" / "report.md").read_text(),
            "suspicious": (tmp / "out" / "suspicious.md").read_text(), "seconds": time.perf_counter() - start}


# ----------------------------------------------------------------------------- the hostile corpus


@pytest.mark.parametrize("student", [*CORPUS, *BROKEN, RENAMED[0], OLD_FORMAT[0]])
def test_each_hostile_or_broken_submission_gets_exactly_its_grade(batch, student):
    points, flagged, phrase = batch["expected"][student]
    row = batch["rows"][student]
    got = [float(row[t]) for t in TASKS]
    assert got == points, f"{student}: got {got}, expected {points} ({row['status']})"
    assert float(row["total"]) == sum(points) and float(row["max"]) == MAX_TOTAL
    assert (row["flagged"] == "yes") == flagged, f"{student}: flagged={row['flagged']!r}, expected {flagged}"
    if phrase:
        assert phrase in _section(batch["report"], student) + row["status"], \
            f"{student}: the report does not say {phrase!r}:\n{_section(batch['report'], student)[:1500]}"


def test_flagged_submissions_are_listed_with_their_evidence(batch):
    for student, (_, flagged, phrase) in batch["expected"].items():
        if flagged:
            part = batch["suspicious"].split(f"## {student}\n", 1)
            assert len(part) == 2, f"{student} is not in suspicious.md"
            assert phrase in part[1].split("\n## ", 1)[0], f"{student}: evidence {phrase!r} missing"
    assert "## honest" not in batch["suspicious"]


def test_the_batch_completes_and_says_what_happened(batch):
    n = len(batch["rows"])
    assert f"{n} submissions in" in batch["stdout"]
    assert "flagged for review" in batch["stdout"]
    assert (batch["out"] / "summary.json").exists()


def test_submissions_are_never_modified(batch):
    assert _digest(batch["subs"]) == batch["before"]


def test_gradebook_is_intact_and_holds_the_reported_grades(batch):
    db = batch["out"] / "course" / "gradebook.db"
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # no manual scores: nothing a submission did reached the gradebook
        assert con.execute("select count(*) from grade where manual_score is not null").fetchone()[0] == 0
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{db}") as gb:
        for student, row in batch["rows"].items():
            if row["status"].startswith("unreadable"):
                continue
            assert gb.find_submission("ch01", student).score == float(row["total"]), student


def test_feedback_never_shows_hidden_tests(batch):
    for html in (batch["out"] / "feedback").glob("*.html"):
        text = html.read_text()
        for secret in ("hidden=True", "BEGIN HIDDEN TESTS", "seed=1207", "seed=7717"):
            assert secret not in text, f"{html.name} shows {secret!r}"


def test_student_html_never_reaches_the_feedback(batch):
    # only text/plain and image/png outputs are kept from student code
    text = (batch["out"] / "feedback" / "output_flood.html").read_text()
    assert "output truncated by the grader" in text
    assert text.count("spam") < 5000


def _everything_shown_for(batch, student: str) -> str:
    """What the instructor and the student see of a submission: feedback, report, autograded notebook."""
    out = batch["out"]
    autograded = out / "course" / "autograded" / student / "ch01" / "ch01_feedforward_lm.ipynb"
    return "\n".join([(out / "feedback" / f"{student}.html").read_text(), _section(batch["report"], student),
                      autograded.read_text(), (out / "grades.csv").read_text()])


def test_hidden_inputs_never_reach_the_feedback(batch):
    import torch

    from lmbook.grading.checks import case_inputs
    from lmbook.tasks.ch01 import CROSS_ENTROPY, LOG_SOFTMAX
    shown = _everything_shown_for(batch, "leaks_through_messages")
    assert LEAK_MARK not in shown, "an exception's message from a hidden case reached the feedback"
    leaked = []
    for check, seed, sizes in [(LOG_SOFTMAX, 1207, (47, 5000, 1)), (CROSS_ENTROPY, 3301, (47, 20, 30))]:
        for k, case in enumerate(check.hidden_cases):
            x = case_inputs(case, seed, k, torch.device("cpu"))[0][0]
            if x.shape[-1] in sizes:
                leaked += [f"{v:.6f}" for v in x.flatten()[:4].tolist() if abs(v) > 1e-3]
    assert leaked and not [v for v in leaked if v in shown], "a hidden input's value reached the feedback"


def test_a_hidden_training_tests_figures_reach_the_instructor_and_not_the_student(batch):
    said = "for you only: hidden test of train_lm (not in the student's feedback): train_lm: perplexity "
    section = _section(batch["report"], "honest")
    assert said in section, section
    hidden_ppl = re.match(r"\d+\.\d+", section.split(said, 1)[1]).group()
    feedback = (batch["out"] / "feedback" / "honest.html").read_text()
    assert f"perplexity {hidden_ppl}" not in feedback, "the hidden test's perplexity reached the student"
    assert "meets the target on fresh held-out text" in feedback


def test_a_notebook_of_megabyte_images_costs_the_grader_a_bounded_amount(batch):
    # 10 cells x 20 images of 1.99 MB: 400 MB shown; what is kept, in each place, stays within the caps
    out = batch["out"]
    autograded = out / "course" / "autograded" / "image_flood" / "ch01" / "ch01_feedforward_lm.ipynb"
    kept = {"autograded notebook": autograded,
            "feedback": out / "feedback" / "image_flood.html"}
    kept |= {f"cached result {p.name}": p for p in (out / "course" / "lmbook_cache").glob("*.json")}
    for what, path in kept.items():
        assert path.stat().st_size < 12_000_000, f"{what} holds {path.stat().st_size / 1e6:.0f} MB"
    assert "more than the grader keeps" in (out / "feedback" / "image_flood.html").read_text()


def test_an_answer_that_loops_forever_costs_one_cells_time_limit(batch):
    import nbformat
    course = batch["out"] / "course"
    nb = nbformat.read(course / "autograded" / "hangs_in_answer" / "ch01" / "ch01_feedforward_lm.ipynb", 4)
    hidden = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "hidden_ffnn_forward")
    said = json.dumps(hidden.outputs)
    assert "already ran past its time limit" in said, said[:2000]


def test_honest_habits_are_graded_like_the_solution(batch):
    row = batch["rows"]["honest_habits"]
    assert row["status"] == "graded" and row["flagged"] == "", row
    assert "## honest_habits" not in batch["suspicious"]
    feedback = (batch["out"] / "feedback" / "honest_habits.html").read_text()
    # the student's own cells' output is shown (what an answer prints while a test cell runs it is not: the
    # test cell shows the checks' verdict)
    assert "largest difference:" in feedback, "the scratch cell's printed output is missing from the feedback"


# ----------------------------------------------------------------------------- wrong and correct implementations


@pytest.mark.parametrize("name", list(WRONG_SETS))
def test_known_wrong_implementations_lose_points_and_are_named(batch, name):
    row, section = batch["rows"][name], _section(batch["report"], name)
    for task, maxp in zip(TASKS, MAX, strict=True):
        assert float(row[task]) < maxp, f"{name}: the wrong {task} kept all its points"
        phrase = WRONG_SETS[name][task][1]
        assert phrase in section, f"{name}: the feedback for {task} does not say {phrase!r}:\n{section[:3000]}"


@pytest.mark.parametrize("name", list(VARIANTS))
def test_correct_but_different_implementations_get_full_marks(batch, name):
    row = batch["rows"][name]
    assert float(row["total"]) == sum(MAX), f"{name}: {row}\n{_section(batch['report'], name)[:3000]}"
    assert row["flagged"] == "" and row["status"] == "graded"


# ----------------------------------------------------------------------------- nbgrader's own commands agree


def _export(course: Path, tmp: Path) -> dict[str, float]:
    dest = tmp / "export.csv"
    r = _nbgrader(course, "export", f"--to={dest}")
    assert r.returncode == 0, r.stderr
    with dest.open() as f:
        return {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}


def test_nbgrader_export_gives_the_same_grades(batch, tmp_path):
    exported = _export(batch["out"] / "course", tmp_path)
    assert exported == {s: float(r["total"]) for s, r in batch["rows"].items()}


def test_nbgrader_autograde_run_again_gives_the_same_grades(batch, tmp_path):
    r = _nbgrader(batch["out"] / "course", "autograde", "ch01", "--force")
    assert r.returncode == 0, r.stderr[-2000:]
    assert _export(batch["out"] / "course", tmp_path) == {s: float(r["total"]) for s, r in batch["rows"].items()}


def test_plain_nbgrader_autograde_alone_is_hardened(batch, tmp_path):
    """Without lmbook-grade and without any cached result: nbgrader's command, this course's config."""
    course = tmp_path / "course"
    course.mkdir()
    r = _nbgrader(course, "generate_assignment", "ch01", "--force")
    assert r.returncode == 0, r.stderr[-2000:]
    picks = ["honest", "monkeypatch_allclose", "tags_on_tests", "edited_test_cells", "honest_habits",
             "thread_pool_operator", "forks_by_a_route_unread"]
    for student in picks:
        dest = course / "submitted" / student / "ch01"
        dest.mkdir(parents=True)
        for f in (batch["subs"] / student).iterdir():
            (dest / f.name).write_bytes(f.read_bytes())
    r = _nbgrader(course, "autograde", "ch01", "--create")
    assert r.returncode == 0, r.stderr[-2000:]
    assert _export(course, tmp_path) == {s: float(batch["rows"][s]["total"]) for s in picks}
    metadata = {s: json.loads(next((course / "autograded" / s / "ch01").glob("*.ipynb")).read_text())["metadata"]
                ["lmbook"] for s in picks}
    assert any("tried to start a process" in line for line in metadata["forks_by_a_route_unread"]["flagged"]), \
        metadata["forks_by_a_route_unread"]
    assert not metadata["honest"]["flagged"], metadata["honest"]
    # the hidden training test's figures are the instructor's: in the autograded notebook's metadata
    assert any(line.startswith("hidden test of train_lm (not in the student's feedback): train_lm: perplexity")
               for line in metadata["honest"]["instructor"]), metadata["honest"]


# ----------------------------------------------------------------------------- re-runs and interruptions


def test_rerunning_the_batch_reuses_results_and_changes_nothing(batch):
    before = (batch["out"] / "grades.csv").read_text()
    r = _grade(batch["subs"], batch["out"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert (batch["out"] / "grades.csv").read_text() == before
    assert "results reused from an earlier run" in r.stdout
    m = re.search(r"\((\d+) results reused", r.stdout)
    graded = sum(1 for row in batch["rows"].values() if not row["status"].startswith("unreadable"))
    assert m and int(m.group(1)) == graded, r.stdout[-1500:]


def test_an_interrupted_batch_resumes_without_regrading_finished_students(tmp_path):
    subs = tmp_path / "subs"
    write_corpus(subs)
    keep = {"honest", "tags_on_tests", "hidden_import", "deleted_answer_cell"}
    for d in subs.iterdir():
        if d.name not in keep:
            shutil.rmtree(d)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "lmbook.autograde", str(subs), "--out", str(out), "--course",
                             str(ROOT / "autograder"), "--timeout", TIMEOUT, "--workers", "1"],
                            env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    cache = out / "course" / "lmbook_cache"
    # Killed when the first result is stored, however slow the machine: no deadline. With one worker the
    # next student is then mid-run (a sandbox start and a torch import take far longer than one poll).
    def students_done() -> int:  # results of students (the reference solution's run is kept there too)
        return len([p for p in cache.glob("*.json") if not p.name.startswith("reference-")]) if cache.is_dir() else 0

    while proc.poll() is None and not students_done():
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # kill the grader and its workers mid-batch
    proc.wait()
    done = students_done()
    assert done >= 1, "the grader stopped before storing any result"
    assert done < len(keep), f"{done} of {len(keep)} results were stored: the batch was not interrupted half way"
    r = _grade(subs, out)
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r"\((\d+) results reused", r.stdout)
    assert m and int(m.group(1)) >= done
    rows = _rows(out)
    for student in keep:
        assert [float(rows[student][t]) for t in TASKS] == CORPUS[student][1], student
    with sqlite3.connect(out / "course" / "gradebook.db") as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# ----------------------------------------------------------------------------- Jupyter says the same thing


def _run_in_jupyter(nb):
    """The notebook as a student runs it: top to bottom in a real kernel (errors kept, as Jupyter shows them)."""
    from nbclient import NotebookClient
    client = NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(ROOT / "exercises" / "ch01")}})
    client.execute()
    return nb


def _said(cell) -> str:
    """What the checks said in a test cell (not what the student's answer printed while it ran)."""
    parts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream" and o.get("name") == "stdout":
            parts += [line for line in o.get("text", "").splitlines() if line.startswith("✓")]
        elif o.get("output_type") == "error":
            parts.append(re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(o.get("traceback", []))))
    # the time a training run took differs between machines: the rest must be the same
    return re.sub(r"trained in [\d.]+ s", "trained in _ s", "\n".join(parts)).strip()


@pytest.mark.parametrize("student", ["honest_habits", "walks_the_traceback"])
def test_jupyter_says_what_the_grader_says_cell_by_cell(batch, student):
    import nbformat
    nb = _run_in_jupyter(nbformat.read(batch["subs"] / student / "ch01_feedforward_lm.ipynb", 4))
    autograded = nbformat.read(batch["out"] / "course" / "autograded" / student / "ch01" / "ch01_feedforward_lm.ipynb",
                               4)
    graded = {c.metadata["nbgrader"]["grade_id"]: c for c in autograded.cells
              if c.metadata.get("nbgrader", {}).get("grade") and c.metadata["nbgrader"]["grade_id"].startswith("test_")}
    # every visible test cell: the five code tasks' and the thinking questions'
    assert {f"test_{task}" for task in TASKS} <= set(graded), sorted(graded)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if gid in graded:
            jupyter, grader = _said(cell), _said(graded[gid])
            if CORPUS[student][2]:  # flagged: both refuse, in their own words for where to look
                refused = "reaches for the grader's machinery"
                assert refused in jupyter and refused in grader, f"{gid}:\nJupyter: {jupyter}\ngrader:  {grader}"
            elif "training took" in jupyter:
                # Jupyter times training on the wall clock of whatever machine runs it (a test machine may be
                # loaded many times over); the grader in CPU time: only the verdicts on the model can be compared
                assert "✓ train_lm" in grader or "training took" in grader, grader
            else:
                assert jupyter == grader, f"{gid}:\nJupyter: {jupyter}\ngrader:  {grader}"
    warned = [c.source[:60] for c in nb.cells if "the grader refuses this cell" in json.dumps(c.get("outputs", []))]
    assert bool(warned) == CORPUS[student][2], f"cells Jupyter warned about: {warned}"
