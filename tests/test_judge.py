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
    assert "KEYS ['kind', 'source']" in text, f"job.json holds more than the cells: {text}"
    assert verdicts["hidden_log_softmax"].passed  # the solution's answer, graded as usual


@pytest.mark.slow
def test_replies_forged_on_the_channel_are_ignored_and_reported(monkeypatch):
    from hostile_corpus import WRONG
    graded, _, verdicts = _graded_with(monkeypatch, FORGES_REPLIES, after="setup",
                                       answers={"ffnn_forward": WRONG["ffnn_forward"]})
    assert not verdicts["test_ffnn_forward"].passed and not verdicts["hidden_ffnn_forward"].passed
    assert verdicts["hidden_cross_entropy"].passed, "an honest answer next to the forgery is still graded"
    assert any("grader's channel" in t for t in graded.tampering), graded.tampering


@pytest.mark.slow
def test_a_hidden_tests_inputs_are_gone_before_the_next_cell(monkeypatch):
    from lmbook.tasks.ch01 import check
    graded, text, verdicts = _graded_with(monkeypatch, "print('CALLS', len(seen))", after="hidden_log_softmax",
                                          answers={"log_softmax": KEEPS_HIDDEN_INPUTS})
    assert verdicts["test_log_softmax"].passed and verdicts["hidden_log_softmax"].passed
    visible = len(check.checks["log_softmax"].cases)
    assert f"CALLS {visible}" in text, f"expected only the {visible} visible calls to be remembered: {text}"


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
