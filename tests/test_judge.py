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
            dim = case["kwargs"]["dim"]["value"] if "dim" in case["kwargs"] else -1
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
