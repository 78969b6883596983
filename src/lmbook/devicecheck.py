"""A pretend accelerator on the CPU: code that would mix devices on a GPU fails here too.

Most device bugs are one line: a tensor, mask or generator made with no ``device=`` (so on the CPU) and then
used with the inputs, which a GPU or Apple's MPS holds. On a CPU-only machine every tensor is on the CPU, so
such a line passes every test there and fails on the first student's laptop with a GPU. This module makes
the bug visible without a GPU: inside ``PretendAccelerator()``, tensors marked as on the accelerator report
``x.device`` as :data:`PRETEND` (``meta``), everything still computes on the CPU with real values, and each
torch call checks the devices its tensors *would* be on::

    with PretendAccelerator() as acc:
        x = acc.put(torch.randn(4, 8))          # "on the accelerator"
        y = x + torch.ones(4, 8)                # RuntimeError, as on a GPU: ones() was made on the CPU
        z = x + torch.ones(4, 8, device=x.device)   # fine: follows x

What it raises on, as CUDA does: an op whose tensors (of one dimension or more) are on both sides; a random
draw whose ``generator=`` is on the other side from the draw; ``.numpy()`` of a tensor on the accelerator.
What it allows, as CUDA does: moves (``.to``, ``.cpu``, ``copy_``, slice assignment), indexing with a CPU
index, 0-d CPU tensors in arithmetic, ``.item()`` / ``.tolist()``. Tensors it has not seen made (made before
it started, or inside autograd) have no side and are never blamed.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

PRETEND = torch.device("meta")  # what x.device reports for a tensor on the pretend accelerator
_SIDE = "_lmbook_side"  # an attribute on each tensor (and generator) the mode has seen made: "gpu" or "cpu"
_GPU, _CPU = "gpu", "cpu"

_TENSOR = torch._C.TensorBase.__dict__
_DEVICE_GET = _TENSOR["device"]
_DATA = _TENSOR["data"]
# Moves between devices, and the ops CUDA lets take a CPU tensor beside a GPU one (packing takes its lengths
# on the CPU).
_MOVES = {"to", "cpu", "cuda", "copy_", "__setitem__", "set_", "new_tensor", "_pack_padded_sequence",
          "_pad_packed_sequence"}
# A recurrent op on a packed sequence, (data, batch_sizes, hx, ...): CUDA wants batch_sizes on the CPU.
_PACKED_RNN = {"gru", "lstm", "rnn_tanh", "rnn_relu"}
_TO_NUMPY = {"numpy", "__array__"}
_REAL_GENERATOR = torch.Generator


def side(obj) -> str | None:
    """"gpu" or "cpu" for a tensor or generator the mode saw made (or put), else None."""
    return getattr(obj, _SIDE, None)


def _mark(t, where: str | None):
    if where is not None and isinstance(t, torch.Tensor | _REAL_GENERATOR):
        try:
            setattr(t, _SIDE, where)
        except AttributeError:  # a C generator without a __dict__: its side is then the CPU's, as made
            pass
    return t


def _is_pretend(value) -> bool:
    if isinstance(value, str):
        value = value.split(":")[0]
    return (isinstance(value, torch.device) and value.type == PRETEND.type) or value == PRETEND.type


def _is_cpu(value) -> bool:
    return (isinstance(value, torch.device) and value.type == "cpu") or (isinstance(value, str) and value == "cpu")


class _Generator(_REAL_GENERATOR):
    """torch.Generator while the mode runs: one made for the pretend device is a CPU generator on its side."""

    def __new__(cls, device="cpu"):
        gen = _REAL_GENERATOR.__new__(cls, "cpu" if _is_pretend(device) else device)
        gen.__dict__[_SIDE] = _GPU if _is_pretend(device) else _CPU
        return gen

    def __init__(self, device="cpu"):
        pass

    @property
    def device(self) -> torch.device:  # as a CUDA generator's: where its draws are made
        return PRETEND if self.__dict__.get(_SIDE) == _GPU else _REAL_GENERATOR.device.__get__(self)


def _name(func) -> str:
    return getattr(func, "__name__", None) or repr(func)


class PretendAccelerator(TorchFunctionMode):
    """Run torch code as if the tensors put on :data:`PRETEND` lived on a GPU; raise where a GPU would."""

    device = PRETEND

    def put(self, obj):
        """Mark ``obj``'s tensors (nested in tuples, lists and dicts), or a module's parameters and buffers,
        as on the accelerator; returns ``obj``."""
        if isinstance(obj, torch.nn.Module):
            for t in [*obj.parameters(), *obj.buffers()]:
                _mark(t, _GPU)
            return obj
        tree_map(lambda t: _mark(t, _GPU), obj)
        return obj

    def __enter__(self):
        torch.Generator = _Generator
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Generator = _REAL_GENERATOR
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = _name(func)
        owner = getattr(func, "__self__", None)
        if owner is _DEVICE_GET and name == "__get__":  # x.device
            real = func(*args, **kwargs)
            return PRETEND if side(args[0]) == _GPU else real
        if owner is _DATA and name == "__set__":  # p.data = t moves p to t's side
            func(*args, **kwargs)
            _mark(args[0], side(args[1]))
            return None

        # where the call says its result goes: a device= (or .to's device), .cpu(), .cuda(), or .to(other)
        target, args, kwargs = self._target(name, args, kwargs)
        leaves = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if name in _PACKED_RNN and len(args) > 1 and isinstance(args[1], torch.Tensor) and args[1].dim() == 1 \
                and not args[1].is_floating_point():  # the packed form: its batch_sizes stay on the CPU
            leaves = [t for t in leaves if t is not args[1]]
        sides = {side(t) for t in leaves if t.dim() > 0 or side(t) == _GPU} - {None}
        if name in _TO_NUMPY and side(args[0]) == _GPU:
            raise TypeError(f"can't convert {PRETEND} device type tensor to numpy (on a GPU: cuda:0). "
                            "Use Tensor.cpu() to copy the tensor to host memory first.")
        if len(sides) > 1 and name not in _MOVES and not self._cpu_index(name, args):
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"{PRETEND} (the pretend GPU) and cpu! (in {name})")
        runs_on = target or (_GPU if _GPU in sides else (_CPU if sides or not leaves else None))
        gen = kwargs.get("generator")
        if gen is not None and runs_on is not None and (side(gen) or _CPU) != runs_on and name not in _MOVES:
            want, found = ("meta", "cpu") if runs_on == _GPU else ("cpu", "meta")
            raise RuntimeError(f"Expected a '{want}' device type for generator but found '{found}' (in {name}; "
                               f"on a GPU: 'cuda' and 'cpu')")

        out = args[0].to("cpu") if name == "cuda" else func(*args, **kwargs)
        if name in ("copy_", "__setitem__", "set_"):  # in place: the tensor stays where it was
            return out
        if target is not None and name in ("to", "cpu", "cuda") and out is args[0] and side(out) != target:
            out = out.view_as(out)  # a real move makes a new tensor: marking the input would move it too
        where = target or runs_on
        tree_map(lambda t: _mark(t, where), out)
        if name == "_pack_padded_sequence":  # (data, batch_sizes): the batch sizes stay on the CPU, as on CUDA
            _mark(out[1], _CPU)
        return out

    @staticmethod
    def _cpu_index(name: str, args) -> bool:
        """x[i] with a CPU index i: CUDA copies the index over."""
        return name == "__getitem__" and side(args[0]) == _GPU

    @staticmethod
    def _target(name: str, args, kwargs):
        """(side the result is made on or moved to, or None to follow the inputs; args; kwargs with the pretend
        device replaced by the CPU, where everything really runs)."""
        target = None

        def real(value):
            nonlocal target
            if _is_pretend(value):
                target = _GPU
                return torch.device("cpu")
            if _is_cpu(value):
                target = _CPU
            return value

        if "device" in kwargs:
            kwargs["device"] = real(kwargs["device"])
        if name == "to":
            args = (args[0], *(real(a) for a in args[1:]))
            other = next((a for a in args[1:] if isinstance(a, torch.Tensor)), None)
            if other is not None:
                target = side(other) or target
        elif name == "cpu":
            target = _CPU
        elif name == "cuda":  # x.cuda(): run as x.to("cpu") here
            target = _GPU
        return target, args, kwargs


__all__ = ["PRETEND", "PretendAccelerator", "side"]
