"""Checks for exercise 2 (chapter 2: recurrent language models).

References are torch's own modules given the student's weights (``nn.RNN`` over a
packed sequence, ``nn.LSTMCell``, ``nn.GRUCell``, ``clip_grad_norm_``), or plain
loops over one sequence at a time, never the course's answers in ``lmbook.rnn``.
Sampling is checked exactly on the filtered distribution and statistically on the
draws. Usage in a notebook: ``from lmbook.tasks.ch02 import check``.
"""

from __future__ import annotations

from ...grading.checks import Registry
from .classify import CLASSIFY
from .clip import CLIP_GRAD_NORM
from .gated import GRU_CELL, LSTM_CELL
from .rnn import RNN_CELL, RNN_FORWARD
from .sampling import FILTER_PROBS, SAMPLE

CHECKS = [RNN_CELL, RNN_FORWARD, LSTM_CELL, GRU_CELL, CLIP_GRAD_NORM, CLASSIFY, FILTER_PROBS, SAMPLE]
check = Registry(CHECKS)
