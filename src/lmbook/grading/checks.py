"""Declarative checks: one definition serves the visible test, the hidden test and the autograder.

A :class:`Check` is data: the cases to try (input generators), an independent
reference (torch's own op where one exists), a comparison, and the common
wrong answers (:class:`Mutant`) it recognises by name. :func:`run_check`
executes one against a student's function and raises :class:`CheckFailed`
with a message in the student's terms, never a bare ``AssertionError``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..device import get_device
from . import values
from .fence import Guarded
from .verdict import Outcome, decide, forbidden_message, not_implemented
from .watch import GRADER_MODULES, CallWatch, find_forbidden_use, install_thread_hooks  # noqa: F401 - re-exported

Inputs = tuple[tuple, dict]


@dataclass(frozen=True)
class Case:
    """One input to try. ``make(generator, device)`` returns ``(args, kwargs)``.

    ``smaller``: smaller versions of a visible case (fewer rows, positions, dimensions; see
    :func:`~lmbook.grading.reproduce.sized`); when the case fails, the smallest of them that fails too is shown to
    the student as Python to paste.
    """

    name: str
    make: Callable[[torch.Generator, torch.device], Inputs]
    smaller: tuple[Case, ...] = ()


@dataclass(frozen=True)
class Mutant:
    """A known wrong implementation, and what the student most likely misunderstood."""

    fn: Callable
    misconception: str


@dataclass(frozen=True)
class Check:
    """What a task's function must do, as data.

    ``compare(out, ref)`` returns None when ``out`` is acceptable and otherwise
    a sentence saying what differs. ``forbidden`` lists objects the answer may
    not use (the graded answer in lmbook, or torch's ready-made op);
    ``forbidden_attrs`` lists attribute names that reach them (``torch.log_softmax``,
    ``x.log_softmax()``).
    """

    task: str
    what: str
    reference: Callable
    cases: Sequence[Case]
    hidden_cases: Sequence[Case]
    compare: Callable[[object, object], str | None]
    mutants: Sequence[Mutant] = ()
    forbidden: Sequence[object] = ()
    forbidden_attrs: Sequence[str] = ()
    forbidden_modules: Sequence[str] = ()
    # What the statement also specifies of the result: no gradient tracking; the inputs' floating dtype.
    no_grad: bool = False
    keep_dtype: bool = False
    # The arguments (by position) a loss is trained through: the gradient the answer's result gives them is
    # checked against autograd on the reference (:mod:`.gradients`).
    grad_of: tuple[int, ...] = ()
    # How many of the result's tensors, from the first, a model is trained through: an LSTM cell's h and c, the
    # three projections Q, K and V; not attention's weights, returned to be plotted.
    trained_outputs: int = 1
    # The earlier tasks' functions the statement lets the answer call, by the name it gives them, and a right
    # version of each, put in their place while the answer runs (:mod:`.earlier`): one mistake costs one task.
    builds_on: tuple[tuple[str, Callable], ...] = ()
    # Whether the answer must leave its inputs as they were (the exercises say so, unless a task works in place).
    inputs_kept: bool = True
    run: Callable | None = None  # custom runner (e.g. a training task); default: call and compare
    # A training task, graded outside the student's kernel: the kernel calls the answer on
    # ``train_args()`` and the model it returns on ``eval_set(hidden, seed).contexts``; then
    # ``judge_model(eval_set, logits, window, seconds)`` returns (passed, message).
    probe: str = "call"
    train_args: Callable | None = None
    eval_set: Callable | None = None
    judge_model: Callable | None = None


class CheckFailed(Exception):
    """A check failed; the message says what is wrong in the student's terms."""

    def _render_traceback_(self) -> list[str]:
        # IPython calls this instead of printing a traceback: the student (and the
        # feedback) sees the diagnosis, not the grading code or hidden inputs.
        return [f"\x1b[31m✗ {line}\x1b[0m" if i == 0 else line for i, line in enumerate(str(self).splitlines())]


# ----------------------------------------------------------------------------- running


def case_seed(seed: int, i: int) -> int:
    """The seed of case ``i`` of a check run with ``seed``: its inputs' and, before the call, torch's global RNG."""
    return seed * 1009 + i


# The inputs are drawn from a stream of their own: were it seeded as torch's global generator is before the call,
# an answer's random draws would repeat the draws that made its inputs (a "random" token would be one of the batch's).
INPUT_STREAM = 0x5DEECE66D


def case_inputs(case: Case, seed: int, i: int, device: torch.device) -> Inputs:
    """The inputs of case ``i`` for a check run with ``seed`` (the same numbers on every device)."""
    return case.make(torch.Generator().manual_seed(case_seed(seed, i) ^ INPUT_STREAM), device)


def planned(check: Check, hidden: bool) -> list[tuple[Case, int, int | None]]:
    """Every case one ``check(...)`` call runs, as (case, its index for :func:`case_seed`, its parent): the
    visible or hidden cases (parent None), then, for a visible call, each visible case's smaller versions (their
    parent's index, and its seed: the same stream of numbers, fewer of them)."""
    cases = list(check.hidden_cases if hidden else check.cases)
    out: list[tuple[Case, int, int | None]] = [(c, i, None) for i, c in enumerate(cases)]
    if not hidden:
        out += [(s, i, i) for i, c in enumerate(cases) for s in c.smaller]
    return out


def run_check(check: Check, answer: Callable, *, hidden: bool = False, seed: int = 0,
              device: torch.device | None = None, verbose: bool = True) -> int:
    """Run ``check`` on ``answer``; return the number of cases passed, or raise :class:`CheckFailed`.

    The answer gets each case's inputs, and the decision its result, as they would cross the grader's
    sandbox (:func:`values.round_trip`), and the decision is the grader's own (:func:`verdict.decide`).
    """
    device = device or get_device()
    reason = find_forbidden_use(answer, check)
    if reason:
        raise CheckFailed(forbidden_message(check, reason))
    if check.run is not None:
        return check.run(check, answer, hidden=hidden, seed=seed, device=device, verbose=verbose)
    plan = planned(check, hidden)
    main = [p for p in plan if p[2] is None]

    def run(case: Case, i: int, parent: int | None) -> Outcome:
        args, kwargs = case_inputs(case, seed, i, device)
        passed_in = (values.round_trip(tuple(args), device, inputs=True),
                     {k: values.round_trip(v, device, inputs=True) for k, v in kwargs.items()})
        watch = Guarded(check)  # what the answer calls is seen, and its ready-made answers do not compute
        try:
            result = values.call_once(answer, passed_in[0], passed_in[1], case_seed(seed, i), around=watch,
                                      device=device, grad_of=check.grad_of, stand_ins=check.builds_on,
                                      trained_outputs=check.trained_outputs)
        except NotImplementedError:
            raise CheckFailed(not_implemented(check)) from None
        if watch.found or watch.tampered:
            raise CheckFailed(forbidden_message(check, watch.found or watch.tampered))
        out = values.round_trip(result["out"], device) if "out" in result else None
        grads = result.get("grads")
        grads = [None if g is None else values.round_trip(g) for g in grads] if isinstance(grads, list) else grads
        return Outcome(case, case_seed(seed, i), args, kwargs, out, result.get("raised"), result["changed"], parent,
                       grads)

    outcomes = [run(*p) for p in main]
    ok, message = decide(check, outcomes, hidden)
    if not ok and len(plan) > len(main):
        # the smaller versions of the visible cases, run only now that one failed: the grader runs them all
        # beforehand, and the decision (the same function) shows the same one
        outcomes += [run(*p) for p in plan[len(main):]]
        ok, message = decide(check, outcomes, hidden)
    if not ok:
        raise CheckFailed(message)
    if verbose:
        print(message)
    return len(main)


@torch.no_grad()
def model_logits(model, window: int, contexts: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A trained model's (N, V) logits, on the CPU, for the last ``window`` words of each context, in batches."""
    if isinstance(model, torch.nn.Module):
        model.eval()
    chunks = [model(contexts[i:i + 4096, contexts.shape[1] - window:].to(device)).float().cpu()
              for i in range(0, len(contexts), 4096)]
    return torch.cat(chunks)


class Registry:
    """The checks of one exercise notebook, looked up by task name.

    In a notebook, the checks also read the cells run so far as the grader reads the notebook
    (:mod:`.static`), so what the grader refuses is refused here first: a check says it when it runs, and
    every cell the grader would refuse says so under it (an IPython hook registered by the set-up cell)."""

    def __init__(self, checks: Sequence[Check]):
        self.checks = {c.task: c for c in checks}
        _watch_the_notebook()

    def __call__(self, task: str, answer: Callable, *, hidden: bool = False, seed: int = 0) -> None:
        # Returns None on purpose: nbgrader reads a number displayed by a grade cell as partial credit.
        if task not in self.checks:
            raise KeyError(f"no check named {task!r}; known: {', '.join(self.checks)}")
        refused = _refused_in_this_notebook(self.checks[task], answer)
        if refused:
            raise CheckFailed(refused)
        run_check(self.checks[task], answer, hidden=hidden, seed=seed)

    def __repr__(self) -> str:
        return f"Registry({', '.join(self.checks)})"


# ----------------------------------------------------------------------------- in the student's notebook


def _shell():
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return shell if shell is not None and hasattr(shell, "history_manager") else None


def _cells_run(shell) -> list[tuple[int, str]]:
    """The cells run so far in this kernel, as typed (``In[1]``, ``In[2]``...)."""
    return [(i, src) for i, src in enumerate(shell.history_manager.input_hist_raw) if i > 0 and src.strip()]


def _jupyter_finding(f) -> str:
    return f"In [{f.cell}], line {f.line}: `{f.code}`: {f.reason}"


def _refused_in_this_notebook(check: Check, answer) -> str | None:
    """What the grader would refuse of this answer, read from the cells run so far (None outside IPython)."""
    shell = _shell()
    if shell is None:
        return None
    from . import static

    cells = _cells_run(shell)
    findings = static.find_tampering(cells)
    if findings:
        return static.tampering_message(_jupyter_finding(findings[0])).replace(
            "Your instructor has been told and will review it.",
            "The grader gives no credit for any task of a notebook that does this: remove it, then restart the "
            "kernel and run the notebook again.")
    names = [k for k, v in shell.user_ns.items() if v is answer and not k.startswith("_")]
    name = getattr(answer, "__name__", "") if getattr(answer, "__name__", "") in names else (names or [""])[0]
    reason = static.find_forbidden_use(cells, name, check, setup=static.setup_cells(cells)) if name else None
    return forbidden_message(check, reason) if reason else None


_hooked_shells: set[int] = set()


def _watch_the_notebook() -> None:
    """Under every cell run from now on that the grader would refuse, say so (once per kernel)."""
    shell = _shell()
    if shell is None or id(shell) in _hooked_shells:
        return
    _hooked_shells.add(id(shell))
    install_thread_hooks()

    def after_cell(result) -> None:
        from . import static

        try:
            cells = _cells_run(shell)
            last = cells[-1][0] if cells else None
            mine = [f for f in static.find_tampering(cells) if f.cell == last]
        except Exception:  # noqa: BLE001 - a student's notebook is never stopped by the grader's reading of it
            return
        for f in mine:
            print(f"\u26a0 the grader refuses this cell, and gives no credit for any task of a notebook with it: "
                  f"line {f.line}: `{f.code}`: {f.reason}", file=sys.stderr)

    shell.events.register("post_run_cell", after_cell)
