"""Checks for exercise 6 (chapter 6: multi-head attention).

The references are plain ``view``/``transpose`` for splitting and merging the heads, and torch's own
``F.multi_head_attention_forward`` (what ``nn.MultiheadAttention`` runs) given the student's weights, never
the course's answers in ``lmbook.multihead`` or ``lmbook.self_attention``. Usage in a notebook:
``from lmbook.tasks.ch06 import check``.

Shapes, as in the chapter, batch first: query (B, n_q, d), key and value (B, n_k, d); the weights packed as
in ``nn.MultiheadAttention``: ``in_proj_weight`` (3d, d) = [W_q; W_k; W_v], ``in_proj_bias`` (3d,),
``out_proj_weight`` (d, d), ``out_proj_bias`` (d,). ``key_padding_mask`` (B, n_k) follows torch's
convention, **True = padding** (the opposite of exercise 5's ``key_mask``); padding comes at the end and
every sequence has at least one real token. ``causal`` is only True in self-attention (n_q = n_k).
"""

from __future__ import annotations

from ...grading.checks import Registry
from .merge_heads import MERGE_HEADS
from .multihead_attention import MULTIHEAD_ATTENTION
from .split_heads import SPLIT_HEADS

CHECKS = [SPLIT_HEADS, MERGE_HEADS, MULTIHEAD_ATTENTION]
check = Registry(CHECKS)
