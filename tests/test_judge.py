"""The judge's reading of test cells and of what the sandbox hands back."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lmbook.grading.judge import Call, NotebookConfigError, Verdict, _read, parse_test_cell


def test_a_test_cell_is_a_list_of_check_calls():
    src = ('# Hidden tests\n### BEGIN HIDDEN TESTS\ncheck("cross_entropy", cross_entropy, hidden=True, seed=3301)\n'
           'check("perplexity", perplexity, hidden=True, seed=3302)\n### END HIDDEN TESTS')
    assert parse_test_cell(src) == [Call("cross_entropy", "cross_entropy", True, 3301),
                                    Call("perplexity", "perplexity", True, 3302)]
    assert parse_test_cell('check("log_softmax", log_softmax)') == [Call("log_softmax", "log_softmax", False, 0)]


@pytest.mark.parametrize("src", ["assert log_softmax(x) == 1", "check(task, fn)", "x = check('a', b)"])
def test_anything_else_in_a_test_cell_is_a_course_bug(src):
    with pytest.raises(NotebookConfigError, match="may only call check"):
        parse_test_cell(src)


def test_a_test_cell_without_checks_is_refused_not_passed():
    # e.g. a released notebook's hidden-test cell, whose tests were never put back
    with pytest.raises(NotebookConfigError, match="no check"):
        parse_test_cell("# Hidden tests for Task 1 (2 points).\n")


def _wire(**arrays) -> dict[str, str]:
    """Arrays as the runner sends them (``.npy`` bytes in base64), pickled ones included, as a forger could."""
    import base64
    import io
    out = {}
    for name, arr in arrays.items():
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=True)
        out[name] = base64.b64encode(buf.getvalue()).decode()
    return out


def test_outputs_are_read_as_plain_arrays_never_unpickled():
    wire = _wire(**{"ok.npy": np.arange(3.0, dtype=np.float32), "obj.npy": np.array([{"evil": 1}], dtype=object)})
    wire["junk.npy"] = "not base64 at all!"
    out = _read({"tensor": "ok.npy"}, wire)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.tolist() == [0.0, 1.0, 2.0]
    assert not isinstance(_read({"tensor": "obj.npy"}, wire), torch.Tensor | dict)
    assert not isinstance(_read({"tensor": "junk.npy"}, wire), torch.Tensor)
    assert not isinstance(_read({"tensor": "missing.npy"}, wire), torch.Tensor)
    assert type(_read({"object": "MyTensorLike"}, wire)).__name__ == "MyTensorLike"
    assert _read({"number": 2.5}, wire) == 2.5
    assert _read({"seq": [{"number": 1}, {"tensor": "ok.npy"}]}, wire)[0] == 1
    assert not isinstance(_read({"tensor": "ok.npy"}, "not a dict"), torch.Tensor)


def test_a_failed_verdict_is_an_error_output_that_nbgrader_scores_0():
    lines = ["✓ perplexity: all 2 visible checks passed", "cross_entropy: 1 of 3 failed\n  - x"]
    outs = Verdict(False, lines).outputs()
    assert [o["output_type"] for o in outs] == ["stream", "error"]
    assert outs[1]["traceback"][0].startswith("\x1b[31m✗ cross_entropy")
    json.dumps(outs)  # plain JSON, as nbformat stores it
    assert Verdict(True, ["✓ ok"]).outputs() == [{"output_type": "stream", "name": "stdout", "text": "✓ ok\n"}]


# ----------------------------------------------------------------------------- the channel to the sandbox
# These run the grader with its static analysis switched off, as if an attack had got past it: what the
# student's code can then do must still be worth nothing.

READS_THE_JOB = """
import os, sys, json
job = sys.argv[1]
print("FILES", sorted(os.listdir(job)))
print("KINDS", sorted({step["kind"] for step in json.load(open(job + "/job.json"))["steps"]}))
print("KEYS", sorted({k for step in json.load(open(job + "/job.json"))["steps"] for k in step}))
"""

FORGES_REPLIES = """
import os, json, threading
def forge():
    for fd in range(3, 64):
        for step in range(80):
            reply = {"event": "end", "step": step, "nonce": "0" * 32, "outputs": [], "arrays": {},
                     "probes": {f"c{step}_0": {"cases": {}}}}
            try:  # every descriptor the process has: the reply pipe is one of them
                os.write(fd, (json.dumps(reply) + "\\n").encode())
            except OSError:
                pass
