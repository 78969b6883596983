"""One mistake costs one task: a later task that calls an earlier task's function is graded with a right one.

The right versions (``lmbook.tasks.earlier``) are checked against each earlier task's own reference (torch's
modules) on every one of its cases; the substitution is checked as a student meets it: a wrong earlier
function no longer fails the later task, a wrong later task still fails, the student's function is theirs
again afterwards, and a right version used as an earlier task's answer is refused.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
from pathlib import Path

import pytest
import torch

from lmbook.grading.checks import CheckFailed, case_inputs, run_check
from lmbook.grading.compare import to_reference
from lmbook.grading.earlier import EarlierTasks

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
CHAPTERS = [f"ch{c:02d}" for c in range(1, 12)]


def _registry(chapter: str) -> dict:
    return importlib.import_module(f"lmbook.tasks.{chapter}").check.checks


def _calls_in_solutions(chapter: str) -> dict[str, set[str]]:
    """For each task function the solution notebook defines, the other tasks' functions it calls by name."""
    tasks = set(_registry(chapter))
    notebook = json.loads(next((ROOT / "solutions" / chapter).glob("*.ipynb")).read_text())
    calls: dict[str, set[str]] = {}
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        try:
            tree = ast.parse("".join(cell["source"]))
        except SyntaxError:  # a cell with magics
            continue
        for fn in tree.body:
            if isinstance(fn, ast.FunctionDef) and fn.name in tasks:
                names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
                calls[fn.name] = (names & tasks) - {fn.name}
    return calls


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_earlier_function_a_solution_calls_is_put_right_for_the_later_task(chapter):
    checks = _registry(chapter)
    for task, called in _calls_in_solutions(chapter).items():
        given = {name for name, _ in checks[task].builds_on}
        assert called <= given, f"{chapter} {task} calls {sorted(called - given)}, which its check does not replace"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_later_task_builds_only_on_earlier_tasks_of_its_exercise(chapter):
    order = list(_registry(chapter))
    for task, check in _registry(chapter).items():
        for name, _ in check.builds_on:
            assert name in order and order.index(name) < order.index(task), f"{task} builds on {name}"


def _solution_signatures(chapter: str) -> dict[str, tuple]:
    """Each task function of the solution notebook: its parameters' names and default values."""
    notebook = json.loads(next((ROOT / "solutions" / chapter).glob("*.ipynb")).read_text())
    found = {}
    for cell in notebook["cells"]:
        try:
            tree = ast.parse("".join(cell["source"])) if cell["cell_type"] == "code" else None
        except SyntaxError:
            continue
        for fn in tree.body if tree else []:
            if isinstance(fn, ast.FunctionDef):
                names = [a.arg for a in fn.args.args]
                defaults = [ast.literal_eval(d) for d in fn.args.defaults]
                found[fn.name] = (names, defaults)
    return found


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_right_version_takes_the_arguments_the_statement_gives_the_function(chapter):
    stated = _solution_signatures(chapter)
    for check in _registry(chapter).values():
        for name, right in check.builds_on:
            params = list(inspect.signature(right).parameters.values())
            ours = ([p.name for p in params], [p.default for p in params if p.default is not p.empty])
            assert ours == stated[name], f"{name}: {ours} here, {stated[name]} in the statement"


def test_a_call_the_statement_does_not_admit_goes_to_the_students_own_function(notebook):
    from lmbook.tasks.ch01 import CROSS_ENTROPY

    def log_softmax(x, dim=-1, *, temperature=1.0):  # the student's own, with an argument of their own
        return torch.log_softmax(x / temperature, dim)

    notebook["log_softmax"] = log_softmax
    with EarlierTasks(notebook["cross_entropy"], CROSS_ENTROPY.builds_on):
        put = notebook["log_softmax"]
        x = torch.tensor([[0.0, 2.0]])
        assert torch.equal(put(x, temperature=2.0), log_softmax(x, temperature=2.0))
        assert torch.equal(put(x, -1), x - torch.logsumexp(x, -1, keepdim=True))


def _pairs():
    for chapter in CHAPTERS:
        checks = _registry(chapter)
        for task, check in checks.items():
            for name, right in check.builds_on:
                yield pytest.param(checks[name], right, id=f"{task}-{name}")


