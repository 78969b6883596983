"""The decision on a task's check, and its words: one function for the student's kernel and for the grader.

:func:`decide` takes what the student's function did on each case (its result as it crossed the sandbox's
wall, an exception, the arguments it changed in place) and returns pass or fail with the message. The
in-kernel check and the grader's judge both call it on the same values (:mod:`.values`), so what passes in
the notebook passes in the grader.

A known mistake is named only when the student's function gave that mistake's output on every case where the
mistake gives one, and the mistake differs from the right answer on at least one of them: one degenerate case
where many mistakes coincide names nothing, and an exception of the same type as the mistake's is no evidence
either way. When several known mistakes explain the outputs, all are said.

When a visible case fails, the smallest of its smaller versions that fails too is printed as Python the student
can paste, with the expected and returned values side by side (:mod:`.reproduce`).
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .compare import float64_inputs, tensors_in, to_reference
from .gradients import gradient_problem
from .reproduce import reproduction
from .values import seed_all

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
    parent: int | None = None  # a smaller version of visible case ``parent``, run to show a failure small
    grads: object = None  # the gradient the result gave each of check.grad_of, or the error computing it


def reference_of(check, o: Outcome):
    with torch.no_grad():
        return check.reference(*to_reference(o.args), **to_reference(o.kwargs))


def _argument_names(check, changed: Sequence[str]) -> str:
    try:
        params = list(inspect.signature(check.reference).parameters)
    except (TypeError, ValueError):
        params = []
    names = [params[int(c)] if c.isdigit() and int(c) < len(params) else c for c in changed]
    return ", ".join(f"`{n}`" for n in names)


def raised_message(raised: str) -> str:
    """'your code raised TypeError: ...', with the student's own lines (if any) indented below it."""
    first, *frames = raised.splitlines()
    return "your code raised " + first + "".join("\n      " + line.strip() for line in frames)


def _floats64(x) -> bool:
    return any(t.dtype == torch.float64 for t in tensors_in(x))


def outcome_problem(check, o: Outcome) -> str | None:
    """What is wrong with one case's outcome, in the student's terms, or None."""
    if o.raised is not None:
        return f"[{o.case.name}] {raised_message(o.raised)}"
    problems = []
    if o.changed and check.inputs_kept:
        problems.append(f"changed its input {_argument_names(check, o.changed)} in place: leave the caller's "
                        "tensors as they were (write `x = x * 2`, not `x *= 2` or `x[...] = ...` on an input)")
    inputs, outputs = tensors_in((o.args, o.kwargs)), tensors_in(o.out)
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
    with float64_inputs(_floats64((o.args, o.kwargs))):
        compared = check.compare(o.out, reference_of(check, o))
    if compared:
        problems.append(compared)
    elif not problems:
        gradient = gradient_problem(check, o.args, o.kwargs, o.grads)
        problems += [f"the value is right, but {gradient}"] if gradient else []
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
    outputs, inputs = tensors_in(o.out), tensors_in((o.args, o.kwargs))
    if check.no_grad and any(t.requires_grad for t in outputs):
        said.append("returned a tensor that still tracks gradients")
    if check.keep_dtype and any(t.is_floating_point() for t in inputs) and any(
            t.is_floating_point() and t.dtype != next(i for i in inputs if i.is_floating_point()).dtype
            for t in outputs):
        said.append("returned another floating dtype than its inputs'")
    if check.compare(o.out, ref) is not None:
        refs = tensors_in(ref)
        if not _answer_like(check, ref):  # e.g. a sampling task, whose reference is a distribution to test against
            said.append("returned a result that fails this case's test")
        elif type(o.out) is not type(ref) and not (isinstance(ref, float | int) and isinstance(o.out, float | int)):
            said.append("returned another kind of value than the expected one")
        elif len(outputs) != len(refs) or any(a.shape != b.shape for a, b in zip(outputs, refs, strict=False)):
            said.append("returned a result of another shape than the expected one")
        else:
            said.append("returned values that differ from the expected ones")
    elif not said:
        gradient = gradient_problem(check, o.args, o.kwargs, o.grads, hidden=True)
        said += [f"returned the right value, but {gradient}"] if gradient else []
    return f"[{o.case.name}] your code " + "; ".join(said or ["returned a wrong result"]) + \
        " (a hidden case's values are not shown)"


def _answer_like(check, ref) -> bool:
    """Whether the reference is a value of the answer's kind (it passes its own comparison), so that kinds and
    shapes can be compared with it."""
    try:
        return check.compare(ref, ref) is None
    except Exception:  # noqa: BLE001 - a comparison that cannot take the reference as an answer
        return False


def case_problem(check, case, out, args: tuple, kwargs: dict) -> str | None:
    """None if ``out`` is right for these inputs; else what differs (no diagnosis)."""
    return outcome_problem(check, Outcome(case, 0, args, kwargs, out))