forge()
threading.Thread(target=lambda: [forge() for _ in range(20)], daemon=True).start()
"""

KEEPS_HIDDEN_INPUTS = """
import torch
seen = []
def log_softmax(x, dim=-1):
    seen.append(x.detach().clone())
    m = x.amax(dim, keepdim=True)
    return x - m - torch.log(torch.exp(x - m).sum(dim, keepdim=True))
"""


def _graded_with(monkeypatch, code: str, after: str, answers: dict | None = None):
    import sys
    from pathlib import Path

    import nbformat

    from lmbook.grading import judge, static

    sys.path.insert(0, str(Path(__file__).parent))
    from hostile_corpus import WRONG, _with_cell

    monkeypatch.setattr(static, "find_tampering", lambda cells: [])
    # the instructor's notebook (hidden tests included, as nbgrader restores them), with fast wrong answers
    nb = nbformat.read(Path(__file__).parent.parent / "solutions" / "ch01" / "ch01_feedforward_lm.ipynb", 4)
    for task, source in {"train_lm": WRONG["train_lm"], **(answers or {})}.items():
        next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == task).source = source
    nb = _with_cell(nb, code, after=after)
    graded = judge.grade_notebook(nb, timeout=60)
    cell = next(i for i, c in enumerate(nb.cells) if c.source == code)
    text = "".join(o.get("text", "") + o.get("evalue", "") for o in graded.outputs.get(cell, []))
    verdicts = {nb.cells[i].metadata["nbgrader"]["grade_id"]: v for i, v in graded.verdicts.items()}
    return graded, text, verdicts


@pytest.mark.slow
def test_the_job_folder_holds_the_students_cells_and_no_test_inputs(monkeypatch):
    _, text, verdicts = _graded_with(monkeypatch, READS_THE_JOB, after="setup")
    assert "FILES ['job.json']" in text, text
    # which cells are hidden, and which run a training task: both as plain in the notebook itself
    assert "KEYS ['fork', 'kind', 'source', 'trains']" in text, f"job.json holds more than the cells: {text}"
    assert verdicts["hidden_log_softmax"].passed  # the solution's answer, graded as usual


@pytest.mark.slow
def test_replies_forged_on_the_channel_are_ignored_and_flag_the_notebook(monkeypatch):
    from hostile_corpus import WRONG
    graded, _, verdicts = _graded_with(monkeypatch, FORGES_REPLIES, after="setup",
                                       answers={"ffnn_forward": WRONG["ffnn_forward"]})
    assert not verdicts["test_ffnn_forward"].passed and not verdicts["hidden_ffnn_forward"].passed
    assert any("grader's channel" in t for t in graded.tampering), graded.tampering
    # forging the grader's replies is tampering: under the one flagging rule no task earns credit (README)
    assert not any(v.passed for v in verdicts.values()), {k: v.passed for k, v in verdicts.items()}


@pytest.mark.slow
def test_a_hidden_tests_inputs_are_gone_before_the_next_cell(monkeypatch):
    from lmbook.tasks.ch01 import check
    graded, text, verdicts = _graded_with(monkeypatch, "print('CALLS', len(seen))", after="hidden_log_softmax",
                                          answers={"log_softmax": KEEPS_HIDDEN_INPUTS})
    assert verdicts["test_log_softmax"].passed and verdicts["hidden_log_softmax"].passed
    visible = len(check.checks["log_softmax"].cases)
    assert f"CALLS {visible}" in text, f"expected only the {visible} visible calls to be remembered: {text}"


# An answer that switches the grader's watch off around torch's op and on again, reaching the watch's module by
# a computed name (the reading of the code, which flags that, is switched off here): the fence refuses the op.
SWITCHES_THE_WATCH_OFF = """
def log_softmax(x, dim=-1):
    module = __import__("lmbook.grading." + "watch", fromlist=["_"])
    kept, module._current = module._current, None
    try:
        return getattr(torch, "log_" + "softmax")(x, dim)
    finally:
        module._current = kept
