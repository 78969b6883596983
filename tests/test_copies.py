"""Answers alike across students (lmbook.grading.copies): winnowed fingerprints of the students' answer cells,
listed for the instructor in suspicious.md and class.html, and never a change to a grade."""

from __future__ import annotations

import csv
import inspect
import itertools
import re
import sys
from pathlib import Path

import nbformat
import pytest
import students_ch01

from lmbook.autograde import reuse_note
from lmbook.grading import classreport, copies, reports
from lmbook.grading.student import Student
from lmbook.grading.submissions import stub_answers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
from make_samples import fill  # noqa: E402

RELEASE = ROOT / "exercises" / "ch01" / "ch01_feedforward_lm.ipynb"
TASKS = {"log_softmax": 3.0, "cross_entropy": 3.0, "ffnn_forward": 3.0, "sgns_loss": 3.0}

# ann_lee's notebook, as she wrote it.
ANN = {
    "log_softmax": '''
def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    # subtract the max first so exp() can't overflow
    m = x.max(dim=dim, keepdim=True).values
    shifted = x - m
    return shifted - torch.log(torch.exp(shifted).sum(dim=dim, keepdim=True))
''',
    "cross_entropy": '''
def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    logp = log_softmax(logits, dim=-1)
    logp = logp.reshape(-1, logp.shape[-1])
    targets = targets.reshape(-1)
    mask = targets != ignore_index  # drop the padding
    picked = logp[mask].gather(1, targets[mask].unsqueeze(1)).squeeze(1)
    return -picked.mean()


def perplexity(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> float:
    return math.exp(cross_entropy(logits, targets, ignore_index).item())
''',
    "ffnn_forward": '''
def ffnn_forward(context: torch.Tensor, E: torch.Tensor, W: torch.Tensor, b: torch.Tensor,
                 U: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    x = E[context]                  # (B, n-1, m)
    x = x.reshape(x.shape[0], -1)   # concatenate the window's embeddings
    h = torch.tanh(x @ W.T + b)
    return h @ U.T + c
''',
    "sgns_loss": '''
def sgns_loss(v_c: torch.Tensor, u_o: torch.Tensor, u_neg: torch.Tensor) -> torch.Tensor:
    pos = F.logsigmoid((u_o * v_c).sum(dim=-1))
    neg = F.logsigmoid(-torch.bmm(u_neg, v_c.unsqueeze(2)).squeeze(2)).sum(dim=-1)
    return -(pos + neg).mean()
''',
}

# bob_ray's: ann's answers with his own names, comments, a docstring and his own layout.
BOB = {
    "log_softmax": '''
def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable log-softmax."""
    biggest = x.max(dim = dim, keepdim = True).values
    z = x - biggest   # stability trick from the lecture

    return z - torch.log(
        torch.exp(z).sum(dim = dim, keepdim = True)
    )
''',
    "cross_entropy": '''
def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    # log probabilities, flattened to (N, V)
    lp = log_softmax(logits, dim=-1)
    lp = lp.reshape(-1, lp.shape[-1])
    tgt = targets.reshape(-1)
    ok = tgt != ignore_index
    chosen = lp[ok].gather(1, tgt[ok].unsqueeze(1)).squeeze(1)
    return -chosen.mean()


def perplexity(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> float:
    # perplexity = e^(mean NLL)
    return math.exp(cross_entropy(logits, targets, ignore_index).item())
''',
    "ffnn_forward": '''
def ffnn_forward(context: torch.Tensor, E: torch.Tensor, W: torch.Tensor, b: torch.Tensor,
                 U: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    emb = E[context]
    emb = emb.reshape(emb.shape[0], -1)
    hidden = torch.tanh(emb @ W.T + b)
    return hidden @ U.T + c
''',
    "sgns_loss": ANN["sgns_loss"].replace("pos", "positive").replace("neg =", "negative =")
                                 .replace("+ neg)", "+ negative)"),
}

# A line everyone might write: no evidence of anything, however alike.
ONE_LINER = '''
def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return x - torch.logsumexp(x, dim=dim, keepdim=True)
'''


