"""The instructor's round trip: an LMS's download in, that LMS's grade import file out.

One known class of five, downloaded as Canvas, Moodle and Blackboard each write it (a stub beside the real
notebook, two uploads of the notebook, a late submission, a renamed notebook with stray files beside it, a
blank stub), is graded from each download; the file each LMS imports must hold exactly the class's ids and
totals. The files are read as each LMS's importer reads them (the rules below are taken from the importers'
own code: Canvas's ``app/models/gradebook_importer.rb``, Moodle's ``mod/assign/feedback/offline``, and
Blackboard's Grade Center upload documentation), not by the code that wrote them.

The same graded class is then looked at as the instructor does, in chromium: the class page's table of every
student (sorting, filtering, links to the feedback), and a feedback page typesetting its maths with no network.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from datetime import datetime
from pathlib import Path

import nbformat
import pytest
from grading_outputs import digest, rows

from lmbook.grading import lms
from lmbook.grading.student import Student

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
from make_samples import fill, notebook_name, solution_answers  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
A = "ch05"  # no training task: seconds per notebook
NB = notebook_name(A)
STEM = NB.removesuffix(".ipynb")
TASKS = ("qkv_projections", "masked_attention")  # 2 and 4 points (masked_attention: 1 visible + 3 hidden)
# A notebook with answers answers every graded cell as the solution does (the thinking questions too); the
# class's points differ in these two tasks only, and QUESTIONS is what the other cells are worth.
GOOD = solution_answers(A)
_GRADED = [c.metadata["nbgrader"] for c in nbformat.read(ROOT / "solutions" / A / NB, as_version=4).cells
           if c.metadata.get("nbgrader", {}).get("grade")]
MAX = float(sum(m["points"] for m in _GRADED))
QUESTIONS = float(sum(m["points"] for m in _GRADED if not any(m["grade_id"].endswith(t) for t in TASKS)))
NO_CAUSAL_MASK = '''
def masked_attention(Q, K, V, key_mask, causal):
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    A = torch.softmax(scores.masked_fill(~key_mask[:, None, :], float("-inf")), dim=-1)  # causal ignored
    return A @ V, A
'''
DUE = "2026-03-01T23:59"
PENALTY = round(0.1 * MAX, 2)  # --late-penalty 10% of the exercise's points


def _nb(kind: str) -> str:
    answers = {"full": GOOD, "stub": {}, "wrong": {**GOOD, "masked_attention": NO_CAUSAL_MASK}}[kind]
    return nbformat.writes(fill(answers, A))


# The class: who, what they sent (file name as uploaded -> notebook kind or text), and their points.
# Each entry: (files, tasks' points, late in the download). Files in upload order (the last is the latest).
CLASS = {
    "Jane Doe": ({NB: "stub", f"{STEM}-1.ipynb": "full"}, [2, 4], False),  # the stub uploaded first, by mistake
    "Bob Smith": ({NB: "wrong"}, [2, 0], True),
    "Zoë Müller": ({NB: "wrong", f"{STEM}-1.ipynb": "full"}, [2, 4], False),  # uploaded again, right this time
    "Ann Lee": ({NB: "stub"}, [0, 0], False),
    "Eve Stray": ({"homework.ipynb": "full", "notes.txt": "text", "data.csv": "text"}, [2, 4], False),
}
CANVAS_IDS = {"Jane Doe": "101", "Bob Smith": "102", "Zoë Müller": "103", "Ann Lee": "104", "Eve Stray": "105"}
MOODLE_IDS = {"Jane Doe": "201", "Bob Smith": "202", "Zoë Müller": "203", "Ann Lee": "204", "Eve Stray": "205"}
BB_USERS = {"Jane Doe": "jdoe", "Bob Smith": "bsmith", "Zoë Müller": "z_muller", "Ann Lee": "alee",
            "Eve Stray": "estray"}


def _content(kind: str) -> str:
    return _nb(kind) if kind in ("full", "stub", "wrong") else f"{kind} of a student\n"


def canvas_zip(dest: Path) -> Path:
    """Canvas's "Download Submissions": flat ``lastfirst[_LATE]_<user id>_<attachment id>_<file>``; a second
    upload under one name comes back as ``<name>-1``; a text entry beside the files."""
    path = dest / "canvas.zip"
    att = 5000
    with zipfile.ZipFile(path, "w") as zf:
        for who, (files, _, late) in CLASS.items():
            first, last = who.split()
            key = re.sub(r"[^a-z]", "", (last + first).lower())
            for name, kind in files.items():
                att += 1
                zf.writestr(f"{key}{'_LATE' if late else ''}_{CANVAS_IDS[who]}_{att}_{name}", _content(kind))
        zf.writestr(f"leeann_{CANVAS_IDS['Ann Lee']}_text.html", "<p>I could not finish</p>")
    return path


def moodle_tree(dest: Path) -> Path:
    """Moodle's "Download all submissions", unpacked: ``<Full Name>_<participant id>_assignsubmission_file_/``
    per student, the online text beside it; a second upload of a name as the browser saved it, ``name (1)``."""
    root = dest / "moodle"
    for who, (files, _, _) in CLASS.items():
        folder = root / f"{who}_{MOODLE_IDS[who]}_assignsubmission_file_"
        folder.mkdir(parents=True)
        for name, kind in files.items():
            (folder / name.replace(f"{STEM}-1", f"{STEM} (1)")).write_text(_content(kind), encoding="utf-8")
        text = root / f"{who}_{MOODLE_IDS[who]}_assignsubmission_onlinetext_"
        text.mkdir()
        (text / "onlinetext.html").write_text("<p>Done.</p>")
    return root


def blackboard_zip(dest: Path) -> Path:
    """Blackboard's "Assignment File Download": ``<assignment>_<username>_attempt_<time>_<file>`` and a receipt
    per attempt. A second upload is a second attempt; a username with an underscore (the receipts settle it)."""
    path = dest / "blackboard.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for who, (files, _, late) in CLASS.items():
            user = BB_USERS[who]
            upload = list(files.items())
            if len(upload) == 2 and who == "Zoë Müller":  # the two uploads are two attempts
                attempts = [[upload[0]], [upload[1]]]
            else:
                attempts = [upload]
            for k, sent in enumerate(attempts):
                when = "2026-03-02-10-00-00" if late else f"2026-02-2{7 + k}-18-30-00"
                prefix = f"Exercise 5_{user}_attempt_{when}"
                listing = ""
                for name, kind in sent:
                    # a file re-uploaded as a new attempt keeps its name there
                    original = name.replace(f"{STEM}-1", STEM) if len(attempts) > 1 else name
                    zf.writestr(f"{prefix}_{original}", _content(kind))
                    listing += f"\tOriginal filename: {original}\n\tFilename: {prefix}_{original}\n"
                zf.writestr(f"{prefix}.txt", (
                    f"Name: {who} ({user})\nAssignment: Exercise 5\nDate Submitted: {when}\nCurrent Grade: Needs "
                    "Grading\n\nSubmission Field:\nThere is no student submission text data for this assignment.\n\n"
                    "Comments:\nThere are no student comments for this assignment.\n\nFiles:\n" + listing))
    return path


# ----------------------------------------------------------------------------- the LMSs' importers, as they read


NON_ASSIGNMENT = re.compile("Current Score|Current Points|Current Grade|Final Score|Final Points|Final Grade|"
                            "Override Score|Override Grade|Override Status")


def canvas_import(path: Path) -> tuple[list[str], dict[str, str], dict[str, float]]:
    """Canvas's GradebookImporter: the header (``Student``, ``ID``, SIS columns, ``Section``), the assignment
    columns after it (totals excluded), ``Points Possible``, and each student's grade by Canvas user ``ID``.
    Returns (assignment columns, points possible per column, {user id: grade of the first column})."""
    table = list(csv.reader(path.open(encoding="utf-8")))
    head = table[0]
    assert len(head) > 3 and "Student" in head[0] and "ID" in head[1], f"Canvas rejects the header: {head}"
    n = 3
    if re.search(r"SIS\s+Login\s+ID", head[2]):
        n += 1
    elif re.search(r"SIS\s+User\s+ID", head[2]) and re.search(r"SIS\s+Login\s+ID", head[3]):
        n += 2 + bool(len(head) > 4 and re.search(r"Integration\s+ID", head[4]))
    assert "Section" in head[n - 1], f"Canvas rejects the header: its last student column is {head[n - 1]!r}"
    columns = [h for h in head[n:] if not NON_ASSIGNMENT.search(h)]
    assert columns, "no assignment column"
    at = head.index(columns[0])
    possible, grades = {}, {}
    for row in table[1:]:
        if "Points Possible" in row[0]:
            possible = {c: row[head.index(c)] for c in columns}
        elif all(re.fullmatch(r"\s*(Muted|Manual Posting.*)?\s*", c, re.I) for c in row):
            continue
        else:
            assert row[1] not in grades, f"user {row[1]} twice"
            grades[row[1]] = float(row[at].replace(",", "."))
    return columns, possible, grades


def moodle_import(path: Path, max_grade: float) -> dict[str, float]:
    """Moodle's offline grading worksheet importer: the columns ``Identifier``, ``Grade`` and ``Last modified
    (grade)`` by their exact titles; the participant id after "Participant "; a grade outside 0..max skipped."""
    reader = csv.DictReader(path.open(encoding="utf-8"))
    for title in ("Identifier", "Grade", "Last modified (grade)"):
        assert title in reader.fieldnames, f"Moodle rejects the worksheet: no {title!r} column"
    # Moodle sets the feedback comment of every row from this column, blank or not: it must not be there
    assert "Feedback comments" not in reader.fieldnames
    grades = {}
    for row in reader:
        assert row["Identifier"].startswith("Participant "), row["Identifier"]
        grade = float(row["Grade"])
        assert 0 <= grade <= max_grade, f"Moodle skips {grade} (maximum {max_grade})"
        assert datetime.fromisoformat(row["Last modified (grade)"]).tzinfo is not None  # strtotime reads ISO 8601
        grades[row["Identifier"].removeprefix("Participant ")] = grade
    return grades


def blackboard_import(path: Path) -> tuple[str, dict[str, float]]:
    """Blackboard's Grade Center upload, comma-delimited: every value in quotes, a ``Username`` column, grade
    columns after it. Returns (the grade column's title, {username: grade})."""
    for line in path.read_text(encoding="utf-8").splitlines():
        assert re.fullmatch(r'"(?:[^"]|"")*"(?:,"(?:[^"]|"")*")*', line), f"a value without quotes: {line}"
    reader = csv.DictReader(path.open(encoding="utf-8"))
    assert "Username" in reader.fieldnames, reader.fieldnames
    column = reader.fieldnames[-1]
    return column, {row["Username"]: float(row[column]) for row in reader}


# ----------------------------------------------------------------------------- fast: names and files


@pytest.mark.parametrize("name, lms_name, key, who, original, late", [
    ("doejane_101_5001_ch05.ipynb", "canvas", "101", "doejane", "ch05.ipynb", False),
    ("smithbob_LATE_102_5003_ch05 final_v2.ipynb", "canvas", "102", "smithbob", "ch05 final_v2.ipynb", True),
    ("leeann_104_text.html", "canvas", "104", "leeann", "", False),
    ("Jane Doe_201_assignsubmission_file_ch05.ipynb", "moodle", "201", "Jane Doe", "ch05.ipynb", False),
    ("Zoë Müller_203_assignsubmission_file_", "moodle", "203", "Zoë Müller", "", False),
    ("Exercise 5_jdoe_attempt_2026-02-27-18-30-00_ch05.ipynb", "blackboard", "jdoe", "", "ch05.ipynb", False),
])
def test_each_lms_name_gives_the_student_id_and_what_was_uploaded(name, lms_name, key, who, original, late):
    entry = lms.parse(name, lms_name, is_dir=name.endswith("_"))
    assert entry is not None, f"{name!r} is not read as a {lms_name} name"
    assert (entry.key, entry.name, entry.original, entry.late) == (key, who, original, late), entry


def test_blackboard_usernames_with_underscores_are_read_from_the_receipts():
    name = "Exercise 5_z_muller_attempt_2026-02-28-18-30-00_ch05.ipynb"
    assert lms.parse(name, "blackboard").key == "muller", "without the receipt the name is ambiguous"
    receipt = "Name: Zoë Müller (z_muller)\nAssignment: Exercise 5\n"
    user, who = lms.receipt_user(receipt)
    entry = lms.parse(name, "blackboard", receipts={user: who})
    assert (entry.key, entry.name, entry.submitted_at) == ("z_muller", "Zoë Müller", datetime(2026, 2, 28, 18, 30))


@pytest.mark.parametrize("name, base", [
    ("ch05-1.ipynb", ("ch05.ipynb", 1)), ("ch05 (2).ipynb", ("ch05.ipynb", 2)), ("ch05.ipynb", ("ch05.ipynb", 0)),
    ("ch05-final.ipynb", ("ch05-final.ipynb", 0))])
def test_a_second_upload_of_a_name_is_recognised(name, base):
    assert lms.base_name(name) == base


def test_a_download_is_recognised_by_its_names_and_a_plain_folder_by_none():
    canvas = [("doejane_101_5001_ch05.ipynb", False), ("smithbob_LATE_102_5002_ch05.ipynb", False)]
    assert lms.detect(canvas)[0] == "canvas"
    assert lms.detect([("Jane Doe_201_assignsubmission_file_", True)])[0] == "moodle"
    assert lms.detect([("ann", True), ("bob", True), ("zoë_4411_ch01.ipynb", False)])[0] is None


def test_the_stub_never_beats_a_notebook_with_answers_and_two_unnamed_answers_are_not_guessed(tmp_path):
    from lmbook.grading.submissions import find_class

    release = ROOT / "exercises" / A / NB  # what students start from
    for folder, files in {"kim": {NB: "stub", "ch05 copy.ipynb": "full"},  # the stub has the assignment's name
                          "lou": {"try1.ipynb": "wrong", "try2.ipynb": "full"},  # answers in both, neither named
                          "max": {NB: "wrong", "scratch.ipynb": "full"}}.items():  # answers in both: the named one
        for name, kind in files.items():
            (tmp_path / folder).mkdir(exist_ok=True)
            (tmp_path / folder / name).write_text(_content(kind), encoding="utf-8")
    found = {st.sid: st for st in find_class(tmp_path, NB, release=release).students}
    assert found["kim"].notebook.name == "ch05 copy.ipynb", found["kim"].notes
    assert "the others are the released exercise with no answer written" in " ".join(found["kim"].notes)
    assert found["lou"].notebook is None and found["lou"].status.startswith(
        f"not graded: 2 notebooks and none named {NB} (try1.ipynb, try2.ipynb)"), found["lou"].status
    assert found["max"].notebook.name == NB


OUT_OF = 6.0  # the made-up class's maximum


def _graded(sid: str, lms_name: str, lms_id: str, points: float, **kw) -> Student:
    st = Student(sid, lms=lms_name, lms_id=lms_id, name=kw.pop("name", sid), **kw)
    st.tasks = {"t": (points, OUT_OF)}
    return st


def test_the_import_files_hold_only_final_grades_of_students_the_lms_knows(tmp_path):
    students = [_graded("a", "canvas", "101", 6), _graded("b", "canvas", "102", 2, penalty=0.6),
                _graded("c", "canvas", "103", 4), _graded("plain", "", "", 6)]
    students[2].pending = {"explain": 2.0}  # its grade will change: it never reaches the LMS yet
    left_out = lms.write_canvas(students, "Exercise 5 (4412)", OUT_OF, tmp_path / "c.csv")
    columns, possible, grades = canvas_import(tmp_path / "c.csv")
    assert (columns, possible, grades) == (["Exercise 5 (4412)"], {"Exercise 5 (4412)": "6"},
                                           {"101": 6.0, "102": 1.4})
    assert [w.split(":")[0] for w in left_out] == ["c", "plain"], left_out
    assert "manual grading" in left_out[0] and "no Canvas id" in left_out[1]


def test_the_moodle_worksheet_and_the_blackboard_upload_read_as_their_lms_reads_them(tmp_path):
    moodle = [_graded("Jane_Doe_201", "moodle", "201", 6, name="Jane Doe"), _graded("x", "moodle", "202", 2.5)]
    lms.write_moodle(moodle, OUT_OF, tmp_path / "m.csv")
    assert moodle_import(tmp_path / "m.csv", OUT_OF) == {"201": 6.0, "202": 2.5}
    bb = [_graded("jdoe", "blackboard", "jdoe", 6, name="Jane Q Doe"), _graded("b", "blackboard", "b,x\"y", 3)]
    lms.write_blackboard(bb, 'Exercise 5 [Total Pts: 6 Score] |1234', tmp_path / "b.csv")
    assert blackboard_import(tmp_path / "b.csv") == ("Exercise 5 [Total Pts: 6 Score] |1234",
                                                     {"jdoe": 6.0, 'b,x"y': 3.0})
    first = next(csv.DictReader((tmp_path / "b.csv").open(encoding="utf-8")))
    assert (first["First Name"], first["Last Name"]) == ("Jane Q", "Doe")


# ----------------------------------------------------------------------------- slow: the round trip


def _env() -> dict:
    return dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))


