"""Inputs that are the same for every student are built once per grading process, and change nothing.

A training task's data and evaluation contexts depend on the task and the call (hidden, seed) alone, so the judge
builds them once per process (:func:`lmbook.grading.judge._shared`) instead of once per student. What each student's
sandbox is sent must not change by it: the same messages as graded alone, never another task's data, never a
message an earlier plan changed in place.
"""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
import torch

from lmbook.grading import judge, values
from lmbook.grading.checks import Check
from lmbook.grading.judge import _plan, checks_module

SOLUTIONS = Path(__file__).resolve().parent.parent / "solutions"


@dataclass(frozen=True)
class _EvalSet:
    contexts: torch.Tensor


class _Registry:
    def __init__(self, *checks: Check):
        self.checks = {c.task: c for c in checks}


def _training_check(data: torch.Tensor, calls: list | None = None) -> Check:
    def train_args():
        if calls is not None:
            calls.append(1)
        return data.clone(), 7

    return Check(task="fit", what="a trained model", reference=lambda: None, compare=lambda out, ref: None,
                 cases=(), hidden_cases=(), probe="train", train_args=train_args,
                 eval_set=lambda hidden, seed: _EvalSet(torch.full((3, 2), 100 * hidden + seed)))


def _notebook(student_code: str) -> nbformat.NotebookNode:
    test = nbformat.v4.new_code_cell('check("fit", fit)\ncheck("fit", fit, hidden=True, seed=5)',
                                     metadata={"nbgrader": {"grade": True, "grade_id": "t", "points": 1}})
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(student_code), test])


def _sent(plan) -> list[dict]:
    """What the sandbox is sent at each step, decoded: the probes, and every array as a plain list."""
    out = []
    for step in plan.run:
        wire = step.message.get("arrays", {})
        out.append({"probes": copy.deepcopy(step.message.get("probes")),
                    "arrays": {k: values.wire_loader(wire)(k).tolist() for k in sorted(wire)}})
    return out


@pytest.fixture(autouse=True)
def _fresh_process_cache():
    judge._SHARED.clear()
    yield
    judge._SHARED.clear()


def test_a_training_tasks_data_is_built_once_per_grading_process_not_once_per_student():
    calls: list = []
    registry = _Registry(_training_check(torch.arange(10), calls))
    for student in ("def fit(data, V): return None", "def fit(data, V): raise ValueError", "x = 1"):
        _plan(_notebook(student), registry, 10.0, {})
    assert len(calls) == 1, f"the training data was built {len(calls)} times for three students (once expected)"


def test_a_student_graded_after_others_is_sent_exactly_what_they_would_be_sent_alone():
    registry = _Registry(_training_check(torch.arange(10)))
    _plan(_notebook("def fit(data, V): return None"), registry, 10.0, {})  # another student first
    after = _sent(_plan(_notebook("def fit(d, V): pass"), registry, 10.0, {}))
    judge._SHARED.clear()
    alone = _sent(_plan(_notebook("def fit(d, V): pass"), registry, 10.0, {}))
    assert after == alone, "a student's sandbox got other messages because another student was graded first"
    probes = after[1]["probes"]
    arrays = after[1]["arrays"]
    assert arrays["train_0.npy"] == list(range(10)) and probes[0]["train_args"][1] == {"number": 7, "type": "int"}
    assert arrays[probes[0]["contexts"]["tensor"]] == [[0, 0]] * 3, "the visible call's contexts (seed 0)"
    assert arrays[probes[1]["contexts"]["tensor"]] == [[105, 105]] * 3, "the hidden call's contexts (seed 5)"


def test_another_assignments_task_of_the_same_name_gets_its_own_data_not_the_first_ones():
    first = _sent(_plan(_notebook("x = 1"), _Registry(_training_check(torch.arange(10))), 10.0, {}))
    second = _sent(_plan(_notebook("x = 1"), _Registry(_training_check(torch.arange(20, 24))), 10.0, {}))
    assert first[1]["arrays"]["train_0.npy"] == list(range(10))
    assert second[1]["arrays"]["train_0.npy"] == [20, 21, 22, 23], "the second task was sent the first one's data"


def test_a_message_changed_after_it_was_planned_does_not_change_the_next_students():
    registry = _Registry(_training_check(torch.arange(10)))
    first = _plan(_notebook("x = 1"), registry, 10.0, {})
    pristine = _sent(first)
    message = first.run[1].message
    message["probes"][0]["train_args"][0]["tensor"] = "elsewhere.npy"
    message["probes"][1]["contexts"]["dtype"] = "float16"
    message["arrays"].clear()
    assert _sent(_plan(_notebook("x = 1"), registry, 10.0, {})) == pristine


def test_exercise_1s_training_cells_are_sent_the_training_text_and_the_same_messages_warm_or_cold():
    from lmbook.corpus import load_corpus

    # the instructor's notebook, hidden tests included, as the judge grades every student's
    nb = nbformat.read(SOLUTIONS / "ch01" / "ch01_feedforward_lm.ipynb", as_version=4)
    registry = importlib.import_module(checks_module(nb)).check
    assert any(c.probe == "train" for c in registry.checks.values()), "exercise 1 no longer has a training task"
    cold = _plan(nb, registry, 10.0, {})
    warm = _plan(nb, registry, 10.0, {})
    assert [s.message for s in warm.run] == [s.message for s in cold.run]
    train = [(s.message, p) for s in cold.run for p in s.message.get("probes", []) if p["mode"] == "train"]
    assert train, "no training probe planned"
    for message, probe in train:
        sent = values.decode(probe["train_args"][0], values.wire_loader(message["arrays"]))
        assert torch.equal(sent, load_corpus().train), "the training cell was not sent the training text"
