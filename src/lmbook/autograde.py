"""``lmbook-grade``: grade a class's submissions with nbgrader, in one command.

    lmbook-grade SUBMISSIONS [--assignment ch01] [--out grading]
    lmbook-grade SUBMISSIONS --assignment ch01 --assignment ch02 [--out grading]
    lmbook-grade SUBMISSIONS --assignment all [--out grading]

One assignment: SUBMISSIONS is the LMS's download (Canvas's, Moodle's or Blackboard's zip, or the folder
it unpacks to), or a folder with one sub-folder per student (holding the notebook), or a zip of such
folders or of flat files named ``<student>_<anything>.ipynb``. The LMS is recognised by its file names
(``--lms`` names it), and each student's LMS id, late marker and latest attempt are kept. The output folder
gets ``grades.csv`` (one row per student, one column per task), the LMS's own import file
(``grades-canvas.csv``, ``grades-moodle.csv`` or ``grades-blackboard.csv``), ``report.md`` (the class at a
glance, then what failed for each student, in the checks' words), ``class.html`` and ``class/*.png`` (the
class at a glance and a table of every student, for a browser or slides), ``suspicious.md`` (the notebooks
flagged for review, and the pairs of students whose answers are alike: listed only, no grade changes),
``feedback/<student>.html`` (no hidden test code; maths typeset offline), and the nbgrader course
(``course/``: its SQLite gradebook and autograded copies).

Several assignments (``--assignment`` given more than once, or ``all``: every assignment folder of the source
folder): SUBMISSIONS holds one such folder (or zip) per assignment, ``SUBMISSIONS/<assignment>/<student>/...``
or ``SUBMISSIONS/<assignment>.zip``, as an LMS downloads them one assignment at a time. Each assignment's
files go to ``OUT/<assignment>/``; ``OUT/grades.csv`` has one row per student and one column per assignment
(its total), and one nbgrader course, ``OUT/course/``, holds them all. With ``all``, an assignment with no
submissions folder is skipped (and said so).

Submissions are only read, never modified. One broken submission affects only its student, and what was
odd about it is said in that student's status or notes: a symbolic link (never followed), a damaged or
refused zip entry, a notebook over the size limit (``--max-notebook-mb``), a notebook file repaired for
nbgrader, a name in another byte encoding, two folders that make the same student id, a stub beside the
real notebook. Names in any script are kept; macOS and Windows litter (``__MACOSX``, ``._*``, ``.DS_Store``)
is ignored. Stopping the grader (Ctrl-C, SIGTERM) removes its temporary folders; re-running it resumes where
it stopped. Time limits (``--timeout``) apply to student code only, never to the grader's own steps; a
grader step that fails is run again once. Scores set by hand in nbgrader's formgrader count, and are shown
as such; answers graded by hand (free-text questions) are pending until graded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import nbformat

from .grading import classreport, copies, interrupt, late, lms, manual, mathjax, reports
from .grading.archive import DEFAULT_ZIP_LIMITS, MB, GiB, ZipLimits
from .grading.late import LatePolicy
from .grading.student import Student
from .grading.submissions import (
    MAX_NOTEBOOK_BYTES,
    class_folder,
    find_class,
    is_stub,
    read_submission,
    resolve_assignments,
    stub_answers,
)

HERE = Path(__file__).resolve()


def _nbgrader(args: list[str], course: Path, config_dir: Path, source: Path,
              use_sandbox: bool = True) -> subprocess.CompletedProcess:
    """One of the grader's own nbgrader steps, run again once if it fails (a busy or flaky machine).

    No time limit: these steps run no student code outside the sandbox, and the sandbox applies the
    students' limits itself. A limit here would only abort a whole class on a slow machine.
    """
    env = dict(os.environ)
    # nbgrader runs `alembic` and the kernel by name: put this interpreter's bin first.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    # One thread per kernel: torch's OpenMP threads spin-wait, and on a busy machine two of them
    # on two cores made a 2 s training run take a minute. Grading is many small ops anyway.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    # Student ids keep their letters (Zoë, José): nbgrader must read folder names as UTF-8 whatever the locale.
    env["PYTHONUTF8"] = "1"
    if not use_sandbox:
        env["LMBOOK_NO_SANDBOX"] = "1"
    cmd = [sys.executable, "-m", "nbgrader", *args,
           f"--CourseDirectory.root={course}", f"--CourseDirectory.source_directory={source}",
           "--CourseDirectory.release_directory=release", "--log-level=WARN"]
    r = interrupt.run_subprocess(cmd, cwd=config_dir, env=env)
    if r.returncode != 0:
        r = interrupt.run_subprocess(cmd, cwd=config_dir, env=env)
    return r


def _task_of(grade_id: str) -> str:
    return manual.task_of(grade_id)


def _read_results(st: Student, course: Path, assignment: str, autograded: Path, state: dict) -> None:
    """Scores per task from nbgrader's gradebook (hand-set and pending ones told apart); the checks' messages
    from the autograded notebook."""
    from nbgrader.api import Gradebook  # imported late: it is slow, and only grading needs it

    nb = nbformat.read(autograded, as_version=4)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        # The gradebook's own list of graded cells, not the student's notebook: nothing a student
        # deletes or renames can drop a test from the total.
        texts = {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
                 if c.metadata.get("nbgrader", {}).get("grade")}
        manual.read_grades(gb, st, assignment, autograded.stem, state, texts)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("grade") or cell.cell_type != "code":
            continue
        task = _task_of(meta.get("grade_id", ""))
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        partial = [o for o in cell.get("outputs", []) if o.get("output_type") == "execute_result"]
        texts = [str(e.get("evalue", "")) for e in errors]
        if partial:  # --partial-credit: the failed checks' words are the cell's printed text
            texts += ["".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream"]
        for text in texts:
            for name in classreport.named_mistakes(text):
                if name not in st.mistakes.setdefault(task, []):
                    st.mistakes[task].append(name)
        if task in st.messages:
            continue
        if errors:
            e = errors[0]
            text = "\n".join(e.get("traceback", [])) or f"{e.get('ename')}: {e.get('evalue')}"
            st.messages[task] = _head(re.sub(r"\x1b\[[0-9;]*m", "", text))
        elif partial and texts:
            st.messages[task] = _head(texts[-1])


def _head(message: str, limit: int = 1500, line_limit: int = 300) -> str:
    """A check's message for the reports: its beginning, which says what failed and the likely cause (a pasted
    smallest input after it can run to thousands of characters, and is in the student's feedback whole)."""
    lines = [line if len(line) <= line_limit else line[:line_limit] + " …" for line in message.strip().splitlines()]
    text = "\n".join(lines)
    return text if len(text) <= limit else text[:limit].rstrip() + " …"


