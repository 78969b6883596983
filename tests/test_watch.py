"""The watch over an answer's run: what students do costs nothing, every route to a ready-made op is seen.

In-process (no sandbox): the same watch runs in the student's kernel and in the grader's runner. Each route
is written so that reading the code (lmbook.grading.static) or the function's objects would not see it: only
the run can.
"""

from __future__ import annotations

import _thread
import logging
import operator
import sys
import threading
import time
import types
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import lmbook
from lmbook.grading import runner, values, watch
from lmbook.grading.checks import CheckFailed, run_check
from lmbook.grading.readymade import forbidden_aten, is_torch_name, torch_match, words
from lmbook.tasks.ch01 import CROSS_ENTROPY, LOG_SOFTMAX, SGNS_LOSS, check

CPU = torch.device("cpu")


def own_log_softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    return x - m - (x - m).exp().sum(dim=dim, keepdim=True).log()


def _grade(answer, task=LOG_SOFTMAX) -> str | None:
    """The message a ready-made answer gets, or None when it passes."""
    try:
        run_check(task, answer, device=CPU, verbose=False)
    except CheckFailed as e:
        return str(e)
    return None


# ----------------------------------------------------------------------------- honest habits cost nothing


def _printing_answer(x, dim=-1):
    print("log-softmax of", tuple(x.shape))
    print("progress 50%", file=sys.stderr)
    sys.stderr.write("\r[=====     ]")
    warnings.warn("just checking", stacklevel=1)
    logging.getLogger("student").warning("a note")
    from tqdm.auto import tqdm
    for _ in tqdm(range(2), leave=False):
        pass
    return own_log_softmax(x, dim)


def test_printing_warnings_logging_and_progress_inside_an_answer_cost_nothing(capsys):
    assert _grade(_printing_answer) is None


