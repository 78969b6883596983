"""Declarative checks: one definition serves the visible test, the hidden test and the autograder.

A :class:`Check` is data: the cases to try (input generators), an independent
reference (torch's own op where one exists), a comparison, and the common
wrong answers (:class:`Mutant`) it recognises by name. :func:`run_check`
executes one against a student's function and raises :class:`CheckFailed`
with a message in the student's terms, never a bare ``AssertionError``.
"""

from __future__ import annotations

import dis
import math
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..device import get_device

Inputs = tuple[tuple, dict]


@dataclass(frozen=True)
class Case:
    """One input to try. ``make(generator, device)`` returns ``(args, kwargs)``."""

    name: str
    make: Callable[[torch.Generator, torch.device], Inputs]


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


# ----------------------------------------------------------------------------- comparisons


def to_reference(x):
    """Move a result to CPU float64 so references and answers are compared on equal terms."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        return x.double() if x.is_floating_point() else x
    if isinstance(x, tuple | list):
        return type(x)(to_reference(v) for v in x)
    return x


def describe_tensor_mismatch(out, ref: torch.Tensor, *, rtol: float = 1e-4, atol: float = 1e-5,
                             dim: int | None = -1) -> str | None:
    """None if ``out`` matches ``ref``; otherwise the first thing a student should fix."""
    if not isinstance(out, torch.Tensor):
        return f"returned a {type(out).__name__}, expected a torch.Tensor"
    if tuple(out.shape) != tuple(ref.shape):
        return f"returned shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    out = to_reference(out)
    if not out.is_floating_point():
        return f"returned dtype {out.dtype}, expected floating point values"
    bad = ~torch.isfinite(out) & torch.isfinite(ref)
    if bad.any():
        return (f"returned {int(bad.sum())} NaN/inf value(s) where the answer is finite "
                "(exp of a large number overflows to inf in float32, of a very negative one underflows to 0)")
    if torch.allclose(out, ref, rtol=rtol, atol=atol, equal_nan=True):
        return None
    diff = out - ref
    if ref.dim() > 0 and dim is not None and ref.shape[dim] > 1:
        spread = diff.amax(dim=dim) - diff.amin(dim=dim)
        if (spread.abs() <= atol + rtol * ref.abs().amax()).all():
            return ("off by a constant along the last dimension: every entry is shifted by the same amount "
                    f"(e.g. {float(diff.flatten()[0]):.4g}); a normalising term is missing or wrong")
    worst = int(diff.abs().flatten().argmax())
    idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), ref.shape)) if ref.dim() else ()
    return (f"values differ: at index {idx} you returned {float(out.flatten()[worst]):.6g}, "
            f"expected {float(ref.flatten()[worst]):.6g}")


def describe_value(x) -> str:
    """What a student returned, in a few words: 'a tensor of shape (2, 3)', 'a list'."""
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)}"
    return f"a {type(x).__name__}"


def compare_parts(*names: str, rtol: float = 1e-4, atol: float = 1e-5, order: Sequence[int] | None = None):
    """A comparison for a tuple of tensors, naming the first part that differs.

    ``order``: the indices in the order to look at them (the order they are computed in, so the part
    named is the first stage that went wrong, not a later one that inherits the error).
    """
    def compare(out, ref) -> str | None:
        if not isinstance(out, tuple | list) or len(out) != len(names):
            return f"returned {describe_value(out)}, expected a tuple ({', '.join(names)})"
        for i in order or range(len(names)):
            problem = describe_tensor_mismatch(out[i], ref[i], rtol=rtol, atol=atol, dim=None)
            if problem:
                return f"{names[i]}: {problem}"
        return None
    return compare


def describe_scalar_mismatch(out, ref, *, rtol: float = 1e-4, atol: float = 1e-6) -> str | None:
    """Compare a scalar answer (a Python number or a 0-d tensor)."""
    if isinstance(out, torch.Tensor):
        if out.numel() != 1:
            return f"returned a tensor of shape {tuple(out.shape)}, expected a single number (a scalar)"
        out = out.detach().cpu().item()
    if not isinstance(out, int | float):
        return f"returned a {type(out).__name__}, expected a number"
    ref = float(ref)
    if not math.isfinite(out) and math.isfinite(ref):
        return f"returned {out}, expected a finite number near {ref:.6g} (an overflow or log(0))"
    if math.isclose(out, ref, rel_tol=rtol, abs_tol=atol):
        return None
    return f"returned {out:.6g}, expected {ref:.6g}"


# ----------------------------------------------------------------------------- using the answer


def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _functions_of(obj) -> list[types.FunctionType]:
    """The Python functions that make up ``obj``: itself, or a class's (or instance's) methods."""
    if isinstance(obj, types.MethodType):
        obj = obj.__func__
    if isinstance(obj, types.FunctionType):
        return [obj]
    cls = obj if isinstance(obj, type) else type(obj)
    # only classes the student wrote (in the notebook) are looked into; torch's own are trusted
    return [f for c in cls.__mro__ if c.__module__ == "__main__"
            for f in vars(c).values() if isinstance(f, types.FunctionType)]


def _is_lmbook_or_banned(obj, check: Check) -> bool:
    if any(obj is f for f in check.forbidden):
        return True
    module = getattr(obj, "__module__", None) or ""
    return any(module == m or module.startswith(m + ".") for m in check.forbidden_modules)


def find_forbidden_use(answer, check: Check) -> str | None:
    """Name the forbidden object an answer is, or calls, if any (following the student's own helpers)."""
    if _is_lmbook_or_banned(answer, check):
        return f"`{getattr(answer, '__qualname__', answer)}` is the ready-made implementation, not yours"
    module = getattr(answer, "__module__", None) or ""
    if getattr(answer, "__name__", None) in check.forbidden_attrs and (module.startswith("torch") or not module):
        return f"is torch's own `{answer.__name__}`, not yours"
    seen: set[int] = set()
    todo = _functions_of(answer)
    while todo:
        fn = todo.pop()
        if id(fn.__code__) in seen:
            continue
        seen.add(id(fn.__code__))
        for code in _code_objects(fn.__code__):
            for ins in dis.get_instructions(code):
                if ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and ins.argval in check.forbidden_attrs:
                    return f"calls `.{ins.argval}`, a ready-made implementation of what this task asks you to write"
                if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                    obj = fn.__globals__.get(ins.argval)
                    if obj is None:
                        continue
                    if _is_lmbook_or_banned(obj, check):
                        return f"uses `{ins.argval}` ({getattr(obj, '__module__', '')}), the ready-made answer"
                    if isinstance(obj, types.FunctionType | type) and getattr(obj, "__module__", "") == "__main__":
                        todo.extend(_functions_of(obj))  # a helper of the student's: look inside it too
                    if isinstance(obj, types.ModuleType) and any(
                            obj.__name__ == m or obj.__name__.startswith(m + ".") for m in check.forbidden_modules):
                        return f"uses the module `{obj.__name__}`, which contains the ready-made answer"
    return None


# ----------------------------------------------------------------------------- running


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, tuple | list):
        return type(x)(_clone(v) for v in x)
    return x


