"""The gradient an answer gives the inputs a task is trained through, checked against autograd on the reference.

A loss is written to be trained through: its value can be right while no gradient reaches the parameters
(``.detach()``, ``.item()`` then a new tensor, ``torch.no_grad()``), or while part of it is left out of the
graph (a log-sum-exp whose sum is detached). A :class:`~.checks.Check` names the arguments a gradient must
reach (``grad_of``, by position). For each case the answer is given those arguments tracked by autograd, and
the gradient of its result reaches the decision beside the result:

    ∂/∂x_i  Σ (out ⊙ w),   w = cos(0.7 k + 0.3) over the result's elements k  (w = 1 for one number)

Of a result that is several tensors, the first ``Check.trained_outputs`` are differentiated, each with its own
weights: an LSTM cell's h and c, Q, K and V; not attention's weights, returned to be plotted.
The reference's gradient, computed the same way in float64 by ``torch.autograd`` on the task's reference,
is what it is compared with. The same function runs in the student's kernel and in the grader's sandbox.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch

from .compare import tensors_in, to_reference

RTOL = 1e-3  # of the largest entry of the reference's gradient: float32 answers compared with float64
ROUNDING_ROOM = 16  # times the formula's own rounding error in the answer's dtype
NEGLIGIBLE = 1e-9  # of the largest gradient any argument gets: below it, an argument's gradient is rounding
# times ε of the inputs' dtype, their largest magnitude and the largest gradient: float32's error on a score
# of size M is ε·M, and a gradient sums a few dozen such terms (Bahdanau's step with v of size 400 needs 43)
INPUT_ROOM = 64


def cotangent(out: torch.Tensor) -> torch.Tensor:
    """A fixed weight per element of the result (1 for a single number), the same on both sides of the wall."""
    if out.numel() == 1:
        return torch.ones_like(out)
    wide = torch.float32 if out.device.type == "mps" else torch.float64  # MPS has no float64
    k = torch.arange(out.numel(), dtype=wide, device=out.device)
    return torch.cos(0.7 * k + 0.3).to(out.dtype).reshape(out.shape)


def inputs_trained(args: Sequence, grad_of: Sequence[int]) -> list[tuple[int, object]]:
    """Each input a gradient must reach, as (argument's position, key): a tensor argument (key None), or each
    floating-point tensor of a dict argument (a model's parameters, by name)."""
    found: list[tuple[int, object]] = []
    for i in grad_of:
        value = args[i] if i < len(args) else None
        if isinstance(value, dict):
            found += [(i, k) for k, t in value.items() if isinstance(t, torch.Tensor) and t.is_floating_point()]
        else:
            found.append((i, None))
    return found


def _track(t):
    """A leaf tracked by autograd, and the copy to pass: the argument's layout (a slice stays a slice), computed
    from the leaf, so that changing it in place is the task's ordinary "changed its input" failure, not
    autograd's error about leaves."""
    if not (isinstance(t, torch.Tensor) and t.is_floating_point()):
        return None, t
    leaf = t.detach().requires_grad_(True)
    try:
        passed = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(leaf)
    except RuntimeError:  # a layout that cannot be written to (an expanded tensor): a plain copy
        passed = leaf.clone()
    return leaf, passed


def tracked(args: Sequence, grad_of: Sequence[int]) -> tuple[list, list[torch.Tensor | None]]:
    """The arguments to pass, those in ``grad_of`` tracked by autograd (a dict's tensors each), and the leaves to
    differentiate by, one per :func:`inputs_trained` (None: not a floating-point tensor)."""
    args, leaves = list(args), []
    for i, key in inputs_trained(args, grad_of):
        if key is None:
            leaf, passed = _track(args[i] if i < len(args) else None)
            if leaf is not None:
                args[i] = passed
        else:
            leaf, passed = _track(args[i][key])
            args[i] = {**args[i], key: passed}
        leaves.append(leaf)
    return args, leaves


def answer_grads(out, leaves: Sequence[torch.Tensor | None], outputs: int = 1) -> list[torch.Tensor | None]:
    """The gradient the answer's result gives each leaf (None: none reaches it), through the first ``outputs``
    tensors of the result (a model is trained through an LSTM cell's h and c, not through attention's weights)."""
    present = [leaf for leaf in leaves if leaf is not None]
    trained = [t for t in tensors_in(out)[:outputs] if t.is_floating_point() and t.requires_grad]
    if not (trained and present):
        return [None] * len(leaves)
    # A -inf score where the mask forbids (or any value that is not finite) gets weight 0: the softmax after it
    # gives it weight 0 too, so no gradient of a real loss passes through it, whichever way it was written
    total = sum(torch.where(t.isfinite(), t * cotangent(t), torch.zeros((), dtype=t.dtype, device=t.device)).sum()
                for t in trained)
    found = iter(torch.autograd.grad(total, present, allow_unused=True))
    return [None if leaf is None else next(found) for leaf in leaves]


def _on_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, tuple | list):
        return type(x)(_on_cpu(v) for v in x)
    if isinstance(x, dict):
        return {k: _on_cpu(v) for k, v in x.items()}
    return x


def reference_grads(check, args: tuple, kwargs: dict, wide: bool = True) -> list[torch.Tensor | None]:
    """The reference's gradient for each argument in ``check.grad_of``, on the CPU: in float64, or (``wide``
    False) in the inputs' own dtype, where it shows how far that dtype's rounding moves the gradient.

    Remembered by the inputs' values: a class's answers are checked on the same cases, and a Transformer
    block's reference (torch's layer, built and differentiated) costs far more than the comparison."""
    key = _key((check.task, id(check), wide, args, kwargs))
    if key is not None and key in _REMEMBERED:
        _REMEMBERED.move_to_end(key)
        return _REMEMBERED[key]
    if wide:
        args, kwargs = list(to_reference(args)), to_reference(kwargs)
    else:
        args, kwargs = list(_on_cpu(args)), _on_cpu(kwargs)
    args, leaves = tracked(args, check.grad_of)
    with torch.enable_grad():
        out = check.reference(*args, **kwargs)
        grads = [None if g is None else g.detach() for g in answer_grads(out, leaves, check.trained_outputs)]
    if key is not None:
        _REMEMBERED[key] = grads
        if len(_REMEMBERED) > REMEMBERED:
            _REMEMBERED.popitem(last=False)
    return grads


REMEMBERED = 256  # cases' reference gradients kept, the least recently used dropped first
_REMEMBERED: OrderedDict = OrderedDict()


def _key(x):
    """The value of a case's inputs, as a dict key; None for what cannot be told apart by value (any object that
    is not a tensor, a number, a string, None or a container of them) or is too large to keep."""
    if isinstance(x, torch.Tensor):
        if x.numel() > 1 << 16:
            return None
        raw = x.detach().cpu().reshape(-1).contiguous().view(torch.uint8)
        return ("tensor", str(x.dtype), tuple(x.shape), raw.numpy().tobytes())
    if isinstance(x, tuple | list):
        parts = tuple(_key(v) for v in x)
        return None if None in parts else (type(x).__name__, parts)
    if isinstance(x, dict):
        parts = tuple((k, _key(v)) for k, v in x.items())
        return None if any(p is None for _, p in parts) else ("dict", parts)
    if x is None or type(x) in (bool, int, float, str):
        return (type(x).__name__, repr(x))  # repr: -0.0 is not 0.0, nor True 1
    return None


def _names(check, args: Sequence) -> list[str]:
    """How the statement calls each input a gradient must reach: ``x``, or ``params['w1']``."""
    import inspect

    try:
        params = list(inspect.signature(check.reference).parameters)
    except (TypeError, ValueError):
        params = []
    names = []
    for i, key in inputs_trained(args, check.grad_of):
        name = params[i] if i < len(params) else f"argument {i + 1}"
        names.append(name if key is None else f"{name}[{key!r}]")
    return names


def gradient_problem(check, args: tuple, kwargs: dict, grads, *, hidden: bool = False) -> str | None:
    """What is wrong with the gradient an answer's right value gave (``grads``, one per :func:`inputs_trained`),
    or None.

    Called once the result's value is right: a wrong value has a wrong gradient too, and is said as a value."""
    if not check.grad_of or grads is None:
        return None
    if isinstance(grads, str):  # the backward pass through the answer raised
        return "computing the gradient through your result raised an error" + ("" if hidden else f": {grads}")
    refs = reference_grads(check, args, kwargs)
    narrow = any(a.dtype != torch.float64 for a in tensors_in((args, kwargs)) if a.is_floating_point())
    try:  # float64 inputs: the reference above is already in their dtype
        rounded = reference_grads(check, args, kwargs, wide=False) if narrow else refs
    except Exception:  # noqa: BLE001 - the reference in a narrow dtype (float16 on the CPU): float64 alone
        rounded = refs
    # A gradient of rounding's size (a LayerNorm over one feature: x − μ is 0 whatever x is) is none at all
    scale = max([float(r.abs().max()) for r in refs if r is not None and r.numel()] or [0.0])
    floor = NEGLIGIBLE * scale
    # Rounding inputs as large as M moves a gradient by about ε·M times the gradients' scale, however the formula
    # is written: a softmax saturated by scores in the hundreds has gradients that small, and that inexact
    sizes = [(torch.finfo(a.dtype).eps, a.detach()[a.isfinite()].abs())
             for a in tensors_in((args, kwargs)) if a.is_floating_point()]
    room = INPUT_ROOM * scale * max([eps * max(1.0, float(v.max()) if v.numel() else 0.0) for eps, v in sizes]
                                    or [0.0])
    for name, got, ref, narrow in zip(_names(check, args), grads, refs, rounded, strict=True):
        if ref is None or not bool(ref.abs().max() > floor):
            continue
        if got is not None and got.shape != ref.shape:
            return f"the gradient your result gives `{name}` has shape {tuple(got.shape)}, not {tuple(ref.shape)}"
        got = None if got is None else to_reference(got)
        if got is not None and not bool(got[ref.isfinite()].isfinite().all()):
            return (f"the gradient the result gives `{name}` holds nan or inf where the formula's is finite: a "
                    "value that overflows, or log(0) or 0/0 on a branch that `torch.where` or a mask then drops "
                    "(its gradient is still computed: inf times 0 is nan), would stop training")
        # A saturated tanh or sigmoid has a gradient float32 rounds to 0 (the formula's own, in the answer's
        # dtype, is 0 too): a graph that gives exactly 0 there is right, not cut
        rounded_away = narrow is not None and not bool(to_reference(narrow).abs().max() > 0)
        if got is None or (not bool(got.abs().max() > 0) and not rounded_away):
            return (f"no gradient reaches `{name}` through the result: it was computed outside autograd's graph "
                    "(`.detach()`, `.item()` or `.tolist()` then a new tensor, `torch.no_grad()`, `.data`); "
                    "training goes through it, so compute it from the input with tensor operations")
        diff = (got - ref).abs()
        # float32's own rounding can move a gradient that is a difference of near-equal terms (RMSNorm over one
        # feature): what the formula itself gives in the answer's dtype, with room for another way of writing it
        slack = 0.0 if narrow is None else ROUNDING_ROOM * float((to_reference(narrow) - ref).abs().max())
        if float(diff.max()) > max(RTOL * float(ref.abs().max()), slack, room):
            k = int(diff.argmax())
            where = "" if hidden else (f" (at one entry the formula's gradient is {float(ref.flatten()[k]):.3g}, "
                                       f"yours {float(got.flatten()[k]):.3g})")
            return (f"the result gives `{name}` another gradient than the formula{where}: part of the computation "
                    "was left outside autograd's graph (`.detach()`, `.item()`, `.data`, `torch.no_grad()`), or "
                    "passes through a kink where torch's derivative is not the formula's (`abs`, `clamp` or a "
                    "maximum at exactly 0), so training would not follow the loss")
    return None
