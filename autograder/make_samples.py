"""Write sample submissions of an exercise, to try the grader on (and to test it).

    python autograder/make_samples.py DEST [ASSIGNMENT ...]

Each sample is the student notebook from exercises/ with its answer cells filled in. Every exercise gets a
correct one (the solutions' code), a blank one, one with a syntax error in an answer cell (exercise 1's
first, the others' last), and a file that is not a notebook at all. Exercise 1 (the default) also gets
answers with known mistakes and one that imports lmbook's answer; the others get one that leaves the last
answer unwritten. With several assignments,
DEST gets one folder per assignment (DEST/ch02/<student>/...); with one, DEST/<student>/....
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "ch01_feedforward_lm.ipynb"


def notebook_name(assignment: str) -> str:
    """The file name of an exercise's notebook (the one notebook in its solutions/ folder)."""
    (path,) = (ROOT / "solutions" / assignment).glob("*.ipynb")
    return path.name


# Answers that differ from the solution, by answer cell (grade_id).
GLOBAL_MAX_LOG_SOFTMAX = '''
def log_softmax(x, dim=-1):
    m = x.max()  # one maximum for the whole tensor, not one per row: fine until rows differ a lot
    return x - m - (x - m).exp().sum(dim=dim, keepdim=True).log()
'''
CE_OVER_PADDING = '''
def cross_entropy(logits, targets, ignore_index=-100):
    logp = (logits - logits.logsumexp(dim=-1, keepdim=True)).reshape(-1, logits.shape[-1])
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


def solution_answers(assignment: str = "ch01") -> dict[str, str]:
    """The solution code of every answer cell, markers removed."""
    nb = nbformat.read(ROOT / "solutions" / assignment / notebook_name(assignment), as_version=4)
    answers = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            answers[meta["grade_id"]] = re.sub(r"^\s*### (BEGIN|END) SOLUTION\n", "", cell.source, flags=re.M)
    return answers


def code_answers(assignment: str = "ch01") -> list[str]:
    """The grade ids of the answer cells that hold code (not free-text answers graded by hand), in order."""
    nb = nbformat.read(ROOT / "solutions" / assignment / notebook_name(assignment), as_version=4)
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"]


def fill(answers: dict[str, str], assignment: str = "ch01") -> nbformat.NotebookNode:
    """The released exercise notebook with the given answer cells replaced."""
    nb = nbformat.read(ROOT / "exercises" / assignment / notebook_name(assignment), as_version=4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = answers[gid].strip("\n")
    return nb


def make_samples(dest: Path, assignment: str = "ch01") -> list[str]:
    """Write one folder per sample student under ``dest``; return their names."""
    good = solution_answers(assignment)
    # Later tasks may call earlier answers: the last answer is the one whose loss costs only its own tests (a
    # code answer: a free-text one, graded by hand, has no syntax to break). The correct sample answers the
    # free-text questions with the model answer: pending, as a student's answer would be.
    last = code_answers(assignment)[-1] if assignment != "ch01" else "log_softmax"
    samples = {
        "correct": good,
        "blank": {},
        "syntax_error": {**good, last: SYNTAX_ERROR},
    }
    if assignment != "ch01":
        samples["last_unanswered"] = {**good, last: None}
    else:  # exercise 1's samples name their mistakes (its tests know each one's exact grade)
        samples["partly_wrong"] = {**good, "log_softmax": GLOBAL_MAX_LOG_SOFTMAX, "cross_entropy": CE_OVER_PADDING,
                                   "ffnn_forward": FFNN_NO_BIAS, "train_lm": None}
        samples["imports_answer"] = {**good, "log_softmax": IMPORTS_ANSWER}
    name = notebook_name(assignment)
    for student, answers in samples.items():
        folder = dest / student
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(fill({k: v for k, v in answers.items() if v is not None}, assignment), folder / name)
    broken = dest / "not_a_notebook"
    broken.mkdir(parents=True, exist_ok=True)
    (broken / name).write_text('{"cells": [ this is not JSON')
    return [*samples, "not_a_notebook"]


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    dest, assignments = Path(sys.argv[1]), sys.argv[2:] or ["ch01"]
    for a in assignments:
        names = make_samples(dest / a if len(assignments) > 1 else dest, a)
        print(f"wrote {len(names)} sample submissions of {a} to {dest}: {', '.join(names)}")
