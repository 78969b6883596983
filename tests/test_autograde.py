"""End to end: `lmbook-grade` on sample submissions gives exactly the intended grades."""

import csv
import os
import re
import shutil
import subprocess
import sys
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from grading_outputs import digest as _digest
from grading_outputs import rows as _rows

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
    shutil.copytree(subs / "partly_wrong", subs / "partly_wrong_too")  # a mistake two students made
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


# ----------------------------------------------------------------------------- the class report

TASKS = ("log_softmax", "cross_entropy", "ffnn_forward", "sgns_loss", "train_lm")
MAXIMA = (3, 3, 3, 3, 4)
CLASS = {**EXPECTED, "partly_wrong_too": EXPECTED["partly_wrong"]}  # the graded batch


class _Tables(HTMLParser):
    """The page's tables by id (rows of cell texts), and its count cards by id."""

    def __init__(self, page: str):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.cards: dict[str, str] = {}
        self.images: list[str] = []
        self._table = self._card = None
        self._cell: list[str] | None = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(a.get("id", ""), [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "div" and a.get("id", "").startswith("count-"):
            self._card = a["id"].removeprefix("count-")
        elif tag == "img":
            self.images.append(a.get("src", ""))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._table[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        elif self._card:
            self.cards[self._card] = data.strip()
            self._card = None


def _page(out: Path) -> _Tables:
    return _Tables((out / "class.html").read_text())


def test_class_page_counts_the_submissions_that_ran_and_those_that_did_not(graded):
    cards = _page(graded["out"]).cards
    ran = [s for s in CLASS if s != "not_a_notebook"]
    assert (cards["submissions"], cards["ran"], cards["not-run"]) == (str(len(CLASS)), str(len(ran)), "1"), cards


def test_class_page_histogram_counts_every_student_by_total(graded):
    rows = _page(graded["out"]).tables["grades"][1:]
    got = {float(points): int(n) for points, n in rows if int(n)}
    want: dict[float, int] = {}
    for total, _ in CLASS.values():
        want[float(total)] = want.get(float(total), 0) + 1
    assert got == want, f"histogram {got}, expected {want}"


def test_class_page_gives_each_tasks_full_partial_and_zero_marks(graded):
    rows = {r[0]: [int(c.split()[0]) for c in r[1:]] for r in _page(graded["out"]).tables["tasks"][1:]}
    ran = [per_task for s, (_, per_task) in CLASS.items() if s != "not_a_notebook"]
    for i, (task, maxp) in enumerate(zip(TASKS, MAXIMA, strict=True)):
        scores = [p[i] for p in ran]
        want = [sum(s == maxp for s in scores), sum(0 < s < maxp for s in scores), sum(s == 0 for s in scores)]
        assert rows[task] == want, f"{task}: full/partial/zero {rows[task]}, expected {want}"


def test_class_page_ranks_the_named_mistakes_with_the_students_who_made_them(graded):
    rows = _page(graded["out"]).tables["mistakes"][1:]
    found = {(task, mistake): (int(n), who) for n, task, mistake, who in rows}
    # partly_wrong and its copy leave out the bias (lmbook.tasks.ch01 names that mistake; the others name none)
    assert found.get(("ffnn_forward", "left out the hidden bias b")) == (2, "partly_wrong, partly_wrong_too"), found
    counts = [int(r[0]) for r in rows]
    assert counts[0] == 2 and counts[-1] >= 1, f"the most common mistake is held by 2: {rows}"
    assert counts == sorted(counts, reverse=True), f"not ranked by how many students: {counts}"


def test_class_page_lists_the_unrunnable_and_flagged_submissions_with_why(graded):
    tables = _page(graded["out"]).tables
    assert [r[0] for r in tables["not-run"][1:]] == ["not_a_notebook"]
    assert tables["not-run"][1][1].startswith("unreadable notebook")
    flagged = {r[0]: r[1] for r in tables["flagged"][1:]}
    assert list(flagged) == ["imports_answer"] and "log_softmax" in flagged["imports_answer"], flagged


def test_class_page_is_self_contained_and_its_figures_are_also_files(graded):
    page = (graded["out"] / "class.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page), "the page refers to something outside itself"
    images = _page(graded["out"]).images
    assert len(images) == 3 and all(src.startswith("data:image/png;base64,") for src in images)
    assert sorted(p.name for p in (graded["out"] / "class").glob("*.png")) == ["grades.png", "mistakes.png",
                                                                                 "tasks.png"]


def test_report_md_starts_with_the_class_summary(graded):
    report = (graded["out"] / "report.md").read_text()
    assert report.startswith("# Class report: ch01")
    summary = report.split("# Students", 1)[0]
    assert "2 × ffnn_forward: left out the hidden bias b" in summary, summary
    assert "not_a_notebook: unreadable notebook" in summary, summary


# ----------------------------------------------------------------------------- several assignments


def test_all_means_every_assignment_folder_of_the_source(tmp_path):
    from lmbook.autograde import resolve_assignments

    (tmp_path / "hw1").mkdir()
    (tmp_path / "hw1" / "hw1.ipynb").write_text("{}")
    (tmp_path / "hw0").mkdir()
    (tmp_path / "hw0" / "hw0.ipynb").write_text("{}")
    (tmp_path / "notes").mkdir()  # no notebook: not an assignment
    assert resolve_assignments(["all"], tmp_path) == ["hw0", "hw1"]


def test_an_unknown_assignment_is_a_clear_error_before_any_grading(tmp_path):
    r = subprocess.run([sys.executable, "-m", "lmbook.autograde", str(tmp_path), "--assignment", "ch01",
                        "--assignment", "ch99", "--out", str(tmp_path / "out"), "--course", str(ROOT / "autograder")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode != 0 and "unknown assignment ch99" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_several_assignments_give_one_sheet_with_a_column_per_assignment(tmp_path):
    subs = tmp_path / "term"
    make_samples(tmp_path / "samples", "ch05")  # exercise 5 has no training task: seconds per submission
    for student in ("correct", "blank"):
        shutil.copytree(tmp_path / "samples" / student, subs / "ch05" / student)
    ch06 = next((ROOT / "exercises" / "ch06").glob("*.ipynb"))  # the student notebook as released: blank
    (subs / "ch06" / "blank").mkdir(parents=True)
    shutil.copy(ch06, subs / "ch06" / "blank" / ch06.name)
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run([sys.executable, "-m", "lmbook.autograde", str(subs), "--assignment", "ch05", "--assignment",
                        "ch06", "--out", str(tmp_path / "out"), "--course", str(ROOT / "autograder")],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = tmp_path / "out"
    with (out / "grades.csv").open() as f:
        reader = csv.DictReader(f)
        rows = {row["student"]: row for row in reader}
    assert reader.fieldnames == ["student", "ch05", "ch06", "total", "max", "status", "flagged"]
    max05, max06 = float(_rows(out / "ch05")["correct"]["max"]), float(_rows(out / "ch06")["blank"]["max"])
    assert [float(rows["correct"][k]) for k in ("ch05", "ch06", "total")] == [max05, 0, max05]
    assert [float(rows["blank"][k]) for k in ("ch05", "ch06", "total")] == [0, 0, 0]
    assert float(rows["correct"]["max"]) == max05 + max06 and max05 > 0 and max06 > 0
    assert rows["correct"]["status"] == "ch06: no submission" and rows["blank"]["status"] == "graded"
    for assignment in ("ch05", "ch06"):
        assert (out / assignment / "class.html").exists(), f"no class page for {assignment}"


# ----------------------------------------------------------------------------- a grading worker that dies


def _dies_the_first_time(job: tuple) -> dict:
    sid, marker = job
    if not Path(marker).exists():
        Path(marker).write_text("died once")
        os._exit(9)  # as if killed (out of memory, say): the whole process pool breaks
    return {"sid": sid, "graded": True}


def _dies_for_bob(job: tuple) -> dict:
    if job[0] == "bob":
        os._exit(9)
    return {"sid": job[0], "graded": True}


def test_a_grading_worker_that_dies_is_replaced_and_its_student_graded_again(tmp_path):
    from lmbook.autograde import _run_phase1

    got = _run_phase1([("ann", str(tmp_path / "marker"))], 1, False, work=_dies_the_first_time)
    assert got == [{"sid": "ann", "graded": True}]


def test_a_worker_that_dies_twice_is_reported_and_the_students_already_graded_are_kept(tmp_path):
    from lmbook.autograde import _run_phase1

    got = {r["sid"]: r for r in _run_phase1([("ann", ""), ("bob", "")], 1, False, work=_dies_for_bob)}
    assert got["ann"] == {"sid": "ann", "graded": True}
    assert "worker process failed twice" in got["bob"]["error"], got["bob"]
