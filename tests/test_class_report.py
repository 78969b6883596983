"""The class page and the report from made-up classes (no grading): who failed what, grouped as the instructor
reads it; answers to grade by hand, scores set by hand, late work; and the modules' one-way imports."""

from __future__ import annotations

import ast
import csv
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

from lmbook.grading import classreport, reports
from lmbook.grading.classreport import failure_kind, summarize
from lmbook.grading.student import Student

ROOT = Path(__file__).resolve().parent.parent
TASKS = {"split_heads": 2.0, "attention": 4.0, "explain": 2.0}


def _message(task: str, case: str, problem: str) -> str:
    return f"✗ {task}: 1 of 5 hidden checks failed\n  - [{case}] {problem}"


def _class() -> list[Student]:
    students = []
    for i, (split, att, explain) in enumerate([(2, 4, 2), (0, 4, 2), (0, 4, 2), (2, 0, 1), (2, 0, None), (0, 0, 0)]):
        st = Student(f"s{i}", tasks={"split_heads": (float(split), 2.0), "attention": (float(att), 4.0),
                                     "explain": (float(explain or 0), 2.0)})
        if explain is None:
            st.pending["explain"] = 2.0
        students.append(st)
    # s1 and s2 fail the same way (numbers differ): one group; s5 another way
    students[1].messages["split_heads"] = _message("split_heads", "batch 2, n=3", "returned shape (2, 3, 4), expected "
                                                   "(2, 2, 3, 2)")
    students[2].messages["split_heads"] = _message("split_heads", "batch 5, n=1", "returned shape (5, 1, 8), expected "
                                                   "(5, 4, 1, 2)")
    students[5].messages["split_heads"] = "split_heads: not implemented yet — replace `raise NotImplementedError()`"
    for st in students[3:6]:  # the named mistake is its own group, not an unnamed one
        st.mistakes["attention"] = ["applied the mask after the softmax"]
        st.messages["attention"] = _message("attention", "causal", "weights: max abs difference 0.31 at (0, 1, 2)")
    students[3].manual["explain"] = 1.0
    students[3].warnings.append("explain: the score 1/2 set by hand in formgrader was set on an earlier submission")
    students[4].late, students[4].penalty, students[4].penalty_why = True, 0.6, "late: -0.6 points"
    return students


def test_failures_no_named_mistake_explains_are_grouped_by_the_checks_words():
    s = summarize("ch06", _class(), TASKS)
    assert s.unnamed == [("split_heads", "returned shape (#, #, #), expected (#, #, #, #)", ["s1", "s2"]),
                         ("split_heads", "not implemented yet — replace `raise NotImplementedError()`", ["s5"])]
    assert s.mistakes == [("attention", "applied the mask after the softmax", ["s3", "s4", "s5"])]


def test_failure_kind_keeps_the_words_and_drops_what_differs_between_students():
    a = failure_kind(_message("t", "case one", "got 0.51 where 1.0 was expected, at index (3, 4)"), "t")
    b = failure_kind(_message("t", "case two", "got -2e-05 where 1.0 was expected, at index (0, 11)"), "t")
    assert a == b == "got # where # was expected, at index (#, #)"


def test_failure_kind_drops_a_case_name_that_holds_brackets_whole():
    kind = failure_kind(_message("t", "a holds the [SEP] id 102 itself, b of 3", "segments: returned [0, 1]"), "t")
    assert kind == "segments: returned [#, #]", kind


def test_answers_to_grade_by_hand_scores_set_by_hand_and_late_work_are_listed():
    s = summarize("ch06", _class(), TASKS, manual_tasks=["explain"])
    assert s.pending == {"explain": ["s4"]}
    assert s.manual == [("s3", "explain", 1.0)]
    assert s.late == [("s4", "late: -0.6 points")]
    assert s.warnings == [("s3", "explain: the score 1/2 set by hand in formgrader was set on an earlier submission")]
    full, partial, zero = s.tasks["explain"]
    assert (full, partial, zero) == (3, 1, 1), "a pending answer is neither full, partial nor zero"


class _Rows(HTMLParser):
    """The student table's rows: each row's tags and cell texts."""

    def __init__(self, page: str):
        super().__init__()
        self.rows: list[tuple[str, list[str]]] = []
        self._in, self._cell = False, None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._in = a.get("id") == "students"
        elif tag == "tr" and self._in and "data-tags" in a:
            self.rows.append((a["data-tags"], []))
        elif tag == "td" and self._in and self.rows:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.rows[-1][1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._in = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def test_the_student_table_has_every_student_with_points_status_flags_and_first_failure(tmp_path):
    students = _class()
    page = classreport.write_class_page(summarize("ch06", students, TASKS), tmp_path).read_text(encoding="utf-8")
    rows = {cells[0]: (tags.split(), cells) for tags, cells in _Rows(page).rows}
    assert list(rows) == [st.sid for st in students]
    tags, cells = rows["s4"]
    # student, total, split_heads, attention, explain, status, late, flags, first failure
    assert cells[1:5] == ["1.4 + 2 to grade", "2", "0", "pending"], cells  # 2 points less the late penalty
    assert cells[6] == "late: -0.6 points" and "late" in tags and "pending" in tags
    assert cells[8] == "attention: applied the mask after the softmax", cells[8]
    assert rows["s1"][1][8] == "split_heads: [batch 2, n=3] returned shape (2, 3, 4), expected (2, 2, 3, 2)"
    assert {"manual", "check", "notfull"} <= set(rows["s3"][0]) and rows["s3"][1][4] == "1 (by hand)"
    assert rows["s0"][0] == [], "a student with full marks and nothing to check has no tag"
    assert re.search(r'<div class=warn id=manual-warnings>.*s3', page, re.S), "no warning box"


def test_grades_csv_shows_pending_answers_as_pending_and_totals_without_them(tmp_path):
    students = _class()
    reports.write_grades(students, TASKS, tmp_path / "grades.csv")
    with (tmp_path / "grades.csv").open(encoding="utf-8") as f:
        got = {row["student"]: row for row in csv.DictReader(f)}
    assert (got["s4"]["explain"], got["s4"]["total"], got["s4"]["pending"], got["s4"]["penalty"]) == (
        "pending", "1.4", "2", "0.6")
    assert got["s3"]["manual"] == "explain" and got["s0"]["total"] == "8"


def test_the_report_modules_import_one_way():
    """reports -> classreport -> student, never back: the class page is built from records, not from reports."""
    def imports(module: str) -> set[str]:
        tree = ast.parse((ROOT / "src" / "lmbook" / "grading" / f"{module}.py").read_text())
        return {(node.module or "").lstrip(".") for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}

    assert "reports" not in imports("classreport") and "classreport" in imports("reports")
    assert not {"reports", "classreport"} & imports("student")


def test_make_grade_passes_its_options_to_lmbook_grade():
    r = subprocess.run(["make", "-n", "--no-print-directory", "grade", "SUBMISSIONS=dl.zip", "ASSIGNMENT=ch06",
                        "OUT=out", "TIMEOUT=17", "LMS=moodle", "LATE_PENALTY=10%/day", "DUE=2026-03-01 23:59",
                        "PARTIAL_CREDIT=1"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    command = r.stdout.replace("\\\n", " ")
    for option in ('"dl.zip" --assignment ch06 --out "out"', "--timeout 17", "--lms moodle",
                   '--late-penalty "10%/day"', '--due "2026-03-01 23:59"', "--partial-credit"):
        assert option in command, f"make grade does not pass {option}: {command}"