@pytest.fixture(scope="module")
def trip(tmp_path_factory):
    """The class graded from each LMS's download (one results cache: the notebooks run once)."""
    tmp = tmp_path_factory.mktemp("roundtrip")
    downloads = {"canvas": canvas_zip(tmp), "moodle": moodle_tree(tmp), "blackboard": blackboard_zip(tmp)}
    found, cache = {}, None
    for name, download in downloads.items():
        out = tmp / f"out-{name}"
        if cache is not None:
            shutil.copytree(cache, out / "course" / "lmbook_cache")
        before = digest(download)
        r = subprocess.run([sys.executable, "-m", "lmbook.autograde", str(download), "--assignment", A, "--out",
                            str(out), "--course", str(ROOT / "autograder"), "--timeout", "60",
                            "--late-penalty", "10%", "--due", DUE], capture_output=True, text=True, env=_env(),
                           cwd=ROOT)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert digest(download) == before, f"the {name} download was modified"
        cache = out / "course" / "lmbook_cache"
        found[name] = {"out": out, "stdout": r.stdout, "rows": rows(out),
                       "summary": json.loads((out / "summary.json").read_text(encoding="utf-8"))}
    return found


def _expected(lms_name: str) -> dict[str, float]:
    ids = {"canvas": CANVAS_IDS, "moodle": MOODLE_IDS, "blackboard": BB_USERS}[lms_name]
    # Canvas marks Bob late in its names, Blackboard by his attempt's time after --due; Moodle's download says
    # neither (its own late handling applies in Moodle)
    late_known = lms_name != "moodle"
    # the questions' points go to every notebook with answers (the stub, Ann's, answers nothing)
    return {ids[who]: sum(points) + (QUESTIONS if sum(points) else 0.0) - (PENALTY if late and late_known else 0.0)
            for who, (_, points, late) in CLASS.items()}