def test_printing_into_the_graders_own_stream_costs_nothing():
    # in the sandbox, stdout and stderr are the runner's streams: writing to them is not calling the grader
    outputs: list = []
    real = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = runner._Stream("stdout", outputs), runner._Stream("stderr", outputs)
    logging.basicConfig(stream=sys.stderr, force=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            message = _grade(_printing_answer)
    finally:
        sys.stdout, sys.stderr = real
        logging.basicConfig(force=True)
    assert message is None, message
    assert "log-softmax of" in "".join(o["text"] for o in outputs if o["output_type"] == "stream")


class Stable:
    """A student's helper class with a method named like torch's op."""

    def logsumexp(self, z, dim):
        m = z.amax(dim=dim, keepdim=True)
        return m + (z - m).exp().sum(dim=dim, keepdim=True).log()


def logsumexp(z, dim):  # a student's own function named like torch's
    return Stable().logsumexp(z, dim)


def test_a_students_own_helpers_named_like_torchs_op_cost_nothing():
    assert _grade(lambda x, dim=-1: x - logsumexp(x, dim)) is None
    assert _grade(lambda x, dim=-1: x - Stable().logsumexp(x, dim)) is None


def test_torch_thread_settings_cost_nothing():
    def answer(x, dim=-1):
        torch.set_num_threads(torch.get_num_threads())
        return own_log_softmax(x, dim)
    assert _grade(answer) is None


# ----------------------------------------------------------------------------- torch's other names


def test_the_forbidden_ops_come_from_torchs_own_registry():
    ops = forbidden_aten(tuple(LOG_SOFTMAX.forbidden_attrs))
    assert {"aten::_log_softmax", "aten::log_softmax", "aten::logsumexp", "aten::special_logsumexp"} <= ops
    assert not {"aten::_softmax", "aten::exp", "aten::amax", "aten::_log_softmax_backward_data"} & ops
    ce = forbidden_aten(tuple(CROSS_ENTROPY.forbidden_attrs))
    assert {"aten::cross_entropy_loss", "aten::nll_loss_nd", "aten::nll_loss_forward", "aten::nll_loss2d_forward"} <= ce
    assert "aten::_log_softmax" not in ce  # torch's log-softmax inside a cross-entropy answer is allowed
    assert words("CrossEntropyLoss") == ("cross", "entropy", "loss") and is_torch_name("LogSoftmax")
    assert not is_torch_name("FeedforwardLM") and not is_torch_name("pool")  # lmbook's names stand for themselves
    assert torch_match("_scaled_dot_product_flash_attention_for_cpu", ["scaled_dot_product_attention"])
    assert torch_match("_native_multi_head_attention", ["multi_head_attention_forward"])
    assert torch_match("bilinear", ["linear"]) is None


def test_the_forbidden_ops_are_exactly_the_operators_torch_match_names_one_by_one():
    # forbidden_aten splits each operator's name once per process for all the checks: the listing must stay
    # what asking torch_match about every operator, one at a time, gives
    every = torch._C._dispatch_get_all_op_names()
    for attrs in (tuple(LOG_SOFTMAX.forbidden_attrs), tuple(CROSS_ENTROPY.forbidden_attrs)):
        one_by_one = {op.split(".", 1)[0] for op in every if torch_match(op.split("::", 1)[-1].split(".", 1)[0], attrs)}
        listed = forbidden_aten(attrs)
        assert listed == one_by_one, f"{attrs}: listed but not named {sorted(listed - one_by_one)[:5]}, " \
                                     f"named but not listed {sorted(one_by_one - listed)[:5]}"


@pytest.mark.parametrize("answer", [
    lambda x, dim=-1: torch.ops.aten._log_softmax(x, dim, False),
    lambda x, dim=-1: getattr(torch.ops.aten, "_log_" + "softmax")(x, dim, False),
    lambda x, dim=-1: getattr(torch, "_log_" + "softmax")(x, dim, False),
    lambda x, dim=-1: x - getattr(torch.special, "log" + "sumexp")(x, dim, keepdim=True),
    lambda x, dim=-1: list(map(getattr(torch.Tensor, "log_" + "softmax"), [x], [dim]))[0],
], ids=["torch.ops.aten", "torch.ops.aten by a computed name", "torch._log_softmax", "torch.special", "map"])
def test_torchs_private_c_level_and_operator_names_are_seen(answer):
    assert "not graded" in _grade(answer)


def test_torchs_function_hooks_switched_off_do_not_hide_the_op():
    def answer(x, dim=-1):
        with torch._C.DisableTorchFunction():
            return list(map(getattr(torch, "log_" + "softmax"), [x], [dim]))[0]
    assert "ran torch's `log_softmax`" in _grade(answer)  # the dispatcher's operator, in the task's words


def test_code_compiled_by_torch_jit_from_a_string_is_seen():
    unit = torch.jit.CompilationUnit("def f(x, dim: int):\n    return torch.log_" "softmax(x, dim)\n")
    assert "not graded" in _grade(lambda x, dim=-1: unit.f(x, dim))


def test_cross_entropy_through_c_level_names_is_seen():
    def answer(logits, targets, ignore_index=-100):
        op = getattr(torch._C._nn, "cross_entropy" + "_loss")
        return op(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), None, 1, ignore_index, 0.0)
    assert "not graded" in _grade(answer, CROSS_ENTROPY)


class _Lazy(torch.Tensor):
    """Computes its value only when the grader reads it (from what the answer left on the class)."""

    def numpy(self, *a, **k):
        return getattr(torch, "log_" + "softmax")(*type(self).pending).numpy()


def test_a_tensor_that_computes_when_read_is_read_under_the_watch():
    def answer(x, dim=-1):
        _Lazy.pending = (x, dim)
        return torch.zeros_like(x).as_subclass(_Lazy)
    assert "not graded" in _grade(answer)


# ----------------------------------------------------------------------------- other threads


def test_an_op_run_in_a_pool_thread_started_before_the_answer_is_seen():
    watch.install_thread_hooks()
    pool = ThreadPoolExecutor(1)
    pool.submit(int).result()  # its worker thread is running before the answer is called
    try:
        op = getattr(torch, "log_" + "softmax")
        assert "not graded" in _grade(lambda x, dim=-1: pool.submit(op, x, dim).result())
    finally:
        pool.shutdown()


def test_an_op_run_in_a_raw_thread_is_seen():
    def answer(x, dim=-1):
        box, done = [], threading.Event()

        def work():
            box.append(getattr(torch, "log_" + "softmax")(x, dim))
            done.set()
        _thread.start_new_thread(work, ())
        done.wait(10)
        return box[0]
    assert "not graded" in _grade(answer)


def test_an_honest_answer_that_uses_threads_passes():
    def answer(x, dim=-1):
        with ThreadPoolExecutor(2) as pool:
            return pool.submit(own_log_softmax, x, dim).result()
    assert _grade(answer) is None


