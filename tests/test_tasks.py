"""Every released exercise, whatever its number: the list, its task module and its notebook agree, and every
known wrong answer its checks name fails and is named. A new exercise is picked up from lmbook.tasks.ASSIGNMENTS."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
import torch
from test_verdict import grader_verdict, kernel_verdict

from lmbook.grading import fence, watch
from lmbook.grading.checks import Mutant
from lmbook.grading.judge import checks_module, is_test_cell, parse_test_cell
from lmbook.tasks import ASSIGNMENTS

ROOT = Path(__file__).resolve().parent.parent
MIN_MUTANTS = 3


def _registry(assignment: str):
    return importlib.import_module(f"lmbook.tasks.{assignment}").check


def _notebook(folder: str, assignment: str) -> nbformat.NotebookNode:
    (path,) = (ROOT / folder / assignment).glob("*.ipynb")
    return nbformat.read(path, as_version=4)


def test_the_list_names_exactly_the_exercises_with_a_task_module_and_a_solution_notebook():
    modules = {p.parent.name for p in (ROOT / "src" / "lmbook" / "tasks").glob("ch*/__init__.py")}
    solutions = {p.name for p in (ROOT / "solutions").iterdir() if p.is_dir()}
    assert list(ASSIGNMENTS) == sorted(ASSIGNMENTS), "keep lmbook.tasks.ASSIGNMENTS in course order"
    assert set(ASSIGNMENTS) == modules, f"task modules {sorted(modules)} vs ASSIGNMENTS {ASSIGNMENTS}"
    assert set(ASSIGNMENTS) == solutions, f"solutions/ folders {sorted(solutions)} vs ASSIGNMENTS {ASSIGNMENTS}"
    for a in ASSIGNMENTS:
        assert len(list((ROOT / "solutions" / a).glob("*.ipynb"))) == 1, f"solutions/{a} needs exactly one notebook"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_notebook_names_its_own_task_module(assignment):
    for folder in ("solutions", "exercises"):
        assert checks_module(_notebook(folder, assignment)) == f"lmbook.tasks.{assignment}", folder


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_task_is_checked_in_the_notebook_visibly_and_hidden(assignment):
    calls = [c for cell in _notebook("solutions", assignment).cells if is_test_cell(cell)
             for c in parse_test_cell(cell.source)]
    tasks = set(_registry(assignment).checks)
    unknown = {c.task for c in calls} - tasks
    assert not unknown, f"the notebook checks tasks its module does not define: {sorted(unknown)}"
    for hidden in (False, True):
        missing = tasks - {c.task for c in calls if c.hidden == hidden}
        assert not missing, f"tasks with no {'hidden' if hidden else 'visible'} test: {sorted(missing)}"


# A training task is judged by the trained model's behaviour, not against named mistakes.
TASKS = [(a, task) for a in ASSIGNMENTS for task, c in _registry(a).checks.items() if c.probe != "train"]


@pytest.mark.parametrize(("assignment", "task"), TASKS)
def test_each_task_knows_at_least_three_wrong_answers(assignment, task):
    check = _registry(assignment).checks[task]
    assert len(check.mutants) >= MIN_MUTANTS, f"{task} has only {len(check.mutants)} named mistakes"


# The mistakes, reached by key: a student's function that held the grader's Mutant object itself (in a
# closure) would be refused as using the grader's code.
_MISTAKES: dict[str, Callable] = {}


def _draw_from_mutant(key: str) -> Callable:
    # A sampling task's mutant gives the wrong distribution; the student would draw from it.
    def answer(logits, n, **kw):
        return torch.multinomial(_MISTAKES[key](logits, n, **kw)[0].float(), n, replacement=True)
    return answer


def _call_mutant(key: str) -> Callable:
    def answer(*args, **kwargs):  # the mistake as the student's own function
        return _MISTAKES[key](*args, **kwargs)
    return answer


# How a mistake looks as a student's function, where it is not simply the mutant's output.
AS_STUDENT = {("ch02", "sample"): _draw_from_mutant}

MUTANTS = [(a, task, i) for a, task in TASKS for i in range(len(_registry(a).checks[task].mutants))]


@pytest.mark.parametrize(("assignment", "task", "index"), MUTANTS)
def test_every_known_wrong_answer_fails_is_named_and_gets_the_same_verdict_in_the_grader(
        assignment, task, index, capsys, monkeypatch):
    # The mistake plays the student's own code. It lives in lmbook.tasks and may use torch's op for the task, both
    # of which the run-time watch and the fence refuse (tests/test_watch.py, tests/test_fence.py): here the watch
    # looks away and the fence stays down, in Jupyter and in the grader alike, so that what is tested is the
    # verdict on the mistake's output.
    for hook in ("_profile", "_torch_call", "_aten_call"):
        monkeypatch.setattr(watch.CallWatch, hook, lambda self, *args: None)
    monkeypatch.setattr(fence.Fence, "__enter__", lambda self: self)
    check = _registry(assignment).checks[task]
    mutant: Mutant = check.mutants[index]
    key = f"{assignment}.{task}.{index}"
    _MISTAKES[key] = mutant.fn
    answer = AS_STUDENT.get((assignment, task), _call_mutant)(key)
    verdicts = [(kernel_verdict(check, answer, hidden=hidden, seed=5, capsys=capsys),
                 grader_verdict(check, answer, hidden=hidden, seed=5)) for hidden in (False, True)]
    for kernel, grader in verdicts:
        assert kernel == grader, f"Jupyter and the grader disagree:\n{kernel[1]}\n---\n{grader[1]}"
    messages = [kernel[1] for kernel, _ in verdicts if not kernel[0]]
    assert messages, "the mistake passed the visible and the hidden tests"
    # A mistake that raises on every case is reported as the exception with the student's line, never named on
    # an exception alone (a different mistake can raise the same one)
    raised_everywhere = all("your code raised" in line for m in messages for line in m.splitlines()[1:]
                            if line.lstrip().startswith("- ["))
    assert raised_everywhere or any(mutant.misconception in m for m in messages), (
        f"expected the diagnosis {mutant.misconception!r}, got:\n" + "\n".join(messages))