@pytest.mark.slow
def test_canvas_import_file_holds_exactly_the_class(trip):
    columns, possible, grades = canvas_import(trip["canvas"]["out"] / "grades-canvas.csv")
    assert columns == [A] and possible == {A: f"{MAX:g}"}, (columns, possible)
    assert grades == pytest.approx(_expected("canvas")), grades


@pytest.mark.slow
def test_moodle_worksheet_holds_exactly_the_class(trip):
    assert moodle_import(trip["moodle"]["out"] / "grades-moodle.csv", MAX) == pytest.approx(_expected("moodle"))


@pytest.mark.slow
def test_blackboard_upload_holds_exactly_the_class(trip):
    column, grades = blackboard_import(trip["blackboard"]["out"] / "grades-blackboard.csv")
    assert column == f"{A} [Total Pts: {MAX:g} Score]"
    assert grades == pytest.approx(_expected("blackboard")), grades


@pytest.mark.slow
@pytest.mark.parametrize("lms_name", ["canvas", "moodle", "blackboard"])
def test_each_download_gives_the_same_points_per_task_and_only_that_lms_file(trip, lms_name):
    found = trip[lms_name]
    by_id = {row["lms_id"]: row for row in found["rows"].values()}
    ids = {"canvas": CANVAS_IDS, "moodle": MOODLE_IDS, "blackboard": BB_USERS}[lms_name]
    for who, (_, points, _) in CLASS.items():
        row = by_id[ids[who]]
        assert [float(row["qkv_projections"]), float(row["masked_attention"])] == points, (who, row)
        assert row["status"] == "graded", (who, row["status"])
    assert sorted(p.name for p in found["out"].glob("grades-*.csv")) == [f"grades-{lms_name}.csv"]
    assert f"recognised a {lms.LABELS[lms_name]} download" in found["stdout"]
    assert found["summary"]["lms"] == lms_name and found["summary"]["lms_rows"] == len(CLASS)


