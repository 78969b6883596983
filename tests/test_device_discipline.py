"""Device discipline, proven without a GPU: what runs on a student's GPU or Mac keeps every tensor, mask and
generator on its inputs' device.

Each test runs code on :class:`lmbook.devicecheck.PretendAccelerator`: on the CPU, with real values, but raising
where CUDA or MPS would raise on mixed devices. A GPU run found every failure these tests now catch first.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from torch.utils._pytree import tree_flatten

from lmbook.devicecheck import PRETEND, PretendAccelerator, side
from lmbook.grading.checks import case_inputs
from lmbook.tasks import ASSIGNMENTS

CHECKS = [(a, c) for a in ASSIGNMENTS for c in importlib.import_module(f"lmbook.tasks.{a}").CHECKS]


def _off_device(tree) -> list[str]:
    return [f"{type(t).__name__} of shape {tuple(t.shape)}" for t in tree_flatten(tree)[0]
            if isinstance(t, torch.Tensor) and side(t) != "gpu"]


def _clone(tree):
    return torch.utils._pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, tree)


@pytest.mark.parametrize(("assignment", "check"), CHECKS, ids=[f"{a}-{c.task}" for a, c in CHECKS])
def test_every_case_puts_its_inputs_on_the_device_it_is_given(assignment, check):
    """The grader moves the inputs itself, but the named mistakes run on the case's own tensors: a case that
    leaves one on the CPU makes every mistake 'raise' on a GPU, and the student's mistake goes unnamed."""
    cases = [*check.cases, *check.hidden_cases, *(s for c in check.cases for s in c.smaller)]
    with PretendAccelerator():
        for i, case in enumerate(cases):
            args, kwargs = case_inputs(case, 0, i, PRETEND)
            off = _off_device((args, kwargs))
            assert not off, f"{check.task}, case {case.name!r}: left on the CPU: {', '.join(off)}"


WITH_MUTANTS = [(a, c) for a, c in CHECKS if c.run is None and c.mutants]


@pytest.mark.parametrize(("assignment", "check"), WITH_MUTANTS, ids=[f"{a}-{c.task}" for a, c in WITH_MUTANTS])
def test_every_named_mistake_runs_on_the_device_of_its_inputs(assignment, check):
    """A named mistake is replayed on the student's inputs, on the student's device: one that mixed devices
    would raise on a GPU, and the student's mistake would go unnamed there."""
    case = check.cases[0]
    with PretendAccelerator():
        args, kwargs = case_inputs(case, 0, 0, PRETEND)
        for mutant in check.mutants:
            torch.manual_seed(0)
            try:
                with torch.no_grad():
                    mutant.fn(*_clone(args), **_clone(kwargs))
            except RuntimeError as e:
                assert "device" not in str(e), (f"{check.task}, case {case.name!r}: the mistake "
                                                f"{mutant.misconception!r} mixes devices: {e}")
            except Exception:  # noqa: BLE001 - a mistake may raise on its own account (a shape error, say)
                pass
