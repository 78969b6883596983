"""Where tensors live, and how runs are made repeatable.

Every chapter calls :func:`get_device` once, so the same notebook runs on a
laptop CPU, an Apple GPU or an NVIDIA GPU without edits.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

_CHOICES = ("cuda", "mps", "cpu", "pretend")
_PRETENDING = None  # the process-wide pretend accelerator, once LMBOOK_DEVICE=pretend asked for it


def get_device() -> torch.device:
    """Return the best available device: cuda, then mps, then cpu.

    Set the environment variable ``LMBOOK_DEVICE`` (e.g. ``cpu`` or ``cuda:1``)
    to override the choice. ``LMBOOK_DEVICE=pretend`` runs everything on the CPU as if on a GPU, and raises
    where a GPU would on mixed devices (:mod:`lmbook.devicecheck`): the tests use it to catch, on a machine
    without a GPU, what a student's GPU or Mac would hit.
    """
    requested = os.environ.get("LMBOOK_DEVICE", "").strip()
    if requested:
        kind = requested.split(":")[0]
        if kind not in _CHOICES:
            raise ValueError(f"LMBOOK_DEVICE={requested!r}: expected one of {', '.join(_CHOICES)}, "
                             "optionally with ':index'")
        if kind == "pretend":
            return _pretend()
        if kind == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"LMBOOK_DEVICE={requested!r} but torch sees no CUDA device")
        if kind == "mps" and not torch.backends.mps.is_available():
            raise RuntimeError(f"LMBOOK_DEVICE={requested!r} but torch sees no MPS device")
        return torch.device(requested)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _pretend() -> torch.device:
    """Enter the pretend accelerator for the rest of the process (once), and return its device."""
    global _PRETENDING
    from .devicecheck import PretendAccelerator

    if _PRETENDING is None:
        _PRETENDING = PretendAccelerator()
        _PRETENDING.__enter__()
    return _PRETENDING.device


def default_seed() -> int:
    """The seed chapters use: 0, or ``LMBOOK_SEED`` (benchmarks rerun chapters with other seeds)."""
    value = os.environ.get("LMBOOK_SEED", "0")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"LMBOOK_SEED={value!r}: expected an integer") from None


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch (all devices); return a CPU generator seeded the same way."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return torch.Generator().manual_seed(seed)
