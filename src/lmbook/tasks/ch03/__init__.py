"""Checks for exercise 3 (chapter 3: encoder–decoder models).

References are torch's own loss (``F.cross_entropy`` with ``ignore_index``),
plain-Python loops over a toy decoder given as a table of log-probabilities
(greedy decoding and beam search, written independently of ``lmbook.decoding``;
the tests check the beam search against brute-force enumeration), and
``sacrebleu`` for corpus BLEU, never the course's answers in ``lmbook.decoding``,
``lmbook.metrics`` or ``lmbook.seq2seq``. Usage in a notebook:
``from lmbook.tasks.ch03 import check``.

The toy decoder: ``log_probs[t, i, j] = log P(y_{t+1} = j | y_t = i)`` at step
``t`` (``y_0`` is ``bos``), each row log-softmaxed. Its tables are random, drawn
again until every decision the reference makes (an argmax, the edge of the beam,
the final choice) wins by at least ``MARGIN``, so float32 and float64 agree.
"""

from __future__ import annotations

from ...grading.checks import Registry
from .beam import BEAM
from .bleu import BLEU_CHECK
from .greedy import GREEDY
from .teacher_forcing import TEACHER_FORCING_LOSS

CHECKS = [TEACHER_FORCING_LOSS, GREEDY, BEAM, BLEU_CHECK]
check = Registry(CHECKS)