"""


@pytest.mark.slow
def test_a_ready_made_op_under_a_watch_switched_off_earns_nothing_visible_or_hidden(monkeypatch):
    _, _, verdicts = _graded_with(monkeypatch, "notes = 'mine'", after="setup",
                                  answers={"log_softmax": SWITCHES_THE_WATCH_OFF})
    assert not verdicts["test_log_softmax"].passed, "the visible test passed with the watch switched off"
    assert not verdicts["hidden_log_softmax"].passed, "the hidden test passed with the watch switched off"
    assert verdicts["test_cross_entropy"].passed, "another task lost its points"


# ----------------------------------------------------------------------------- the results cache


def _label(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id") or cell.source[:60]


@pytest.mark.parametrize("first", ["plain", "with_a_markdown_cell"])
def test_a_cached_result_lands_on_the_same_cells_in_a_notebook_that_differs_by_a_markdown_cell(tmp_path, first):
    import copy
    import sys
    from pathlib import Path

    import nbformat

    from lmbook.grading.judge import Graded, is_test_cell
    from lmbook.grading.nbgrader_plugin import load_cached, notebook_key, store
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "autograder"))
    from make_samples import fill, solution_answers

    plain = fill(solution_answers())
    noted = copy.deepcopy(plain)
    noted.cells.insert(1, nbformat.v4.new_markdown_cell("My notes on the exercise."))
    graded_nb, cached_nb = (plain, noted) if first == "plain" else (noted, plain)
    key = notebook_key(graded_nb)
    assert notebook_key(cached_nb) == key  # same code cells: one shares the other's cached result
    code = [i for i, c in enumerate(graded_nb.cells) if c.cell_type == "code"]
    # each cell's result names the cell it belongs to; every other test fails
    graded = Graded(outputs={i: [{"output_type": "stream", "name": "stdout", "text": _label(graded_nb.cells[i])}]
                             for i in code},
                    verdicts={i: Verdict(n % 2 == 0, [_label(graded_nb.cells[i])])
                              for n, i in enumerate(i for i in code if is_test_cell(graded_nb.cells[i]))})
    passed = {_label(graded_nb.cells[i]): v.passed for i, v in graded.verdicts.items()}
    store(tmp_path, key, graded, graded_nb)
    cached = load_cached(tmp_path, key, cached_nb)
    assert cached is not None
    for i, cell in enumerate(cached_nb.cells):
        if cell.cell_type != "code":
            assert i not in cached.outputs, f"markdown cell {i} got a code cell's outputs"
            continue
        assert cached.outputs[i][0]["text"] == _label(cell), f"cell {i} got another cell's outputs"
        if is_test_cell(cell):
            assert cached.verdicts[i].lines == [_label(cell)], f"test cell {i} ({_label(cell)}) got another's verdict"
            assert cached.verdicts[i].passed == passed[_label(cell)], f"test cell {i} got another's grade"


def test_a_cell_the_analysis_cannot_read_is_not_run():
    # `<>` is valid only after `from __future__ import barry_as_FLUFL`: were the kernel to read Python
    # differently from the analysis, this is where unchecked code would hide; it never reaches the sandbox
    import importlib
    import sys
    from pathlib import Path

    import nbformat

    from lmbook.grading import static
    from lmbook.grading.judge import _plan, checks_module, is_test_cell, student_cells
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "autograder"))
    from make_samples import fill, solution_answers

    nb = fill(solution_answers())
    nb.cells = [c for c in nb.cells if not is_test_cell(c)]  # the student's cells are what is at stake
    hidden = "assert 1 <> 2\nfrom torch.nn.functional import log_softmax"
    nb.cells.insert(3, nbformat.v4.new_code_cell(hidden))
    unreadable = static.unreadable_cells(student_cells(nb))
    assert list(unreadable) == [3]
    plan = _plan(nb, importlib.import_module(checks_module(nb)).check, 10.0, unreadable)
    assert 3 not in plan.cells and all(s.get("source") != hidden for s in plan.steps)
    assert len(plan.cells) == sum(c.cell_type == "code" for c in nb.cells) - 1  # every other cell runs


# ----------------------------------------------------------------------------- hidden inputs stay in the sandbox
# With the static analysis off (as if the attack had got past it), the leaking answer writes what it gets into a
# file, into memory shared with its parent, into its exception's message and its return value, and a thread
# started in an earlier cell watches every frame of the process for the grader's messages.

SPY = """
import mmap, sys, threading, time
SHARED = mmap.mmap(-1, 4096)  # anonymous memory shared with every process forked later
FOUND = []
TOKENS = ["'" + HIDDEN_ID + "0'", '"' + HIDDEN_ID + '0"']  # the first case's id, in a dict or in JSON
def spy():
    while True:
        for frame in list(sys._current_frames().values()):
            while frame is not None:
                for v in list(frame.f_locals.values()):
                    if v is TOKENS or v is FOUND or v is globals():  # the spy's own (the notebook's namespace)
                        continue
                    text = repr(v)[:1000000]
                    if any(t in text for t in TOKENS):
                        FOUND.append(f"{type(v).__name__} in {frame.f_code.co_name}")
                frame = frame.f_back
        time.sleep(0.0005)
