"""Grade one notebook: run the student's code in the sandbox, decide every test cell outside it.

:func:`grade_notebook` takes a notebook whose test cells hold the instructor's
text (nbgrader's ``OverwriteCells`` put them back, after
:class:`lmbook.grading.nbgrader_plugin.Hygiene`) and returns the outputs of every cell and a verdict for every test
cell. The test cells are never executed: each is a list of
``check("task", answer, hidden=..., seed=...)`` calls, which the judge turns
into inputs for the sandboxed runner, sent only when that cell's turn comes.
The runner replies with the answer's outputs as plain arrays; the judge recomputes the references (torch's own
ops in float64), compares, and names known mistakes, with the same words as
the checks students run in Jupyter.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from . import sandbox, static, values
from .checks import Check, case_inputs, case_seed, planned
from .graded import (  # noqa: F401 - the judge's own names too
    DEFAULT_TIMEOUT,
    Graded,
    ReferenceFailed,
    Verdict,
    is_test_cell,
)
from .gradients import inputs_trained
from .verdict import (
    _KNOWN_ERRORS,
    Outcome,
    bad_return_message,
    bad_window_message,
    decide,
    forbidden_message,
    not_implemented,
    outcome_problem,
)

CPU = torch.device("cpu")


class NotebookConfigError(ValueError):
    """The instructor's notebook is not in the form the judge grades (a bug in the course, not the student)."""


@dataclass(frozen=True)
class Call:
    task: str
    fn: str
    hidden: bool
    seed: int


# ----------------------------------------------------------------------------- reading the notebook


def parse_test_cell(source: str) -> list[Call]:
    """The ``check(...)`` calls of a test cell; anything else in it is a course bug."""
    body = ast.parse(source).body
    calls = []
    for stmt in body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "check"
                and len(call.args) == 2 and isinstance(call.args[0], ast.Constant)
                and isinstance(call.args[1], ast.Name)):
            raise NotebookConfigError(f"a test cell may only call check('task', answer, hidden=..., seed=...): "
                                      f"{ast.unparse(stmt)!r}")
        kw = {k.arg: k.value.value for k in call.keywords if isinstance(k.value, ast.Constant)}
        calls.append(Call(call.args[0].value, call.args[1].id, bool(kw.get("hidden", False)), int(kw.get("seed", 0))))
    if not calls:  # it would pass with nothing checked: hidden tests that were never put back, say
        raise NotebookConfigError("a test cell has no check(...) calls (are the hidden tests missing? grade the "
                                  "notebook as nbgrader's autograde sees it, after OverwriteCells)")
    return calls


def checks_module(nb) -> str:
    """The task module whose ``check`` the notebook's test cells call (``from lmbook.tasks.X import check``).

    This line of the notebook's locked set-up cell is the only way the engine reaches an exercise's tasks.
    """
    for cell in nb.cells:
        if cell.cell_type == "code" and not is_test_cell(cell) and cell.metadata.get("nbgrader", {}).get("locked"):
            m = re.search(r"^from (lmbook\.tasks\.\w+) import check\b", cell.source, re.M)
            if m:
                return m.group(1)
    raise NotebookConfigError("no locked cell imports `check` from an lmbook.tasks module")