# ----------------------------------------------------------------------------- the course's and the grader's own


def test_the_graders_own_reference_is_seen():
    assert "not graded" in _grade(lambda x, dim=-1: check.checks["log_softmax"].reference(x, dim))


def test_the_course_module_reached_by_an_attribute_getter_is_seen():
    ready = operator.attrgetter("functional.log_" + "softmax")(lmbook)
    assert "not graded" in _grade(lambda x, dim=-1: ready(x, dim))


def test_a_clone_of_the_courses_function_is_seen():
    original = operator.attrgetter("word2vec.sgns_" + "loss")(lmbook)
    clone = types.FunctionType(original.__code__.replace(co_name="mine"), original.__globals__, "mine")
    assert "a copy of its code" in _grade(lambda v, u, n: clone(v, u, n), SGNS_LOSS)


def test_a_library_looking_up_a_missing_attribute_of_the_graders_packages_runs_none_of_its_code():
    """torch.compile's tracer looks attributes up on loaded modules while the model it compiled runs: on lmbook
    and the grader's packages, a missing one must run no grader code under the answer's call (a module
    ``__getattr__`` in ``lmbook.grading`` did, and a compiled model lost its task as "called the grader's own
    code")."""
    import lmbook.grading
    import lmbook.tasks

    # a notebook's code is __main__'s, as in the sandbox (the watch tells the student's calls by it)
    notebook = {"__name__": "__main__", "packages": (lmbook, lmbook.grading, lmbook.tasks), "own": own_log_softmax}
    exec("def answer(x, dim=-1):\n"
         "    for module in packages:\n"
         "        getattr(module, '_a_name_no_module_has', None)\n"
         "    return own(x, dim)\n", notebook)
    w = watch.CallWatch(LOG_SOFTMAX)
    values.call_once(notebook["answer"], [torch.randn(3, 4)], {}, 0, around=w)
    assert w.found is None, w.found


# ----------------------------------------------------------------------------- switching the watch off


def test_switching_off_the_profile_hook_is_tampering():
    def answer(x, dim=-1):
        sys.setprofile(None)
        return own_log_softmax(x, dim)
    w = watch.CallWatch(LOG_SOFTMAX)
    values.call_once(answer, [torch.randn(3, 4)], {}, 0, around=w)
    assert w.tampered and "sys.setprofile" in w.tampered


def test_popping_the_watchs_torch_modes_is_tampering():
    from torch.utils._python_dispatch import _pop_mode

    def answer(x, dim=-1):
        _pop_mode()
        return own_log_softmax(x, dim)
    w = watch.CallWatch(LOG_SOFTMAX)
    values.call_once(answer, [torch.randn(3, 4)], {}, 0, around=w)
    assert w.tampered and "modes" in w.tampered


def test_replacing_the_thread_hook_is_tampering():
    watch.install_thread_hooks()
    hooked = _thread.start_new_thread

    def answer(x, dim=-1):
        _thread.start_new_thread = threading.Thread  # anything but the grader's hook
        return own_log_softmax(x, dim)
    w = watch.CallWatch(LOG_SOFTMAX)
    try:
        values.call_once(answer, [torch.randn(3, 4)], {}, 0, around=w)
    finally:
        _thread.start_new_thread = hooked
    assert w.tampered and "threads" in w.tampered


def test_a_thread_the_watch_did_not_start_is_tampering_in_the_grader():
    stop = threading.Event()
    watch.install_thread_hooks()
    raw = watch._hooked[(_thread, "start_new_thread")].__closure__[0].cell_contents  # the unwatched original
    raw(lambda: stop.wait(30), ())  # started around the hooks, as code that found the original could
    time.sleep(0.1)
    try:
        w = watch.CallWatch(LOG_SOFTMAX, strict=True)
        values.call_once(own_log_softmax, [torch.randn(3, 4)], {}, 0, around=w)
        assert w.tampered and "did not start" in w.tampered
    finally:
        stop.set()


# ------------------------------------------------------------------------ honest errors and tools are not tampering


def test_an_answer_that_recurses_without_end_fails_with_its_error_and_is_not_tampering():
    def answer(x, dim=-1):
        return answer(x, dim)  # the base case forgotten
    w = watch.CallWatch(LOG_SOFTMAX)  # not strict: a thread the test runner started is not the answer's
    result = values.call_once(answer, [torch.randn(3, 4)], {}, 0, around=w)
    assert result.get("raised", "").startswith("RecursionError"), result
    assert w.tampered is None, w.tampered


