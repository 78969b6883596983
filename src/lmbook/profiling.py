"""How much memory a computation allocates, counted tensor by tensor (chapter 5's cost of attention).

``allocated_bytes(fn)`` runs ``fn()`` and adds up the storage of every new tensor the operators it calls
create: views (a transpose, a reshape that needs no copy) share their input's storage and count nothing.
It sees the tensors of PyTorch's operators, not the scratch space inside one operator's kernel, and works
the same on every device, unlike ``torch.cuda.max_memory_allocated`` (GPU only) or the process's RSS
(which counts the allocator's caches and everything else in the process).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class _CountAllocations(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        seen = set()
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                if storage.data_ptr() not in inputs and storage.data_ptr() not in seen:  # new memory, once
                    seen.add(storage.data_ptr())
                    self.bytes += storage.nbytes()
        return out


def allocated_bytes(fn: Callable[[], object]) -> int:
    """The bytes of all the tensors that ``fn()`` creates (views and in-place results count nothing)."""
    with _CountAllocations() as counter:
        fn()
    return counter.bytes


def peak_bytes(fn: Callable[[], object], device: torch.device | str) -> int | None:
    """The most memory the CUDA allocator held for tensors while ``fn()`` ran, above what it held before (the
    peak, which :func:`allocated_bytes`'s total is not); None on a device whose allocator does not say (CPU, MPS)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before
