"""Checks for exercise 5 (chapter 5: self-attention).

The references are torch's own ops given the student's inputs (``F.scaled_dot_product_attention``,
``F.linear``), never the course's answers in ``lmbook.self_attention`` or ``lmbook.multihead``. Usage in a
notebook: ``from lmbook.tasks.ch05 import check``.

Shapes, as in the chapter, with a batch dimension in front: Q, K (B, n, d_k), V (B, n, d_v); ``key_mask``
(B, n) is True at real tokens, padding comes at the end of a sequence and every sequence has at least one
real token; ``causal`` (a bool) lets position i attend only to positions j ≤ i. Masks mean True = may attend.
"""

from __future__ import annotations

from ...grading.checks import Registry
from .masked_attention import MASKED_ATTENTION
from .qkv import QKV

CHECKS = [MASKED_ATTENTION, QKV]
check = Registry(CHECKS)