def _call(fn, args: tuple, kwargs: dict):
    return fn(*_clone(args), **{k: _clone(v) for k, v in kwargs.items()})


def _diagnose(check: Check, out, args: tuple, kwargs: dict) -> str | None:
    """If the wrong output is exactly what a known mistake produces, name the mistake."""
    for mutant in check.mutants:
        try:
            with torch.no_grad():
                # same dtype and device as the student's run, so overflow mistakes reproduce exactly
                wrong = to_reference(_call(mutant.fn, args, kwargs))
        except Exception:
            continue
        if check.compare(out, wrong) is None:
            return mutant.misconception
    return None


def run_check(check: Check, answer: Callable, *, hidden: bool = False, seed: int = 0,
              device: torch.device | None = None, verbose: bool = True) -> int:
    """Run ``check`` on ``answer``; return the number of cases passed, or raise :class:`CheckFailed`."""
    device = device or get_device()
    reason = find_forbidden_use(answer, check)
    if reason:
        raise CheckFailed(forbidden_message(check, reason))
    if check.run is not None:
        return check.run(check, answer, hidden=hidden, seed=seed, device=device, verbose=verbose)
    cases = list(check.hidden_cases if hidden else check.cases)
    failures = []
    for i, case in enumerate(cases):
        args, kwargs = case_inputs(case, seed, i, device)
        torch.manual_seed(case_seed(seed, i))  # a sampling answer draws the same numbers in Jupyter and the grader
        try:
            out = _call(answer, args, kwargs)
        except NotImplementedError:
            raise CheckFailed(not_implemented(check)) from None
        except Exception as e:  # the student's code crashed: say where, in their terms
            failures.append(f"[{case.name}] your code raised {type(e).__name__}: {e}")
            continue
        problem = case_problem(check, case, out, args, kwargs)
        if problem:
            failures.append(problem)
    if failures:
        raise CheckFailed(failure_message(check, failures, len(cases), hidden))
    if verbose:
        print(pass_message(check, len(cases), hidden))
    return len(cases)


