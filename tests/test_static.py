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
         "from lmbook.tasks.ch01 import check\ndevice = get_device()\ncorpus = load_corpus()")


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
    # what students write while they work: output, warnings, logging, progress, threads, timing, figures
    "import sys\nprint('epoch 1', file=sys.stderr)\nsys.stderr.write('50%\\r')\nsys.stdout.flush()",
    "import warnings\nwarnings.warn('the loss went up')",
    "import logging\nlogging.basicConfig(level=logging.INFO)\nlogging.info('step %d', 3)",
    "from tqdm.auto import tqdm\nfor i in tqdm(range(3)):\n    pass",
    "import os\ntorch.set_num_threads(os.cpu_count())",
    "from os import cpu_count\ntorch.set_num_threads(cpu_count())",
    "%config InlineBackend.figure_format = 'retina'",
    '%config InlineBackend.figure_formats = {"png", "retina"}',
    "%%time\nx = torch.randn(3, 5)\ny = x.sum()",
    "%time y = torch.randn(3).sum()",
    "%timeit torch.randn(3).sum()",
    "%timeit -n 10 -r 3 torch.randn(3).sum()",
    "result = %timeit -o torch.randn(3).sum()",
    "%%timeit x = torch.randn(3)\nx.sum()",
    "for n in (10, 100):\n    %time torch.randn(n).sum()",
    "%%capture captured\nprint('quiet')",
    "%load_ext autoreload\n%autoreload 2",
    "from IPython.display import display, Markdown\ndisplay(Markdown('**done**'))",
    "import IPython.display as ipd\nipd.clear_output()",
    # timing with the timeit module, compiling a model, images and functional helpers
    "import timeit\nt = timeit.timeit(lambda: torch.randn(3).sum(), number=10)",
    "import timeit\ndef step():\n    return torch.randn(3).sum()\nt = timeit.repeat(step, number=5, repeat=3)",
    "model = torch.compile(nn.Linear(2, 2))",
    "from PIL import Image",
    "import functools, operator\nn = functools.reduce(operator.mul, (2, 3, 4))",
    "import rich\nrich.print('[bold]done[/bold]')",
    "import pandas as pd\ndf = pd.DataFrame({'loss': [1.0, 0.5]})",
    "from scipy import signal\nw = signal.windows.hann(8)",
    "from torch.utils.data import DataLoader, TensorDataset",
    "layer = nn.Linear(2, 2)\nlayer.weight.requires_grad = False",
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
    # the code under a timing magic is read as any code
    ("%time x = open('/etc/passwd').read()", "calls `open`"),
    ("%%time\nimport os\nos.system('ls')", "imports `os`"),
    ("%timeit exec('import os')", "calls `exec`"),
    ("%%timeit import subprocess\nsubprocess.run(['ls'])", "running other programs"),
    ("%%capture out\nimport socket", "the network"),
    ("x = %timeit -o __import__('os')", "`__import__`"),
    # magics that run other code, or reach files or processes; and IPython's expansions in allowed ones
    ("%config InlineBackend.figure_format = x", "`%config`"),
    ("%config InlineBackend.figure_format = '{exec(\"1\")}'", "`%config`"),
    ("%config IPCompleter.evaluation = 'unsafe'", "`%config`"),
    ("%run helper.py", "`%run`"),
    ("%env SECRET=1", "`%env`"),
    ("%%writefile helper.py\nprint(1)", "`%%writefile`"),
    ("%load helper.py", "`%load`"),
    ("%sx cat /etc/passwd", "`%sx`"),
    ("files = !ls", "getoutput"),
    ("%%bash\nls", "`%%bash`"),
    ("%load_ext helper_extension", "`%load_ext`"),
    ("%matplotlib module://helper", "`%matplotlib`"),
    ("%matplotlib {exec('1')}", "`%matplotlib`"),
    ("get_ipython().run_line_magic('run', 'x.py')", "`%run`"),
    # IPython's shell under another name, frames and tracebacks, torch's hooks and internals
    ("from IPython import get_ipython as shell\nshell().run_cell('1')", "`IPython.get_ipython`"),
    ("import IPython\nIPython.get_ipython().ex('1')", "`IPython.get_ipython`"),
    ("ip = IPython_shell.run_cell", "`run_cell`"),
    ("try:\n    1 / 0\nexcept Exception as e:\n    up = e.__traceback__.tb_frame.f_back", "`tb_frame`"),
    ("def f(g):\n    return g.gi_frame.f_locals", "`gi_frame`"),
    ("frame = getattr(tb, 'tb_frame')", "`tb_frame`"),
    ("import operator\nget = operator.attrgetter('tb_' + 'frame')", "computed at run time"),
    ("with torch._C.DisableTorchFunction():\n    pass", "torch's internals"),
    ("from torch.overrides import TorchFunctionMode", "torch's internals"),
    ("class Lazy(torch.Tensor):\n    @classmethod\n    def __torch_function__(cls, f, t, a=(), k=None):\n"
     "        return f(*a)", "`__torch_function__`"),
    ("cu = torch.jit.CompilationUnit('def f(x):\\n    return x')", "torch's internals"),
    ("import _thread\n_thread.start_new_thread(print, ())", "background threads"),
    ("import mmap\nbuf = mmap.mmap(-1, 4096)", "shared memory"),
    ("import numpy as np\nc = np.ctypeslib.ctypes", "raw memory"),
    ("import sys\nsys.settrace(None)", "sys.settrace"),
    ("import sys\nsys.stderr = open('/dev/null', 'w')", "monkeypatching"),
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
    # raw OS calls without os, found from what the modules expose
    ("import posix\nfor name in posix.listdir('/'):\n    print(name)", "imports `posix`"),
    ("import posix as p\np.system('cat /etc/passwd')", "other programs (a shell)"),
    ("import _posixsubprocess", "processes"),
    ("from _ctypes import dlopen", "C libraries"),
    ("import cffi\nffi = cffi.FFI()\nlibc = ffi.dlopen(None)", "C libraries"),
    ("import resource\nresource.setrlimit(resource.RLIMIT_CPU, (10**6, 10**6))", "the sandbox's limits"),
    # code in strings, and names resolved at run time
    ("import timeit\ntimeit.timeit('import os; os.system(\"ls\")', number=1)", "runs code given as a string"),
    ("from timeit import Timer\nTimer(stmt='x = 1', setup='import posix').timeit(1)", "as a string"),
    ("import pkgutil\nf = pkgutil.resolve_name('torch.nn.functional:log_softmax')", "computed at run time"),
    ("import functools\nf = functools.reduce(getattr, ['nn', 'functional', 'log_softmax'], torch)",
     "hands `getattr`"),
    ("names = ['x']\nvalues = list(map(eval, names))", "hands `eval`"),
    ("import torch\n@torch.library.custom_op('me::lsm', mutates_args=())\ndef lsm(x: torch.Tensor) -> "
     "torch.Tensor:\n    return x", "torch.library"),
    # the grader's own modules reached through an attribute, and the watch's hook read back
    ("import lmbook\nw = lmbook.grading.watch\nw._current = None", "the grader's internals"),
    ("import sys\nhook = sys.getprofile()", "sys.getprofile"),
    # a library module under another name is still a library module; a library's layer over processes too
    ("F = torch.nn.functional\nsetattr(F, 'log_softmax', lambda x, dim=-1: x)", "`setattr` on a library module"),
    ("nnf = torch.nn.functional\nnnf.relu = lambda x: x", "monkeypatching"),
    ("import torch.multiprocessing as mp\nmp.Process(target=print).start()", "other processes"),
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
    "def log_softmax(x, dim=-1):\n    return x - torch.logsumexp(x, dim, keepdim=True)",
    # torch's other names for the same op, derived from torch: private, C-level, special
    "def log_softmax(x, dim=-1):\n    return torch._log_softmax(x, dim, False)",
    "def log_softmax(x, dim=-1):\n    return x - torch.special.logsumexp(x, dim, keepdim=True)",
    "def log_softmax(x, dim=-1):\n    return torch.nn.LogSoftmax(dim)(x)",
    # a definition under a timing magic is a definition
    "%%time\ndef log_softmax(x, dim=-1):\n    return F.log_softmax(x, dim)",
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


