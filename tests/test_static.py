"""Reading student code for tampering and for the ready-made answer (no code is run)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lmbook.grading.ch01 import CROSS_ENTROPY, FFNN_FORWARD, LOG_SOFTMAX, TRAIN_LM
from lmbook.grading.static import find_forbidden_use, find_tampering

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
from make_samples import solution_answers  # noqa: E402

SETUP = ("import math\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n"
         "from lmbook import get_device, seed_everything\nfrom lmbook.corpus import load_corpus, make_windows\n"
         "from lmbook.grading.ch01 import check\ndevice = get_device()")


def cells(*sources: str) -> list[tuple[int, str]]:
    return list(enumerate([SETUP, *sources]))


def test_the_solution_and_its_setup_are_not_suspicious():
    assert find_tampering(cells(*solution_answers().values())) == []


@pytest.mark.parametrize("code", [
    "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])",
    "torch.backends.cudnn.deterministic = True",
    "import numpy as np\nx = np.zeros(3)\nx[0] = 1",
    "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        setattr(self, 'w', nn.Linear(2, 2))",
    "import sys\nprint(sys.version)",
    "model = nn.Linear(2, 2)\nmodel.weight.data = torch.zeros(2, 2)",
])
def test_honest_code_is_not_flagged(code):
    assert find_tampering(cells(code)) == []


@pytest.mark.parametrize("code, reason", [
    ("get_ipython().input_transformers_cleanup.append(lambda lines: [])", "IPython"),
    ("ip = get_ipython()\nip.events.register('pre_run_cell', print)", "get_ipython()"),
    ("torch.allclose = lambda *a, **k: True", "monkeypatching"),
    ("torch.Tensor.__eq__ = lambda self, other: True", "monkeypatching"),
    ("F.log_softmax.__code__ = (lambda x: x).__code__", "__code__"),
    ("import lmbook.grading.checks as C", "grader's internals"),
    ("from lmbook.grading.checks import run_check", "grader's internals"),
    ("import builtins\nbuiltins.print = None", "built-in"),
    ("__builtins__['abs'] = None", "__builtins__"),
    ("import sys\nsys.meta_path.insert(0, None)", "sys.meta_path"),
    ("open('/etc/passwd').read()", "opens a file"),
    ("import subprocess\nsubprocess.run(['ls'])", "running other programs"),
    ("!ls /", "system"),
    ("exec('print(1)')", "exec"),
    ("f = eval('lambda x: x')", "eval"),
    ("m = __import__('o' + 's')", "__import__"),
    ("fn = getattr(torch, 'log_' + 'softmax')", "getattr"),
    ("g = globals()\ng['check'] = None", "globals"),
    ("import ctypes", "raw memory"),
    ("import gc\ngc.get_objects()", "every live object"),
    ("class A:\n    def __eq__(self, o):\n        return True", "__eq__"),
    ("import sqlite3", "gradebook"),
    ("import socket", "network"),
    ("import sys\njob = sys.argv[1]", "sys.argv"),
    ("import numpy as np\nx = np.load('/tmp/x')", "reads or writes files"),
    ("torch.save(torch.zeros(1), 'out.pt')", "reads or writes files"),
    ("path = '/proc/self/cmdline'", "process table"),
])
def test_tampering_is_found_with_its_evidence(code, reason):
    findings = find_tampering(cells(code))
    assert findings, f"not flagged: {code!r}"
    assert any(reason in str(f) for f in findings), [str(f) for f in findings]
    assert findings[0].cell == 1 and findings[0].code  # where, and the line itself


def test_syntax_errors_are_not_tampering():
    assert find_tampering(cells("def f(:\n    pass")) == []


# ----------------------------------------------------------------------------- the ready-made answer


@pytest.mark.parametrize("code", [
    "from lmbook.functional import log_softmax",
    "from torch.nn.functional import log_softmax",
    "log_softmax = torch.log_softmax",
    "def log_softmax(x, dim=-1):\n    return F.log_softmax(x, dim)",
    "def log_softmax(x, dim=-1):\n    return x.log_softmax(dim)",
    "def log_softmax(x, dim=-1):\n    return x - torch.logsumexp(x, dim, keepdim=True)",
    "from torch.nn.functional import log_softmax as ls\ndef log_softmax(x, dim=-1):\n    return ls(x, dim)",
    "import lmbook.functional as lf\ndef log_softmax(x, dim=-1):\n    return lf.log_softmax(x, dim)",
    "helper = F.log_softmax\ndef log_softmax(x, dim=-1):\n    return helper(x, dim)",
    "def _inner(x, dim):\n    return torch.log_softmax(x, dim)\ndef log_softmax(x, dim=-1):\n    return _inner(x, dim)",
])
def test_the_ready_made_answer_is_found_through_aliases_and_helpers(code):
    assert find_forbidden_use(cells(code), "log_softmax", LOG_SOFTMAX) is not None


def test_a_students_own_answer_is_not_forbidden():
    answers = solution_answers()
    nb = cells(*answers.values())
    for fn, check in [("log_softmax", LOG_SOFTMAX), ("cross_entropy", CROSS_ENTROPY), ("perplexity", CROSS_ENTROPY),
                      ("ffnn_forward", FFNN_FORWARD), ("train_lm", TRAIN_LM)]:
        assert find_forbidden_use(nb, fn, check) is None, fn


def test_a_later_task_may_build_on_the_students_earlier_answer_even_if_that_used_torch():
    # task 2 calls the student's log_softmax, which used torch's: only task 1 loses its credit
    nb = cells("def log_softmax(x, dim=-1):\n    return torch.log_softmax(x, dim)",
               solution_answers()["cross_entropy"])
    assert find_forbidden_use(nb, "log_softmax", LOG_SOFTMAX) is not None
    assert find_forbidden_use(nb, "cross_entropy", CROSS_ENTROPY) is None


def test_training_with_the_books_model_or_the_true_model_is_forbidden():
    uses_model = "from lmbook.ffnn import FeedforwardLM\ndef train_lm(ids, V):\n    return FeedforwardLM(V, 3), 3"
    uses_hmm = "def train_lm(ids, V):\n    hmm = load_corpus().hmm\n    return (lambda c: hmm), 3"
    assert find_forbidden_use(cells(uses_model), "train_lm", TRAIN_LM)
    assert find_forbidden_use(cells(uses_hmm), "train_lm", TRAIN_LM)
