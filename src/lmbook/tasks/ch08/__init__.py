"""Checks for exercise 8 (chapter 8: the Transformer).

The references are torch's own: ``F.layer_norm``, ``F.linear``, and ``nn.TransformerEncoderLayer`` /
``nn.TransformerDecoderLayer`` loaded with the case's weights, never the course's answers in
``lmbook.transformer``. Usage in a notebook: ``from lmbook.tasks.ch08 import check``.

Conventions, as in the chapter and exercise 6: batch first, x (B, n, d); weights stored as ``nn.Linear`` stores
them, (d_out, d_in); a block's weights are a dict with the names of its torch layer's ``state_dict()``
(``self_attn.in_proj_weight`` the packed (3d, d) [W_q; W_k; W_v], ``linear1.weight`` (d_ff, d), ``norm1.weight``
(d,), ...). Padding masks follow torch's convention, **True = padding**; padding comes at the end and every
sequence has at least one real token. The FFN's activation is ReLU, dropout is off (evaluation mode).

The encoder block's output is graded at real positions only: what a block computes at a padded position is never
used (``nn.TransformerEncoder``'s fast path returns zeros there), so any value is accepted. The decoder's target
has no padding here: all of its positions are graded.
"""

from __future__ import annotations

from ...grading.checks import Registry
from .decoder_block import DECODER_BLOCK
from .encoder_block import ENCODER_BLOCK
from .feed_forward import FEED_FORWARD
from .layer_norm import LAYER_NORM

CHECKS = [LAYER_NORM, FEED_FORWARD, ENCODER_BLOCK, DECODER_BLOCK]
check = Registry(CHECKS)
