"""Checks for exercise 9 (chapter 9: GPT, decoder-only pretraining).

The references are written here, independently of the course's answers in ``lmbook.bpe`` and ``lmbook.gpt``:
a brute-force BPE trainer that recounts every pair after each merge, a byte-level encoder and decoder written
from the definition (the tests check them against ``lmbook.bpe`` and against tiktoken built from GPT-2's own
files), torch's ``nn.TransformerEncoderLayer`` for a GPT-2 block (pre-LN, causal, tanh GELU), and torch's
``F.scaled_dot_product_attention`` for attention with a KV cache. Usage in a notebook:
``from lmbook.tasks.ch09 import check``.

Conventions, as in the chapter:

- **BPE.** Ids 0–255 are the bytes; merge i (0-based) makes id 256 + i. A text is first cut into pre-tokens with
  GPT-2's pattern (``GPT2_PATTERN.findall(text)``); pairs are counted, and merged, inside a pre-token only. Training
  merges the most frequent pair (ties: the smallest (left id, right id)), every occurrence left to right without
  overlap, then counts again; it stops after ``n_merges`` merges, or earlier when no pair occurs twice. Encoding a
  pre-token repeatedly merges its adjacent pair of lowest rank (the earliest merge), every occurrence left to right,
  until none of its pairs is a merge. Decoding joins the ids' bytes and decodes them as UTF-8 once, with
  ``errors="replace"``.
- **Blocks.** Batch first, x (B, n, d); weights stored as ``nn.Linear`` stores them, (d_out, d_in), in a dict named
  as ``nn.TransformerEncoderLayer``'s ``state_dict()`` (a GPT-2 block is that layer with ``norm_first=True``, the
  tanh GELU and a causal mask); LayerNorm's ε is 1e-5; no dropout.
- **KV cache.** ``cache`` is None (nothing read yet) or ``{"k": K, "v": V}``, each (B, n_head, t, d_head): the
  keys and values of the t earlier positions, heads split as exercise 6 splits them. The n_new new positions come
  after them: new query i (position t + i) attends to keys 0 … t + i.
- **Fine-tuning.** GPT-1's input [start] a [delim] b [extract]; a right-padded batch's states h (B, n, d) are
  pooled at each sequence's last real token, h[b, lengths[b] − 1].
"""

from __future__ import annotations

from ...grading.checks import Registry
from ..questions.ch09 import QUESTIONS
from .cached_attention import CACHED_ATTENTION
from .decode import DECODE
from .encode import ENCODE
from .format_pair import FORMAT_PAIR
from .gpt_block import GPT_BLOCK
from .pool_last import POOL_LAST
from .train_bpe import TRAIN_BPE

CHECKS = [TRAIN_BPE, ENCODE, DECODE, GPT_BLOCK, CACHED_ATTENTION, FORMAT_PAIR, POOL_LAST]
check = Registry(CHECKS + QUESTIONS)
