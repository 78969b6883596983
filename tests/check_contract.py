"""The right-answer half of the contract an exercise's checks meet, for an exercise's own test module:

    test_a, test_b = contract_tests(CHECKS, RIGHT)

- every task has a right answer written differently from the reference (in the test module), and it
  passes the visible and the hidden tests, in Jupyter and in the grader.

The other half (every named mistake fails and is named, at least three per task, the notebook and the task
module agree) is checked for every released exercise at once by test_tasks.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from test_verdict import grader_verdict, kernel_verdict

from lmbook.devicecheck import PRETEND, PretendAccelerator
from lmbook.grading.checks import CheckFailed, case_inputs, run_check
from lmbook.grading.compare import tensors_in
from lmbook.grading.verdict import case_problem


@dataclass(frozen=True)
class Student:
    """A wrong implementation written as a student would, and the named mistake it has (word for word a
    Mutant's misconception of its task), or None when the checks have no name for it (see test_students.py)."""

    fn: Callable
    has: str | None = None
    note: str = ""


def library_agrees(check, ours: Callable, seed: int = 0) -> int:
    """The chapter's lmbook code and the exercise's reference are two implementations: assert they agree on
    every visible and hidden case that ``ours`` answers (it returns None where the book's code does not
    apply), and return how many that was."""
    compared = 0
    for i, case in enumerate([*check.cases, *check.hidden_cases]):
        args, kwargs = case_inputs(case, seed, i, torch.device("cpu"))
        # a case whose input tracks gradients (a learned table) asks that they reach it
        with torch.enable_grad() if any(t.requires_grad for t in tensors_in((args, kwargs))) else torch.no_grad():
            out = ours(*args, **kwargs)
        if out is not None:
            assert case_problem(check, case, out, args, kwargs) is None, case.name
            compared += 1
    return compared


def contract_tests(checks, right: dict[str, Callable]):
    by_task = {c.task: c for c in checks}

    def test_every_task_has_a_right_answer_here():
        assert set(right) == set(by_task)

    @pytest.mark.parametrize("task", list(right))
    @pytest.mark.parametrize("hidden", [False, True])
    def test_a_correct_but_different_answer_passes_in_jupyter_and_in_the_grader(task, hidden, capsys):
        kernel = kernel_verdict(by_task[task], right[task], hidden=hidden, seed=11, capsys=capsys)
        grader = grader_verdict(by_task[task], right[task], hidden=hidden, seed=11)
        assert kernel[0] and grader[0], f"Jupyter: {kernel[1]}\ngrader: {grader[1]}"

    @pytest.mark.parametrize("task", list(right))
    def test_a_correct_answer_passes_on_a_gpu_too(task, capsys):
        """On the pretend accelerator (lmbook.devicecheck): the CPU's numbers, and an error wherever a GPU
        would meet tensors, masks or generators on two devices."""
        with PretendAccelerator():
            try:
                run_check(by_task[task], right[task], hidden=False, seed=11, device=PRETEND)
            except CheckFailed as e:
                pytest.fail(f"passes on the CPU, fails on a GPU: {e}")

    return (test_every_task_has_a_right_answer_here,
            test_a_correct_but_different_answer_passes_in_jupyter_and_in_the_grader,
            test_a_correct_answer_passes_on_a_gpu_too)