threading.Thread(target=spy, daemon=True).start()
"""
LEAKS = """
import torch
def log_softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    if tuple(x.shape) == (1, 47):  # the first hidden case
        secret = "LEAKED" + ",".join(f"{v:.6f}" for v in x.flatten()[:3].tolist())
        SHARED[:len(secret)] = secret.encode()
        for path in ("/tmp/leak.txt", "/home/student/leak.txt"):
            try:
                open(path, "w").write(secret)
            except OSError:
                pass
        raise ValueError(secret)
    return x - m - (x - m).exp().sum(dim=dim, keepdim=True).log()
"""
ECHOES = """
def cross_entropy(logits, targets, ignore_index=-100):
    return logits.flatten()[:1].sum()  # echoes an input back

def perplexity(logits, targets, ignore_index=-100):
    return float(logits.flatten()[0])
"""
READS_BACK = """
import os
print("FILES", [open(p).read() for p in ("/tmp/leak.txt", "/home/student/leak.txt") if os.path.exists(p)])
print("SHARED", SHARED[:6])
print("SPY", FOUND)
"""


@pytest.mark.slow
def test_a_hidden_test_leaves_nothing_behind_and_its_feedback_echoes_nothing(monkeypatch):
    import sys
    from pathlib import Path

    import nbformat

    from lmbook.grading import judge, static
    from lmbook.grading.checks import case_inputs
    from lmbook.tasks.ch01 import CROSS_ENTROPY, LOG_SOFTMAX
    sys.path.insert(0, str(Path(__file__).parent))
    from hostile_corpus import WRONG, _with_cell

    monkeypatch.setattr(static, "find_tampering", lambda cells: [])
    nb = nbformat.read(Path(__file__).parent.parent / "solutions" / "ch01" / "ch01_feedforward_lm.ipynb", 4)
    for task, source in {"train_lm": WRONG["train_lm"], "log_softmax": LEAKS, "cross_entropy": ECHOES}.items():
        next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == task).source = source
    hidden = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") ==
                  "hidden_log_softmax")
    # the probe ids of that cell (made at run time: the notebook's own source never holds them)
    nb = _with_cell(nb, f"HIDDEN_ID = 'c' + str({hidden + 1}) + '_0_'\n" + SPY, after="setup")
    nb = _with_cell(nb, READS_BACK, after="hidden_cross_entropy")
    graded = judge.grade_notebook(nb, timeout=60)
    later = next(i for i, c in enumerate(nb.cells) if c.source == READS_BACK)
    text = "".join(o.get("text", "") for o in graded.outputs.get(later, []))
    assert "FILES []" in text, f"a hidden test's file reached a later cell: {text}"
    assert "SHARED b'\\x00\\x00\\x00\\x00\\x00\\x00'" in text, f"shared memory reached a later cell: {text}"
    assert "SPY []" in text, f"a thread of the notebook saw a hidden test's inputs: {text}"
    feedback = json.dumps({i: v.lines for i, v in graded.verdicts.items()}) + json.dumps(graded.outputs)
    assert "LEAKED" not in feedback
    x = case_inputs(LOG_SOFTMAX.hidden_cases[0], 1207, 0, torch.device("cpu"))[0][0]
    logits = case_inputs(CROSS_ENTROPY.hidden_cases[0], 3301, 0, torch.device("cpu"))[0][0]
    for value in [*x.flatten()[:3].tolist(), float(logits.flatten()[0])]:
        for shown in (f"{value:.6f}", f"{value:.6g}", f"{value:.4g}"):
            assert shown not in feedback, f"a hidden input ({shown}) reached the feedback"
    verdicts = {nb.cells[i].metadata["nbgrader"]["grade_id"]: v for i, v in graded.verdicts.items()}
    assert "your code raised ValueError" in verdicts["hidden_log_softmax"].lines[0]
    assert "(a hidden case's values are not shown)" in verdicts["hidden_cross_entropy"].lines[0]


# ----------------------------------------------------------------------------- switching the watch off, in the sandbox

SWITCHES_OFF = """
import sys
def log_softmax(x, dim=-1):
    sys.setprofile(None)
    m = x.amax(dim=dim, keepdim=True)
    return x - m - (x - m).exp().sum(dim=dim, keepdim=True).log()
