"""Write sample submissions of exercise 1, to try the grader on (and to test it).

    python autograder/make_samples.py DEST

Each sample is the student notebook from exercises/ with its answer cells
filled in: a correct one (the solutions' code), a blank one, partly wrong
ones, one with a syntax error, one that imports lmbook's answer, and a file
that is not a notebook at all.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "ch01_feedforward_lm.ipynb"

# Answers that differ from the solution, by answer cell (grade_id).
GLOBAL_MAX_LOG_SOFTMAX = '''
def log_softmax(x, dim=-1):
    m = x.max()  # one maximum for the whole tensor, not one per row: fine until rows differ a lot
    return x - m - (x - m).exp().sum(dim=dim, keepdim=True).log()
'''
CE_OVER_PADDING = '''
def cross_entropy(logits, targets, ignore_index=-100):
    logp = log_softmax(logits, dim=-1).reshape(-1, logits.shape[-1])
    targets = targets.reshape(-1)
    keep = targets != ignore_index
    return -logp[keep].gather(1, targets[keep].unsqueeze(1)).sum() / targets.numel()


def perplexity(logits, targets, ignore_index=-100):
    return math.exp(cross_entropy(logits, targets, ignore_index).item())
'''
FFNN_NO_BIAS = '''
def ffnn_forward(context, E, W, b, U, c):
    x = E[context].flatten(start_dim=1)
    return torch.tanh(x @ W.T) @ U.T + c
'''
SYNTAX_ERROR = '''
def log_softmax(x, dim=-1)
    return x
'''
IMPORTS_ANSWER = '''
from lmbook.functional import log_softmax
'''


def solution_answers() -> dict[str, str]:
    """The solution code of every answer cell, markers removed."""
    nb = nbformat.read(ROOT / "solutions" / "ch01" / NOTEBOOK, as_version=4)
    answers = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            answers[meta["grade_id"]] = re.sub(r"^\s*### (BEGIN|END) SOLUTION\n", "", cell.source, flags=re.M)
    return answers


def fill(answers: dict[str, str]) -> nbformat.NotebookNode:
    """The released exercise notebook with the given answer cells replaced."""
    nb = nbformat.read(ROOT / "exercises" / "ch01" / NOTEBOOK, as_version=4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = answers[gid].strip("\n")
    return nb


def make_samples(dest: Path) -> list[str]:
    """Write one folder per sample student under ``dest``; return their names."""
    good = solution_answers()
    samples = {
        "correct": good,
        "blank": {},
        "partly_wrong": {**good, "log_softmax": GLOBAL_MAX_LOG_SOFTMAX, "cross_entropy": CE_OVER_PADDING,
                         "ffnn_forward": FFNN_NO_BIAS, "train_lm": None},
        "syntax_error": {**good, "log_softmax": SYNTAX_ERROR},
        "imports_answer": {**good, "log_softmax": IMPORTS_ANSWER},
    }
    for name, answers in samples.items():
        folder = dest / name
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(fill({k: v for k, v in answers.items() if v is not None}), folder / NOTEBOOK)
    broken = dest / "not_a_notebook"
    broken.mkdir(parents=True, exist_ok=True)
    (broken / NOTEBOOK).write_text('{"cells": [ this is not JSON')
    return [*samples, "not_a_notebook"]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    names = make_samples(Path(sys.argv[1]))
    print(f"wrote {len(names)} sample submissions to {sys.argv[1]}: {', '.join(names)}")
