"""Checks for exercise 4 (chapter 4: attention).

References are plain loops over one (query, key) pair at a time, torch's own ops
given the student's weights (``F.bilinear``, ``F.scaled_dot_product_attention``,
``nn.GRUCell``, ``F.embedding``, ``F.linear``), never the course's answers in
``lmbook.attention`` or ``lmbook.seq2seq``. Usage in a notebook:
``from lmbook.tasks.ch04 import check``.

Shapes, as in the chapter: a decoder state s (B, d_s) queries the encoder states
H (B, T, d_h); ``mask`` (B, T) is True at real source positions. A score at a
padded position is exactly -inf, and its attention weight exactly 0.
"""

from __future__ import annotations

from ...grading.checks import Registry
from .attend import ATTEND
from .bahdanau import BAHDANAU_STEP
from .scores import ADDITIVE, DOT, MULTIPLICATIVE

CHECKS = [DOT, MULTIPLICATIVE, ADDITIVE, ATTEND, BAHDANAU_STEP]
check = Registry(CHECKS)
