"""The fence: while an answer runs, its task's ready-made answers refuse to compute, whatever the answer does to
the watch; once it returns, they compute again (lmbook.grading.fence).

The answers here switch the watch off from inside, as one that found its module by a route the reading of the
code misses would: before the fence they got full marks.
"""

from __future__ import annotations

import threading

import pytest
import torch

import lmbook.functional
from lmbook.grading import values
from lmbook.grading.checks import CheckFailed, run_check
from lmbook.grading.fence import Fence, Guarded, ReadyMadeRefused
from lmbook.tasks.ch01 import LOG_SOFTMAX, TRAIN_LM
from lmbook.tasks.ch05 import CHECKS as CH05

CPU = torch.device("cpu")
QKV = next(c for c in CH05 if c.task == "qkv_projections")


def own_log_softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    return x - m - (x - m).exp().sum(dim=dim, keepdim=True).log()


def unwatched(compute):
    """An answer that switches the watch off around ``compute`` and on again before it returns, reaching the
    watch's module by a computed name (it holds no reference to it, which the check of the function would see)."""
    def answer(x, dim=-1):
        module = __import__("lmbook.grading." + "watch", fromlist=["_"])
        kept, module._current = module._current, None
        try:
            return compute(x, dim)
        finally:
            module._current = kept
    return answer


def _message(answer) -> str | None:
    try:
        run_check(LOG_SOFTMAX, answer, device=CPU, verbose=False)
    except CheckFailed as e:
        return str(e)
    return None


def test_torchs_op_called_with_the_watch_switched_off_gets_no_credit():
    message = _message(unwatched(lambda x, dim: getattr(torch, "log_" + "softmax")(x, dim)))
    assert message is not None, "the ready-made op earned full marks with the watch switched off"
    assert "ran torch's `log_softmax`" in message, message


def test_the_courses_own_answer_called_with_the_watch_switched_off_does_not_compute():
    kept = lmbook.functional.log_softmax  # an alias taken in an earlier cell
    message = _message(unwatched(lambda x, dim: kept(x, dim)))
    assert message is not None, "the course's log_softmax earned full marks with the watch switched off"
    assert "switched off while the answer runs" in message, message
    assert "in refused" not in message, f"the fence's own frame is shown as the student's line: {message}"


def test_a_refusal_the_answer_catches_still_earns_nothing():
    def compute(x, dim):
        try:
            return torch.ops.aten._log_softmax(x, dim, False)
        except Exception:  # noqa: BLE001 - what a student who expects the fence would write
            return own_log_softmax(x, dim)
    message = _message(unwatched(compute))
    assert message is not None and "ran torch's `log_softmax`" in message, message


@pytest.mark.parametrize("route", [
    lambda x: torch.log_softmax(x, -1),
    lambda x: torch.nn.functional.log_softmax(x, -1),
    lambda x: x.log_softmax(-1),
    lambda x: torch.ops.aten._log_softmax.default(x, -1, False),
    lambda x: torch.ops.aten.log_softmax.int(x, -1),
    lambda x: torch.logsumexp(x, -1),
    lambda x: torch.log_softmax(x.requires_grad_(), -1),
], ids=["torch", "functional", "method", "aten_private", "aten_overload", "logsumexp", "with_autograd"])
def test_every_route_to_the_op_is_refused_while_the_fence_is_up(route):
    x = torch.randn(3, 5)
    with Fence(LOG_SOFTMAX), pytest.raises(ReadyMadeRefused):
        route(x.clone())


def test_the_op_is_refused_in_a_thread_too():
    raised = []

    def work():
        try:
            torch.log_softmax(torch.randn(2, 3), -1)
        except ReadyMadeRefused:
            raised.append(True)
    with Fence(LOG_SOFTMAX):
        t = threading.Thread(target=work)
        t.start()
        t.join()
    assert raised == [True], "a thread computed the ready-made op while the fence was up"


def test_everything_computes_again_once_the_answer_returns_even_after_it_raised():
    x = torch.randn(4, 6)
    expected = torch.log_softmax(x, -1)

    def answer(x, dim=-1):
        lmbook.functional.log_softmax(x, dim)  # refused: the answer raises
    result = values.call_once(answer, [x], {}, 0, around=Guarded(LOG_SOFTMAX))
    assert "raised" in result
    torch.testing.assert_close(torch.log_softmax(x, -1), expected, rtol=0, atol=0)
    torch.testing.assert_close(torch.ops.aten._log_softmax(x, -1, False), expected, rtol=0, atol=0)
    torch.testing.assert_close(lmbook.functional.log_softmax(x, -1), expected)


def test_a_forbidden_class_whose_methods_call_super_is_refused_and_works_after():
    with Fence(QKV), pytest.raises(RuntimeError, match="switched off while the answer runs"):
        torch.nn.Linear(4, 3)
    layer = torch.nn.Linear(4, 3)
    assert layer(torch.randn(2, 4)).shape == (2, 3)


def test_the_functions_a_training_task_forbids_are_refused_without_torchs_ops():
    from lmbook.train import fit
    with Fence(TRAIN_LM, torch_ops=False), pytest.raises(RuntimeError, match="switched off"):
        fit(None, None)
    with Fence(TRAIN_LM, torch_ops=False):  # training tasks forbid none of torch's ops: they compute
        torch.log_softmax(torch.randn(2, 3), -1)


def test_code_put_back_while_the_fence_is_up_is_tampering():
    original = lmbook.functional.log_softmax.__code__

    def answer(x, dim=-1):
        lmbook.functional.log_softmax.__code__ = original  # what only reading the grader's objects allows
        return lmbook.functional.log_softmax(x, dim)
    guarded = Guarded(LOG_SOFTMAX)
    values.call_once(answer, [torch.randn(3, 4)], {}, 0, around=guarded)
    assert guarded.tampered and "fence" in guarded.tampered, guarded.tampered
    assert lmbook.functional.log_softmax.__code__ is original


def test_an_honest_answer_passes_under_the_fence():
    assert _message(own_log_softmax) is None


def test_the_fence_switched_off_in_an_earlier_cell_is_seen_as_tampering(monkeypatch):
    from lmbook.grading import runner

    expected = runner._fingerprint(None)  # taken before the notebook's first cell
    monkeypatch.setattr(Fence, "__enter__", lambda self: self)  # what a cell reaching the module could do
    assert runner._tampering_seen(expected, None) == \
        "the notebook changed the grader's own code or the task definitions in the sandbox"


def test_a_fence_inside_another_refuses_and_both_come_down():
    x = torch.randn(2, 5)
    expected = torch.log_softmax(x, -1)
    with Fence(LOG_SOFTMAX):
        with Fence(LOG_SOFTMAX), pytest.raises(ReadyMadeRefused):
            torch.log_softmax(x, -1)
        with pytest.raises(ReadyMadeRefused):
            torch.log_softmax(x, -1)
    torch.testing.assert_close(torch.log_softmax(x, -1), expected, rtol=0, atol=0)