def test_cross_entropy_through_torchs_c_level_names_is_forbidden():
    for code in ["def cross_entropy(lg, t, ignore_index=-100):\n    return torch._C._nn.cross_entropy_loss(lg, t)",
                 "def cross_entropy(lg, t, ignore_index=-100):\n    return torch._C._nn.nll_loss_nd(lg, t)",
                 "def cross_entropy(lg, t, ignore_index=-100):\n    return torch.nn.CrossEntropyLoss()(lg, t)"]:
        assert find_forbidden_use(cells(code), "cross_entropy", CROSS_ENTROPY), code


@pytest.mark.parametrize("code, fn, check", [
    # a helper of the student's own named like torch's op
    ("def logsumexp(z, dim):\n    m = z.amax(dim, keepdim=True)\n"
     "    return m + (z - m).exp().sum(dim, keepdim=True).log()\n"
     "def log_softmax(x, dim=-1):\n    return x - logsumexp(x, dim)", "log_softmax", LOG_SOFTMAX),
    # a method of the student's own, called on their own object (not a library's)
    ("class Stable:\n    def logsumexp(self, z, dim):\n        return z.exp().sum(dim, keepdim=True).log()\n"
     "def log_softmax(x, dim=-1):\n    m = x.amax(dim, keepdim=True)\n"
     "    return x - m - Stable().logsumexp(x - m, dim)",
     "log_softmax", LOG_SOFTMAX),
    ("class MyLM(nn.Module):\n    def __init__(self, V):\n        super().__init__()\n"
     "        self.out = nn.Linear(4, V)\n"
     "    def fit(self, ids):\n        return self\n"
     "def train_lm(train_ids, vocab_size):\n    model = MyLM(vocab_size).fit(train_ids)\n    return model, 3",
     "train_lm", TRAIN_LM),
])
def test_students_names_that_match_a_ready_made_ones_are_not_forbidden(code, fn, check):
    assert find_forbidden_use(cells(code), fn, check) is None