def _cell_kinds(course: Path, assignment: str, notebook_stem: str) -> dict[str, str]:
    """Each task's kind of graded cell: ``code`` (autograded) or ``markdown`` (graded by hand)."""
    release = course / "release" / assignment / f"{notebook_stem}.ipynb"
    kinds: dict[str, str] = {}
    for cell in nbformat.read(release, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            kinds[_task_of(meta["grade_id"])] = cell.cell_type
    return kinds


def _max_points(course: Path, assignment: str, notebook_stem: str) -> dict[str, float]:
    release = course / "release" / assignment / f"{notebook_stem}.ipynb"
    totals: dict[str, float] = {}
    for cell in nbformat.read(release, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            task = _task_of(meta["grade_id"])
            totals[task] = totals.get(task, 0.0) + float(meta.get("points", 0))
    return totals


def _prepare(nb, sid: str, assignment: str, stem: str, db_url: str):
    """The notebook exactly as nbgrader's autograde will see it: hygiene, then nbgrader's own sanitizing."""
    from .grading.nbgrader_plugin import sanitize_preprocessors

    resources = {"nbgrader": {"student": sid, "assignment": assignment, "notebook": stem, "db_url": db_url}}
    for pp in sanitize_preprocessors():
        nb, resources = pp(log_level="ERROR").preprocess(nb, resources)
    return nb


def _phase1(job: tuple) -> dict:
    """Worker: prepare, sandbox-run and judge one submission; the result goes into the course's cache."""
    sid, nb_path, assignment, stem, db_url, cache, use_sandbox, timeout, reference_seconds = job
    from .grading import judge
    from .grading.nbgrader_plugin import load_cached, notebook_key, store

    try:
        nb = _prepare(nbformat.read(nb_path, as_version=4), sid, assignment, stem, db_url)
        key = notebook_key(nb)
        graded = load_cached(Path(cache), key, nb)
        cached = graded is not None
        if graded is None:
            graded = judge.grade_notebook(nb, use_sandbox=use_sandbox, timeout=timeout,
                                          reference_seconds=reference_seconds)
            store(Path(cache), key, graded, nb)
    except judge.NotebookConfigError:
        raise  # the course's notebook is broken: stop the batch and say so
    except Exception as e:  # noqa: BLE001 - one student's odd notebook never stops the class
        return {"sid": sid, "error": f"{type(e).__name__}: {e}"}
    return {"sid": sid, "notes": nb.metadata.get("lmbook", {}).get("hygiene", []), "tampering": graded.flagged,
            "forbidden": graded.forbidden, "problem": graded.problem, "instructor": graded.instructor,
            "cached": cached, "key": _submission_key(nb), "cache_key": key}


def _submission_key(nb) -> str:
    """What the student wrote: every cell's kind and text (markdown answers too, unlike the results cache's key,
    which is about code). A resubmission has another key; a re-run of the same submission the same one."""
    import hashlib

    h = hashlib.sha256()
    for cell in nb.cells:
        h.update(json.dumps([cell.cell_type, cell.source]).encode())
    return h.hexdigest()[:32]


def grade(submissions: Path, out: Path, assignment: str, config_dir: Path, source: Path,
          timeout: float = 300, workers: int | None = None, use_sandbox: bool = True,
          progress: bool = True, course: Path | None = None, max_notebook_bytes: int = MAX_NOTEBOOK_BYTES,
          zip_limits: ZipLimits = DEFAULT_ZIP_LIMITS, lms_name: str = "auto", late_policy: LatePolicy | None = None,
          due: datetime | None = None, partial_credit: bool = False, lms_column: str | None = None,
          device: str | None = None) -> list[Student]:
    """Grade a class. Re-running it on the same output folder reuses every finished student's result.

    ``course``: the nbgrader course folder (default ``out/course``); several assignments share one.
    ``max_notebook_bytes``: the most code and text a notebook may hold once its outputs are removed.
    ``zip_limits``: how much an LMS zip may unpack to. ``lms_name``: whose download it is (``auto``: by its
    names; ``none``: plain student folders). ``late_policy``, ``due``: the penalty for late submissions, and
    the deadline attempts are compared with. ``partial_credit``: hidden-test cells graded in proportion to
    their cases passed. ``lms_column``: the grade column's title in the LMS's import file. ``device``: the device
    student code runs on (``cpu`` or ``cuda``; default ``LMBOOK_DEVICE``, else the machine's GPU): where the sandbox
    cannot use it, one line says so and the class is graded on the CPU (:mod:`.grading.devices`).
    """
    from .grading import devices, sandbox

    if use_sandbox:
        try:
            sandbox.check_available()
        except sandbox.SandboxUnavailable as e:
            raise SystemExit(f"lmbook-grade: {e}") from None
    devices.settle(device, use_sandbox)
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    course = course or out / "course"
    course.mkdir(parents=True, exist_ok=True)
    notebooks = sorted((source / assignment).glob("*.ipynb"))
    if len(notebooks) != 1:
        raise SystemExit(f"expected one source notebook in {source / assignment}, found {len(notebooks)}")
    nb_name, stem = notebooks[0].name, notebooks[0].stem
    _write_course_config(course, config_dir, source)
    r = _nbgrader(["generate_assignment", assignment, "--force"], course, config_dir, source, use_sandbox)
    if r.returncode != 0:
        raise SystemExit(f"nbgrader generate_assignment {assignment} failed twice (nothing graded yet; results "
                         f"of earlier runs are kept in {course}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    tasks_max = _max_points(course, assignment, stem)
    kinds = _cell_kinds(course, assignment, stem)
    phases = {"generate": time.perf_counter() - started}
    db_url = f"sqlite:///{course / 'gradebook.db'}"

    # mkdtemp makes the folder 0700: other users of the machine never see the unpacked submissions. It is
    # removed on leaving the block, also when the grader is stopped (interrupt.stop_cleanly), not after SIGKILL.
    with tempfile.TemporaryDirectory(prefix="lmbook-grade-unzip-") as tmp:
        root, zip_problems = class_folder(submissions, Path(tmp), zip_limits)
        found = find_class(root, nb_name, zip_problems, lms_name, course / "release" / assignment / nb_name)
        students = found.students
        if not students:
            raise SystemExit(f"{submissions}: no submissions found")
        # The course gets a copy of each readable notebook (without outputs), and nothing else the student sent.
        for st in students:
            try:
                _copy_in(st, course / "submitted" / st.sid / assignment, nb_name, max_notebook_bytes)
            except Exception as e:  # noqa: BLE001 - one student's notebook never stops the class
                st.status = f"could not be read: {type(e).__name__}: {str(e)[:200]}"
                st.notebook = None
                shutil.rmtree(course / "submitted" / st.sid / assignment, ignore_errors=True)

    # The reference solution first, in the same sandbox and configuration: if it does not earn full marks, the
    # grader is misconfigured (say, the sandbox cannot import lmbook) and grades nobody. In a process of its
    # own: this one must not start torch's threads before it forks the grading workers.
    from concurrent.futures import ProcessPoolExecutor

    def reference_run() -> float | str:
        with ProcessPoolExecutor(max_workers=1, initializer=interrupt.unwind_on_signals) as pool:
            try:
                return pool.submit(interrupt.call_in_worker, _reference, (
                    str(notebooks[0]), use_sandbox, timeout, str(course / "lmbook_cache"))).result()
            except BaseException:
                interrupt.stop_workers(pool)
                raise

    reference = reference_run()
    on = os.environ.get("LMBOOK_DEVICE", "cpu")
    if isinstance(reference, str) and on != "cpu":  # the device, not the grader, may be what fails it
        os.environ["LMBOOK_DEVICE"] = "cpu"
        on_cpu = reference_run()
        if isinstance(on_cpu, str):
            os.environ["LMBOOK_DEVICE"] = on
        else:
            why = reference.split("nobody was graded: ", 1)[-1]
            print(f"lmbook-grade: the reference solution does not earn full marks on {on} in the sandbox "
                  f"({why[:300]}): grading on the CPU", file=sys.stderr, flush=True)
            reference = on_cpu
    if isinstance(reference, str):
        raise SystemExit(f"lmbook-grade: {reference}")
    reference_seconds = reference
    phases["reference"] = time.perf_counter() - started - sum(phases.values())

    # Phase 1, in parallel: sandboxed runs and verdicts, cached in the course folder.
    by_sid = {st.sid: st for st in students}
    cached_before = {p.stem for p in (course / "lmbook_cache").glob("*.json")}  # what "an earlier run" left
    cache_keys: dict[str, str] = {}
    jobs = [(st.sid, str(st.notebook), assignment, stem, db_url, str(course / "lmbook_cache"), use_sandbox, timeout,
             reference_seconds) for st in students if st.notebook is not None]
    for res in _run_phase1(jobs, workers, progress):
        st = by_sid[res["sid"]]
        if "error" in res:
            st.status = f"could not be graded: {res['error'][:300]}"
            shutil.rmtree(course / "submitted" / st.sid / assignment, ignore_errors=True)  # keeps nbgrader consistent
            st.notebook = None
            continue
        st.notes += res["notes"]
        st.suspicious, st.forbidden, st.instructor = res["tampering"], res["forbidden"], res.get("instructor", [])
        st.cached, st.key = res["cached"], res.get("key", "")
        cache_keys[st.sid] = res.get("cache_key", "")
        if res["problem"]:
            st.status = f"graded what ran: {res['problem']}"

    phases["run"] = time.perf_counter() - started - sum(phases.values())
    # Phases 2 and 3: nbgrader records the grades (from the cache) and writes feedback, for the whole class.
    graded = [st for st in students if st.notebook is not None]
    state = manual.load_state(course)
    mine = state.setdefault(assignment, {})
    if graded:
        # Results come from the cache; a miss runs student code, under the students' limit (and only there).
        r = _nbgrader(["autograde", assignment, "--create", "--force", f"--SandboxedExecute.timeout={timeout}",
                       f"--SandboxedExecute.partial_credit={partial_credit}"],
                      course, config_dir, source, use_sandbox)
        phases["record"] = time.perf_counter() - started - sum(phases.values())
        r2 = _nbgrader(["generate_feedback", assignment, "--force"], course, config_dir, source, use_sandbox)
        phases["feedback"] = time.perf_counter() - started - sum(phases.values())
        offline_maths = mathjax.install(out / "feedback")
        for st in graded:
            autograded = course / "autograded" / st.sid / assignment / nb_name
            if not autograded.exists():
                st.status = "nbgrader could not grade it: " + _nbgrader_error(r.stdout + r.stderr, st.sid)
                continue
            try:
                _read_results(st, course, assignment, autograded, mine)
            except Exception as e:  # noqa: BLE001 - one student's gradebook rows never stop the class
                st.status = f"could not read its grades: {type(e).__name__}: {str(e)[:200]}"
                continue
            html = course / "feedback" / st.sid / assignment / f"{stem}.html"
            try:
                if html.exists():
                    page = mathjax.offline(html.read_text(encoding="utf-8"))
                    html.write_text(page, encoding="utf-8")  # nbgrader's copy too (release_feedback sends it)
                    (out / "feedback").mkdir(exist_ok=True)
                    _link_or_copy(html, out / "feedback" / f"{st.sid}.html")
                elif r2.returncode != 0:
                    st.notes.append("no feedback file: " + _nbgrader_error(r2.stdout + r2.stderr, st.sid))
            except OSError as e:
                st.notes.append(f"no feedback file: {e}")
        if not offline_maths:
            print("note: no MathJax in this checkout (run make install): the feedback pages load it from the "
                  "internet", file=sys.stderr)
    manual.save_state(course, state)
    _register_ungraded(students, db_url)
    for st in students:
        for task, maxp in tasks_max.items():
            st.tasks.setdefault(task, (0.0, maxp))
        for task in st.forbidden:
            if task in st.tasks:
                st.messages.setdefault(task, f"{task}: no credit: the answer {st.forbidden[task]}")
    late.apply(students, late_policy, due, sum(tasks_max.values()))
    release = course / "release" / assignment / nb_name
    alike = copies.find_alike_in({st.sid: st.notebook for st in students if st.notebook is not None}, release)
    summary = classreport.summarize(assignment, students, tasks_max, late_policy=late_policy,
                                    lms=found.lms, download_notes=found.notes, manual_tasks=[
                                        t for t, k in kinds.items() if k == "markdown"], alike=alike)
    left_out = _write_lms_file(found.lms, students, assignment, sum(tasks_max.values()), lms_column, out)
    summary.left_out = left_out
    reports.write_grades(students, tasks_max, out / "grades.csv")
    reports.write_report(students, tasks_max, summary, out / "report.md")
    reports.write_suspicious(students, out / "suspicious.md", alike)
    classreport.write_class_page(summary, out)
    reports.write_summary(students, out, time.perf_counter() - started, phases, lms=found.lms, left_out=left_out,
                          download_notes=found.notes, course=course,
                          reused_why=reuse_note(students, cache_keys, cached_before, alike, stub_answers(release)))
    return students


def _write_course_config(course: Path, config_dir: Path, source: Path) -> None:
    """``course/nbgrader_config.py``: the course's own configuration, so that nbgrader's formgrader, started in
    the course folder (``make formgrader``), shows this course for grading by hand."""
    text = (f"# Written by lmbook-grade. Grade by hand in formgrader: make formgrader OUT={course.parent} (or start\n"
            f"# jupyter lab in this folder), then run lmbook-grade again.\n"
            f"c = get_config()  # noqa: F821\n"
            f"load_subconfig({str(config_dir / 'nbgrader_config.py')!r})  # noqa: F821\n"
            f"c.CourseDirectory.root = {str(course)!r}\n"
            f"c.CourseDirectory.source_directory = {str(source)!r}\n"
            f"c.CourseDirectory.release_directory = 'release'\n")
    path = course / "nbgrader_config.py"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _copy_in(st: Student, dest: Path, nb_name: str, max_notebook_bytes: int) -> None:
    """The readable notebook, outputs removed, into the course (``st.notebook`` then points there)."""
    nb = read_submission(st, max_notebook_bytes) if st.notebook is not None else None
    if nb is None:
        shutil.rmtree(dest, ignore_errors=True)
        st.notebook = None
        return
    text = nbformat.writes(nb)
    if not (dest / nb_name).exists() or (dest / nb_name).read_text(encoding="utf-8") != text:
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        (dest / nb_name).write_text(text, encoding="utf-8")
    st.notebook = dest / nb_name


def _write_lms_file(lms_name: str | None, students: list[Student], assignment: str, max_points: float,
                    column: str | None, out: Path) -> list[str]:
    """The LMS's import file, ``grades-<lms>.csv``; the students left out of it, and why."""
    for old in out.glob("grades-*.csv"):
        old.unlink()  # a file from a run under another --lms would be uploaded by mistake
    if lms_name is None:
        return []
    path = out / f"grades-{lms_name}.csv"
    column = column or lms.default_column(lms_name, assignment, max_points)
    if lms_name == "canvas":
        return lms.write_canvas(students, column, max_points, path)
    if lms_name == "moodle":
        return lms.write_moodle(students, max_points, path)
    return lms.write_blackboard(students, column, path)


def _reference(job: tuple) -> float | str:
    """Worker: grade the reference solution (judge.preflight); its run's time, or the line saying why not."""
    source, use_sandbox, timeout, cache = job
    from .grading import judge

    try:
        return judge.preflight(Path(source), use_sandbox=use_sandbox, timeout=timeout, cache=Path(cache))
    except judge.ReferenceFailed as e:
        return str(e)


def _link_or_copy(src: Path, dest: Path) -> None:
    """The feedback page once on disk, where the file system allows (its images can be megabytes)."""
    dest.unlink(missing_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def _run_phase1(jobs: list[tuple], workers: int | None, progress: bool,
                work: Callable[[tuple], dict] | None = None) -> list[dict]:
    """Every job's result, in parallel. A job whose worker process died (killed, out of memory: never the
    student's code, which runs in the sandbox) runs again once in a fresh pool, and is then reported."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm.auto import tqdm

    results: dict[str, dict] = {}
    for attempt in (1, 2):
        todo = [job for job in jobs if job[0] not in results]
        if not todo:
            break
        with ProcessPoolExecutor(max_workers=max(1, min(workers or os.cpu_count() or 1, len(todo))),
                                 initializer=interrupt.unwind_on_signals) as pool:
            futures = {pool.submit(interrupt.call_in_worker, work or _phase1, job): job[0] for job in todo}
            try:
                for fut in tqdm(as_completed(futures), total=len(futures), desc="grading", unit="notebook",
                                disable=not progress, file=sys.stdout):
                    _collect(fut, futures[fut], attempt, results)
            except BaseException:  # stopped, or the course is broken: no worker may go on grading
                interrupt.stop_workers(pool)
                raise
    return list(results.values())


def _collect(fut, sid: str, attempt: int, results: dict[str, dict]) -> None:
    try:
        results[sid] = fut.result()
    except Exception as e:
        if type(e).__name__ == "NotebookConfigError":  # by name: importing judge here costs torch
            raise  # the course's notebook is broken: stop the batch and say so
        if attempt == 2:
            results[sid] = {"sid": sid, "error": f"the grader's worker process failed twice ({type(e).__name__}: {e})"}


def _nbgrader_error(log: str, sid: str) -> str:
    lines = [ln for ln in log.splitlines() if sid in ln or "Error" in ln]
    return (lines[-1] if lines else "(no message)")[:300]


def _register_ungraded(students: list[Student], db_url: str) -> None:
    """Every student in the gradebook with what the LMS says of them (their LMS id, which `nbgrader export`
    writes, and their name, which formgrader shows); those with nothing gradable too, so that `nbgrader export`
    lists them (with 0)."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        for st in students:
            first, _, last = st.name.rpartition(" ") if " " in st.name else ("", "", st.name)
            known = {k: v for k, v in (("lms_user_id", st.lms_id), ("first_name", first), ("last_name", last)) if v}
            if known or st.notebook is None or st.status.startswith(("could not", "nbgrader")):
                gb.update_or_create_student(st.sid, **known)


def grade_several(submissions: Path, out: Path, assignments: list[str], config_dir: Path, source: Path,
                  skip_missing: bool = False, **kwargs) -> tuple[dict[str, list[Student]], dict[str, str]]:
    """Grade ``submissions/<assignment>/`` (or ``<assignment>.zip``) for each assignment into ``out/<assignment>/``,
    with one nbgrader course, and write ``out/grades.csv`` across them. Every folder is found before any grading;
    an assignment that cannot be graded (its return: assignment -> why) does not lose the others.
    """
    where = {a: next((p for p in (submissions / a, submissions / f"{a}.zip") if p.exists()), None)
             for a in assignments}
    missing = [a for a, p in where.items() if p is None]
    if missing and not skip_missing:
        raise SystemExit(f"no submissions for {', '.join(missing)}: expected {submissions}/<assignment>/ (a folder "
                         f"of student folders) or {submissions}/<assignment>.zip")
    if len(missing) == len(assignments):
        raise SystemExit(f"{submissions}: no assignment folder ({', '.join(assignments)}) found")
    for a in missing:
        print(f"{a}: skipped, no submissions ({submissions / a} is missing)")
    graded, failed = {}, {}
    for a, path in where.items():
        try:
            if path is not None:
                graded[a] = grade(path, out / a, a, config_dir, source, course=out / "course", **kwargs)
        except SystemExit as e:  # this assignment's set-up or submissions are broken: say so, go on
            failed[a] = str(e)
            print(f"{a}: not graded: {e}", file=sys.stderr)
    reports.write_term_grades(graded, out / "grades.csv")
    return graded, failed


def reuse_note(students: list[Student], cache_keys: dict[str, str], cached_before: set[str],
               alike: list[copies.Pair], stub: dict[str, str]) -> str:
    """Which results were reused and why, in one line's words: a result is reused whenever a notebook's code is
    the same, cell for cell, as one already graded, from an earlier run or from another student in this one.

    ``cache_keys``: each student's results key; ``cached_before``: the keys the cache held before this run;
    ``alike``: the pairs in suspicious.md; ``stub``: the released exercise's answer cells.
    """
    reused = [st for st in students if st.cached]
    earlier = sum(cache_keys.get(st.sid) in cached_before for st in reused)
    now = len(reused) - earlier
    this_run = "from notebooks with the same code graded earlier in this run"
    head = (f"{len(reused)} results reused from an earlier run" if not now else
            f"{len(reused)} results reused {this_run}" if not earlier else
            f"{len(reused)} results reused: {earlier} from an earlier run, {now} {this_run}")
    groups: dict[str, list[Student]] = {}
    for st in students:
        if cache_keys.get(st.sid) and st.notebook is not None:
            groups.setdefault(cache_keys[st.sid], []).append(st)
    same = [g for g in groups.values() if len(g) > 1 and any(st.cached for st in g)]  # what explains a reuse
    if not reused or not same:
        return head
    listed = {frozenset((p.a, p.b)) for p in alike}
    words = []
    for group in same[:3]:
        sids = [st.sid for st in group]
        if all(is_stub(st.notebook, stub) for st in group):
            why = "the exercise as released, unanswered"
        elif any(frozenset((a, b)) in listed for i, a in enumerate(sids) for b in sids[i + 1:]):
            why = "see suspicious.md"
        else:
            why = "too little code of their own to list as alike"
        words.append(f"{', '.join(sids[:-1])} and {sids[-1]} ({why})")
    more = f"; {len(same) - 3} more groups" if len(same) > 3 else ""
    return f"{head}; identical code: {'; '.join(words)}{more}"


def _say(out: Path, students: list[Student], label: str = "") -> None:
    s = json.loads((out / "summary.json").read_text())
    print(f"\n{label}{s['submissions']} submissions in {s['seconds']:.0f} s: {s['graded']} graded, "
          f"{s['graded_partly']} graded up to where they stopped, {s['failed_to_run']} could not be run, "
          f"{s['flagged']} flagged for review ({s.get('reused_why') or str(s['reused']) + ' results reused'}).")
    for note in s.get("download", []):
        print(f"  {note}")
    if s.get("pending"):
        print(f"  {s['pending']} submissions have answers to grade by hand: grade them in formgrader (make formgrader "
              f"OUT={Path(s['course']).parent}), then run the same command again.")
    for st in students:
        if st.status != "graded":
            print(f"  {st.sid}: {st.status}")
        if st.suspicious:
            print(f"  {st.sid}: flagged: {st.suspicious[0]}")
        for note in st.notes:
            if note.startswith("student id clash"):
                print(f"  {st.sid}: {note}")
        for warning in st.warnings:
            print(f"  {st.sid}: WARNING: {warning}")
    if s.get("lms"):
        lms_file = out / f"grades-{s['lms']}.csv"
        print(f"  {lms.LABELS[s['lms']]}'s import file: {lms_file} ({s['lms_rows']} students)")
        for why in s.get("left_out", []):
            print(f"    left out: {why}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="lmbook-grade", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("submissions", type=Path,
                   help="folder of per-student folders, or an LMS zip; with several assignments, a folder\n"
                        "holding one such folder (or zip) per assignment: SUBMISSIONS/<assignment>/<student>/")
    p.add_argument("--assignment", action="append", metavar="ID",
                   help="assignment id (a folder of solutions/), default ch01; give it again for several,\n"
                        "or 'all' for every assignment folder of the source folder")
    p.add_argument("--out", type=Path, default=Path("grading"), help="output folder, default ./grading")
    p.add_argument("--course", type=Path, default=Path("autograder"),
                   help="folder holding nbgrader_config.py, default ./autograder")
    p.add_argument("--source", type=Path, default=None, help="nbgrader source folder, default COURSE/../solutions")
    p.add_argument("--timeout", type=float, default=300,
                   help="seconds a student's cell may run (default 300); the grader's own steps have no limit")
    p.add_argument("--lms", choices=["auto", *lms.LMS_NAMES, "none"], default="auto",
                   help="whose download SUBMISSIONS is (default: recognised by its file names, and said);\n"
                        "none: a folder of student folders, named by student")
    p.add_argument("--lms-column", metavar="TITLE",
                   help="the grade column's title in the LMS's import file, as the LMS's own gradebook export\n"
                        "writes it (Canvas: 'Exercise 6 (4412)'; Blackboard: 'Exercise 6 [Total Pts: 16\n"
                        "Score] |1234'); default: the assignment's name (a new column)")
    p.add_argument("--late-penalty", metavar="SPEC", type=LatePolicy.parse,
                   help="points off a late submission: 10%% or 2 (once), 10%%/day or 2/day (per day\n"
                        "started); off by default. Late: Canvas's _LATE_ marker, or an attempt after --due")
    p.add_argument("--due", metavar="WHEN", type=datetime.fromisoformat,
                   help="the deadline, in the LMS's local time ('2026-03-01 23:59'): Blackboard's attempt\n"
                        "times are compared with it")
    p.add_argument("--partial-credit", action="store_true",
                   help="a failed hidden-test cell earns its points in proportion to the cases its answer\n"
                        "passed (default: all or nothing)")
    p.add_argument("--workers", type=int, default=None, help="parallel gradings (default: one per core)")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="the device student code runs on (default: LMBOOK_DEVICE, else the machine's GPU);\n"
                        "where the sandbox cannot use the GPU, one line says so and the class is graded on\n"
                        "the CPU")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run student code without bubblewrap: only for notebooks you trust")
    p.add_argument("--max-notebook-mb", type=float, default=MAX_NOTEBOOK_BYTES / MB,
                   help=f"most code and text a notebook may hold once its outputs are removed\n"
                        f"(default {MAX_NOTEBOOK_BYTES / MB:g}); outputs never count")
    p.add_argument("--max-unzip-gb", type=float, default=DEFAULT_ZIP_LIMITS.max_total_bytes / GiB,
                   help=f"most a class zip may unpack to, in GiB (default "
                        f"{DEFAULT_ZIP_LIMITS.max_total_bytes / GiB:g}); entries past it are reported, not unpacked")
    a = p.parse_args(argv)
    try:
        with interrupt.stop_cleanly():
            return _run(p, a)
    except (interrupt.Stopped, KeyboardInterrupt) as e:
        why = str(e) if isinstance(e, interrupt.Stopped) else "stopped by SIGINT"
        print(f"\nlmbook-grade: {why}; its temporary folders were removed. Results finished so far are kept in the "
              "course folder: the same command resumes.", file=sys.stderr)
        return 128 + getattr(e, "signum", 2)


def _run(p: argparse.ArgumentParser, a: argparse.Namespace) -> int:
    config_dir = a.course.resolve()
    if not (config_dir / "nbgrader_config.py").exists():
        p.error(f"{config_dir}: no nbgrader_config.py (run from the repository root or pass --course)")
    source = (a.source or config_dir.parent / "solutions").resolve()
    out = a.out.resolve()
    names = a.assignment or ["ch01"]
    assignments = resolve_assignments(names, source)
    if a.lms_column and len(assignments) > 1:
        p.error("--lms-column names one assignment's column: grade the assignments one at a time to use it")
    kwargs = {"timeout": a.timeout, "workers": a.workers, "use_sandbox": not a.no_sandbox, "progress": True,
              "max_notebook_bytes": int(a.max_notebook_mb * MB),
              "zip_limits": ZipLimits(max_total_bytes=int(a.max_unzip_gb * GiB)), "lms_name": a.lms,
              "late_policy": a.late_penalty, "due": a.due, "partial_credit": a.partial_credit,
              "lms_column": a.lms_column, "device": a.device}
    if len(names) == 1 and names != ["all"]:
        students = grade(a.submissions.resolve(), out, assignments[0], config_dir, source, **kwargs)
        _say(out, students)
        print(f"Grades:     {out / 'grades.csv'}\nClass:      {out / 'class.html'}\n"
              f"Report:     {out / 'report.md'}\nSuspicious: {out / 'suspicious.md'}\nFeedback:   {out / 'feedback'}/")
        for upload in sorted(out.glob("grades-*.csv")):
            print(f"Upload:     {upload}")
        return 0
    graded, failed = grade_several(a.submissions.resolve(), out, assignments, config_dir, source,
                                   skip_missing="all" in names, **kwargs)
    for assignment, students in graded.items():
        _say(out / assignment, students, f"{assignment}: ")
    print(f"\nGrades (one column per assignment): {out / 'grades.csv'}")
    for assignment in graded:
        print(f"{assignment}: {out / assignment}/ (class.html, grades.csv, report.md, suspicious.md, feedback/)")
    for assignment, why in failed.items():
        print(f"{assignment}: NOT GRADED: {why.splitlines()[0] if why else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