def _tracked_as_passed(check, args: tuple) -> tuple:
    """The arguments a loss is trained through, shown as the answer got them: tracking gradients."""
    return tuple(a.detach().clone().requires_grad_(True) if i in check.grad_of and isinstance(a, torch.Tensor)
                 and a.is_floating_point() else a for i, a in enumerate(args))


def known_mistakes(check, outcomes: Sequence[Outcome]) -> list[str]:
    """The misconceptions whose mutant gives the student's output on every case where it gives one, and differs
    from the reference on at least one of them (the smaller versions of cases are not evidence)."""
    outcomes = [o for o in outcomes if o.parent is None]
    if not outcomes:
        return []
    return list(dict.fromkeys(m.misconception for m in check.mutants if _explains(check, m, outcomes)))


def _explains(check, mutant, outcomes: Sequence[Outcome]) -> bool:
    informative = False
    for o in outcomes:
        seed_all(o.seed)
        try:
            with torch.no_grad():
                # same dtype and device as the student's run, so overflow mistakes reproduce exactly
                wrong = to_reference(mutant.fn(*_clone(o.args), **_clone(o.kwargs)))
        except Exception:  # noqa: BLE001 - the mistake raises here: the student's code must not return a value
            if o.raised is None:
                return False
            continue  # both raise: that says nothing about which mistake it is
        if o.raised is not None:
            return False
        with float64_inputs(_floats64((o.args, o.kwargs))):
            if check.compare(o.out, wrong) is not None:
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
    main = [o for o in outcomes if o.parent is None]  # a visible case's smaller versions are not cases of their own
    problems = [(hidden_problem if hidden else outcome_problem)(check, o) for o in main]
    failures = [p for p in problems if p]
    failures += [f"[{name}] no result (the run stopped before this case)" for name in missing]
    if not failures:
        return True, pass_message(check, n, hidden)
    message = failure_message(check, failures, n, hidden)
    named = known_mistakes(check, main) if not missing else []
    if len(named) == 1:
        message += f"\n  {LIKELY_CAUSE}{named[0]}"
    elif named:
        message += f"\n  {SEVERAL_CAUSES}" + CAUSE_SEPARATOR.join(named)
    if not hidden:
        shown = smallest_failure(check, main, problems, [o for o in outcomes if o.parent is not None])
        if shown:
            message += "\n  " + shown.replace("\n", "\n  ")
    return False, message


def _size(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel()
    if isinstance(x, tuple | list):
        return sum(_size(v) for v in x) + 1
    if isinstance(x, dict):
        return sum(_size(v) for v in x.values()) + 1
    if isinstance(x, str):
        return len(x) + 1
    return 1


def _detail(o: Outcome, problem: str) -> str:
    """A case's problem without the case's name in front (a name may hold brackets: "[SEP] 102")."""
    prefix = f"[{o.case.name}] "
    return problem[len(prefix):] if problem.startswith(prefix) else problem


def _kind(o: Outcome, problem: str) -> str:
    if o.raised is not None:
        return "raised " + o.raised.split(":", 1)[0]
    detail = _detail(o, problem)
    head = detail.split(": ", 1)[0]
    return head if " " not in head else detail.split(" ", 1)[0]


def smallest_failure(check, main: Sequence[Outcome], problems: Sequence[str | None],
                     smaller: Sequence[Outcome]) -> str | None:
    """The smallest failing input of the first failing visible case that has smaller versions, shown in full;
    the case itself when none of them fails (its inputs are visible anyway) and it is small enough to print.
    Nothing when every failing case says the same (a list returned for a tuple): the input does not matter."""
    details = {_detail(o, p) for o, p in zip(main, problems, strict=True) if p}
    if len(details) == 1 and sum(p is not None for p in problems) > 1 and \
            details.pop().startswith(("returned a", "returned dtype", "changed its input")):
        return None
    for i, (o, problem) in enumerate(zip(main, problems, strict=True)):
        if problem is None:
            continue
        # the smallest smaller version that fails the same way (the same exception, or the same part wrong)
        found = None
        for s in sorted((s for s in smaller if s.parent == i), key=lambda s: _size((s.args, s.kwargs))):
            p = outcome_problem(check, s)
            if p and _kind(s, p) == _kind(o, problem):
                found = s, p
                break
        s, p = found or (o, problem)
        if _size((s.args, s.kwargs)) > (400 if s is not o else 120):  # an unshrunk case: random digits, keep short
            continue
        detail = _detail(s, p)
        if s.raised is not None:
            return reproduction(check.task, check.reference, s.args, s.kwargs, reference_of(check, s), None,
                                detail, raised=True)
        return reproduction(check.task, check.reference, _tracked_as_passed(check, s.args), s.kwargs,
                            reference_of(check, s), s.out, detail)
    return None


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
