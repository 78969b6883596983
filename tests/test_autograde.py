"""End to end: `lmbook-grade` on sample submissions gives exactly the intended grades."""

import csv
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
from make_samples import make_samples  # noqa: E402

pytestmark = pytest.mark.slow

# total out of 16, and per task (log_softmax, cross_entropy, ffnn_forward, sgns_loss, train_lm)
EXPECTED = {
    "correct": (16, [3, 3, 3, 3, 4]),
    "blank": (0, [0, 0, 0, 0, 0]),
    # global max: passes the visible tests, fails the hidden huge-logit case; CE averages over padding;
    # FFNN without b; SGNS right; train_lm left blank
    "partly_wrong": (4, [1, 0, 0, 3, 0]),
    # log_softmax never gets defined, and this student's cross_entropy calls it
    "syntax_error": (10, [0, 0, 3, 3, 4]),
    # imports lmbook's log_softmax: no credit for task 1 only (task 2 may build on any log-softmax)
    "imports_answer": (13, [0, 3, 3, 3, 4]),
    "not_a_notebook": (0, [0, 0, 0, 0, 0]),
}


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _grade(submissions: Path, out: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return subprocess.run([sys.executable, "-m", "lmbook.autograde", str(submissions), "--out", str(out),
                           "--course", str(ROOT / "autograder")], capture_output=True, text=True, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grading")
    subs = tmp / "submissions"
    make_samples(subs)
    before = _digest(subs)
    r = _grade(subs, tmp / "out")
    assert r.returncode == 0, r.stdout + r.stderr
    return {"rows": _rows(tmp / "out"), "out": tmp / "out", "subs": subs, "before": before, "stdout": r.stdout}


@pytest.mark.parametrize("student", EXPECTED)
def test_each_sample_gets_exactly_its_grade(graded, student):
    row = graded["rows"][student]
    total, per_task = EXPECTED[student]
    got = [float(row[t]) for t in ("log_softmax", "cross_entropy", "ffnn_forward", "sgns_loss", "train_lm")]
    assert (float(row["total"]), got) == (total, per_task), f"{student}: {row}"
    assert float(row["max"]) == 16


def test_submissions_are_not_modified(graded):
    assert _digest(graded["subs"]) == graded["before"]


def test_unreadable_notebook_is_reported_and_the_batch_completes(graded):
    assert graded["rows"]["not_a_notebook"]["status"].startswith("unreadable notebook")
    assert all(graded["rows"][s]["status"] == "graded" for s in EXPECTED if s != "not_a_notebook")


def test_feedback_is_written_and_never_shows_hidden_tests(graded):
    for student in EXPECTED:
        if student == "not_a_notebook":
            continue
        html = (graded["out"] / "feedback" / f"{student}.html").read_text()
        for secret in ("hidden=True", "BEGIN HIDDEN TESTS", "seed=1207", "seed=7717"):
            assert secret not in html, f"{student}'s feedback shows {secret!r}"


def test_feedback_and_report_explain_failures_in_the_students_terms(graded):
    report = (graded["out"] / "report.md").read_text()
    assert "averaged over padding positions too" in report
    assert "left out the hidden bias b" in report
    assert "not graded" in report  # the imported answer
    html = (graded["out"] / "feedback" / "partly_wrong.html").read_text()
    assert "left out the hidden bias b" in html


def test_gradebook_holds_the_same_scores(graded):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{graded['out'] / 'course' / 'gradebook.db'}") as gb:
        for student, (total, _) in EXPECTED.items():
            if student == "not_a_notebook":
                continue
            assert gb.find_submission("ch01", student).score == total, student


def _zip_of_samples(tmp_path: Path, entries: dict[str, str | None]) -> Path:
    """A zip whose entries are sample notebooks (by sample name) or, for None, a stray text entry."""
    subs = tmp_path / "subs"
    make_samples(subs)
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, sample in entries.items():
            if sample is None:
                zf.writestr(name, "{}")
            else:
                zf.write(subs / sample / "ch01_feedforward_lm.ipynb", name)
    shutil.rmtree(subs)
    return archive


def _rows(out: Path) -> dict[str, dict]:
    with (out / "grades.csv").open() as f:
        return {row["student"]: row for row in csv.DictReader(f)}


def test_lms_zip_is_graded_like_folders(tmp_path):
    archive = _zip_of_samples(tmp_path, {
        "blank/ch01_feedforward_lm.ipynb": "blank",
        "zoe_4411_ch01.ipynb": "not_a_notebook",  # LMS style: flat, renamed "<student>_<id>_<file>.ipynb"
    })
    r = _grade(archive, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    rows = _rows(tmp_path / "out")
    assert set(rows) == {"blank", "zoe"}
    assert rows["blank"]["total"] == "0" and rows["blank"]["status"] == "graded"
    assert rows["zoe"]["status"].startswith("unreadable notebook")


def test_a_zip_entry_pointing_outside_the_archive_is_skipped_not_fatal(tmp_path):
    archive = _zip_of_samples(tmp_path, {"blank/ch01_feedforward_lm.ipynb": "blank", "../../escaped.ipynb": None})
    r = _grade(archive, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert "skipped an entry" in r.stderr
    assert not (tmp_path.parent / "escaped.ipynb").exists() and not (tmp_path / "escaped.ipynb").exists()
    assert list(_rows(tmp_path / "out")) == ["blank"]


def test_missing_submissions_folder_is_a_clear_error(tmp_path):
    r = _grade(tmp_path / "nowhere", tmp_path / "out")
    assert r.returncode != 0 and "not a folder or a .zip" in r.stderr
