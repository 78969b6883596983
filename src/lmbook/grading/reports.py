"""What ``lmbook-grade`` writes for the instructor: grades, the report, the flagged list, the summary.

Everything here reads :class:`Student` records and writes files; nothing grades. The class page
(``class.html``) is :mod:`.classreport`, which this module uses (never the other way round); the LMS's own
import files are :mod:`.lms`.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from .classreport import ClassSummary, summary_markdown
from .copies import EXPLANATION, Pair
from .student import Student

__all__ = ["Student", "write_grades", "write_report", "write_summary", "write_suspicious", "write_term_grades"]


def _task_cell(st: Student, task: str) -> str:
    return "pending" if task in st.pending else f"{st.tasks[task][0]:g}"


def write_grades(students: list[Student], tasks_max: dict[str, float], path: Path) -> None:
    """One row per student, one column per task (``pending`` for an answer awaiting grading by hand).

    ``total`` is the grade so far (late penalty taken off); it is final when ``pending`` (the points
    awaiting grading by hand) is 0. ``manual``: the tasks whose score was set by hand in formgrader.
    """
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student", "lms_id", "name", *tasks_max, "total", "max", "pending", "late", "penalty", "status",
                    "flagged", "manual"])
        total_max = sum(tasks_max.values())
        for st in students:
            w.writerow([st.sid, st.lms_id, st.name, *(_task_cell(st, t) for t in tasks_max), f"{st.score:g}",
                        f"{total_max:g}", f"{st.pending_points:g}", "yes" if st.late else "", f"{st.penalty:g}",
                        st.status, "yes" if st.suspicious else "", " ".join(sorted(st.manual))])


def write_term_grades(by_assignment: dict[str, list[Student]], path: Path) -> None:
    """Several assignments in one sheet: one row per student, one column per assignment (its total).

    A student with nothing graded in an assignment gets 0 there, and ``status`` says why.
    """
    sids = sorted({st.sid for students in by_assignment.values() for st in students})
    found = {a: {st.sid: st for st in students} for a, students in by_assignment.items()}
    maxima = {a: max((st.max_score for st in students), default=0.0) for a, students in by_assignment.items()}
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student", *by_assignment, "total", "max", "pending", "status", "flagged"])
        for sid in sids:
            mine = {a: found[a].get(sid) for a in by_assignment}
            scores = [st.score if st else 0.0 for st in mine.values()]
            problems = [f"{a}: {st.status if st else 'no submission'}" for a, st in mine.items()
                        if st is None or st.status != "graded"]
            problems += [f"{a}: {st.pending_points:g} points to grade by hand" for a, st in mine.items()
                         if st and st.pending]
            w.writerow([sid, *(f"{s:g}" for s in scores), f"{sum(scores):g}", f"{sum(maxima.values()):g}",
                        f"{sum(st.pending_points for st in mine.values() if st):g}", "; ".join(problems) or "graded",
                        " ".join(a for a, st in mine.items() if st and st.suspicious)])


def write_report(students: list[Student], tasks_max: dict[str, float], summary: ClassSummary, path: Path) -> None:
    """The class at a glance (as on class.html), then one section per student."""
    lines = [*summary_markdown(summary), "# Students", ""]
    for st in students:
        pending = f", {st.pending_points:g} to grade by hand" if st.pending else ""
        lines += [f"## {st.sid}: {st.score:g} / {sum(tasks_max.values()):g}{pending} ({st.status})", ""]
        if st.suspicious:
            lines += ["**Flagged for review** (see suspicious.md): " + st.suspicious[0], ""]
        for warning in st.warnings:
            lines += [f"**Check**: {warning}", ""]
        who = ", ".join(x for x in (st.name, f"{st.lms} id {st.lms_id}" if st.lms_id else "") if x)
        if who:
            lines += [f"{who}.", ""]
        if st.source and st.source != st.sid:
            lines += [f"Submitted as `{st.source}`.", ""]
        if st.late:
            lines += [f"Late: {st.penalty_why.removeprefix('late: ') or 'no late penalty set'}.", ""]
        for note in st.notes:
            lines.append(f"- note: {note}")
        for note in st.instructor:
            lines.append(f"- for you only: {note}")
        if st.notes or st.instructor:
            lines.append("")
        for task, (score, maxp) in st.tasks.items():
            if task in st.pending:
                lines.append(f"- **{task}**: pending ({maxp:g} points to grade by hand in formgrader)")
                continue
            lines.append(f"- **{task}**: {score:g}/{maxp:g}" + (" (set by hand)" if task in st.manual else ""))
            if task in st.messages:
                lines += ["", "  ```", *("  " + ln for ln in st.messages[task].splitlines()), "  ```"]
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


def write_suspicious(students: list[Student], path: Path, alike: Sequence[Pair] = ()) -> None:
    """The flagged submissions, each with its evidence; then the pairs of students whose answers are alike
    (listed only: a pair is no flag, and no grade depends on it)."""
    flagged = [st for st in students if st.suspicious or st.forbidden]
    lines = ["# Submissions to review", "",
             "Notebooks whose code reaches for the grader's machinery (tampering) get no credit for any task; "
             "evidence the grader cannot settle by itself is listed for review, and the points stand until you "
             "decide; answers that use a task's ready-made implementation get none for that task. The evidence is "
             "the student's own code, read by the grader, and what the grader saw while it ran in the sandbox.",
             ""]
    if not flagged:
        lines.append("None.")
    for st in flagged:
        lines += [f"## {st.sid}", ""]
        lines += [f"- {e}" if e.startswith("for review") else f"- tampering: {e}" for e in st.suspicious]
        lines += [f"- {task}: the answer {why}" for task, why in st.forbidden.items()]
        lines.append("")
    if flagged:
        lines.pop()
    lines += ["", "## Answers alike across students", "", EXPLANATION, ""]
    lines += [f"- {p.a} and {p.b}: {p.how_alike()}; tasks alike: {p.describe()}" for p in alike] or ["None."]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_summary(students: list[Student], out: Path, seconds: float, phases: dict[str, float],
                  lms: str | None = None, left_out: list[str] | None = None,
                  download_notes: list[str] | None = None, course: Path | None = None, reused_why: str = "") -> None:
    """``summary.json``: the counts the command's last lines say. ``reused_why``: the results reused, and why."""
    ok = [st for st in students if st.status == "graded"]
    partial = [st for st in students if st.status.startswith("graded what ran")]
    failed = [st for st in students if not st.status.startswith("graded")]
    flagged = [st for st in students if st.suspicious]
    summary = {"submissions": len(students), "graded": len(ok), "graded_partly": len(partial),
               "failed_to_run": len(failed), "flagged": len(flagged), "reused": sum(st.cached for st in students),
               "reused_why": reused_why,
               "pending": sum(bool(st.pending) for st in students), "late": sum(st.late for st in students),
               "manual_warnings": sum(bool(st.warnings) for st in students), "lms": lms,
               "lms_rows": len(students) - len(left_out or []) if lms else 0, "left_out": left_out or [],
               "download": download_notes or [], "course": str(course or out / "course"),
               "seconds": round(seconds, 1), "phase_seconds": {k: round(v, 1) for k, v in phases.items()}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
