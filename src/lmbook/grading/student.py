"""One student's submission to one assignment, and what grading found: the record every report reads.

Its own module so that the modules writing reports import it and never each other (:mod:`.reports` uses
:mod:`.classreport`; neither is imported by this one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path


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
    instructor: list[str] = field(default_factory=list)  # what the student's feedback leaves out (hidden figures)
    cached: bool = False
    source: str = ""  # the folder or file of the class folder it came from (the id is made from it)
    # What the LMS download says about the student (empty for a plain folder of student folders)
    lms: str = ""  # "canvas", "moodle" or "blackboard"
    lms_id: str = ""  # Canvas user id, Moodle participant id, Blackboard username: what the LMS imports by
    name: str = ""  # the student's name as the LMS wrote it
    late: bool = False
    submitted_at: datetime | None = None  # when the LMS says the graded attempt was made (Blackboard)
    days_late: int | None = None  # whole days (started) past the deadline, when known
    penalty: float = 0.0  # points taken off for lateness
    penalty_why: str = ""
    pending: dict[str, float] = field(default_factory=dict)  # task -> points awaiting manual grading
    manual: dict[str, float] = field(default_factory=dict)  # task -> points of it set by hand (formgrader)
    warnings: list[str] = field(default_factory=list)  # what the instructor must look at (a stale manual score)
    key: str = ""  # the graded notebook's content key: tells a resubmission from the notebook graded before

    @property
    def points(self) -> float:
        """Points earned in the tasks graded so far (autograded, and manually graded), before any penalty."""
        return sum(s for s, _ in self.tasks.values())

    @property
    def score(self) -> float:
        """The grade: points earned less the late penalty, never below 0."""
        return max(0.0, self.points - self.penalty)

    @property
    def max_score(self) -> float:
        return sum(m for _, m in self.tasks.values())

    @property
    def pending_points(self) -> float:
        return sum(self.pending.values())

    @property
    def final(self) -> bool:
        """Whether the grade is complete: nothing awaits manual grading."""
        return not self.pending