def student_cells(nb) -> list[tuple[int, str]]:
    return [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code" and not is_test_cell(c)]


# ----------------------------------------------------------------------------- the job for the runner


def _write(value, name: str, arrays: values.Arrays) -> dict:
    return values.encode(value, name, arrays, inputs=True)


def _read(spec, arrays):
    """A value of the runner's reply, as plain data: arrays read without pickle, nothing else executable."""
    return values.decode(spec, values.wire_loader(arrays))


@dataclass
class _Plan:
    steps: list[dict]  # what job.json holds: the student's cells, and a place for each test cell
    run: list[sandbox.Step]  # what the runner is sent at each step (a test cell's inputs)
    cells: list[int]  # the notebook cell of each step
    probes: list[list[dict]]  # the probes of each step (none for a code cell)
    calls: dict[str, tuple[Call, Check]]  # probe id -> (call, check)
    inputs: dict[str, tuple]  # case id -> (case, seed, args, kwargs, parent: the visible case it shrinks, or None)


# What a training task is sent depends on the task and the call (hidden, seed) alone, never on the student: its
# training data and evaluation contexts, built once per grading process (exercise 1's training text takes ~0.3 s
# of CPU to generate, on every test cell of every student otherwise) and kept encoded, as text (the specs as
# JSON, the arrays as base64), which no later use can change in place. Keyed by the check object itself.
_SHARED: dict[tuple, tuple[Check, str, dict[str, str]]] = {}
_SHARED_MAX = 64  # entries (a few MB each at most); a process grades one assignment at a time


def _shared(check: Check, key: tuple, name: str, make) -> tuple[dict, dict[str, str]]:
    """A fresh copy of the spec of ``make()``'s value (its arrays named after ``name``) and its arrays on the
    wire: computed on the first use in this process for this check, ``key`` and ``name``, then reused."""
    entry = _SHARED.get((id(check), key, name))
    if entry is None or entry[0] is not check:  # an id can be reused by another check once the first is gone
        arrays: values.Arrays = {}
        spec = _write(make(), name, arrays)
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        entry = _SHARED[id(check), key, name] = (check, json.dumps(spec), values.to_wire(arrays))
    return json.loads(entry[1]), entry[2]


def _plan(nb, registry, timeout: float, unreadable: dict[int, str]) -> _Plan:
    plan = _Plan([], [], [], [], {}, {})
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or i in unreadable:  # what the analysis could not read never runs
            continue
        if not is_test_cell(cell):
            plan.steps.append({"kind": "code", "source": cell.source})
            plan.run.append(sandbox.Step(timeout))
            plan.cells.append(i)
            plan.probes.append([])
            continue
        probes, arrays, shared, hidden = [], {}, {}, False
        for j, call in enumerate(parse_test_cell(cell.source)):
            if call.task not in registry.checks:
                raise NotebookConfigError(f"cell {i} checks {call.task!r}, which {registry!r} does not know")
            check = registry.checks[call.task]
            hidden |= call.hidden
            pid = f"c{i}_{j}"
            plan.calls[pid] = (call, check)
            probe = {"id": pid, "task": call.task, "fn": call.fn, "mode": check.probe}
            if check.probe == "train":
                spec, wire = _shared(check, ("train_args",), "train", lambda c=check: list(c.train_args()))
                probe["train_args"] = spec["seq"]  # its items named train_0, train_1, ...
                shared.update(wire)
                probe["contexts"], wire = _shared(check, ("eval_set", call.hidden, call.seed), f"{pid}_ctx",
                                                  lambda c=check, d=call: c.eval_set(d.hidden, d.seed).contexts)
                shared.update(wire)
            else:
                probe["cases"] = []
                # the visible cases' smaller versions too (checks.planned): the decision may show one
                for k, (case, index, parent) in enumerate(planned(check, call.hidden)):
                    args, kwargs = case_inputs(case, call.seed, index, CPU)
                    cid = f"{pid}_{k}"
                    plan.inputs[cid] = (case, case_seed(call.seed, index), args, kwargs, parent)
                    probe["cases"].append({"id": cid, "seed": case_seed(call.seed, index),
                                           "args": [_write(a, f"{cid}_a{n}", arrays) for n, a in enumerate(args)],
                                           "kwargs": {k2: _write(v, f"{cid}_{k2}", arrays)
                                                      for k2, v in kwargs.items()}})
            probes.append(probe)
        trains = any(p["mode"] == "train" for p in probes)
        plan.steps.append({"kind": "probe", "fork": hidden, "trains": trains})  # hidden: in a confined child
        # Not in the job folder: the runner is sent these inputs only when this cell's turn comes.
        plan.run.append(sandbox.Step(timeout, {"probes": probes, "arrays": {**values.to_wire(arrays), **shared}},
                                     fork=hidden,
                                     timed=trains))
        plan.cells.append(i)
        plan.probes.append(probes)
    return plan


# ----------------------------------------------------------------------------- verdicts


def _cases_passed(check: Check, outcomes: list[Outcome]) -> int:
    """How many cases an answer got right (for partial credit): the same test of each case as :func:`decide`'s."""
    try:
        return sum(outcome_problem(check, o) is None for o in outcomes)
    except Exception:  # noqa: BLE001 - an output that cannot be compared earns nothing
        return 0


def _judge_call(pid: str, call: Call, check: Check, result: dict, plan: _Plan, arrays) -> tuple[bool, str, int]:
    """Pass or fail, the message, and the number of cases passed."""
    if result.get("not_implemented"):
        return False, not_implemented(check), 0
    cases = result.get("cases") if isinstance(result.get("cases"), dict) else {}
    outcomes, missing = [], []
    for cid, (case, seed, args, kwargs, parent) in plan.inputs.items():
        if not cid.startswith(pid + "_"):
            continue
        got = cases.get(cid)
        if not isinstance(got, dict):
            if parent is None:  # a smaller version with no result is only not shown
                missing.append(case.name)
            continue
        outcomes.append(outcome_of(got, check, case, seed, args, kwargs, parent, arrays))
    try:
        ok, msg = decide(check, outcomes, call.hidden, missing)
    except Exception as e:  # noqa: BLE001 - a malformed output is the student's wrong answer
        said = "" if call.hidden else f" ({type(e).__name__}: {str(e)[:300]})"  # a hidden case's is not shown
        return False, f"{check.task}: your output could not be compared{said}", 0
    return ok, msg, len(outcomes) if ok else _cases_passed(check, outcomes)


def outcome_of(got: dict, check: Check, case, seed: int, args, kwargs, parent, arrays) -> Outcome:
    """One case's reply from the sandbox (:func:`.runner.reply_of`), read as plain data."""
    changed = got.get("changed") if isinstance(got.get("changed"), list) else []
    changed = [str(c)[:40] for c in changed[:16]]
    if "raised" in got:
        return Outcome(case, seed, args, kwargs, raised=str(got["raised"])[:600], changed=changed, parent=parent)
    return Outcome(case, seed, args, kwargs, _read(got.get("ok"), arrays), changed=changed, parent=parent,
                   grads=_grads(got.get("grads"), check, args, arrays))


def _grads(got, check: Check, args, arrays):
    """The gradients a reply carries, one per input the task is trained through (None: none reached it), or the
    backward pass's error; None when the reply carries none."""
    if isinstance(got, str):
        return got[:300]
    n = len(inputs_trained(args, check.grad_of))
    if not isinstance(got, list) or len(got) != n:
        return None if not check.grad_of else [None] * n
    return [None if spec is None else _read(spec, arrays) for spec in got]


def _error_kind(raised) -> str:
    """An exception's class, if it is Python's or torch's (a class of the student's could be named anything)."""
    kind = str(raised).split(":", 1)[0].strip()
    return kind if kind in _KNOWN_ERRORS else "an exception"


def _judge_train(call: Call, check: Check, result: dict, arrays, seconds: float | None,
                 figures: list[str] | None = None) -> tuple[bool, str]:
    """``seconds``: the CPU time the sandbox spent on this task's training and evaluation, measured from
    outside it (None where it could not be: then the runner's own measure). What a hidden case measured
    (perplexity on the hidden text, training time) is added to ``figures``, for the instructor only."""
    task = check.task
    if result.get("not_implemented"):
        return False, not_implemented(check)
    if "bad_return" in result:
        return False, bad_return_message(check, "another kind of value" if call.hidden else str(result["bad_return"]))
    if result.get("bad_window"):
        longest = check.eval_set(call.hidden, call.seed).contexts.shape[1]
        return False, bad_window_message(check, result.get("window"), longest)
    if "raised" in result:
        return False, f"{task}: your code raised {result['raised']}"
    if "eval_raised" in result:
        said = _error_kind(result["eval_raised"]) if call.hidden else result["eval_raised"]
        return False, f"{task}: evaluating your model on ({result.get('window')}-word) contexts raised {said}"
    ev = check.eval_set(call.hidden, call.seed)
    logits = _read(result.get("logits"), arrays)
    if seconds is None:
        seconds = float(result.get("seconds", 0.0)) if isinstance(result.get("seconds"), int | float) else 0.0
    window = result.get("window") if isinstance(result.get("window"), int) else 0
    targets = getattr(ev, "targets", None)
    if call.hidden and isinstance(targets, torch.Tensor) and not (
            isinstance(logits, torch.Tensor) and logits.dim() == 2 and logits.shape[0] == len(targets)
            and logits.shape[1] > int(targets.max())):
        return False, f"{task}: your model's output on the hidden contexts is not (B, V) logits, one row per context"
    passed, message = check.judge_model(ev, logits, window, seconds)
    if call.hidden:
        if figures is not None:
            figures.append(message.removeprefix("✓ "))
        # The model chose its logits on the hidden text: a perplexity to three decimals, or a diagnosis drawn
        # from it, would carry that text out. The visible test gives the figures, on text the student has.
        return passed, (f"✓ {task}: your model meets the target on fresh held-out text" if passed else
                        f"{task}: your model does not pass on fresh held-out text; the visible test above gives "
                        "its perplexity on held-out text, its training time, and what to change")
    return passed, message


REVIEW_MARGIN = 0.01  # a trained model within 1% of the best possible perplexity is too good to be believed


def _too_good(check: Check, call: Call, result: dict, arrays) -> str | None:
    """Evidence for review that a model was not trained but built from the true one: an evaluation set that
    knows the best possible perplexity (``floor``), reached by the model (a trained one stays well above)."""
    ev = check.eval_set(call.hidden, call.seed)
    floor, targets = getattr(ev, "floor", None), getattr(ev, "targets", None)
    logits = _read(result.get("logits"), arrays)
    if not isinstance(floor, float) or not isinstance(targets, torch.Tensor) or not isinstance(logits, torch.Tensor) \
            or logits.dim() != 2 or logits.shape[0] != len(targets) or logits.shape[1] <= int(targets.max()):
        return None
    with torch.no_grad():
        ppl = float(torch.nn.functional.cross_entropy(logits.double(), targets.long()).exp())
    if ppl <= floor * (1 + REVIEW_MARGIN):
        return (f"{check.task}: the model's perplexity ({ppl:.3f}) is within {REVIEW_MARGIN:.0%} of the best "
                f"possible ({floor:.3f}), that of the process that generated the text: a model trained on the "
                "training text does not get this close. Check that it was trained, not built from the grammar.")
    return None


def _verdicts(plan: _Plan, run: sandbox.RunResult, graded: Graded) -> None:
    budget = [MAX_NOTEBOOK_OUTPUT_CHARS]
    trained_cpu: dict[str, float | None] = {}  # task -> CPU seconds of its training steps so far
    for step_index, (step, cell_index) in enumerate(zip(plan.steps, plan.cells, strict=True)):
        end = run.step_end(step_index)
        if end is not None and isinstance(end.get("tampered"), str):
            graded.tampering.append(f"in the sandbox, after cell {cell_index}: {end['tampered'][:300]}")
        if step["kind"] == "code":
            if end is not None:
                graded.outputs[cell_index] = _clean_outputs(end.get("outputs"), budget)
            continue
        lines, passed, right, planned, hidden = [], True, 0, 0, False
        results = end.get("probes") if end is not None else None
        results = results if isinstance(results, dict) else {}  # the sandbox's word: check its shape
        arrays = end.get("arrays") if end is not None and isinstance(end.get("arrays"), dict) else {}
        timed_out = results.get("timeout") is True
        crashed = results.get("crashed") if isinstance(results.get("crashed"), str) else None
        for probe in plan.probes[step_index]:
            call, check = plan.calls[probe["id"]]
            hidden |= call.hidden
            n_cases = 1 if check.probe == "train" else len(probe.get("cases", []))
            good = 0
            result = results.get(probe["id"])
            result = result if isinstance(result, dict) else None
            forbidden = graded.forbidden.get(call.task)
            if result is not None and not forbidden and isinstance(result.get("forbidden"), str):
                forbidden = graded.forbidden[call.task] = result["forbidden"][:300]  # the runner's second opinion
            if result is not None and isinstance(result.get("tampered"), str):
                graded.tampering.append(f"while `{call.fn}` ran (cell {cell_index}): {result['tampered'][:300]}")
            if forbidden:
                ok, msg = False, forbidden_message(check, forbidden)
            elif result is None and timed_out:
                ok, msg = False, (f"{check.task}: stopped after {plan.run[step_index].timeout:.0f} s: your code "
                                  "took too long (an endless loop?)")
            elif result is None:
                why = crashed or run.killed or "the notebook stopped before this cell"
                ok, msg = False, f"{check.task}: not graded: {why}."
            elif result.get("missing"):
                ok, msg = False, (f"{check.task}: `{call.fn}` is not defined; run the cell that defines it and fix "
                                  "any error it shows")
            elif result.get("timed_out_before"):
                ok, msg = False, (f"{check.task}: not run: `{call.fn}` already ran past its time limit in an earlier "
                                  "test (an endless loop?), so it was not run again")
            elif check.probe == "train":
                cpu = run.cpu.get(step_index)
                so_far = trained_cpu.get(call.task, 0.0)
                trained_cpu[call.task] = None if cpu is None or so_far is None else so_far + cpu
                figures: list[str] = []
                ok, msg = _judge_train(call, check, result, arrays, trained_cpu[call.task], figures)
                graded.instructor += [f"hidden test of {call.task} (not in the student's feedback): {f}"
                                      for f in figures]
                good = int(ok)
                too_good = _too_good(check, call, result, arrays) if ok else None
                if too_good and too_good not in graded.review:
                    graded.review.append(too_good)
            else:
                ok, msg, good = _judge_call(probe["id"], call, check, result, plan, arrays)
            passed &= ok
            right += n_cases if ok else min(good, n_cases)
            planned += n_cases
            lines.append(msg)
        graded.verdicts[cell_index] = Verdict(passed, lines, (right, planned), hidden)
        graded.outputs[cell_index] = graded.verdicts[cell_index].outputs()


MAX_CELL_OUTPUT_CHARS = 2_500_000  # as the runner keeps them (runner.py); checked again here, outside
MAX_NOTEBOOK_OUTPUT_CHARS = 8_000_000


def _clean_outputs(outputs, budget: list[int] | None = None) -> list[dict]:
    """The runner's outputs, re-built field by field (the student could have written anything there), within
    the cell's and the notebook's share of what the feedback keeps (``budget``: what the notebook has left)."""
    clean = []
    cell = MAX_CELL_OUTPUT_CHARS
    budget = budget if budget is not None else [MAX_NOTEBOOK_OUTPUT_CHARS]

    def fits(text: str) -> bool:
        nonlocal cell
        if len(text) > min(cell, budget[0]):
            return False
        cell -= len(text)
        budget[0] -= len(text)
        return True

    for o in outputs if isinstance(outputs, list) else []:
        if not isinstance(o, dict):
            continue
        kind = o.get("output_type")
        if kind == "stream" and o.get("name") in ("stdout", "stderr"):
            text = str(o.get("text", ""))[:30_000]
            clean.append({"output_type": "stream", "name": o["name"], "text": text if fits(text) else
                          "[output left out: more than the grader keeps]\n"})
        elif kind in ("display_data", "execute_result") and isinstance(o.get("data"), dict):
            data = {k: v[:30_000] if k == "text/plain" else v for k, v in o["data"].items()
                    if k in ("text/plain", "image/png") and isinstance(v, str) and len(v) <= 2_000_000}
            data = {k: v for k, v in data.items() if fits(v)} or {
                "text/plain": "<output left out: more than the grader keeps>"}
            out = {"output_type": kind, "data": data, "metadata": {}}
            if kind == "execute_result":
                out["execution_count"] = o.get("execution_count") if isinstance(o.get("execution_count"), int) else None
            clean.append(out)
        elif kind == "error":
            tb = o.get("traceback") if isinstance(o.get("traceback"), list) else []
            clean.append({"output_type": "error", "ename": str(o.get("ename", "Error"))[:100],
                          "evalue": str(o.get("evalue", ""))[:2000], "traceback": [str(t)[:5000] for t in tb[:40]]})
    return clean[:30]


# ----------------------------------------------------------------------------- the whole notebook


def notebook_time_limit(timeout: float, reference_seconds: float | None) -> float:
    """The most a whole notebook may run on the clock: one cell at its full limit (a cell that waits without
    computing runs sandbox.WALL_FACTOR times its CPU-time limit on the clock, and must cost only that cell), and
    everything else ten times as long as the reference solution took (what the exercise needs); without a
    reference run, three cells' limits on the clock."""
    if reference_seconds is None:
        return max(900.0, 3 * sandbox.WALL_FACTOR * timeout)
    return sandbox.WALL_FACTOR * timeout + max(120.0, 10 * reference_seconds)


def grade_notebook(nb, *, use_sandbox: bool = True, limits: sandbox.Limits | None = None,
                   timeout: float = DEFAULT_TIMEOUT, reference_seconds: float | None = None) -> Graded:
    """Run and judge ``nb`` (test cells already restored to the instructor's text). ``reference_seconds``: how
    long the reference solution's run took here (:func:`preflight`), which sets the whole notebook's limit."""
    total = notebook_time_limit(timeout, reference_seconds)
    limits = limits or sandbox.Limits(total_s=total, cpu_seconds=int(total))
    module = checks_module(nb)
    registry = importlib.import_module(module).check
    graded = Graded()
    cells = student_cells(nb)
    findings = static.find_tampering(cells)
    graded.tampering = [str(f) for f in findings]
    tests = [(i, call) for i, c in enumerate(nb.cells) if is_test_cell(c) for call in parse_test_cell(c.source)]
    # the assignment's locked set-up (its text restored from the gradebook): the data it binds is every student's
    setup = {i for i, c in enumerate(nb.cells) if c.cell_type == "code" and not is_test_cell(c)
             and c.metadata.get("nbgrader", {}).get("locked")}
    for i, call in tests:
        reason = static.find_forbidden_use(cells, call.fn, registry.checks[call.task], before=i, setup=setup)
        if reason:
            graded.forbidden.setdefault(call.task, reason)
    if findings:  # not run at all: every task of a tampering notebook gets no credit
        _no_credit(graded, tests)
        return graded
    tmp = Path(tempfile.mkdtemp(prefix="lmbook-grade-"))
    try:
        job_dir = tmp / "job"
        job_dir.mkdir()
        unreadable = static.unreadable_cells(cells)
        for i, why in unreadable.items():
            graded.outputs[i] = [{"output_type": "error", "ename": "SyntaxError", "evalue": why, "traceback": [
                f"the grader cannot read this cell as Python ({why}), so it did not run it"]}]
        plan = _plan(nb, registry, timeout, unreadable)
        # The job holds the student's own cells and nothing of the grader's: inputs go with each step.
        (job_dir / "job.json").write_text(json.dumps({"checks_module": module, "steps": plan.steps,
                                                        "sandboxed": use_sandbox}))
        # tmp stays 0700 (mkdtemp): bubblewrap binds the job in as root; sandbox.run lets the sandbox read it
        run = sandbox.run(job_dir, plan.run, limits, sandbox=use_sandbox)
        graded.seconds = run.seconds
        if run.stray:
            graded.tampering.append("messages on the grader's channel that the grader's runner did not send: the "
                                    "notebook's code wrote them (they were ignored)")
        graded.tampering += [f"in the sandbox: {t}" for t in run.tampered]
        if not run.complete(len(plan.steps)):
            first = next((i for i in sandbox.run_order(plan.run) if i not in run.ends), None)
            stop = plan.cells[first] if first is not None else None
            graded.problem = (run.killed or f"the run ended early (exit status {run.returncode})") + (
                f"; cell {stop} did not finish, and the cells after it did not run" if stop is not None else "")
            if not run.ends:
                graded.problem += f". Sandbox error: {run.stderr.strip()[-500:]}"
        _verdicts(plan, run, graded)
        if graded.tampering:  # found while it ran: the same rule, no credit for any task
            _no_credit(graded, tests)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return graded


def _no_credit(graded: Graded, tests: list[tuple[int, Call]]) -> None:
    msg = static.tampering_message(graded.tampering[0])
    for i, _ in tests:
        graded.verdicts[i] = Verdict(False, [msg])
        graded.outputs[i] = graded.verdicts[i].outputs()


# ----------------------------------------------------------------------------- the reference solution first


def reference_problem(nb, graded: Graded) -> str | None:
    """Why a graded reference solution is not a full-marks notebook (None: it is)."""
    if graded.tampering:
        return f"it is flagged for tampering ({graded.tampering[0]})"
    if graded.problem:
        return graded.problem
    if graded.forbidden:
        task, why = next(iter(graded.forbidden.items()))
        return f"{task}: its answer {why}"
    tests = [i for i, c in enumerate(nb.cells) if is_test_cell(c)]
    for i in tests:
        verdict = graded.verdicts.get(i)
        if verdict is None or not verdict.passed:
            return (verdict.lines[-1] if verdict and verdict.lines else f"cell {i} was not graded")
    return None


def preflight(source: Path, *, use_sandbox: bool = True, timeout: float = DEFAULT_TIMEOUT,
              cache: Path | None = None) -> float:
    """Grade the reference solution ``source`` (the nbgrader source notebook) exactly as a student's notebook
    is graded, and return how long its run took; raise :class:`ReferenceFailed`, with one line, if it does not
    earn full marks. The result is kept in ``cache`` (by the notebook, the grader and the configuration)."""
    import hashlib

    import nbformat

    from .nbgrader_plugin import grader_fingerprint

    nb = nbformat.read(source, as_version=4)
    key = hashlib.sha256(json.dumps([grader_fingerprint(), use_sandbox, timeout, os.environ.get("LMBOOK_DEVICE", ""),
                                     [(c.cell_type, c.source) for c in nb.cells]]).encode()).hexdigest()[:32]
    path = cache / f"reference-{key}.json" if cache is not None else None
    graded = None
    if path is not None and path.exists():
        try:
            graded = Graded.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            graded = None
    if graded is None:
        graded = grade_notebook(nb, use_sandbox=use_sandbox, timeout=timeout)
        if path is not None and reference_problem(nb, graded) is None:  # a failure is never kept: fixed, it reruns
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(graded.to_json()))
            os.replace(tmp, path)
    why = reference_problem(nb, graded)
    if why:
        why = " ".join(why.split())[:400]
        raise ReferenceFailed(f"the reference solution {source.name} does not earn full marks in this grader's "
                              f"sandbox and configuration, so nobody was graded: {why}")
    return graded.seconds
