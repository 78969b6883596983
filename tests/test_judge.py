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


def test_outputs_are_read_as_plain_arrays_never_unpickled(tmp_path):
    np.save(tmp_path / "ok.npy", np.arange(3.0, dtype=np.float32))
    np.save(tmp_path / "obj.npy", np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    out = _read({"tensor": "ok.npy"}, tmp_path)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.tolist() == [0.0, 1.0, 2.0]
    assert not isinstance(_read({"tensor": "obj.npy"}, tmp_path), torch.Tensor | dict)
    assert not isinstance(_read({"tensor": "../ok.npy"}, tmp_path), torch.Tensor)  # no paths out of the folder
    assert type(_read({"object": "MyTensorLike"}, tmp_path)).__name__ == "MyTensorLike"
    assert _read({"number": 2.5}, tmp_path) == 2.5
    assert _read({"seq": [{"number": 1}, {"tensor": "ok.npy"}]}, tmp_path)[0] == 1


def test_a_failed_verdict_is_an_error_output_that_nbgrader_scores_0():
    lines = ["✓ perplexity: all 2 visible checks passed", "cross_entropy: 1 of 3 failed\n  - x"]
    outs = Verdict(False, lines).outputs()
    assert [o["output_type"] for o in outs] == ["stream", "error"]
    assert outs[1]["traceback"][0].startswith("\x1b[31m✗ cross_entropy")
    json.dumps(outs)  # plain JSON, as nbformat stores it
    assert Verdict(True, ["✓ ok"]).outputs() == [{"output_type": "stream", "name": "stdout", "text": "✓ ok\n"}]


FORGER = '''
import json, sys
import numpy as np
job, out = sys.argv[1], sys.argv[2]
for step in json.load(open(job + "/job.json"))["steps"]:
    for probe in step.get("probes", []):
        for case in probe.get("cases", []) if probe["task"] == "log_softmax" else []:
            x = torch.from_numpy(np.load(job + "/" + case["args"][0]["tensor"]))
            dim = case["kwargs"]["dim"]["number"] if "dim" in case["kwargs"] else -1
            np.save(out + "/" + case["id"] + ".npy", torch.log_softmax(x, dim).numpy())
'''


@pytest.mark.slow
def test_outputs_rewritten_after_their_test_cell_do_not_count(monkeypatch):
    """Even with the static analysis switched off, a later cell cannot replace an earlier answer's outputs."""
    import sys
    from pathlib import Path

    import nbformat

    from lmbook.grading import judge, static

    sys.path.insert(0, str(Path(__file__).parent))
    from hostile_corpus import WRONG, _with_cell

    monkeypatch.setattr(static, "find_tampering", lambda cells: [])
    # the instructor's notebook (hidden tests included, as nbgrader restores them), with a wrong answer
    nb = nbformat.read(Path(__file__).parent.parent / "solutions" / "ch01" / "ch01_feedforward_lm.ipynb", 4)
    next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "log_softmax").source = \
        WRONG["log_softmax"]
    nb = _with_cell(nb, FORGER, after="hidden_log_softmax")
    graded = judge.grade_notebook(nb, timeout=60)
    forged = [i for i, c in enumerate(nb.cells) if c.source == FORGER][0]
    assert not any(o.get("output_type") == "error" for o in graded.outputs[forged]), graded.outputs[forged]
    verdicts = {nb.cells[i].metadata["nbgrader"]["grade_id"]: v for i, v in graded.verdicts.items()}
    assert not verdicts["test_log_softmax"].passed and not verdicts["hidden_log_softmax"].passed


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


def test_a_cell_the_analysis_cannot_read_is_not_run(tmp_path):
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
    plan = _plan(nb, importlib.import_module(checks_module(nb)).check, tmp_path, 10.0, unreadable)
    assert 3 not in plan.cells and all(s.get("source") != hidden for s in plan.steps)
    assert len(plan.cells) == sum(c.cell_type == "code" for c in nb.cells) - 1  # every other cell runs
