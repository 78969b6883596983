"""What grading a notebook gives, in the form the grader's nbgrader steps read: no torch, no checks.

``nbgrader autograde`` (recording cached results) and ``generate_feedback`` load the course's preprocessors
for every class graded; these types are all they need from :mod:`.judge`, which imports torch and the checks
(seconds per nbgrader step) only where a notebook is graded afresh.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_TIMEOUT = 300.0


@dataclass
class Verdict:
    passed: bool
    lines: list[str]  # ✓ lines, and for a failure the checks' messages
    cases: tuple[int, int] | None = None  # (passed, planned) cases of the cell's checks; None when not counted
    hidden: bool = False  # a hidden-test cell

    def partial_outputs(self, earned: float, points: float) -> list[dict]:
        """The outputs of a failed cell graded in proportion to its cases passed (``lmbook-grade
        --partial-credit``): the checks' words as text, and the points as the cell's value, which is how
        nbgrader reads partial credit (an error output would score 0)."""
        passed, total = self.cases or (0, 0)
        text = "\n".join(self.lines) + (f"\npartial credit: {passed} of {total} checks passed: {earned:g} of "
                                        f"{points:g} points\n")
        return [{"output_type": "stream", "name": "stdout", "text": text},
                {"output_type": "execute_result", "execution_count": None, "metadata": {},
                 "data": {"text/plain": f"{earned:g}"}}]

    def outputs(self) -> list[dict]:
        ok = [ln for ln in self.lines if ln.startswith("✓")]
        bad = [ln for ln in self.lines if not ln.startswith("✓")]
        outs = [{"output_type": "stream", "name": "stdout", "text": "\n".join(ok) + "\n"}] if ok else []
        if bad:
            text = "\n".join(bad)
            first, *rest = text.splitlines()
            outs.append({"output_type": "error", "ename": "CheckFailed", "evalue": text,
                         "traceback": [f"\x1b[31m✗ {first}\x1b[0m", *rest]})
        return outs


@dataclass
class Graded:
    """What grading one notebook found: outputs per cell index, verdicts per test cell, evidence."""

    outputs: dict[int, list[dict]] = field(default_factory=dict)
    verdicts: dict[int, Verdict] = field(default_factory=dict)
    tampering: list[str] = field(default_factory=list)  # evidence, for the instructor: no credit for any task
    forbidden: dict[str, str] = field(default_factory=dict)  # task -> what the answer used
    problem: str | None = None  # why the run stopped early, if it did
    review: list[str] = field(default_factory=list)  # evidence the grader cannot settle: flagged, points stand
    seconds: float = 0.0  # how long the sandboxed run took (wall clock)
    instructor: list[str] = field(default_factory=list)  # for the instructor's report only (hidden figures)

    def to_json(self) -> dict:
        return {"outputs": {str(k): v for k, v in self.outputs.items()},
                "verdicts": {str(k): {"passed": v.passed, "lines": v.lines, "cases": v.cases, "hidden": v.hidden}
                             for k, v in self.verdicts.items()},
                "tampering": self.tampering, "forbidden": self.forbidden, "problem": self.problem,
                "review": self.review, "seconds": self.seconds, "instructor": self.instructor}

    @classmethod
    def from_json(cls, d: dict) -> Graded:
        return cls({int(k): v for k, v in d["outputs"].items()},
                   {int(k): Verdict(v["passed"], v["lines"], tuple(v["cases"]) if v.get("cases") else None,
                                    bool(v.get("hidden"))) for k, v in d["verdicts"].items()},
                   d["tampering"], d["forbidden"], d["problem"], d.get("review", []), d.get("seconds", 0.0),
                   d.get("instructor", []))

    @property
    def flagged(self) -> list[str]:
        """The one flagging rule: tampering (no credit) and what is left for review (points stand)."""
        return [*self.tampering, *(f"for review (the points stand): {r}" for r in self.review)]


def is_test_cell(cell) -> bool:
    return cell.cell_type == "code" and bool(cell.metadata.get("nbgrader", {}).get("grade"))


class ReferenceFailed(RuntimeError):
    """The reference solution does not earn full marks here: the grader is misconfigured, nobody is graded."""
