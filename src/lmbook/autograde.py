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
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
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
    notes: list[str] = field(default_factory=list)  # what hygiene changed or ignored
    suspicious: list[str] = field(default_factory=list)  # evidence of tampering, for the instructor
    forbidden: dict[str, str] = field(default_factory=dict)  # task -> the ready-made answer it used
    cached: bool = False

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
    """One Student per sub-folder (or per flat ``<student>_*.ipynb`` file), with the notebook to grade.

    Only that notebook is ever used: other files in a submission (a planted ``numpy.py``, data, a copy of
    the gradebook) are listed in the student's notes and otherwise ignored.
    """
    students: dict[str, Student] = {}
    for entry in sorted(root.iterdir()):
        if entry.name.startswith((".", "__MACOSX")):
            continue
        if entry.is_dir():
            sid = _safe_id(entry.name)
            files = sorted(p for p in entry.rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts)
            nbs = [p for p in files if p.suffix == ".ipynb"]
            exact = [p for p in nbs if p.name == notebook_name]
            st = Student(sid)
            if exact:
                st.notebook = exact[0]
            elif len(nbs) == 1:  # renamed by the student or the LMS: still theirs
                st.notebook = nbs[0]
                st.notes.append(f"graded {nbs[0].name} as {notebook_name} (the notebook was renamed)")
            else:
                st.status = (f"no notebook found (expected {notebook_name})" if not nbs
                             else f"{len(nbs)} notebooks and none named {notebook_name}")
            extra = [str(p.relative_to(entry)) for p in files if p != st.notebook]
            if extra:
                st.notes.append(f"ignored {len(extra)} other file(s): {', '.join(extra[:8])}"
                                + (" ..." if len(extra) > 8 else ""))
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
              timeout: float, use_sandbox: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    # nbgrader runs `alembic` and the kernel by name: put this interpreter's bin first.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    # One thread per kernel: torch's OpenMP threads spin-wait, and on a busy machine two of them
    # on two cores made a 2 s training run take a minute. Grading is many small ops anyway.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    if not use_sandbox:
        env["LMBOOK_NO_SANDBOX"] = "1"
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


def _read_submission(st: Student) -> nbformat.NotebookNode | None:
    """The student's notebook as nbformat 4, or None with the reason in ``st.status``."""
    try:
        raw = st.notebook.read_bytes()
        version = json.loads(raw).get("nbformat") if raw.strip().startswith(b"{") else None
        nb = nbformat.reads(raw.decode("utf-8"), as_version=4)
        nbformat.validate(nb)
    except Exception as e:  # invalid JSON, not a notebook, a format nbformat cannot convert...
        st.status = f"unreadable notebook ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
        return None
    if isinstance(version, int) and version < 4:
        st.notes.append(f"converted from notebook format {version} to 4")
    return nb


def _prepare(nb, sid: str, assignment: str, stem: str, db_url: str):
    """The notebook exactly as nbgrader's autograde will see it: hygiene, then nbgrader's own sanitizing."""
    from .grading.nbgrader_plugin import sanitize_preprocessors

    resources = {"nbgrader": {"student": sid, "assignment": assignment, "notebook": stem, "db_url": db_url}}
    for pp in sanitize_preprocessors():
        nb, resources = pp(log_level="ERROR").preprocess(nb, resources)
    return nb


def _phase1(job: tuple) -> dict:
    """Worker: prepare, sandbox-run and judge one submission; the result goes into the course's cache."""
    sid, nb_path, assignment, stem, db_url, cache, use_sandbox, timeout = job
    from .grading import judge
    from .grading.nbgrader_plugin import load_cached, notebook_key, store

    try:
        nb = _prepare(nbformat.read(nb_path, as_version=4), sid, assignment, stem, db_url)
        key = notebook_key(nb)
        graded = load_cached(Path(cache), key)
        cached = graded is not None
        if graded is None:
            graded = judge.grade_notebook(nb, use_sandbox=use_sandbox, timeout=timeout)
            store(Path(cache), key, graded)
    except judge.NotebookConfigError:
        raise  # the course's notebook is broken: stop the batch and say so
    except Exception as e:  # noqa: BLE001 - one student's odd notebook never stops the class
        return {"sid": sid, "error": f"{type(e).__name__}: {e}"}
    return {"sid": sid, "notes": nb.metadata.get("lmbook", {}).get("hygiene", []), "tampering": graded.tampering,
            "forbidden": graded.forbidden, "problem": graded.problem, "cached": cached}


