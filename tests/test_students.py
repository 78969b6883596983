"""The checks against what students actually write, for every released exercise.

Each exercise has a module ``tests/students_chNN.py`` with, for every graded task, implementations written
as a student would (not derived from the reference):

    WRONG = {"task": [Student(fn, has="the misconception it has, word for word from the task's Mutant", or None)]}
    RIGHT = {"task": [fn, ...]}   # correct, but written differently from the reference

and this file holds them to the bar: every wrong one loses points and every right one gets full marks, in
Jupyter and in the grader alike (the same decision, on values that crossed the sandbox's wall), and no wrong
one is told a misconception it does not have. ``feedback_quality()`` counts, per exercise, how many wrong
ones are caught, named, and named correctly (`python tests/test_students.py` prints the table).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lmbook.grading import reproduce
from lmbook.grading.checks import CheckFailed, run_check
from lmbook.grading.verdict import SEVERAL_CAUSES
from lmbook.tasks import ASSIGNMENTS

sys.path.insert(0, str(Path(__file__).parent))
from check_contract import Student  # noqa: E402, F401  (the students modules build their lists with it)
from test_verdict import grader_verdict  # noqa: E402

MIN_WRONG, MIN_RIGHT = 6, 3
CPU = torch.device("cpu")
SEEDS = (5, 1234)  # hidden cases are run with each, visible ones with the first


def _students(assignment: str):
    try:
        return importlib.import_module(f"students_{assignment}")
    except ModuleNotFoundError:  # test_every_exercise_has_its_students says so
        return SimpleNamespace(WRONG={}, RIGHT={}, missing=True)


def _registry(assignment: str):
    return importlib.import_module(f"lmbook.tasks.{assignment}").check


def verdicts(assignment: str, task: str, fn: Callable) -> list[tuple[bool, str]]:
    """The grader's verdicts on the visible cases (at the first seed, as a notebook runs them) and on the hidden
    cases at each seed; Jupyter's must be the same (compared at the first seed: a notebook's cells run each check
    at one seed, and the two paths share every step but the crossing of the sandbox's wall, which no seed
    changes)."""
    check = _registry(assignment).checks[task]
    out = []
    for hidden in (False, True):
        for seed in SEEDS if hidden else SEEDS[:1]:
            grader = grader_verdict(check, fn, hidden=hidden, seed=seed)
            out.append(grader)
            if seed != SEEDS[0]:
                continue
            try:
                run_check(check, fn, hidden=hidden, seed=seed, device=CPU, verbose=False)
                kernel_ok = True
            except CheckFailed as e:
                kernel_ok = False
                assert grader == (False, str(e)), f"Jupyter and the grader disagree:\n{e}\n---\n{grader[1]}"
            assert kernel_ok == grader[0], f"Jupyter passed it, the grader did not:\n{grader[1]}"
    return out


def named_mistakes(check, messages: list[str]) -> set[str]:
    return {m.misconception for m in check.mutants if any(m.misconception in msg for msg in messages)}


def _tasks(assignment: str) -> list[str]:
    return [t for t, c in _registry(assignment).checks.items() if c.probe == "call"]


def test_every_exercise_has_its_students():
    for a in ASSIGNMENTS:
        module = _students(a)
        assert not getattr(module, "missing", False), f"write tests/students_{a}.py"
        for task in _tasks(a):
            assert all(isinstance(s, Student) for s in module.WRONG.get(task, [])), f"{a}.{task}: use Student(...)"
            assert len(module.WRONG.get(task, [])) >= MIN_WRONG, f"{a}.{task}: fewer than {MIN_WRONG} wrong answers"
            assert len(module.RIGHT.get(task, [])) >= MIN_RIGHT, f"{a}.{task}: fewer than {MIN_RIGHT} right answers"


WRONG = [(a, task, i) for a in ASSIGNMENTS for task in _tasks(a) for i in range(len(_students(a).WRONG.get(task, [])))]
RIGHT = [(a, task, i) for a in ASSIGNMENTS for task in _tasks(a) for i in range(len(_students(a).RIGHT.get(task, [])))]


@pytest.mark.parametrize(("assignment", "task", "index"), WRONG)
def test_a_wrong_answer_loses_points_and_is_never_told_a_mistake_it_does_not_have(assignment, task, index):
    student: Student = _students(assignment).WRONG[task][index]
    results = verdicts(assignment, task, student.fn)
    assert not all(ok for ok, _ in results), f"{student.note or student.fn.__name__}: full marks for a wrong answer"
    failed = [m for ok, m in results if not ok]
    told = named_mistakes(_registry(assignment).checks[task], failed)
    # Where the outputs match several known mistakes on every case, the message lists them as alternatives
    # ("your outputs match more than one known mistake: A; or B"): true, if the student's own is among them.
    listed = {m.misconception for m in _registry(assignment).checks[task].mutants
              if any(m.misconception in line.split(SEVERAL_CAUSES, 1)[1]
                     for msg in failed for line in msg.splitlines() if SEVERAL_CAUSES in line)}
    alone = told - listed  # named as the likely cause
    assert alone <= ({student.has} if student.has else set()) and (not listed or student.has in listed), (
        f"{student.note or student.fn.__name__} was told {told}, but its mistake is {student.has!r}")


@pytest.mark.parametrize(("assignment", "task", "index"), RIGHT)
def test_a_right_answer_written_differently_gets_full_marks(assignment, task, index):
    fn = _students(assignment).RIGHT[task][index]
    failed = [m for ok, m in verdicts(assignment, task, fn) if not ok]
    assert not failed, failed[0]


def feedback_quality(assignments: tuple[str, ...] = ASSIGNMENTS) -> dict[str, dict[str, int]]:
    """Per exercise: wrong answers in the suite, caught (lose points), named, named correctly, caught by a visible
    test, and shown a pasteable smallest failing input there."""
    table = {}
    for a in assignments:
        row = {"wrong": 0, "caught": 0, "named": 0, "named_correctly": 0, "visible": 0, "pasteable": 0, "right": 0,
               "right_pass": 0}
        for task in _tasks(a):
            check = _registry(a).checks[task]
            for student in _students(a).WRONG.get(task, []):
                results = verdicts(a, task, student.fn)  # visible at the first seed, then hidden at each seed
                told = named_mistakes(check, [m for ok, m in results if not ok])
                visible = [m for ok, m in results[:1] if not ok]
                row["wrong"] += 1
                row["caught"] += not all(ok for ok, _ in results)
                row["named"] += bool(told)
                row["named_correctly"] += bool(told) and told == {student.has}
                row["visible"] += bool(visible)
                row["pasteable"] += any(reproduce.HEADER in m for m in visible)
            for fn in _students(a).RIGHT.get(task, []):
                row["right"] += 1
                row["right_pass"] += all(ok for ok, _ in verdicts(a, task, fn))
        table[a] = row
    return table


if __name__ == "__main__":  # python tests/test_students.py [ch02 ...]: the feedback-quality table
    print("| exercise | wrong answers | caught | named | named correctly | caught visibly | with a pasteable smallest "
          "input | right answers | full marks |")
    print("|---|---|---|---|---|---|---|---|---|")
    for a, r in feedback_quality(tuple(sys.argv[1:]) or ASSIGNMENTS).items():
        print(f"| {a} | {r['wrong']} | {r['caught']} | {r['named']} | {r['named_correctly']} | {r['visible']} | "
              f"{r['pasteable']} | {r['right']} | {r['right_pass']} |")
