"""What ``lmbook-grade`` writes for the instructor: grades, the report, the flagged list, the summary.

Everything here reads :class:`Student` records and writes files; nothing grades. The class page
(``class.html``) is :mod:`.classreport`.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from .classreport import ClassSummary, summary_markdown


@dataclass
class Student:
    """One student's submission to one assignment, and what grading found."""

    sid: str
    notebook: Path | None = None
    status: str = "graded"
    tasks: dict[str, tuple[float, float]] = field(default_factory=dict)  # task -> (score, max)
    messages: dict[str, str] = field(default_factory=dict)
    mistakes: dict[str, list[str]] = field(default_factory=dict)  # task -> the named mistakes its checks found
    notes: list[str] = field(default_factory=list)  # what hygiene changed or ignored
    suspicious: list[str] = field(default_factory=list)  # evidence of tampering, for the instructor
    forbidden: dict[str, str] = field(default_factory=dict)  # task -> the ready-made answer it used
    cached: bool = False
    source: str = ""  # the folder or file of the class folder it came from (the id is made from it)

    @property
    def score(self) -> float:
        return sum(s for s, _ in self.tasks.values())

    @property
    def max_score(self) -> float:
        return sum(m for _, m in self.tasks.values())


def write_grades(students: list[Student], tasks_max: dict[str, float], path: Path) -> None:
    """One row per student, one column per task."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", *tasks_max, "total", "max", "status", "flagged"])
        total_max = sum(tasks_max.values())
        for st in students:
            w.writerow([st.sid, *(f"{st.tasks[t][0]:g}" for t in tasks_max), f"{st.score:g}", f"{total_max:g}",
                        st.status, "yes" if st.suspicious else ""])


def write_term_grades(by_assignment: dict[str, list[Student]], path: Path) -> None:
    """Several assignments in one sheet: one row per student, one column per assignment (its total).

    A student with nothing graded in an assignment gets 0 there, and ``status`` says why.
    """
    sids = sorted({st.sid for students in by_assignment.values() for st in students})
    found = {a: {st.sid: st for st in students} for a, students in by_assignment.items()}
    maxima = {a: max((st.max_score for st in students), default=0.0) for a, students in by_assignment.items()}
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", *by_assignment, "total", "max", "status", "flagged"])
        for sid in sids:
            mine = {a: found[a].get(sid) for a in by_assignment}
            scores = [st.score if st else 0.0 for st in mine.values()]
            problems = [f"{a}: {st.status if st else 'no submission'}" for a, st in mine.items()
                        if st is None or st.status != "graded"]
            w.writerow([sid, *(f"{s:g}" for s in scores), f"{sum(scores):g}", f"{sum(maxima.values()):g}",
                        "; ".join(problems) or "graded", " ".join(a for a, st in mine.items() if st and st.suspicious)])


def write_report(students: list[Student], tasks_max: dict[str, float], summary: ClassSummary, path: Path) -> None:
    """The class at a glance (as on class.html), then one section per student."""
    lines = [*summary_markdown(summary), "# Students", ""]
    for st in students:
        lines += [f"## {st.sid}: {st.score:g} / {sum(tasks_max.values()):g} ({st.status})", ""]
        if st.suspicious:
            lines += ["**Flagged for review** (see suspicious.md): " + st.suspicious[0], ""]
        if st.source and st.source != st.sid:
            lines += [f"Submitted as `{st.source}`.", ""]
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


def write_suspicious(students: list[Student], path: Path) -> None:
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
    path.write_text("\n".join(lines) + "\n")


def write_summary(students: list[Student], out: Path, seconds: float, phases: dict[str, float]) -> None:
    ok = [st for st in students if st.status == "graded"]
    partial = [st for st in students if st.status.startswith("graded what ran")]
    failed = [st for st in students if not st.status.startswith("graded")]
    flagged = [st for st in students if st.suspicious]
    summary = {"submissions": len(students), "graded": len(ok), "graded_partly": len(partial),
               "failed_to_run": len(failed), "flagged": len(flagged), "reused": sum(st.cached for st in students),
               "seconds": round(seconds, 1), "phase_seconds": {k: round(v, 1) for k, v in phases.items()}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
