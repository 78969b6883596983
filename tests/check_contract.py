"""The contract every exercise's checks meet, written once: a test module calls :func:`contract_tests`.

    test_a, test_b, test_c, test_d = contract_tests(CHECKS, check, RIGHT)

- every task has a right answer written differently from the reference, and it passes the visible and
  the hidden tests;
- every known wrong answer (a :class:`Mutant`), written as a student's own function, fails and the
  feedback names its misconception;
- every task knows at least three wrong answers.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lmbook.grading.checks import CheckFailed, Mutant

MIN_MUTANTS = 3


def _plain_answer(task: str, mutant: Mutant) -> Callable:
    def answer(*args, **kwargs):  # the mistake as the student's own function (not the grader's code)
        return mutant.fn(*args, **kwargs)
    return answer


def contract_tests(checks, check, right: dict[str, Callable], *,
                   as_student_answer: Callable[[str, Mutant], Callable] = _plain_answer):
    by_task = {c.task: c for c in checks}
    mutants = [(c.task, i) for c in checks for i in range(len(c.mutants))]

    def test_every_task_has_a_right_answer_here():
        assert set(right) == set(by_task)

    @pytest.mark.parametrize("task", list(right))
    @pytest.mark.parametrize("hidden", [False, True])
    def test_a_correct_but_different_answer_passes(task, hidden, capsys):
        check(task, right[task], hidden=hidden, seed=11)
        assert "✓" in capsys.readouterr().out

    @pytest.mark.parametrize(("task", "index"), mutants)
    def test_every_known_wrong_answer_fails_and_is_named(task, index):
        mutant: Mutant = by_task[task].mutants[index]
        with pytest.raises(CheckFailed) as err:
            for hidden in (False, True):
                check(task, as_student_answer(task, mutant), hidden=hidden, seed=5)
        assert mutant.misconception in str(err.value), (
            f"expected the diagnosis {mutant.misconception!r}, got:\n{err.value}")

    def test_each_task_knows_at_least_three_wrong_answers():
        for c in checks:
            assert len(c.mutants) >= MIN_MUTANTS, f"{c.task} has only {len(c.mutants)} mutants"

    return (test_every_task_has_a_right_answer_here, test_a_correct_but_different_answer_passes,
            test_every_known_wrong_answer_fails_and_is_named, test_each_task_knows_at_least_three_wrong_answers)