"""


@pytest.mark.slow
def test_switching_off_the_watch_at_run_time_is_tampering_and_earns_nothing(monkeypatch):
    graded, _, verdicts = _graded_with(monkeypatch, "import _thread\n_thread.start_new_thread = print",
                                       after="sgns_loss", answers={"log_softmax": SWITCHES_OFF})
    assert any("sys.setprofile" in t for t in graded.tampering), graded.tampering
    assert any("hook on new threads" in t for t in graded.tampering), graded.tampering
    assert all(not v.passed and "reaches for the grader's machinery" in v.lines[0] for v in verdicts.values())


# ----------------------------------------------------------------------------- training time the student cannot fake

FAKES_TIME = """
import time
time.perf_counter = lambda: 0.0  # training looks instant to the notebook

def train_lm(train_ids, vocab_size):
    class Lazy(nn.Module):  # trains on its first forward call, after train_lm has returned
        def __init__(self):
            super().__init__()
            self.done = False

        def forward(self, ctx):
            if not self.done:
                end = time.process_time() + 4
                while time.process_time() < end:
                    pass
                self.done = True
            return torch.zeros(len(ctx), vocab_size)
    return Lazy(), 3
"""


@pytest.mark.slow
def test_training_time_is_measured_where_the_student_cannot_fake_it(monkeypatch):
    from lmbook.tasks.ch01 import train_lm
    monkeypatch.setattr(train_lm, "TRAIN_TIME_LIMIT_S", 2.0)  # read by the judge, outside the sandbox
    _, _, verdicts = _graded_with(monkeypatch, "x = 1", after="setup", answers={"train_lm": FAKES_TIME})
    assert "training took" in verdicts["test_train_lm"].lines[0], verdicts["test_train_lm"].lines
    seconds = float(verdicts["test_train_lm"].lines[0].split("training took ")[1].split(" s")[0])
    assert seconds >= 4, verdicts["test_train_lm"].lines
