"""Which of torch's functions are a task's ready-made answer, derived from torch itself.

A task names what its answer may not use (``Check.forbidden_attrs``: ``"log_softmax"``,
``"cross_entropy"``...). torch reaches each of those by many names: the public one, a private or C-level
alias (``torch._log_softmax``, ``torch._C._nn.cross_entropy_loss``, ``torch._C._nn.nll_loss_nd``,
``torch._scaled_dot_product_attention_math``), an operator (``torch.ops.aten._log_softmax``) and the kernels
the dispatcher finally runs (``aten::_log_softmax``, ``aten::nll_loss_forward``). None of these is typed
here: a forbidden name that is one of torch's own (a function, a class or an aten operator of that name
exists in torch) stands for every name of torch's whose words contain its words, minus the generic ones
(``multi_head_attention_forward`` -> multi, head, attention, which ``aten::_native_multi_head_attention``
contains). Backward kernels are not answers. A forbidden name that is not torch's (``"FeedforwardLM"``,
lmbook's own) stands for itself only.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

# Words that say how an op is implemented, not what it computes.
GENERIC = {"native", "fused", "thnn", "cudnn", "mkldnn", "miopen", "mps", "cpu", "cuda", "xpu", "math", "forward",
           "fwd", "impl", "nd", "special", "linalg", "out", "default", "int", "functional", "for", "aten"}


@functools.lru_cache(maxsize=1 << 14)
def words(name: str) -> tuple[str, ...]:
    """The words of a name: ``CrossEntropyLoss`` and ``_cross_entropy_loss`` -> cross, entropy, loss;
    ``nll_loss2d_forward`` -> nll, loss, 2d, forward. Remembered: the watch asks about every torch call."""
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name))
    return tuple(w for w in re.split(r"[^a-z0-9]+|(?<=[a-z])(?=\d)", name.lower()) if w)


@functools.cache
def _torch_names() -> frozenset[str]:
    """Every name torch gives a function, a class or an operator (as joined words)."""
    import torch
    import torch.nn.functional as F

    names: set[str] = set()
    spaces = [torch, F, torch.Tensor, torch.nn, torch.special, torch.linalg, torch._C._nn, torch._C._VariableFunctions,
              torch.nn.utils, torch.nn.init]
    for space in spaces:
        for attr in dir(space):
            try:
                obj = getattr(space, attr)
            except Exception:  # noqa: BLE001 - a lazy attribute that fails to load is no name of an op
                continue
            if not callable(obj) or isinstance(obj, type(torch)):
                continue
            if isinstance(obj, type) and (obj.__module__ == "torch._C" or type(obj).__name__ == "pybind11_type"):
                continue  # TorchScript's IR (torch.Block, torch.Graph...) and torch's context managers
            names.add("_".join(words(attr)))
    for op in torch._C._dispatch_get_all_op_names():
        names.add("_".join(words(op.split("::", 1)[-1].split(".", 1)[0])))
    return frozenset(names)


def is_torch_name(name: str) -> bool:
    """Whether torch has a function, class or operator of this name (``LogSoftmax`` and ``log_softmax`` are)."""
    return "_".join(words(name)) in _torch_names()


def core(name: str) -> frozenset[str]:
    return frozenset(w for w in words(name) if w not in GENERIC) or frozenset(words(name))


@functools.cache
def _patterns(forbidden: tuple[str, ...]) -> tuple[tuple[str, frozenset[str]], ...]:
    return tuple((name, core(name)) for name in forbidden if is_torch_name(name))


def torch_match(name: str, forbidden: Iterable[str]) -> str | None:
    """The forbidden name that ``name``, one of torch's, is a form of (None: it is not one). ``forbidden``:
    a check's ``forbidden_attrs``."""
    return _match(name, frozenset(words(name)) if name else frozenset(), tuple(forbidden))


def _match(name: str, have: frozenset[str], forbidden: tuple[str, ...]) -> str | None:
    """:func:`torch_match`, given the words of ``name``."""
    if not name:
        return None
    if name in forbidden or name.rstrip("_") in forbidden:
        return name.rstrip("_") if name.rstrip("_") in forbidden else name
    if "backward" in have:
        return None
    for wanted, parts in _patterns(forbidden):
        if parts <= have:
            return wanted
    return None


@functools.cache
def _op_words(bare: str) -> frozenset[str]:
    """The words of an operator's name, split once per process, not once per check (each of a notebook's checks
    asks about all ~3,000 of torch's operators): a cache only calls can fill, with the true words."""
    return frozenset(words(bare))


@functools.cache
def forbidden_aten(forbidden: tuple[str, ...]) -> frozenset[str]:
    """The aten operators (``aten::_log_softmax``...) that compute what a check forbids: listed from torch."""
    import torch

    names = torch._C._dispatch_get_all_op_names()  # at each call: operators registered since are included
    ops = [(op.split(".", 1)[0], op.split("::", 1)[-1].split(".", 1)[0]) for op in names]
    return frozenset(name for name, bare in ops if _match(bare, _op_words(bare), forbidden))


@functools.cache
def _overloads(ops: frozenset[str]) -> tuple[str, ...]:
    import torch

    return tuple(sorted(op for op in torch._C._dispatch_get_all_op_names() if op.split(".", 1)[0] in ops))


def forbidden_overloads(forbidden: tuple[str, ...]) -> tuple[str, ...]:
    """Every overload (``aten::log_softmax.int``, ``aten::log_softmax.Dimname``...) of torch's own operators that
    compute what a check forbids (not the quantized or oneDNN backends' namespaces, which no student's tensor
    reaches): the names the fence registers its refusing kernels under."""
    return _overloads(frozenset(op for op in forbidden_aten(forbidden) if op.startswith("aten::")))


# The file name of the code the fence puts in place of a ready-made answer's (:mod:`.fence`): the watch knows it
FENCE_FILE = "<lmbook fence>"