def _right(task: str, fn) -> str:
    """A right answer of students_ch01.py as the student's cell: the task's name, the helper it calls inlined."""
    src = re.sub(r"^def \w+", f"def {task}", inspect.getsource(fn))
    return src.replace("_logp(logits)", "torch.log_softmax(logits, dim=-1)")


def _prints(src: str) -> set[int]:
    common = set().union(*(copies.fingerprints(c.source) for c in fill({}).cells if c.cell_type == "code"))
    return copies.fingerprints(src) - common


# ----------------------------------------------------------------------------- fingerprints


def test_renamed_variables_new_comments_and_layout_are_the_same_answer():
    for task in ("log_softmax", "cross_entropy", "ffnn_forward", "sgns_loss"):
        a, b = _prints(ANN[task]), _prints(BOB[task])
        assert copies.similarity(a, b) == 1.0, task
        assert len(a) >= copies.MIN_FINGERPRINTS, f"{task}: too short a test answer ({len(a)} fingerprints)"
    assert copies.tokens(ANN["log_softmax"]) == copies.tokens(BOB["log_softmax"])


def test_right_answers_written_differently_are_below_the_threshold():
    for task, fns in students_ch01.RIGHT.items():
        for f, g in itertools.combinations(fns, 2):
            s = copies.similarity(_prints(_right(task, f)), _prints(_right(task, g)))
            assert s < copies.THRESHOLD, f"{task}: {f.__name__} and {g.__name__} are {s:.0%} alike"


def test_a_copy_with_a_line_changed_is_still_alike():
    changed = ANN["cross_entropy"].replace("return -picked.mean()", "loss = -picked.mean()\n    return loss")
    assert copies.similarity(_prints(ANN["cross_entropy"]), _prints(changed)) >= copies.THRESHOLD


def test_code_that_does_not_parse_is_still_compared():
    assert copies.tokens("def f(x:\n    return x.sum(") == ["def", "V", "(", "V", ":", "return", "V", ".", "sum", "("]


# ----------------------------------------------------------------------------- pairs in a class


def _class(answers: dict[str, dict[str, str]]) -> dict[str, nbformat.NotebookNode]:
    return {sid: fill(a) for sid, a in answers.items()}


def _carl() -> dict[str, str]:
    return {"log_softmax": _right("log_softmax", students_ch01.ls_right_add_back),
            "cross_entropy": _right("cross_entropy", students_ch01.ce_right_onehot) + "\n\n"
            + _right("perplexity", students_ch01.ppl_right_geometric),
            "ffnn_forward": _right("ffnn_forward", students_ch01.ff_right_blocks),
            "sgns_loss": _right("sgns_loss", students_ch01.sg_right_softplus)}


def test_two_copies_are_a_pair_with_every_task_named():
    (pair,) = copies.find_alike(_class({"ann_lee": ANN, "bob_ray": BOB, "carl": _carl()}), fill({}))
    assert (pair.a, pair.b, pair.similarity, pair.identical) == ("ann_lee", "bob_ray", 1.0, False)
    assert [t for t, _ in pair.tasks] == ["log_softmax", "cross_entropy", "ffnn_forward", "sgns_loss"]


def test_blank_notebooks_are_not_copies_of_each_other():
    assert copies.find_alike(_class({"dee": {}, "eve": {}, "ann_lee": ANN}), fill({})) == []


def test_a_shared_one_liner_is_not_a_pair():
    one = {"log_softmax": ONE_LINER}
    assert copies.similarity(_prints(ONE_LINER), _prints(ONE_LINER)) == 1.0
    assert copies.find_alike(_class({"fay": one, "gus": one}), fill({})) == []


def test_code_most_of_the_class_wrote_is_not_evidence():
    everyone = {f"s{i}": {"ffnn_forward": ANN["ffnn_forward"]} for i in range(5)}
    assert copies.find_alike(_class(everyone), fill({})) == []


def test_one_task_copied_in_otherwise_different_notebooks_is_named():
    carl_copies_ffnn = {**_carl(), "ffnn_forward": BOB["ffnn_forward"]}
    (pair,) = copies.find_alike(_class({"ann_lee": ANN, "carl": carl_copies_ffnn}), fill({}))
    assert [t for t, _ in pair.tasks] == ["ffnn_forward"] and pair.similarity < copies.THRESHOLD