def test_a_scratch_cell_comparing_with_torch_into_a_global_does_not_cost_the_answer():
    # `out` is a global of the scratch cell and a local of the answer: the answer never reads the global
    answer = ("def log_softmax(x, dim=-1):\n    out = x - x.amax(dim, keepdim=True)\n"
              "    return out - out.exp().sum(dim, keepdim=True).log()")
    scratch = "x = torch.randn(3, 5)\nout = torch.log_softmax(x, -1)\nprint((log_softmax(x) - out).abs().max())"
    assert find_forbidden_use(cells(answer, scratch), "log_softmax", LOG_SOFTMAX) is None
    assert find_forbidden_use(cells(scratch, answer), "log_softmax", LOG_SOFTMAX) is None


def test_the_binding_in_force_at_the_test_counts():
    tried = "from torch.nn.functional import log_softmax"  # tried first, then written by hand
    own = ("def log_softmax(x, dim=-1):\n    m = x.amax(dim, keepdim=True)\n"
           "    return x - m - (x - m).exp().sum(dim, keepdim=True).log()")
    assert find_forbidden_use(cells(tried, own), "log_softmax", LOG_SOFTMAX) is None
    assert find_forbidden_use(cells(own, tried), "log_softmax", LOG_SOFTMAX) is not None
    # a test cell between them sees the first: before=3 is the cell after `tried` and `own` (cells 1 and 2)
    assert find_forbidden_use(cells(own, tried), "log_softmax", LOG_SOFTMAX, before=2) is None


def test_a_method_call_on_a_tensor_is_left_to_the_run_time_watch():
    # `x` is the answer's parameter: reading the code cannot tell a tensor from the student's own object;
    # the watch over the answer's run sees torch's Tensor.log_softmax called (tests/test_checks.py)
    assert find_forbidden_use(cells("def log_softmax(x, dim=-1):\n    return x.log_softmax(dim)"),
                              "log_softmax", LOG_SOFTMAX) is None


def test_a_library_objects_forbidden_attribute_is_forbidden():
    # the set-up cell's `corpus = load_corpus()`: its `.hmm` is the true model
    assert find_forbidden_use(cells("def train_lm(ids, V):\n    h = corpus.hmm\n    return (lambda c: h), 3"),
                              "train_lm", TRAIN_LM)
