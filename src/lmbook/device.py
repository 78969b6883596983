"""Where tensors live, and how runs are made repeatable.

Every chapter calls :func:`get_device` once, so the same notebook runs on a
laptop CPU, an Apple GPU or an NVIDIA GPU without edits.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

_CHOICES = ("cuda", "mps", "cpu")


def get_device() -> torch.device:
    """Return the best available device: cuda, then mps, then cpu.

    Set the environment variable ``LMBOOK_DEVICE`` (e.g. ``cpu`` or ``cuda:1``)
    to override the choice.
    """
    requested = os.environ.get("LMBOOK_DEVICE", "").strip()
    if requested:
        kind = requested.split(":")[0]
        if kind not in _CHOICES:
            raise ValueError(f"LMBOOK_DEVICE={requested!r}: expected one of {', '.join(_CHOICES)}, "
                             "optionally with ':index'")
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