@pytest.mark.slow
def test_the_stub_beside_the_real_notebook_is_not_graded_and_the_report_says_so(trip):
    report = (trip["canvas"]["out"] / "report.md").read_text(encoding="utf-8")
    jane = re.search(r"^## doejane_101:.*?(?=^## )", report, re.M | re.S).group(0)
    assert f"{STEM}-1.ipynb of 2 notebooks (the others are the released exercise with no answer written)" in jane


@pytest.mark.slow
def test_late_submissions_are_marked_and_the_penalty_is_stated(trip):
    for lms_name, late_id in (("canvas", "102"), ("blackboard", "bsmith")):
        by_id = {row["lms_id"]: row for row in trip[lms_name]["rows"].values()}
        late = {i for i, row in by_id.items() if row["late"] == "yes"}
        assert late == {late_id}, (lms_name, late)
        assert float(by_id[late_id]["penalty"]) == PENALTY
        page = (trip[lms_name]["out"] / "class.html").read_text(encoding="utf-8")
        assert "Late penalty: 10% of the assignment&#x27;s points if late." in page
    moodle = trip["moodle"]["rows"].values()
    assert not any(row["late"] for row in moodle), "Moodle's download does not say who was late"


@pytest.mark.slow
def test_blackboard_grades_the_latest_attempt_and_names_the_student_from_the_receipt(trip):
    row = next(r for r in trip["blackboard"]["rows"].values() if r["lms_id"] == "z_muller")
    assert (row["student"], row["name"], float(row["total"])) == ("z_muller", "Zoë Müller", 6.0 + QUESTIONS)
    report = (trip["blackboard"]["out"] / "report.md").read_text(encoding="utf-8")
    assert "2 attempts: graded the latest, of 2026-02-28 18:30" in report


