"""Answers graded by hand, and scores set by hand, from the instructor's side.

An exercise may ask a free-text question ("explain why..."): an nbgrader manually graded answer cell, with a
model answer in the solution. No machine grades it: its points are pending (neither earned nor lost) until
someone grades it in formgrader; an answer left as released gets 0 (nbgrader sees the stub unchanged). What
the instructor sets by hand in formgrader counts, and shows as set by hand; when the student resubmits after
that, the instructor is told which score counts. Checked on exercise 5 with one such question added, graded
three times as a class is: before grading by hand, after it, and after a resubmission.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from grading_outputs import rows, section

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
from make_samples import notebook_name, solution_answers  # noqa: E402

pytestmark = pytest.mark.slow
A = "ch05"
NB = notebook_name(A)
CHROMIUM = Path("/usr/bin/chromium")
MODEL_ANSWER = ("The dot product of two random vectors of size $d_k$ has a variance that grows with $d_k$: divided "
                "by $\\sqrt{d_k}$ the scores keep unit variance, and the softmax does not saturate.")
WRONG_MASK = "def masked_attention(Q, K, V, key_mask, causal):\n    return V, None"
EXPLAIN = 2.0  # the question's points
# every autograded point of exercise 5 (its tasks' test cells, and any other code test cell it has)
AUTOGRADED = float(sum(c.metadata["nbgrader"]["points"] for c in nbformat.read(
    ROOT / "solutions" / A / NB, as_version=4).cells if c.metadata.get("nbgrader", {}).get("grade")))


def _source_with_a_question(dest: Path) -> Path:
    """solutions/ch05 with an "explain" question before its last cell: a locked prompt, a graded answer cell."""
    src = next((ROOT / "solutions" / A).glob("*.ipynb"))
    nb = nbformat.read(src, as_version=4)
    prompt = nbformat.v4.new_markdown_cell("**Explain** (2 points): why are the scores divided by $\\sqrt{d_k}$?")
    prompt.metadata["nbgrader"] = {"grade": False, "solution": False, "locked": True, "task": False,
                                   "schema_version": 3, "grade_id": "explain_scale_prompt"}
    answer = nbformat.v4.new_markdown_cell(f"### BEGIN SOLUTION\n{MODEL_ANSWER}\n### END SOLUTION")
    answer.metadata["nbgrader"] = {"grade": True, "solution": True, "locked": False, "task": False,
                                   "schema_version": 3, "grade_id": "explain_scale", "points": EXPLAIN}
    nb.cells[-1:-1] = [prompt, answer]
    (dest / A).mkdir(parents=True)
    nbformat.write(nb, dest / A / NB)
    return dest


def _env() -> dict:
    return dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))


def _nbgrader(course: Path, source: Path, *args: str) -> None:
    course.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={course}",
                        f"--CourseDirectory.source_directory={source}", "--CourseDirectory.release_directory=release",
                        "--log-level=ERROR"], capture_output=True, text=True, env=_env(), cwd=ROOT / "autograder")
    assert r.returncode == 0, r.stderr[-2000:]


def _student(release: Path, answers: dict[str, str]) -> str:
    nb = nbformat.read(release, as_version=4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = answers[gid]
    return nbformat.writes(nb)


def _set_by_hand(course: Path, scores: dict[tuple[str, str], float]) -> None:
    """What formgrader does when the instructor types a score: the grade's manual score, no longer to grade."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for (student, cell), score in scores.items():
            grade = gb.find_grade(cell, NB.removesuffix(".ipynb"), A, student)
            grade.manual_score = score
            grade.needs_manual_grade = False
        gb.db.commit()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The class graded three times: as submitted; after grading by hand; after one student resubmitted."""
    tmp = tmp_path_factory.mktemp("manual")
    source = _source_with_a_question(tmp / "source")
    _nbgrader(tmp / "release-course", source, "generate_assignment", A, "--force")
    release = tmp / "release-course" / "release" / A / NB
    good = {k: v.replace("### END SOLUTION", "").strip() for k, v in solution_answers(A).items()}
    subs = tmp / "canvas"
    subs.mkdir()
    files = {"doejane_101_1": _student(release, {**good, "explain_scale": MODEL_ANSWER}),  # the solution
             "leeann_102_2": _student(release, {}),  # the exercise as released
             "smithbob_103_3": _student(release, {**good, "masked_attention": WRONG_MASK,
                                                  "explain_scale": "Bigger scores make a peakier softmax."})}
    for name, text in files.items():
        (subs / f"{name}_{NB}").write_text(text, encoding="utf-8")
    out, found = tmp / "out", []

    def grade() -> dict:
        r = subprocess.run([sys.executable, "-m", "lmbook.autograde", str(subs), "--assignment", A, "--source",
                            str(source), "--out", str(out), "--course", str(ROOT / "autograder"), "--timeout", "60"],
                           capture_output=True, text=True, env=_env(), cwd=ROOT)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        with (out / "grades-canvas.csv").open(encoding="utf-8") as f:
            canvas = {row[1]: row[5] for row in list(csv.reader(f))[2:]}
        return {"rows": rows(out), "stdout": r.stdout, "canvas": canvas,
                "report": (out / "report.md").read_text(encoding="utf-8"),
                "page": (out / "class.html").read_text(encoding="utf-8")}

    found.append(grade())
    _set_by_hand(out / "course", {("doejane_101", "explain_scale"): 1.5, ("smithbob_103", "explain_scale"): 2.0,
                                  ("smithbob_103", "hidden_masked_attention"): 2.0})  # partial credit by hand
    found.append(grade())
    # Both resubmit: Bob's mask is right now (his explanation is the same); Jane rewrote her explanation only
    (subs / f"smithbob_103_3_{NB}").unlink()
    (subs / f"smithbob_103_4_{NB}").write_text(
        _student(release, {**good, "explain_scale": "Bigger scores make a peakier softmax."}), encoding="utf-8")
    (subs / f"doejane_101_1_{NB}").unlink()
    (subs / f"doejane_101_5_{NB}").write_text(
        _student(release, {**good, "explain_scale": "To keep the scores' variance near 1."}), encoding="utf-8")
    found.append(grade())
    return {"runs": found, "out": out}


def _total(row: dict) -> tuple[float, float, str]:
    return float(row["total"]), float(row["pending"]), row["explain_scale"]


def test_the_solution_earns_every_autograded_point_and_its_explanation_awaits_grading(runs):
    row = runs["runs"][0]["rows"]["doejane_101"]
    assert _total(row) == (AUTOGRADED, EXPLAIN, "pending"), row
    assert float(row["max"]) == AUTOGRADED + EXPLAIN and row["status"] == "graded"


def test_the_exercise_as_released_earns_nothing_and_nothing_awaits_grading(runs):
    row = runs["runs"][0]["rows"]["leeann_102"]
    assert _total(row) == (0.0, 0.0, "0"), row


def test_pending_grades_are_kept_out_of_the_lms_file_until_graded(runs):
    first, second = runs["runs"][0], runs["runs"][1]
    assert first["canvas"] == {"102": "0"}, f"only final grades are uploaded: {first['canvas']}"
    assert "2 submissions have answers to grade by hand" in first["stdout"]
    # Bob: every autograded point but masked_attention's 4, then 2 set by hand on its hidden cell, 2 for his answer
    assert second["canvas"] == {"101": f"{AUTOGRADED + 1.5:g}", "102": "0", "103": f"{AUTOGRADED - 4 + 2 + 2:g}"}


def test_the_class_page_lists_the_answers_to_grade_by_hand(runs):
    page = runs["runs"][0]["page"]
    table = re.search(r"<table id=pending>(.*?)</table>", page, re.S).group(1)
    assert "<td>explain_scale</td><td class=n>2</td><td>doejane_101, smithbob_103</td>" in table, table


def test_scores_set_by_hand_count_and_show_as_set_by_hand(runs):
    got = runs["runs"][1]["rows"]
    assert _total(got["doejane_101"]) == (AUTOGRADED + 1.5, 0.0, "1.5")
    assert got["doejane_101"]["manual"] == "explain_scale"
    # Bob: qkv 2, masked_attention 0 visible + 2 set by hand for the hidden cell, explanation 2 by hand
    assert (float(got["smithbob_103"]["masked_attention"]), got["smithbob_103"]["manual"]) == (
        2.0, "explain_scale masked_attention")
    assert "(set by hand)" in section(runs["runs"][1]["report"], "smithbob_103")
    assert not any("WARNING" in line for line in runs["runs"][1]["stdout"].splitlines()), "no resubmission yet"


def _warnings(run: dict, sid: str) -> list[str]:
    return [ln for ln in run["stdout"].splitlines() if ln.strip().startswith(f"{sid}: WARNING")]


def test_a_resubmission_meeting_a_score_set_by_hand_is_warned_about_and_says_which_counts(runs):
    third = runs["runs"][2]
    bob = third["rows"]["smithbob_103"]
    assert float(bob["masked_attention"]) == 1 + 2.0, "the score set by hand counts (and the visible test's 1)"
    # his hidden test's score was set on answers he has changed; his explanation, graded by hand, is unchanged
    (warning,) = _warnings(third, "smithbob_103")
    assert "masked_attention: the score 2/3 set by hand in formgrader was set on an earlier submission" in warning \
        and "this submission's autograde is 3/3" in warning and "The score set by hand counts" in warning, warning
    assert "id=manual-warnings" in third["page"]


def test_an_answer_graded_by_hand_that_changed_is_warned_about_and_one_that_did_not_is_not(runs):
    third = runs["runs"][2]
    (warning,) = _warnings(third, "doejane_101")
    assert "explain_scale: the score 1.5/2 set by hand" in warning and "its answer has changed since" in warning
    assert float(third["rows"]["doejane_101"]["total"]) == AUTOGRADED + 1.5, "the score set by hand still counts"
    assert not _warnings(runs["runs"][1], "doejane_101"), "no resubmission yet, no warning"


@pytest.mark.skipif(os.environ.get("LMBOOK_SKIP_BROWSER_TESTS") == "1", reason="LMBOOK_SKIP_BROWSER_TESTS=1")
def test_the_warning_is_the_first_thing_on_the_class_page_and_the_table_finds_the_student(runs):
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), f"{CHROMIUM} is missing (make system-deps)"
    page_path = runs["out"] / "class.html"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.goto(page_path.as_uri())
        box = page.locator("#manual-warnings")
        assert box.is_visible() and box.bounding_box()["y"] < 900, "the warning is not on the first screen"
        assert "smithbob_103" in box.inner_text() and "masked_attention" in box.inner_text()
        page.locator("#show").select_option("check")
        shown = page.evaluate("() => [...document.querySelectorAll('#students tbody tr')].filter(r => !r.hidden)"
                              ".map(r => r.cells[0].textContent)")
        page.screenshot(path=str(runs["out"] / "class-check.png"), full_page=True)
        browser.close()
    assert shown == ["doejane_101", "smithbob_103"], shown