def grade(submissions: Path, out: Path, assignment: str, config_dir: Path, source: Path,
          timeout: float = 300, workers: int | None = None, use_sandbox: bool = True,
          progress: bool = True) -> list[Student]:
    """Grade a class. Re-running it on the same output folder reuses every finished student's result."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm.auto import tqdm

    from .grading import sandbox

    if use_sandbox:
        try:
            sandbox.check_available()
        except sandbox.SandboxUnavailable as e:
            raise SystemExit(f"lmbook-grade: {e}") from None
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    course = out / "course"
    course.mkdir(exist_ok=True)
    notebooks = sorted((source / assignment).glob("*.ipynb"))
    if len(notebooks) != 1:
        raise SystemExit(f"expected one source notebook in {source / assignment}, found {len(notebooks)}")
    nb_name, stem = notebooks[0].name, notebooks[0].stem
    r = _nbgrader(["generate_assignment", assignment, "--force"], course, config_dir, source, timeout, use_sandbox)
    if r.returncode != 0:
        raise SystemExit(f"nbgrader generate_assignment failed:\n{r.stdout}\n{r.stderr}")
    tasks_max = _max_points(course, assignment, stem)
    phases = {"generate": time.perf_counter() - started}
    db_url = f"sqlite:///{course / 'gradebook.db'}"

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
        # The course gets a copy of each readable notebook, and nothing else the student sent.
        for st in students:
            dest = course / "submitted" / st.sid / assignment
            nb = _read_submission(st) if st.notebook is not None else None
            if nb is None:
                shutil.rmtree(course / "submitted" / st.sid, ignore_errors=True)
                st.notebook = None
                continue
            text = nbformat.writes(nb)
            if not (dest / nb_name).exists() or (dest / nb_name).read_text() != text:
                shutil.rmtree(dest, ignore_errors=True)
                dest.mkdir(parents=True)
                (dest / nb_name).write_text(text)
            st.notebook = dest / nb_name

    # Phase 1, in parallel: sandboxed runs and verdicts, cached in the course folder.
    by_sid = {st.sid: st for st in students}
    jobs = [(st.sid, str(st.notebook), assignment, stem, db_url, str(course / "lmbook_cache"), use_sandbox, timeout)
            for st in students if st.notebook is not None]
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs) or 1))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_phase1, job) for job in jobs]
        for fut in tqdm(as_completed(futures), total=len(futures), desc="grading", unit="notebook",
                        disable=not progress, file=sys.stdout):
            res = fut.result()
            st = by_sid[res["sid"]]
            if "error" in res:
                st.status = f"could not be graded: {res['error'][:300]}"
                shutil.rmtree(course / "submitted" / st.sid, ignore_errors=True)  # keeps nbgrader consistent
                st.notebook = None
                continue
            st.notes += res["notes"]
            st.suspicious, st.forbidden = res["tampering"], res["forbidden"]
            st.cached = res["cached"]
            if res["problem"]:
                st.status = f"graded what ran: {res['problem']}"

    phases["run"] = time.perf_counter() - started - sum(phases.values())
    # Phases 2 and 3: nbgrader records the grades (from the cache) and writes feedback, for the whole class.
    graded = [st for st in students if st.notebook is not None]
    if graded:
        r = _nbgrader(["autograde", assignment, "--create", "--force"], course, config_dir, source,
                      timeout * 50, use_sandbox)
        phases["record"] = time.perf_counter() - started - sum(phases.values())
        r2 = _nbgrader(["generate_feedback", assignment, "--force"], course, config_dir, source, timeout * 10,
                       use_sandbox)
        phases["feedback"] = time.perf_counter() - started - sum(phases.values())
        for st in graded:
            autograded = course / "autograded" / st.sid / assignment / nb_name
            if not autograded.exists():
                st.status = "nbgrader could not grade it: " + _nbgrader_error(r.stdout + r.stderr, st.sid)
                continue
            _read_results(st, course, assignment, autograded)
            html = course / "feedback" / st.sid / assignment / f"{stem}.html"
            if html.exists():
                (out / "feedback").mkdir(exist_ok=True)
                shutil.copyfile(html, out / "feedback" / f"{st.sid}.html")
            elif r2.returncode != 0:
                st.notes.append("no feedback file: " + _nbgrader_error(r2.stdout + r2.stderr, st.sid))
    _register_ungraded(students, db_url)
    for st in students:
        for task, maxp in tasks_max.items():
            st.tasks.setdefault(task, (0.0, maxp))
        for task in st.forbidden:
            if task in st.tasks:
                st.messages.setdefault(task, f"{task}: no credit: the answer {st.forbidden[task]}")
    _write_grades(students, tasks_max, out / "grades.csv")
    _write_report(students, tasks_max, out / "report.md")
    _write_suspicious(students, out / "suspicious.md")
    _write_summary(students, out, time.perf_counter() - started, phases)
    return students


def _nbgrader_error(log: str, sid: str) -> str:
    lines = [ln for ln in log.splitlines() if sid in ln or "Error" in ln]
    return (lines[-1] if lines else "(no message)")[:300]


def _register_ungraded(students: list[Student], db_url: str) -> None:
    """Students with nothing gradable still get a gradebook row, so `nbgrader export` lists them (with 0)."""
    from nbgrader.api import Gradebook

    missing = [st for st in students if st.notebook is None or st.status.startswith(("could not", "nbgrader"))]
    if missing:
        with Gradebook(db_url) as gb:
            for st in missing:
                gb.update_or_create_student(st.sid)


def _write_grades(students: list[Student], tasks_max: dict[str, float], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", *tasks_max, "total", "max", "status", "flagged"])
        total_max = sum(tasks_max.values())
        for st in students:
            w.writerow([st.sid, *(f"{st.tasks[t][0]:g}" for t in tasks_max), f"{st.score:g}", f"{total_max:g}",
                        st.status, "yes" if st.suspicious else ""])


def _write_report(students: list[Student], tasks_max: dict[str, float], path: Path) -> None:
    lines = ["# Grading report", "", f"{len(students)} submissions; maximum {sum(tasks_max.values()):g} points.", ""]
    for st in students:
        lines += [f"## {st.sid}: {st.score:g} / {sum(tasks_max.values()):g} ({st.status})", ""]
        if st.suspicious:
            lines += ["**Flagged for review** (see suspicious.md): " + st.suspicious[0], ""]
        for note in st.notes:
            lines.append(f"- note: {note}")
        if st.notes:
            lines.append("")
        for task, (score, maxp) in st.tasks.items():
            lines.append(f"- **{task}**: {score:g}/{maxp:g}")
            if task in st.messages:
                lines += ["", "  ```", *("  " + ln for ln in st.messages[task].splitlines()), "  ```"]
        lines.append("")
    path.write_text("\n".join(lines))


def _write_suspicious(students: list[Student], path: Path) -> None:
    flagged = [st for st in students if st.suspicious or st.forbidden]
    lines = ["# Submissions to review", "",
             "Notebooks whose code reaches for the grader's machinery get no credit for any task; answers that "
             "use a task's ready-made implementation get none for that task. The evidence is the student's own "
             "code, read by the grader (it never ran those notebooks' tampering outside the sandbox).", ""]
    if not flagged:
        lines.append("None.")
    for st in flagged:
        lines += [f"## {st.sid}", ""]
        lines += [f"- tampering: {e}" for e in st.suspicious]
        lines += [f"- {task}: the answer {why}" for task, why in st.forbidden.items()]
        lines.append("")
    path.write_text("\n".join(lines) + "\n")


def _write_summary(students: list[Student], out: Path, seconds: float, phases: dict[str, float]) -> None:
    ok = [st for st in students if st.status == "graded"]
    partial = [st for st in students if st.status.startswith("graded what ran")]
    failed = [st for st in students if not st.status.startswith("graded")]
    flagged = [st for st in students if st.suspicious]
    summary = {"submissions": len(students), "graded": len(ok), "graded_partly": len(partial),
               "failed_to_run": len(failed), "flagged": len(flagged), "reused": sum(st.cached for st in students),
               "seconds": round(seconds, 1), "phase_seconds": {k: round(v, 1) for k, v in phases.items()}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="lmbook-grade", description=__doc__.split("\n\n")[0])
    p.add_argument("submissions", type=Path, help="folder of per-student folders, or an LMS zip")
    p.add_argument("--assignment", default="ch01", help="assignment id (a folder of solutions/), default ch01")
    p.add_argument("--out", type=Path, default=Path("grading"), help="output folder, default ./grading")
    p.add_argument("--course", type=Path, default=Path("autograder"),
                   help="folder holding nbgrader_config.py, default ./autograder")
    p.add_argument("--source", type=Path, default=None, help="nbgrader source folder, default COURSE/../solutions")
    p.add_argument("--timeout", type=float, default=300, help="seconds allowed per cell (default 300)")
    p.add_argument("--workers", type=int, default=None, help="parallel gradings (default: one per core)")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run student code without bubblewrap: only for notebooks you trust")
    a = p.parse_args(argv)
    config_dir = a.course.resolve()
    if not (config_dir / "nbgrader_config.py").exists():
        p.error(f"{config_dir}: no nbgrader_config.py (run from the repository root or pass --course)")
    source = (a.source or config_dir.parent / "solutions").resolve()
    out = a.out.resolve()
    students = grade(a.submissions.resolve(), out, a.assignment, config_dir, source, a.timeout, a.workers,
                     use_sandbox=not a.no_sandbox, progress=True)
    s = json.loads((out / "summary.json").read_text())
    print(f"\n{s['submissions']} submissions in {s['seconds']:.0f} s: {s['graded']} graded, "
          f"{s['graded_partly']} graded up to where they stopped, {s['failed_to_run']} could not be run, "
          f"{s['flagged']} flagged for review ({s['reused']} results reused from an earlier run).")
    for st in students:
        if st.status != "graded":
            print(f"  {st.sid}: {st.status}")
        if st.suspicious:
            print(f"  {st.sid}: flagged: {st.suspicious[0]}")
    print(f"Grades:     {out / 'grades.csv'}\nReport:     {out / 'report.md'}\n"
          f"Suspicious: {out / 'suspicious.md'}\nFeedback:   {out / 'feedback'}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