def test_an_answer_interrupted_inside_the_watch_is_not_tampering():
    def answer(x, dim=-1):
        # A time limit's signal that lands inside the watch's hook: Python drops the hook, then the
        # interrupt unwinds the answer
        sys.setprofile(None)
        raise KeyboardInterrupt
    w = watch.CallWatch(LOG_SOFTMAX)  # not strict: a thread the test runner started is not the answer's
    with pytest.raises(KeyboardInterrupt):
        values.call_once(answer, [torch.randn(3, 4)], {}, 0, around=w)
    assert w.tampered is None, w.tampered


def test_a_model_compiled_with_torch_compile_costs_nothing():
    from lmbook.tasks.ch01 import check as registry

    before = runner._fingerprint(registry)
    layer = torch.compile(torch.nn.Linear(4, 4))

    def answer(x, dim=-1):
        return own_log_softmax(layer(x) * 0 + x, dim)
    w = watch.CallWatch(LOG_SOFTMAX, strict=True)
    result = values.call_once(answer, [torch.randn(3, 4)], {}, 0, around=w)
    assert "out" in result, result
    assert (w.found, w.tampered) == (None, None)
    assert runner._fingerprint(registry) == before, "torch.compile counted as changing the grader's code"


def test_training_and_evaluating_a_compiled_model_is_not_the_ready_made_model():
    # The training task's forbidden objects include a dataclass (the corpus): its generated __repr__ is
    # dataclasses' own wrapper, shared with every dataclass, which torch.compile calls while it traces.
    from lmbook.tasks.ch01 import TRAIN_LM

    model = torch.compile(torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten(1),
                                              torch.nn.Linear(32, 50)))
    ids = torch.randint(0, 50, (16, 4))
    with watch.CallWatch(TRAIN_LM, strict=True, torch_calls=False) as training:
        model(ids).logsumexp(-1).mean().backward()
    with watch.CallWatch(TRAIN_LM, strict=True) as evaluating:
        model(ids)
    assert (training.found, training.tampered) == (None, None)
    assert (evaluating.found, evaluating.tampered) == (None, None)


def test_the_ready_made_op_inside_a_compiled_function_is_seen():
    compiled = torch.compile(lambda x, dim: torch.log_softmax(x, dim))
    assert "not graded" in _grade(lambda x, dim=-1: compiled(x, dim))


def test_the_watch_switched_off_through_its_module_is_tampering():
    def answer(x, dim=-1):
        watch._current = None  # what an answer that found the watch's module could do
        return torch.log_softmax(x, dim)
    w = watch.CallWatch(LOG_SOFTMAX, strict=True)
    values.call_once(answer, [torch.randn(3, 4)], {}, 0, around=w)
    assert w.found or w.tampered, "the ready-made op ran unseen"


# ---------------------------------------------------------------- nothing the answer names reaches the feedback


def test_a_renamed_course_function_is_not_named_in_the_feedback():
    ready = operator.attrgetter("functional.log_" + "softmax")(lmbook)
    renamed = types.FunctionType(ready.__code__, ready.__globals__, "LEAK_0_25")
    renamed.__qualname__ = "LEAK_0_25"  # a hidden value, written where a message might echo it
    message = _grade(lambda x, dim=-1: renamed(x, dim))
    assert "not graded" in message and "LEAK" not in message, message


def test_a_module_name_the_notebook_sets_is_not_named_in_the_feedback():
    # `global __name__; __name__ = "lmbook.tasks." + secret` in a notebook: its functions then seem the course's
    own = types.FunctionType(own_log_softmax.__code__, {**own_log_softmax.__globals__,
                                                        "__name__": "lmbook.tasks.LEAK_0_25"}, "helper")
    message = _grade(lambda x, dim=-1: own(x, dim))
    assert message is not None and "LEAK" not in message, message


def test_torchs_op_renamed_is_named_by_the_tasks_words():
    f = torch.nn.functional.log_softmax

    def answer(x, dim=-1):
        f.__name__ = "log_softmax_LEAK_0_25"
        return f(x, dim)
    try:
        message = _grade(answer)
    finally:
        f.__name__ = "log_softmax"
    assert "not graded" in message and "LEAK" not in message, message