@pytest.mark.slow
def test_stray_files_and_online_texts_are_listed_not_graded(trip):
    report = (trip["moodle"]["out"] / "report.md").read_text(encoding="utf-8")
    eve = re.search(r"^## Eve_Stray_205:.*?(?=^## |\Z)", report, re.M | re.S).group(0)
    assert "graded Eve Stray_205_assignsubmission_file_/homework.ipynb as" in eve, eve
    assert "data.csv" in eve and "notes.txt" in eve and "onlinetext.html" in eve, eve


# ----------------------------------------------------------------------------- in the browser

skip_browser = pytest.mark.skipif(os.environ.get("LMBOOK_SKIP_BROWSER_TESTS") == "1",
                                  reason="LMBOOK_SKIP_BROWSER_TESTS=1: the browser tests were not run")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), f"{CHROMIUM} is missing (make system-deps)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def _open(browser, path: Path, offline: bool = True):
    """A page opened from the file system; every request that leaves it is recorded (and refused)."""
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    left: list[str] = []
    errors: list[str] = []
    if offline:
        context.route("**/*", lambda route: (left.append(route.request.url), route.abort())
                      if not route.request.url.startswith(("file:", "data:")) else route.continue_())
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri(), wait_until="load")
    return page, left, errors


def _shown(page) -> list[str]:
    return page.evaluate("() => [...document.querySelectorAll('#students tbody tr')].filter(r => !r.hidden)"
                         ".map(r => r.cells[0].textContent)")


