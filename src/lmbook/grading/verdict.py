"""The decision on a task's check, and its words: one function for the student's kernel and for the grader.

:func:`decide` takes what the student's function did on each case (its result as it crossed the sandbox's
wall, an exception, the arguments it changed in place) and returns pass or fail with the message. The
in-kernel check and the grader's judge both call it on the same values (:mod:`.values`), so what passes in
the notebook passes in the grader.

A known mistake is named only when the student's function did what that mistake does on every case (the
same output, or an exception of the same type), and the mistake differs from the right answer on at least
one of them: one degenerate case where many mistakes coincide names nothing. When several known mistakes
explain the outputs, all are said.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .compare import to_reference

# How a message names known mistakes (the class report reads them back).
LIKELY_CAUSE = "likely cause: "
SEVERAL_CAUSES = "your outputs match more than one known mistake: "
CAUSE_SEPARATOR = "; or "


@dataclass
class Outcome:
    """What the student's function did on one case. ``args``/``kwargs``: the case's inputs as made."""

    case: object  # a checks.Case
    seed: int
    args: tuple
    kwargs: dict
    out: object = None
    raised: str | None = None
    changed: Sequence[str] = ()


def reference_of(check, o: Outcome):
    with torch.no_grad():
        return check.reference(*to_reference(o.args), **to_reference(o.kwargs))


def _tensors(x) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, tuple | list | dict):
        return [t for v in (x.values() if isinstance(x, dict) else x) for t in _tensors(v)]
    return []


def _argument_names(check, changed: Sequence[str]) -> str:
    try:
        params = list(inspect.signature(check.reference).parameters)
    except (TypeError, ValueError):
        params = []
    names = [params[int(c)] if c.isdigit() and int(c) < len(params) else c for c in changed]
    return ", ".join(f"`{n}`" for n in names)


def outcome_problem(check, o: Outcome) -> str | None:
    """What is wrong with one case's outcome, in the student's terms, or None."""
    if o.raised is not None:
        return f"[{o.case.name}] your code raised {o.raised}"
    problems = []
    if o.changed:
        problems.append(f"changed its input {_argument_names(check, o.changed)} in place: leave the caller's "
                        "tensors as they were (write `x = x * 2`, not `x *= 2` or `x[...] = ...` on an input)")
    inputs, outputs = _tensors((o.args, o.kwargs)), _tensors(o.out)
    devices = {t.device.type for t in inputs}
    moved = [t.device.type for t in outputs if devices and t.device.type not in devices]
    if moved:
        problems.append(f"returned a tensor on {moved[0]} while the inputs are on {', '.join(sorted(devices))}: "
                        "create new tensors on the inputs' device (`device=x.device`)")
    if check.no_grad and any(t.requires_grad for t in outputs):
        problems.append("returned a tensor that still tracks gradients (requires_grad=True): the statement asks "
                        "for plain values (compute under `torch.no_grad()` or return `.detach()`)")
    if check.keep_dtype:
        floats = [t.dtype for t in inputs if t.is_floating_point()]
        off = [t.dtype for t in outputs if t.is_floating_point() and floats and t.dtype != floats[0]]
        if off:
            problems.append(f"returned {off[0]} for {floats[0]} inputs: keep the inputs' dtype")
    compared = check.compare(o.out, reference_of(check, o))
    if compared:
        problems.append(compared)
    return f"[{o.case.name}] " + "; ".join(problems) if problems else None


# Exceptions whose name the feedback of a hidden case may show: Python's and torch's own. Any other class is
# the student's, and its name, like every message, could carry the hidden inputs out.
_KNOWN_ERRORS = {name for name, obj in vars(builtins).items()
                 if isinstance(obj, type) and issubclass(obj, BaseException)} | {"OutOfMemoryError", "LinAlgError"}


def hidden_problem(check, o: Outcome) -> str | None:
    """What is wrong with a hidden case's outcome, summarised in the grader's own words: never a message, a
    value, a shape or a type name the student's code chose (any of them could carry the hidden inputs)."""
    if o.raised is not None:
        kind = o.raised.split(":", 1)[0].strip()
        return f"[{o.case.name}] your code raised {kind if kind in _KNOWN_ERRORS else 'an exception'}"
    if outcome_problem(check, o) is None:
        return None
    ref = reference_of(check, o)
    said = []
    if o.changed:
        said.append("changed one of its inputs in place")
    outputs, inputs = _tensors(o.out), _tensors((o.args, o.kwargs))
    if check.no_grad and any(t.requires_grad for t in outputs):
        said.append("returned a tensor that still tracks gradients")
    if check.keep_dtype and any(t.is_floating_point() for t in inputs) and any(
            t.is_floating_point() and t.dtype != next(i for i in inputs if i.is_floating_point()).dtype
            for t in outputs):
        said.append("returned another floating dtype than its inputs'")
    if check.compare(o.out, ref) is not None:
        refs = _tensors(ref)
        if type(o.out) is not type(ref) and not (isinstance(ref, float | int) and isinstance(o.out, float | int)):
            said.append("returned another kind of value than the expected one")
        elif len(outputs) != len(refs) or any(a.shape != b.shape for a, b in zip(outputs, refs, strict=False)):
            said.append("returned a result of another shape than the expected one")
        else:
            said.append("returned values that differ from the expected ones")
    return f"[{o.case.name}] your code " + "; ".join(said or ["returned a wrong result"]) + \
        " (a hidden case's values are not shown)"


