"""Checks for exercise 7 (chapter 7: positional information).

The references are written from the formulas with Python's ``math`` and explicit loops, or, for RoPE,
with torch's complex numbers (a rotation of x_2i + i x_2i+1 by e^{i p θ_i}): never the course's answers
in ``lmbook.positions``. Usage in a notebook: ``from lmbook.tasks.ch07 import check``.

Conventions, as in the chapter: θ_i = 10000^(-2i/d) for the pair of dimensions (2i, 2i+1), i = 0 … d/2 - 1;
attention scores are indexed (head, query i, key j); a query is at the end of the keys when n_q < n_k
(its position is i + n_k - n_q), as when new queries attend to a cache.
"""

from __future__ import annotations

from ...grading.checks import Registry
from .alibi import ALIBI
from .relative import RELATIVE
from .rope import ROPE
from .sinusoidal import SINUSOIDAL

CHECKS = [SINUSOIDAL, ROPE, ALIBI, RELATIVE]
check = Registry(CHECKS)
