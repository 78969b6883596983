"""Reading student code for tampering and for the ready-made answer (no code is run)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lmbook.grading.static import find_forbidden_use, find_tampering, unreadable_cells
from lmbook.tasks.ch01 import CROSS_ENTROPY, FFNN_FORWARD, LOG_SOFTMAX, TRAIN_LM

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
from make_samples import solution_answers  # noqa: E402

SETUP = ("import math\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n"
         "from lmbook import get_device, seed_everything\nfrom lmbook.corpus import load_corpus, make_windows\n"
         "from lmbook.tasks.ch01 import check\ndevice = get_device()")


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
    # what honest students write, that a grader reading names rather than uses would flag
    'def embed(ids):\n    """Look the ids up; the book saves the table as `embeddings.npy`."""\n    return ids',
    '"""Weights come from weights.npy and /proc is never read."""\nx = 1',
    "x = 1  # unlike np.load('c1_0_a0.npy') or open('/proc/self/status'), this is fine",
    "print('The grader writes its inputs as .npy files.')",
    "import sys\nsys.path.insert(0, '..')",
    "import sys\nsys.path.append('../src')",
    "import os\nimport sys\nsys.path.insert(0, os.path.abspath(os.path.join('..', 'src')))",
    "import os\nname = os.path.join('data', 'corpus.txt')\nstem, ext = os.path.splitext(os.path.basename(name))",
    "from os.path import join\np = join('a', 'b')",
    "from os import path\np = path.join('a', 'b')",
    "%matplotlib inline",
    "from __future__ import annotations\ndef f(x: Tensor) -> Tensor:\n    return x",
    "torch.log_softmax?",
    "%precision 3",
])
def test_honest_code_is_not_flagged(code):
    assert find_tampering(cells(code)) == []


def test_an_honest_notebook_with_all_of_those_is_clean_and_keeps_its_answers():
    honest = ['"""Notes: the book keeps its tables in .npy files (embeddings.npy)."""',
              "%matplotlib inline\nimport os\nimport sys\nsys.path.insert(0, '..')\n"
              "print(os.path.join('results', 'run1'))  # not /proc, not lmbook-grade",
              *solution_answers().values()]
    assert find_tampering(cells(*honest)) == []
    assert unreadable_cells(cells(*honest)) == {}
    assert find_forbidden_use(cells(*honest), "log_softmax", LOG_SOFTMAX) is None


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
    ("out = '/tmp/lmbook-grade-x/out/c4_0_0.npy'", "grader's files"),
    ("name = f'{out}/c4_0_0.npy'", "grader's files"),
    # magics whose argument is code, or that reach files or processes
    ("%time x = open('/etc/passwd').read()", "`%time` runs the code"),
    ("%%time\nimport os\nos.system('ls')", "`%%time` runs the code"),
    ("%timeit log_softmax(torch.zeros(3))", "`%timeit` runs the code"),
    ("%%capture out\nprint(1)", "`%%capture`"),
    ("%config InlineBackend.figure_format = 'svg'", "`%config`"),
    ("%run helper.py", "`%run`"),
    ("%env SECRET=1", "`%env`"),
    ("%%writefile helper.py\nprint(1)", "`%%writefile`"),
    ("%load helper.py", "`%load`"),
    ("%sx cat /etc/passwd", "`%sx`"),
    ("files = !ls", "getoutput"),
    ("%%bash\nls", "`%%bash`"),
    ("%load_ext autoreload", "`%load_ext`"),
    ("%matplotlib module://helper", "`%matplotlib`"),
    ("%matplotlib {exec('1')}", "`%matplotlib`"),
    ("get_ipython().run_line_magic('time', 'x = 1')", "`%time`"),
    # os beyond its path functions, and sys.path beyond a fixed folder
    ("import os\nos.system('ls')", "imports `os`"),
    ("import os\nsh = os\nsh.system('ls')", "reaches `os`"),
    ("import os\nos.path.os.system('ls')", "reaches `os`"),
    ("import os.path as osp\nosp.os.listdir('.')", "reaches `os.path`"),
    ("from os import listdir", "imports `os.listdir`"),
    ("from os.path import os as o", "imports `os.path.os`"),
    ("import sys\nsys.path.insert(0, input())", "sys.path"),
    ("import sys\nsys.path[0] = '/home/student'", "sys.path"),
    ("import sys\np = sys.path\np.clear()", "sys.path"),
])
def test_tampering_is_found_with_its_evidence(code, reason):
    findings = find_tampering(cells(code))
    assert findings, f"not flagged: {code!r}"
    assert any(reason in str(f) for f in findings), [str(f) for f in findings]
    assert findings[0].cell == 1 and findings[0].code  # where, and the line itself


def test_syntax_errors_are_not_tampering():
    assert find_tampering(cells("def f(:\n    pass")) == []


def test_a_cell_the_analysis_cannot_read_is_reported_with_why():
    nb = cells("x = 1", "def f(:\n    pass")
    assert list(unreadable_cells(nb)) == [2], unreadable_cells(nb)
    assert "SyntaxError" in unreadable_cells(nb)[2] and "line 1" in unreadable_cells(nb)[2]


def test_a_future_import_that_changes_the_syntax_of_later_cells_does_not_hide_them():
    # IPython keeps __future__ features for later cells: there `1 <> 2` is valid, and the kernel runs the cell
    nb = cells("from __future__ import barry_as_FLUFL", "assert 1 <> 2\nexec('import os')")
    assert unreadable_cells(nb) == {}
    assert any("exec" in str(f) for f in find_tampering(nb)), find_tampering(nb)


def test_a_future_import_late_in_a_cell_counts_too():
    # IPython compiles a cell statement by statement, so a __future__ import need not come first
    nb = cells("x = 1\nfrom __future__ import barry_as_FLUFL", "assert 1 <> 2\nexec('import os')")
    assert any("exec" in str(f) for f in find_tampering(nb)), find_tampering(nb)


def test_the_ready_made_answer_is_found_in_a_cell_only_a_future_import_makes_valid():
    nb = cells("from __future__ import barry_as_FLUFL",
               "assert 1 <> 2\nfrom torch.nn.functional import log_softmax")
    assert find_forbidden_use(nb, "log_softmax", LOG_SOFTMAX) is not None


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