def case_problem(check, case, out, args: tuple, kwargs: dict) -> str | None:
    """None if ``out`` is right for these inputs; else what differs (no diagnosis)."""
    return outcome_problem(check, Outcome(case, 0, args, kwargs, out))


def known_mistakes(check, outcomes: Sequence[Outcome]) -> list[str]:
    """The misconceptions whose mutant reproduces what the student's function did on every case (the same
    output, or an exception of the same type), and differs from the reference on at least one of them."""
    if not outcomes:
        return []
    return list(dict.fromkeys(m.misconception for m in check.mutants if _explains(check, m, outcomes)))


def _explains(check, mutant, outcomes: Sequence[Outcome]) -> bool:
    informative = False
    for o in outcomes:
        torch.manual_seed(o.seed)
        try:
            with torch.no_grad():
                # same dtype and device as the student's run, so overflow mistakes reproduce exactly
                wrong = to_reference(mutant.fn(*_clone(o.args), **_clone(o.kwargs)))
        except Exception as e:  # noqa: BLE001 - the mistake raises here: so must the student's code
            if o.raised is None or not o.raised.startswith(f"{type(e).__name__}:"):
                return False
            informative = True
            continue
        if o.raised is not None or check.compare(o.out, wrong) is not None:
            return False
        informative = informative or check.compare(wrong, reference_of(check, o)) is not None
    return informative


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, tuple | list):
        return type(x)(_clone(v) for v in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def decide(check, outcomes: Sequence[Outcome], hidden: bool, missing: Sequence[str] = ()) -> tuple[bool, str]:
    """Pass or fail for one ``check(...)`` call, and the message the student sees (in Jupyter and feedback).

    ``missing``: the names of cases with no result (the run stopped before them).
    """
    n = len(check.hidden_cases if hidden else check.cases)
    failures = [p for p in ((hidden_problem if hidden else outcome_problem)(check, o) for o in outcomes) if p]
    failures += [f"[{name}] no result (the run stopped before this case)" for name in missing]
    if not failures:
        return True, pass_message(check, n, hidden)
    message = failure_message(check, failures, n, hidden)
    named = known_mistakes(check, outcomes) if not missing else []
    if len(named) == 1:
        message += f"\n  {LIKELY_CAUSE}{named[0]}"
    elif named:
        message += f"\n  {SEVERAL_CAUSES}" + CAUSE_SEPARATOR.join(named)
    return False, message


# ----------------------------------------------------------------------------- the words


def not_implemented(check) -> str:
    return f"{check.task}: not implemented yet — replace `raise NotImplementedError()` with your code."


def forbidden_message(check, reason: str) -> str:
    return (f"{check.task}: not graded — your answer {reason}. Write it yourself from the definition; "
            "that is the exercise.")


def failure_message(check, failures: Sequence[str], n_cases: int, hidden: bool) -> str:
    kind = "hidden" if hidden else "visible"
    return f"{check.task}: {len(failures)} of {n_cases} {kind} checks failed\n  - " + "\n  - ".join(failures)


def pass_message(check, n_cases: int, hidden: bool) -> str:
    return f"✓ {check.task}: all {n_cases} {'hidden' if hidden else 'visible'} checks passed ({check.what})"


def bad_return_message(check, got: str) -> str:
    return (f"{check.task}: return `(model, window)`: a callable mapping (B, window) word ids to (B, V) logits, "
            f"and the window as an int; got {got}")


def bad_window_message(check, window, longest: int) -> str:
    return f"{check.task}: window {window}: use a window of 1 to {longest} words"