# One wording for the kernel's visible tests and the grader's verdicts outside the kernel.


def case_seed(seed: int, i: int) -> int:
    """The seed of case ``i`` of a check run with ``seed``: its inputs' and, before the call, torch's global RNG."""
    return seed * 1009 + i


def case_inputs(case: Case, seed: int, i: int, device: torch.device) -> Inputs:
    """The inputs of case ``i`` for a check run with ``seed`` (the same numbers on every device)."""
    return case.make(torch.Generator().manual_seed(case_seed(seed, i)), device)


def case_problem(check: Check, case: Case, out, args: tuple, kwargs: dict) -> str | None:
    """None if ``out`` is right for these inputs; else what differs and, if known, the likely cause."""
    with torch.no_grad():
        ref = check.reference(*to_reference(args), **to_reference(kwargs))
    problem = check.compare(out, ref)
    if problem is None:
        return None
    named = _diagnose(check, out, args, kwargs)
    return f"[{case.name}] {problem}" + (f"\n    likely cause: {named}" if named else "")


def not_implemented(check: Check) -> str:
    return f"{check.task}: not implemented yet — replace `raise NotImplementedError()` with your code."


def forbidden_message(check: Check, reason: str) -> str:
    return (f"{check.task}: not graded — your answer {reason}. Write it yourself from the definition; "
            "that is the exercise.")


def failure_message(check: Check, failures: Sequence[str], n_cases: int, hidden: bool) -> str:
    kind = "hidden" if hidden else "visible"
    return f"{check.task}: {len(failures)} of {n_cases} {kind} checks failed\n  - " + "\n  - ".join(failures)


def bad_return_message(check: Check, got: str) -> str:
    return (f"{check.task}: return `(model, window)`: a callable mapping (B, window) word ids to (B, V) logits, "
            f"and the window as an int; got {got}")


def bad_window_message(check: Check, window, longest: int) -> str:
    return f"{check.task}: window {window}: use a window of 1 to {longest} words"


def pass_message(check: Check, n_cases: int, hidden: bool) -> str:
    return f"✓ {check.task}: all {n_cases} {'hidden' if hidden else 'visible'} checks passed ({check.what})"


@torch.no_grad()
def model_logits(model, window: int, contexts: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A trained model's (N, V) logits, on the CPU, for the last ``window`` words of each context, in batches."""
    if isinstance(model, torch.nn.Module):
        model.eval()
    chunks = [model(contexts[i:i + 4096, contexts.shape[1] - window:].to(device)).float().cpu()
              for i in range(0, len(contexts), 4096)]
    return torch.cat(chunks)


# torch's recurrent layers and cells, by every name a notebook can reach them (a task that asks for a cell
# forbids them all)
TORCH_RNN_NAMES = ("RNN", "RNNCell", "LSTM", "LSTMCell", "GRU", "GRUCell", "rnn_tanh", "rnn_tanh_cell",
                   "rnn_relu_cell", "lstm_cell", "gru_cell", "_VF")


def load_weights(module: torch.nn.Module, weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    """``module`` holding the given tensors as its parameters (dotted names reach submodules), in their dtype."""
    module = module.to(dtype=next(iter(weights.values())).dtype)
    with torch.no_grad():
        for name, value in weights.items():
            module.get_parameter(name).copy_(value)
    return module


class Registry:
    """The checks of one exercise notebook, looked up by task name."""

    def __init__(self, checks: Sequence[Check]):
        self.checks = {c.task: c for c in checks}

    def __call__(self, task: str, answer: Callable, *, hidden: bool = False, seed: int = 0) -> None:
        # Returns None on purpose: nbgrader reads a number displayed by a grade cell as partial credit.
        if task not in self.checks:
            raise KeyError(f"no check named {task!r}; known: {', '.join(self.checks)}")
        run_check(self.checks[task], answer, hidden=hidden, seed=seed)

    def __repr__(self) -> str:
        return f"Registry({', '.join(self.checks)})"


def randn(shape: Sequence[int], g: torch.Generator, device: torch.device, scale: float = 1.0,
          offset: float = 0.0) -> torch.Tensor:
    """Random normal floats, generated on the CPU (same numbers on every device) then moved."""
    return (torch.randn(*shape, generator=g) * scale + offset).to(device)
