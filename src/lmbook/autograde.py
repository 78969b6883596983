"""``lmbook-grade``: grade a class's submissions with nbgrader, in one command.

    lmbook-grade SUBMISSIONS [--assignment ch01] [--out grading]

SUBMISSIONS is a folder with one sub-folder per student (holding the
notebook), or an LMS-style zip of such folders or of flat files named
``<student>_<anything>.ipynb``. The output folder gets ``grades.csv`` (one row
per student, one column per task), ``report.md`` (what failed, in the
checks' words), ``feedback/<student>.html`` (no hidden test code), and the
nbgrader course (``course/``: its SQLite gradebook and autograded copies).
Submissions are only read, never modified. One broken submission affects
only its student: each is graded in its own nbgrader run.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve()


@dataclass
class Student:
    sid: str
    notebook: Path | None = None
    status: str = "graded"
    tasks: dict[str, tuple[float, float]] = field(default_factory=dict)  # task -> (score, max)
    messages: dict[str, str] = field(default_factory=dict)

    @property
    def score(self) -> float:
        return sum(s for s, _ in self.tasks.values())


def _safe_id(name: str) -> str:
    sid = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip("._")
    return sid or "student"


def _extract_zip(path: Path, dest: Path) -> Path:
    """Unpack an LMS zip, skipping (and reporting) entries that would land outside ``dest``."""
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as e:
        raise SystemExit(f"{path}: not a readable zip file ({e})") from None
    with zf:
        for info in zf.infolist():
            target = (dest / info.filename).resolve()
            if not target.is_relative_to(dest.resolve()):
                print(f"warning: {path.name}: skipped an entry that points outside the archive: {info.filename!r}",
                      file=sys.stderr)
                continue
            zf.extract(info, dest)
    return dest


def find_submissions(root: Path, notebook_name: str) -> list[Student]:
    """One Student per sub-folder (or per flat ``<student>_*.ipynb`` file), with the notebook to grade."""
    students: dict[str, Student] = {}
    for entry in sorted(root.iterdir()):
        if entry.name.startswith((".", "__MACOSX")):
            continue
        if entry.is_dir():
            sid = _safe_id(entry.name)
            nbs = sorted(p for p in entry.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
            exact = [p for p in nbs if p.name == notebook_name]
            st = Student(sid)
            if exact:
                st.notebook = exact[0]
            elif len(nbs) == 1:  # renamed by the student or the LMS: still theirs
                st.notebook = nbs[0]
            else:
                st.status = (f"no notebook found (expected {notebook_name})" if not nbs
                             else f"{len(nbs)} notebooks and none named {notebook_name}")
        elif entry.suffix == ".ipynb":
            sid = _safe_id(entry.stem.split("_")[0])
            st = Student(sid, notebook=entry)
        else:
            continue
        if sid in students:
            st.status = f"two submissions map to the student id {sid!r}"
            st.notebook = None
        students[sid] = st
    return list(students.values())


def _nbgrader(args: list[str], course: Path, config_dir: Path, source: Path,
              timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    # nbgrader runs `alembic` and the kernel by name: put this interpreter's bin first.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    # One thread per kernel: torch's OpenMP threads spin-wait, and on a busy machine two of them
    # on two cores made a 2 s training run take a minute. Grading is many small ops anyway.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    cmd = [sys.executable, "-m", "nbgrader", *args,
           f"--CourseDirectory.root={course}", f"--CourseDirectory.source_directory={source}",
           "--CourseDirectory.release_directory=release", "--log-level=WARN"]
    return subprocess.run(cmd, cwd=config_dir, env=env, capture_output=True, text=True, timeout=timeout)


def _task_of(grade_id: str) -> str:
    return re.sub(r"^(test|hidden)_", "", grade_id)


def _read_results(st: Student, course: Path, assignment: str, autograded: Path) -> None:
    """Scores per task from nbgrader's gradebook; the checks' messages from the autograded notebook."""
    from nbgrader.api import Gradebook  # imported late: it is slow, and only grading needs it

    nb = nbformat.read(autograded, as_version=4)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        # The gradebook's own list of graded cells, not the student's notebook: nothing a student
        # deletes or renames can drop a test from the total.
        for cell in gb.find_notebook(autograded.stem, assignment).grade_cells:
            g = gb.find_grade(cell.name, autograded.stem, assignment, st.sid)
            score, maxp = st.tasks.get(_task_of(cell.name), (0.0, 0.0))
            st.tasks[_task_of(cell.name)] = (score + float(g.score), maxp + float(g.max_score))
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        task = _task_of(meta.get("grade_id", ""))
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if meta.get("grade") and errors and task not in st.messages:
            e = errors[0]
            text = "\n".join(e.get("traceback", [])) or f"{e.get('ename')}: {e.get('evalue')}"
            st.messages[task] = re.sub(r"\x1b\[[0-9;]*m", "", text).strip()[-1500:]


def _max_points(course: Path, assignment: str, notebook_stem: str) -> dict[str, float]:
    release = course / "release" / assignment / f"{notebook_stem}.ipynb"
    totals: dict[str, float] = {}
    for cell in nbformat.read(release, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            task = _task_of(meta["grade_id"])
            totals[task] = totals.get(task, 0.0) + float(meta.get("points", 0))
    return totals


def grade(submissions: Path, out: Path, assignment: str, config_dir: Path, source: Path,
          timeout: float = 1800) -> list[Student]:
    out.mkdir(parents=True, exist_ok=True)
    course = out / "course"
    course.mkdir(exist_ok=True)
    notebooks = sorted((source / assignment).glob("*.ipynb"))
    if len(notebooks) != 1:
        raise SystemExit(f"expected one source notebook in {source / assignment}, found {len(notebooks)}")
    nb_name = notebooks[0].name
    r = _nbgrader(["generate_assignment", assignment, "--force"], course, config_dir, source, timeout)
    if r.returncode != 0:
        raise SystemExit(f"nbgrader generate_assignment failed:\n{r.stdout}\n{r.stderr}")
    tasks_max = _max_points(course, assignment, notebooks[0].stem)

    with tempfile.TemporaryDirectory() as tmp:
        root = submissions
        if submissions.is_file() and submissions.suffix == ".zip":
            root = _extract_zip(submissions, Path(tmp))
            inner = [p for p in root.iterdir() if not p.name.startswith((".", "__MACOSX"))]
            if len(inner) == 1 and inner[0].is_dir() and not any(inner[0].glob("*.ipynb")):
                root = inner[0]  # a zip of one folder that holds the student folders
        elif not submissions.is_dir():
            raise SystemExit(f"{submissions}: not a folder or a .zip of submissions")
        students = find_submissions(root, nb_name)
        if not students:
            raise SystemExit(f"{submissions}: no submissions found")
        for i, st in enumerate(students, 1):
            print(f"[{i}/{len(students)}] {st.sid}", flush=True)
            _grade_one(st, assignment, nb_name, course, config_dir, source, out, timeout)
    for st in students:
        for task, maxp in tasks_max.items():
            st.tasks.setdefault(task, (0.0, maxp))
    _write_grades(students, tasks_max, out / "grades.csv")
    _write_report(students, tasks_max, out / "report.md")
    return students


def _grade_one(st: Student, assignment: str, nb_name: str, course: Path, config_dir: Path, source: Path,
               out: Path, timeout: float) -> None:
    if st.notebook is None:
        return
    try:
        nb = nbformat.read(st.notebook, as_version=4)
        nbformat.validate(nb)
    except Exception as e:  # invalid JSON, not a notebook, an old format...
        st.status = f"unreadable notebook ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
        return
    dest = course / "submitted" / st.sid / assignment
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    shutil.copyfile(st.notebook, dest / nb_name)  # a copy: the student's file is never touched
    try:
        r = _nbgrader(["autograde", assignment, f"--student={st.sid}", "--create", "--force"],
                      course, config_dir, source, timeout)
    except subprocess.TimeoutExpired:
        st.status = f"grading timed out after {timeout:.0f} s"
        return
    autograded = course / "autograded" / st.sid / assignment / nb_name
    if r.returncode != 0 or not autograded.exists():
        st.status = "grader error: " + (r.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
        return
    _read_results(st, course, assignment, autograded)
    r = _nbgrader(["generate_feedback", assignment, f"--student={st.sid}", "--force"], course, config_dir, source,
                  timeout)
    html = course / "feedback" / st.sid / assignment / nb_name.replace(".ipynb", ".html")
    if html.exists():
        (out / "feedback").mkdir(exist_ok=True)
        shutil.copyfile(html, out / "feedback" / f"{st.sid}.html")


def _write_grades(students: list[Student], tasks_max: dict[str, float], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", *tasks_max, "total", "max", "status"])
        total_max = sum(tasks_max.values())
        for st in students:
            w.writerow([st.sid, *(f"{st.tasks[t][0]:g}" for t in tasks_max), f"{st.score:g}", f"{total_max:g}",
                        st.status])


def _write_report(students: list[Student], tasks_max: dict[str, float], path: Path) -> None:
    lines = ["# Grading report", "", f"{len(students)} submissions; maximum {sum(tasks_max.values()):g} points.", ""]
    for st in students:
        lines += [f"## {st.sid}: {st.score:g} / {sum(tasks_max.values()):g} ({st.status})", ""]
        for task, (score, maxp) in st.tasks.items():
            lines.append(f"- **{task}**: {score:g}/{maxp:g}")
            if task in st.messages:
                lines += ["", "  ```", *("  " + ln for ln in st.messages[task].splitlines()), "  ```"]
        lines.append("")
    path.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="lmbook-grade", description=__doc__.split("\n\n")[0])
    p.add_argument("submissions", type=Path, help="folder of per-student folders, or an LMS zip")
    p.add_argument("--assignment", default="ch01", help="assignment id (a folder of solutions/), default ch01")
    p.add_argument("--out", type=Path, default=Path("grading"), help="output folder, default ./grading")
    p.add_argument("--course", type=Path, default=Path("autograder"),
                   help="folder holding nbgrader_config.py, default ./autograder")
    p.add_argument("--source", type=Path, default=None, help="nbgrader source folder, default COURSE/../solutions")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed per submission")
    a = p.parse_args(argv)
    config_dir = a.course.resolve()
    if not (config_dir / "nbgrader_config.py").exists():
        p.error(f"{config_dir}: no nbgrader_config.py (run from the repository root or pass --course)")
    source = (a.source or config_dir.parent / "solutions").resolve()
    students = grade(a.submissions.resolve(), a.out.resolve(), a.assignment, config_dir, source, a.timeout)
    out = a.out.resolve()
    print(f"\nGraded {sum(s.status == 'graded' for s in students)} of {len(students)} submissions.")
    for st in students:
        if st.status != "graded":
            print(f"  {st.sid}: {st.status}")
    print(f"Grades:   {out / 'grades.csv'}\nReport:   {out / 'report.md'}\nFeedback: {out / 'feedback'}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
