"""Checks for exercise 1 (chapter 1: the feedforward neural LM).

Each task's references are torch's own ops in float64, or closed forms,
never the course's own answers; mutants are the mistakes students make.
Usage in a notebook: ``from lmbook.tasks.ch01 import check``, then
``check("log_softmax", log_softmax)``.
"""

from __future__ import annotations

from ...grading.checks import Registry
from .cross_entropy import CROSS_ENTROPY, PERPLEXITY
from .ffnn import FFNN_FORWARD
from .log_softmax import LOG_SOFTMAX
from .sgns import SGNS_LOSS
from .train_lm import TRAIN_LM

CHECKS = [LOG_SOFTMAX, CROSS_ENTROPY, PERPLEXITY, FFNN_FORWARD, SGNS_LOSS, TRAIN_LM]
check = Registry(CHECKS)
