"""A late policy: points taken off a late submission, as ``lmbook-grade --late-penalty`` states it.

``--late-penalty 10%`` takes 10% of the assignment's points off any late submission; ``10%/day`` takes 10%
per day (or part of a day) late; ``2`` and ``2/day`` take points instead of a share. A grade never goes below
0. Off by default.

Which submissions are late comes from the download: Canvas marks them (``_LATE_`` in the file name, by the due
date and extensions Canvas knows), Blackboard gives each attempt's time (late when past ``--due``). Canvas
does not say by how much: a per-day penalty counts such a submission as one day late, and the report says so.
Moodle's download says neither; its grades get no penalty here (Moodle applies its own, if set).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime

from .student import Student

_SPEC = re.compile(r"^\s*(?P<amount>\d+(?:\.\d+)?)\s*(?P<pct>%)?\s*(?P<per_day>/\s*day)?\s*$")


@dataclass(frozen=True)
class LatePolicy:
    amount: float  # points, or percent of the assignment's points
    percent: bool
    per_day: bool

    @classmethod
    def parse(cls, spec: str) -> LatePolicy:
        m = _SPEC.match(spec)
        if not m:
            raise ValueError(f"--late-penalty {spec!r}: write it as 10%, 10%/day, 2 or 2/day")
        return cls(float(m["amount"]), bool(m["pct"]), bool(m["per_day"]))

    def __str__(self) -> str:
        what = f"{self.amount:g}% of the assignment's points" if self.percent else f"{self.amount:g} points"
        return what + (" per day late (a part of a day counts as a day)" if self.per_day else " if late")

    def penalty(self, max_points: float, days: int) -> float:
        per = self.amount * max_points / 100 if self.percent else self.amount
        return per * (days if self.per_day else 1)


def days_late(submitted: datetime, due: datetime) -> int:
    """Whole days late, a part of a day counting as a day; 0 when on time."""
    return max(0, math.ceil((submitted - due).total_seconds() / 86400))


def apply(students: list[Student], policy: LatePolicy | None, due: datetime | None, max_points: float) -> None:
    """Mark late submissions (``due`` against the LMS's attempt times) and take off the policy's penalty."""
    for st in students:
        if due is not None and st.submitted_at is not None:
            st.days_late = days_late(st.submitted_at, due)
            st.late = st.days_late > 0
        if not st.late or policy is None:
            continue
        days = st.days_late
        guessed = days is None
        if days is None:
            days = 1
        st.penalty = min(st.points, round(policy.penalty(max_points, days), 2))
        when = (f"{days} day{'s' if days != 1 else ''} late" if not guessed
                else "late (the LMS does not say by how much: counted as 1 day)" if policy.per_day else "late")
        st.penalty_why = f"{when}: -{st.penalty:g} points"