@pytest.mark.slow
@skip_browser
def test_class_page_table_sorts_and_filters_every_student_with_no_server(trip, browser):
    out = trip["canvas"]["out"]
    page, left, errors = _open(browser, out / "class.html")
    assert sorted(_shown(page)) == sorted(trip["canvas"]["rows"]), "the table does not list every student"
    assert page.locator("#shown").inner_text() == "5 of 5 students shown"
    heads = page.locator("#students thead th")
    total = [h.strip() for h in heads.all_inner_texts()].index("total")
    heads.nth(total).click()  # ascending by total
    totals = page.evaluate(f"() => [...document.querySelectorAll('#students tbody tr')].map(r => "
                           f"parseFloat(r.cells[{total}].textContent))")
    assert totals == sorted(totals) and totals[0] == 0, totals
    page.locator("#show").select_option("late")
    assert _shown(page) == ["smithbob_102"]
    page.locator("#show").select_option("")
    page.locator("#filter").fill("masked_attention")  # the first failure's words: the check's own message
    assert _shown(page) == ["smithbob_102"], _shown(page)
    # the blank notebook's first failure is its first task (the others' may be an unanswered thinking question)
    page.locator("#filter").fill("qkv_projections")
    assert _shown(page) == ["leeann_104"], _shown(page)
    page.locator("#filter").fill("")
    page.locator("#show").select_option("notfull")
    assert sorted(_shown(page)) == ["leeann_104", "smithbob_102"]
    page.screenshot(path=str(out / "class-filtered.png"), full_page=True)
    link = page.locator("#students a", has_text="doejane_101")
    assert link.get_attribute("href") == "feedback/doejane_101.html"
    assert (out / "feedback" / "doejane_101.html").exists()
    page.context.close()
    assert left == [] and errors == [], (left, errors)