# ----------------------------------------------------------------------------- what the instructor sees


@pytest.fixture
def graded_class(tmp_path):
    """A class as the grader leaves it: each notebook in the course, each student's grades; ann_lee and bob_ray
    sent the same notebook (bob's result reused from ann's), dee and eve the exercise untouched."""
    answers = {"ann_lee": ANN, "bob_ray": ANN, "carl": _carl(), "dee": {}, "eve": {}, "fay": {"log_softmax": ONE_LINER}}
    students = []
    for sid, a in answers.items():
        path = tmp_path / "course" / "submitted" / sid / "ch01" / RELEASE.name
        path.parent.mkdir(parents=True)
        nbformat.write(fill(a), path)
        full = 3.0 if a else 0.0
        students.append(Student(sid, notebook=path, tasks={t: (full, m) for t, m in TASKS.items()}))
    by = {st.sid: st for st in students}
    by["bob_ray"].cached = by["eve"].cached = True
    keys = {"ann_lee": "k-ann", "bob_ray": "k-ann", "carl": "k-carl", "dee": "k-blank", "eve": "k-blank",
            "fay": "k-fay"}
    return students, keys, tmp_path


def test_the_reports_list_the_pair_and_change_no_grade(graded_class):
    students, keys, tmp = graded_class
    alike = copies.find_alike_in({st.sid: st.notebook for st in students}, RELEASE)
    assert [(p.a, p.b, p.identical) for p in alike] == [("ann_lee", "bob_ray", True)]
    summary = classreport.summarize("ch01", students, TASKS, alike=alike)
    assert summary.flagged == [] and not any(st.suspicious for st in students)

    reports.write_suspicious(students, tmp / "suspicious.md", alike)
    text = (tmp / "suspicious.md").read_text(encoding="utf-8")
    section = text.split("## Answers alike across students\n", 1)[1]
    assert ("- ann_lee and bob_ray: 100% (the same code, byte for byte); tasks alike: log_softmax 100%, "
            "cross_entropy 100%, ffnn_forward 100%, sgns_loss 100%") in section
    assert "carl" not in section and "dee" not in section and "fay" not in section

    page = classreport.write_class_page(summary, tmp).read_text(encoding="utf-8")
    assert '<a href="#alike-section">answers alike</a>' in page
    table = re.search(r"<h2 id=alike-section>Answers alike across students</h2>.*?<table id=alike>(.*?)</table>",
                      page, re.S)
    assert table, "no table of answers alike in class.html"
    assert "<td>ann_lee, bob_ray</td><td>100% (the same code, byte for byte)</td>" in table[1]
    assert 'data-tags="flagged' not in page and "tag flagged" not in page, "a pair is no flag"

    reports.write_grades(students, TASKS, tmp / "grades.csv")
    with (tmp / "grades.csv").open(encoding="utf-8") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    assert [(rows[s]["total"], rows[s]["flagged"]) for s in ("ann_lee", "bob_ray")] == [("12", ""), ("12", "")]


def test_no_pair_says_none(tmp_path):
    reports.write_suspicious([Student("carl")], tmp_path / "suspicious.md", [])
    assert (tmp_path / "suspicious.md").read_text(encoding="utf-8").endswith(
        "## Answers alike across students\n\n" + copies.EXPLANATION + "\n\nNone.\n")


def test_the_reuse_line_says_what_was_reused_and_why(graded_class):
    students, keys, _ = graded_class
    alike = copies.find_alike_in({st.sid: st.notebook for st in students}, RELEASE)
    stub = stub_answers(RELEASE)
    line = reuse_note(students, keys, set(), alike, stub)
    assert line == ("2 results reused from notebooks with the same code graded earlier in this run; identical code: "
                    "ann_lee and bob_ray (see suspicious.md); dee and eve (the exercise as released, unanswered)")
    for st in students:
        st.cached = True  # the same class graded again
    assert reuse_note(students, keys, set(keys.values()), alike, stub).startswith(
        "6 results reused from an earlier run; identical code: ann_lee and bob_ray (see suspicious.md)")
    assert reuse_note([Student("carl")], {}, set(), [], stub) == "0 results reused from an earlier run"
