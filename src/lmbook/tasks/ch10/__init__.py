"""Checks for exercise 10 (chapter 10: BERT, encoder-only pretraining).

The references are written here, independently of the course's answers in ``lmbook.bert``: the masked-LM
corruption as a *law* (what every output position may hold, and with which probability) that a student's draws are
tested against, the embeddings from ``F.embedding`` and ``F.layer_norm``, the span search by brute force over every
(start, end) pair, and the parameter count by listing every weight tensor of the model with its shape (the tests
prove them equal to ``lmbook.bert``, to Hugging Face's ``BertEmbeddings`` given the same weights, to its masking
collator, and to ``transformers.BertModel`` / ``BertForPreTraining`` built on the meta device). Usage in a
notebook: ``from lmbook.tasks.ch10 import check``.

Conventions, as in the chapter:

- **Masked LM.** ``ids`` (B, n) int64. The special tokens are ``special_ids`` together with ``mask_id`` and
  ``pad_id``; every other position is *eligible*. Each eligible position is chosen with probability p, on its own;
  a chosen one becomes [MASK] 80% of the time, a token drawn uniformly from the non-special vocabulary (every id of
  [0, vocab_size) that is not special; it may be the original) 10%, and stays as it is 10%. Labels hold the
  original id at chosen positions and −100 everywhere else. The draws use torch's global generator (the grader
  seeds it before each call). A random function is graded by its draws: exact rules (what may never happen) and
  counts within binomial bounds (two-sided, at level 1e-9 each), on batches of thousands of tokens.
- **Inputs and embeddings.** [CLS] a [SEP] b [SEP], segments 0 for [CLS] a [SEP] and 1 for b [SEP];
  x = LN(E_tok[ids] + E_pos[0 … n − 1] + E_seg[segments]) with ε = 1e-12, weights named as Hugging Face's
  ``BertEmbeddings``' ``state_dict()``.
- **Spans.** Logits (B, n); the loss is (CE(start) + CE(end)) / 2, each averaged over the batch; the best span
  maximises start_logits[s] + end_logits[e] over s ≤ e, both in the passage, e − s < max_len when given (a span of
  at most max_len tokens); any best span is accepted when several tie.
- **Parameters.** A config as a dict (vocab_size, n_layer, n_head, d_model, d_ff, max_position,
  type_vocab_size); the body is ``BertModel`` with its pooler; with ``heads`` it is ``BertForPreTraining``, whose
  decoder weight is the token embedding itself (tied, counted once) and whose decoder bias is its own.
"""

from __future__ import annotations

from ...grading.checks import Registry
from ..questions.ch10 import QUESTIONS
from .bert_embeddings import BERT_EMBEDDINGS
from .best_span import BEST_SPAN
from .build_inputs import BUILD_INPUTS
from .count_parameters import COUNT_PARAMETERS
from .mask_tokens import MASK_TOKENS
from .span_loss import SPAN_LOSS

CHECKS = [MASK_TOKENS, BUILD_INPUTS, BERT_EMBEDDINGS, SPAN_LOSS, BEST_SPAN, COUNT_PARAMETERS]
check = Registry(CHECKS + QUESTIONS)