@pytest.mark.slow
@skip_browser
def test_feedback_typesets_its_maths_with_no_network(trip, browser):
    page_path = trip["canvas"]["out"] / "feedback" / "smithbob_102.html"
    assert "$" in page_path.read_text(encoding="utf-8"), "the feedback has no maths to typeset"
    page, left, errors = _open(browser, page_path)
    page.wait_for_function("document.querySelectorAll('mjx-container svg').length > 0", timeout=30_000)
    count = page.evaluate("() => document.querySelectorAll('mjx-container').length")
    text = page.locator("body").inner_text()
    page.screenshot(path=str(page_path.with_suffix(".png")), full_page=True)
    page.context.close()
    assert count >= 5, f"only {count} formulas typeset"
    assert "\\sqrt" not in text and "$$" not in text, "raw TeX left on the page"
    assert left == [], f"the page reached for the network: {left}"
    assert errors == [], errors


# ----------------------------------------------------------------------------- partial credit


def _cases_right(answer_source: str, hidden_seed: int) -> tuple[int, int]:
    """How many of masked_attention's hidden cases an answer gets right, by the task's own reference and
    comparison, counted here (case by case) and not by the grader."""
    import math

    import torch

    from lmbook.grading.checks import case_inputs
    from lmbook.grading.compare import to_reference
    from lmbook.tasks.ch05 import check

    scope = {"math": math, "torch": torch}
    exec(answer_source, scope)  # noqa: S102 - the test's own answer
    task = check.checks["masked_attention"]
    right = 0
    for k, case in enumerate(task.hidden_cases):
        args, kwargs = case_inputs(case, hidden_seed, k, torch.device("cpu"))
        with torch.no_grad():
            got = scope["masked_attention"](*args, **kwargs)
            want = task.reference(*to_reference(args), **to_reference(kwargs))  # as the checks do: in float64
        right += task.compare(to_reference(got), want) is None
    return right, len(task.hidden_cases)


@pytest.mark.slow
def test_partial_credit_gives_a_hidden_cell_its_points_in_proportion_to_the_cases_passed(trip, tmp_path):
    solution = nbformat.read(ROOT / "solutions" / A / NB, as_version=4)  # the hidden tests are not released
    call = r'check\("masked_attention", masked_attention, hidden=True, seed=(\d+)\)'
    seed = next(int(m[1]) for c in solution.cells if (m := re.search(call, c.source)))
    right, n = _cases_right(NO_CAUSAL_MASK, seed)
    assert 0 < right < n, f"the wrong answer should pass some hidden cases and fail others: {right} of {n}"
    (tmp_path / "subs" / "bob").mkdir(parents=True)
    (tmp_path / "subs" / "bob" / NB).write_text(_nb("wrong"), encoding="utf-8")
    out = tmp_path / "out"
    shutil.copytree(trip["canvas"]["out"] / "course" / "lmbook_cache", out / "course" / "lmbook_cache")
    r = subprocess.run([sys.executable, "-m", "lmbook.autograde", str(tmp_path / "subs"), "--assignment", A, "--out",
                        str(out), "--course", str(ROOT / "autograder"), "--partial-credit"], capture_output=True,
                       text=True, env=_env(), cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    row = rows(out)["bob"]
    hidden_points = 3.0  # the hidden masked_attention cell's points; its visible cell (1 point) stays all or nothing
    assert float(row["masked_attention"]) == pytest.approx(round(hidden_points * right / n, 2)), row
    assert float(row["qkv_projections"]) == 2 and "0 results reused" not in r.stdout
    feedback = (out / "feedback" / "bob.html").read_text(encoding="utf-8")
    assert f"partial credit: {right} of {n} checks passed" in feedback
    same_without = next(r for r in trip["canvas"]["rows"].values() if r["lms_id"] == "102")
    assert float(same_without["masked_attention"]) == 0, "without --partial-credit the same answer earns 0"