@pytest.mark.parametrize("earlier, right", list({id(r): (e, r) for p in _pairs() for e, r in [p.values]}.values()),
                         ids=lambda v: getattr(v, "task", getattr(v, "__name__", "")))
def test_each_right_version_agrees_with_the_earlier_tasks_reference_on_all_its_cases(earlier, right):
    for cases in (earlier.cases, earlier.hidden_cases):
        for i, case in enumerate(cases):
            args, kwargs = case_inputs(case, 0, i, CPU)
            got = right(*args, **kwargs)
            with torch.no_grad():
                ref = earlier.reference(*to_reference(args), **to_reference(kwargs))
            if earlier.task == "filter_probs":  # a distribution: the same tokens kept, the same probabilities
                torch.testing.assert_close(to_reference(got), to_reference(ref), rtol=1e-5, atol=1e-7)
            else:
                assert earlier.compare(got, ref) is None, f"{earlier.task} [{case.name}]: {earlier.compare(got, ref)}"


def _verdict(check, answer, hidden=False) -> str:
    try:
        run_check(check, answer, hidden=hidden, device=CPU, verbose=False)
    except CheckFailed as e:
        return str(e)
    return "passed"


# A notebook's namespace, as the student's cells leave it: a naive log_softmax (Task 1 wrong), then a
# cross_entropy that calls it and is right in its own part, and one that is wrong in its own part.
NOTEBOOK = '''
import torch

def log_softmax(x, dim=-1):
    return x - x.exp().sum(dim, keepdim=True).log()

def cross_entropy(logits, targets, ignore_index=-100):
    logp = log_softmax(logits, dim=-1).reshape(-1, logits.shape[-1])
    t = targets.reshape(-1)
    keep = t != ignore_index
    return -logp[keep].gather(1, t[keep].unsqueeze(1)).mean()

def cross_entropy_over_padding(logits, targets, ignore_index=-100):
    logp = log_softmax(logits, dim=-1).reshape(-1, logits.shape[-1])
    t = targets.reshape(-1).clamp(min=0)
    return -logp.gather(1, t.unsqueeze(1)).mean()
'''


@pytest.fixture
def notebook() -> dict:
    space: dict = {"__name__": "__main__"}
    exec(compile(NOTEBOOK, "<notebook>", "exec"), space)  # noqa: S102 - the test's own student
    return space


def test_a_wrong_earlier_function_costs_only_its_own_task(notebook):
    from lmbook.tasks.ch01 import CROSS_ENTROPY, LOG_SOFTMAX

    assert _verdict(LOG_SOFTMAX, notebook["log_softmax"]) != "passed"
    assert _verdict(CROSS_ENTROPY, notebook["cross_entropy"]) == "passed"
    assert _verdict(CROSS_ENTROPY, notebook["cross_entropy"], hidden=True) == "passed"


def test_a_later_task_wrong_in_its_own_part_still_fails(notebook):
    from lmbook.tasks.ch01 import CROSS_ENTROPY

    said = _verdict(CROSS_ENTROPY, notebook["cross_entropy_over_padding"])
    first = said.splitlines()[0]
    assert first.startswith("cross_entropy: 1 of ") and "padded with -100" in said, said


def test_the_students_own_function_is_theirs_again_after_the_call_even_if_it_raised(notebook):
    from lmbook.tasks.ch01 import CROSS_ENTROPY

    own = notebook["log_softmax"]
    with pytest.raises(ZeroDivisionError), EarlierTasks(notebook["cross_entropy"], CROSS_ENTROPY.builds_on):
        assert notebook["log_softmax"] is not own
        raise ZeroDivisionError
    assert notebook["log_softmax"] is own


def test_a_right_version_used_as_the_earlier_tasks_answer_gets_no_credit():
    from lmbook.tasks.ch06 import MULTIHEAD_ATTENTION, SPLIT_HEADS

    right_split = dict(MULTIHEAD_ATTENTION.builds_on)["split_heads"]
    assert "not graded" in _verdict(SPLIT_HEADS, right_split)

    def split_heads(x, n_head):  # reached through the check object, as a student who read the grader might
        return right_split(x, n_head)

    assert "not graded" in _verdict(SPLIT_HEADS, split_heads)
