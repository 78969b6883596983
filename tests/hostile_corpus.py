"""Hostile and broken submissions of exercise 1, each with the exact grade it must get.

Every attack on the grader we know of (and every way a submission breaks) is
one student folder. The tampering ones carry wrong or blank answers, so an
attack that worked would show up as points. ``EXPECTED[name]`` is
``(per-task points, flagged for review, a phrase the report must contain)``;
the task order is log_softmax, cross_entropy, ffnn_forward, sgns_loss, train_lm
(3 + 3 + 3 + 3 + 4 = 16 points; the thinking questions are left unanswered).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
from make_samples import NOTEBOOK, fill, solution_answers  # noqa: E402

# The samples answer the five code tasks only: the thinking questions (lmbook.tasks.questions.ch01) stay
# unanswered in every one, so a sample's total is its code tasks' points, out of MAX_TOTAL for the exercise.
CODE_TASKS = ("log_softmax", "cross_entropy", "ffnn_forward", "sgns_loss", "train_lm")
GOOD = {task: answer for task, answer in solution_answers().items() if task in CODE_TASKS}
FULL, ZERO = [3, 3, 3, 3, 4], [0, 0, 0, 0, 0]
MAX_TOTAL = sum(c.metadata["nbgrader"]["points"] for c in nbformat.read(
    ROOT / "solutions" / "ch01" / NOTEBOOK, as_version=4).cells if c.metadata.get("nbgrader", {}).get("grade"))
WRONG = {  # a wrong answer for every task: a successful attack would turn these into points
    "log_softmax": "def log_softmax(x, dim=-1):\n    return x",
    "cross_entropy": "def cross_entropy(logits, targets, ignore_index=-100):\n    return logits.sum()\n\n"
                     "def perplexity(logits, targets, ignore_index=-100):\n    return 1.0",
    "ffnn_forward": "def ffnn_forward(context, E, W, b, U, c):\n    return torch.zeros(len(context), U.shape[0])",
    "sgns_loss": "def sgns_loss(v_c, u_o, u_neg):\n    return torch.tensor(0.0)",
    "train_lm": "def train_lm(train_ids, vocab_size):\n    return (lambda ctx: torch.zeros(len(ctx), vocab_size)), 3",
}


def _with_cell(nb, source: str, after: str = "setup"):
    """Add a student's own code cell after the cell with grade_id ``after``."""
    i = next(k for k, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == after)
    nb.cells.insert(i + 1, nbformat.v4.new_code_cell(source))
    return nb


def _tampering(code: str, after: str = "setup"):
    return lambda: _with_cell(fill(WRONG), code, after)


def _cells_of(nb, *grade_ids):
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") in grade_ids]


def _tags_on_tests():
    nb = fill({**GOOD, "ffnn_forward": WRONG["ffnn_forward"], "train_lm": WRONG["train_lm"]})
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade"):
            c.metadata["tags"] = ["skip-execution", "raises-exception"]
    return nb


def _duplicate_test_cell():
    nb = fill(GOOD)
    test = copy.deepcopy(_cells_of(nb, "test_log_softmax")[0])
    i = nb.cells.index(_cells_of(nb, "sgns_loss")[0])
    nb.cells.insert(i + 1, test)
    return nb


def _deleted_test_cells():
    nb = fill(GOOD)
    for c in _cells_of(nb, "test_log_softmax", "hidden_log_softmax"):
        nb.cells.remove(c)
    return nb


def _deleted_answer_cell():
    nb = fill(GOOD)
    nb.cells.remove(_cells_of(nb, "ffnn_forward")[0])
    return nb


def _edited_test_cells():
    nb = fill(WRONG)
    for c in nb.cells:
        meta = c.metadata.get("nbgrader", {})
        if meta.get("grade"):
            c.source = "16"  # nbgrader reads a displayed number as partial credit
            meta["points"] = 100
    _cells_of(nb, "hidden_train_lm")[0].metadata["nbgrader"]["grade"] = False
    extra = nbformat.v4.new_code_cell("1000")
    extra.metadata["nbgrader"] = {"grade": True, "grade_id": "bonus", "locked": False, "points": 1000,
                                  "schema_version": 3, "solution": False, "task": False}
    nb.cells.append(extra)
    return nb


def _hangs_in_answer():
    return fill({**GOOD, "ffnn_forward": "def ffnn_forward(context, E, W, b, U, c):\n    while True:\n        pass"})


def _unkillable_loop():
    # After task 2, a cell that swallows the grader's soft time limit: the run is killed there.
    return _with_cell(fill(GOOD), "while True:\n    try:\n        while True:\n            pass\n"
                                  "    except BaseException:\n        pass", after="hidden_cross_entropy")


def _output_flood():
    return _with_cell(fill(GOOD), "for i in range(200_000):\n    print('spam' * 50)")


def _memory_hog():
    return _with_cell(fill(GOOD), "hog = torch.ones(3_000_000_000, dtype=torch.float32)", after="hidden_cross_entropy")


def _hidden_import():
    return fill({**GOOD, "log_softmax": "from torch.nn.functional import log_softmax as _ls\n\n"
                                        "def log_softmax(x, dim=-1):\n    return _ls(x, dim)"})


def _future_hides_import():
    # IPython keeps the __future__ feature for later cells, where `<>` is valid: a cell the analysis once skipped.
    # It also makes `!=` invalid: the cross_entropy answer's cell is a syntax error, for kernel and grader alike.
    nb = fill({**GOOD, "log_softmax": "from __future__ import barry_as_FLUFL"})
    return _with_cell(nb, "assert 1 <> 2\nfrom torch.nn.functional import log_softmax", after="log_softmax")


def _answer(log_softmax: str):
    """A ready-made log_softmax by some route, every other answer right: only that task may lose its points."""
    return lambda: fill({**GOOD, "log_softmax": log_softmax})


# The ready-made answer by routes a deny-list of names misses; caught by the static analysis, the function
# object's check or the run-time watch, whichever sees it first.
READY_MADE = {
    "private_alias": "from torch import log_softmax as _mine\n\ndef log_softmax(x, dim=-1):\n    return _mine(x, dim)",
    "default_argument": "def log_softmax(x, dim=-1, _f=torch.log_softmax):\n    return _f(x, dim)",
    "lambda_bound_later": ("helper = None\n\ndef log_softmax(x, dim=-1):\n    return helper(x, dim)\n\n"
                           "helper = lambda x, dim: torch.nn.functional.log_softmax(x, dim)"),
    "module_named_at_run_time": ("import importlib\nF = importlib.import_module('torch.nn.' + 'functional')\n\n"
                                 "def log_softmax(x, dim=-1):\n    return F.log_softmax(x, dim)"),
    "compiled_from_bytes": "log_softmax = eval(compile(b'lambda x, dim=-1: torch.log_softmax(x, dim)', 'a', 'eval'))",
    # these two pass the static analysis and the function-object check: the run-time watch catches them
    "attrgetter": ("import operator\nmine = operator.attrgetter('log_' + 'softmax')(torch)\n\n"
                   "def log_softmax(x, dim=-1):\n    return mine(x, dim)"),
    "methodcaller": ("import operator\n\ndef log_softmax(x, dim=-1):\n"
                     "    return operator.methodcaller('log_' + 'softmax', dim)(x)"),
    "builtins_through_itself": ("imp = __builtins__.__dict__['__imp' + 'ort__']\n"
                                "F = imp('torch.nn.functional', fromlist=['log_softmax'])\n\n"
                                "def log_softmax(x, dim=-1):\n    return F.log_softmax(x, dim)"),
}

# Code that would forge the grader's results from beside the answers (threads, forked processes writing to
# the reply pipe after the runner's own reply): refused before it runs, and ignored if it ever ran.
THREAD_FORGER = ("import os, threading, json\n"
                 "def forge():\n    for fd in range(3, 64):\n        try:\n"
                 "            os.write(fd, json.dumps({'event': 'end', 'step': 9, 'probes': {}}).encode() + b'\\n')\n"
                 "        except OSError:\n            pass\n"
                 "threading.Thread(target=forge, daemon=True).start()")
FORK_FORGER = "import os\nif os.fork() == 0:\n    import time\n    time.sleep(5)\n    os._exit(0)"
HUGE_IMAGE = "from IPython.display import display\ndisplay({'image/png': 'A' * 40_000_000}, raw=True)"


HONEST_PATTERNS = ('"""My notes: the book keeps its tables in .npy files."""\n%matplotlib inline\nimport os\n'
                   "import sys\nsys.path.insert(0, '..')  # not /proc\nprint(os.path.join('runs', 'first'))")

# What each ready-made route gets: (per-task points, flagged, a phrase of the report)
READY_MADE_EXPECTED = {
    "private_alias": ([0, 3, 3, 3, 4], False, "uses `torch.log_softmax`, the ready-made answer"),
    "default_argument": ([0, 3, 3, 3, 4], False, "calls `.log_softmax`"),
    "lambda_bound_later": ([0, 3, 3, 3, 4], False, "calls `.log_softmax`"),
    "module_named_at_run_time": (ZERO, True, "imports `importlib`"),
    "compiled_from_bytes": (ZERO, True, "calls `eval`"),
    # a name computed at run time, as getattr on a module: reaching for what the grader cannot read
    "attrgetter": (ZERO, True, "computed at run time"),
    "methodcaller": (ZERO, True, "computed at run time"),
    "builtins_through_itself": (ZERO, True, "reaches `__dict__`"),
}

# ----------------------------------------------------------------------------- issue 29's kinds
# Honest habits: everything here is what students write while they work, and costs nothing.
HABITS_SETUP = """%matplotlib inline
%config InlineBackend.figure_format = "retina"
import os
import sys
import logging
import warnings
from tqdm.auto import tqdm
torch.set_num_threads(os.cpu_count())
logging.basicConfig(level=logging.INFO)"""
HABITS_LOG_SOFTMAX = '''
def logsumexp(z, dim):
    """My own: the maximum first, so exp never overflows."""
    m = z.amax(dim=dim, keepdim=True)
    return m + (z - m).exp().sum(dim=dim, keepdim=True).log()


def log_softmax(x, dim=-1):
    print("log_softmax of shape", tuple(x.shape))
    print("working...", file=sys.stderr)
    sys.stderr.write("\\r50%")
    logging.info("dim=%s", dim)
    if x.abs().max() > 100:
        warnings.warn("large logits: subtracting the maximum keeps exp finite")
    return x - logsumexp(x, dim)'''
HABITS_SCRATCH = """x = torch.randn(4, 10)
out = torch.log_softmax(x, dim=-1)  # compare with torch's, outside the answer
print("largest difference:", (log_softmax(x) - out).abs().max().item())
%time y = log_softmax(torch.randn(64, 1000))
%timeit -n 3 -r 1 log_softmax(x)"""
HABITS_TIMED = """%%time
import matplotlib.pyplot as plt
z = torch.linspace(-5, 5, 50)
plt.plot(z, log_softmax(torch.stack([z, torch.zeros_like(z)]), dim=0)[0])
plt.title("log-softmax of (z, 0)")"""
HABITS_TRAIN = '''
class FFLM(nn.Module):
    def __init__(self, V, window=4, d=32, H=128):
        super().__init__()
        self.window = window
        self.emb, self.hidden, self.out = nn.Embedding(V, d), nn.Linear(window * d, H), nn.Linear(H, V)

    def forward(self, ctx):
        return self.out(torch.tanh(self.hidden(self.emb(ctx).flatten(1))))

    def fit(self, ids, epochs=4):
        contexts, targets = make_windows(ids, self.window)
        opt = torch.optim.Adam(self.parameters(), lr=3e-3)
        for epoch in tqdm(range(epochs), desc="epochs"):
            order = torch.randperm(len(targets))
            for i in range(0, len(order), 256):
                idx = order[i:i + 256]
                loss = F.cross_entropy(self(contexts[idx]), targets[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
            print(f"epoch {epoch}: loss {loss.item():.3f}")
        return self


def train_lm(train_ids, vocab_size):
    torch.manual_seed(0)
    return FFLM(vocab_size).fit(train_ids), 4'''
PASTED_IMAGE_B64 = "iVBORw0KGgo" + "A" * 25_000_000  # 25 MB pasted into a markdown cell


def _honest_habits():
    nb = fill({**GOOD, "log_softmax": HABITS_LOG_SOFTMAX, "train_lm": HABITS_TRAIN})
    _with_cell(nb, HABITS_SETUP)
    _with_cell(nb, HABITS_TIMED, after="log_softmax")
    _with_cell(nb, HABITS_SCRATCH, after="log_softmax")
    note = nbformat.v4.new_markdown_cell("My sketch of the model: ![sketch](attachment:sketch.png)")
    note["attachments"] = {"sketch.png": {"image/png": PASTED_IMAGE_B64}}
    i = next(k for k, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "train_lm")
    nb.cells.insert(i, note)
    return nb


def _malformed_metadata():
    nb = _with_cell(fill(GOOD), "scratch = 1")
    cell = next(c for c in nb.cells if c.source == "scratch = 1")
    cell.metadata["nbgrader"] = {"grade_id": ["scratch"], "solution": True, "grade": "no", "locked": []}
    return nb


# The ready-made op by routes only the run shows: another thread, torch's operator under a computed name, a
# tensor that computes when read, the course's function reached by an attribute getter, the grader's reference.
ROUTES_SETUP = """from concurrent.futures import ThreadPoolExecutor
import operator
import lmbook
pool = ThreadPoolExecutor(1)
pool.submit(int).result()  # the pool's thread runs from here on
ops = torch.ops.aten
name = "_log_" + "softmax\""""
RUN_TIME_ROUTES = {
    # a pool of its own: a hidden test runs in a fresh process, where threads of earlier cells do not exist
    "thread_pool_operator": ("def log_softmax(x, dim=-1):\n    with ThreadPoolExecutor(1) as own:\n"
                             "        return own.submit(getattr(ops, name), x, dim, False).result()"),
    "tensor_computed_when_read": ("class Later(torch.Tensor):\n    def numpy(self, *args, **kwargs):\n"
                                  "        return getattr(ops, name)(*type(self).todo, False).numpy()\n\n"
                                  "def log_softmax(x, dim=-1):\n    Later.todo = (x, dim)\n"
                                  "    return torch.zeros_like(x).as_subclass(Later)"),
    "course_by_attribute_getter": ("get = operator.attrgetter('functional.log_softmax')\n\n"
                                   "def log_softmax(x, dim=-1):\n    return get(lmbook)(x, dim)"),
}
RUN_TIME_EXPECTED = {
    # the feedback names the forbidden op by the task's own words (never a name the answer could set)
    "thread_pool_operator": "torch's `log_softmax` while it ran",  # called or ran: either watch may see it first
    "tensor_computed_when_read": "torch's `log_softmax` while it ran",
    "course_by_attribute_getter": "called the ready-made implementation of this task",
}


# A cross-entropy of the student's own that does not call their log_softmax: only task 1 is at stake.
CE_OWN = """def cross_entropy(logits, targets, ignore_index=-100):
    z = logits.reshape(-1, logits.shape[-1])
    m = z.amax(dim=-1, keepdim=True)
    logp = z - m - (z - m).exp().sum(dim=-1, keepdim=True).log()
    targets = targets.reshape(-1)
    keep = targets != ignore_index
    return -logp[keep].gather(1, targets[keep].unsqueeze(1)).mean()


def perplexity(logits, targets, ignore_index=-100):
    return math.exp(cross_entropy(logits, targets, ignore_index).item())"""


def _run_time_route(code: str):
    return lambda: _with_cell(fill({**GOOD, "log_softmax": code, "cross_entropy": CE_OWN,
                                    "train_lm": WRONG["train_lm"]}), ROUTES_SETUP)


# Hidden inputs carried out through an exception's message and a returned value (the answers are right on the
# visible cases): the feedback must show neither. LEAK_MARK and the hidden inputs' values are looked for.
LEAK_MARK = "LEAKED-"
LEAKING = {
    "log_softmax": ("def log_softmax(x, dim=-1):\n    m = x.amax(dim=dim, keepdim=True)\n"
                    "    if x.shape[-1] in (47, 5000, 1):  # hidden cases' sizes\n"
                    # the mark is built at run time: the code itself, shown in the feedback, must not hold it
                    f"        raise ValueError('{LEAK_MARK[:4]}' + '{LEAK_MARK[4:]}' + str(x.flatten()[:4].tolist()))\n"
                    "    return x - m - (x - m).exp().sum(dim=dim, keepdim=True).log()"),
    "cross_entropy": GOOD["cross_entropy"].replace(
        "    logp = ", "    if logits.shape[-1] in (47, 20, 30):\n"
                      "        return logits.flatten()[:1].sum()  # an input, echoed\n    logp = ", 1),
}


def _image_flood():
    cell = ("from IPython.display import display\nfor _ in range(20):\n"
            "    display({'image/png': 'iVBORw0KGgo' + 'B' * 1_990_000}, raw=True)")
    nb = fill(GOOD)
    for _ in range(10):
        _with_cell(nb, cell, after="sgns_loss")
    return nb


ISSUE_29 = {
    "honest_habits": (_honest_habits, FULL, False, "attachments", {}),
    "malformed_metadata": (_malformed_metadata, FULL, False, "malformed nbgrader metadata", {}),
    "image_flood": (_image_flood, FULL, False, "", {}),
    "leaks_through_messages": (lambda: fill({**GOOD, **LEAKING, "train_lm": WRONG["train_lm"]}), [1, 1, 3, 3, 0],
                               False, "", {}),
    **{name: (_run_time_route(code), [0, 3, 3, 3, 0], False, RUN_TIME_EXPECTED[name], {})
       for name, code in RUN_TIME_ROUTES.items()},
    # the grader's reference reached from the set-up's `check`: its internals, read in the code
    "graders_own_reference": (_run_time_route(
        "def log_softmax(x, dim=-1):\n    return check.checks['log_softmax'].reference(x, dim)"), ZERO, True,
        "the grader's internals", {}),
    "private_c_kernel": (lambda: fill({**GOOD, "cross_entropy": GOOD["cross_entropy"].replace(
        "return -logp[keep].gather(1, targets[keep].unsqueeze(1)).mean()",
        "return torch._C._nn.nll_loss_nd(logp, targets, None, 1, ignore_index)")}), ZERO, True, "torch's internals",
        {}),
    "returns_the_true_model": (lambda: fill({**GOOD, "train_lm": "def train_lm(train_ids, vocab_size):\n"
                                             "    hmm = corpus.hmm\n    return (lambda ctx: torch.zeros(len(ctx), "
                                             "vocab_size)), 12"}), [3, 3, 3, 3, 0], False, "`.hmm`", {}),
    "fakes_training_time": (_tampering("import time\ntime.perf_counter = lambda: 0.0"), ZERO, True,
                            "monkeypatching", {}),
    "shell_under_an_alias": (_tampering("from IPython import get_ipython as shell\nshell().run_cell('x = 1')"),
                             ZERO, True, "IPython.get_ipython", {}),
    "walks_the_traceback": (_tampering("try:\n    1 / 0\nexcept ZeroDivisionError as e:\n"
                                       "    above = e.__traceback__.tb_frame.f_back"), ZERO, True, "tb_frame", {}),
    "shared_memory": (_tampering("import mmap\nshared = mmap.mmap(-1, 4096)"), ZERO, True, "shared memory", {}),
}


# name -> (build, expected per-task points, flagged, a phrase the report must contain, extra files)
# ----------------------------------------------------------------------------- issue 45's honest kinds
# What honest students write that a grader living in their process once took for tampering or a ready-made
# answer: an endless recursion (Python drops the watch's hook as the stack overflows), the set-up's corpus
# read inside an answer. (A model compiled with torch.compile: test_watch.py, since tracing it takes longer than
# this batch's 15-second cells.)
RECURSES = """def log_softmax(x, dim=-1):
    # the base case forgotten: each call hands the same input on
    return log_softmax(x, dim)"""
READS_SETUP = GOOD["train_lm"].replace(
    "    window, d, H = 4, 32, 128\n",
    "    window, d, H = 4, 32, 128\n    print('vocabulary:', len(corpus.vocab), 'given:', vocab_size)\n", 1)
# A child process to train in, away from the grader's watch, reached through a module another one imported:
# torch's (read in the code, and flagged) or tempfile's (a route the reading does not follow: the runner's
# audit hook refuses the fork as it starts, and the notebook is flagged all the same)
FORK_THROUGH_TORCH = """# train in a child, where the grader's watch is not looking
system = torch.serialization.os
if system.fork() == 0:
    system._exit(0)"""
FORK_UNREAD = """import tempfile
system = tempfile._os  # train in a child, where the grader's watch is not looking
if system.fork() == 0:
    system._exit(0)"""
ISSUE_45 = {
    "forks_through_torch": (lambda: _with_cell(fill(GOOD), FORK_THROUGH_TORCH), ZERO, True,
                            "through `torch.serialization.os`", {}),
    "forks_by_a_route_unread": (lambda: _with_cell(fill(GOOD), FORK_UNREAD), ZERO, True,
                                "tried to start a process (`os.fork`)", {}),
    # cross_entropy calls the student's own log_softmax: it is checked with a right one in its place (one
    # mistake, one task), so only log_softmax fails
    "endless_recursion": (lambda: fill({**GOOD, "log_softmax": RECURSES}), [0, 3, 3, 3, 4], False,
                          "RecursionError", {}),
    "reads_the_setups_corpus": (lambda: fill({**GOOD, "train_lm": READS_SETUP}), FULL, False, "", {}),
}


CORPUS = {
    "honest": (lambda: fill(GOOD), FULL, False, "", {}),
    "tags_on_tests": (_tags_on_tests, [3, 3, 0, 3, 0], False, "ignored the tag(s)", {}),
    "input_transformer": (_tampering("ip = get_ipython()\nip.input_transformers_cleanup.append("
                                     "lambda lines: ['pass\\n'])"), ZERO, True, "uses IPython's", {}),
    "monkeypatch_allclose": (_tampering("import numpy as np\ntorch.allclose = lambda *a, **k: True\n"
                                        "np.allclose = lambda *a, **k: True"), ZERO, True, "monkeypatching", {}),
    "patch_grader": (_tampering("import lmbook.grading.checks as C\n"
                                "C.describe_tensor_mismatch = lambda *a, **k: None"), ZERO, True,
                     "grader's internals", {}),
    "always_equal": (_tampering("class Anything(torch.Tensor):\n    def __eq__(self, other):\n        return True\n"
                                "def log_softmax(x, dim=-1):\n    return Anything()"), ZERO, True,
                     "defines `__eq__`", {}),
    "planted_numpy": (lambda: fill(GOOD), FULL, False, "ignored 1 other file(s): numpy.py",
                      {"numpy.py": "raise SystemExit('planted')\nallclose = lambda *a, **k: True\n"}),
    "reads_gradebook": (_tampering("data = open('../../../gradebook.db', 'rb').read()"), ZERO, True,
                        "opens a file", {}),
    "finds_hidden_tests": (_tampering("import glob\nfound = glob.glob('/**/source/**/*.ipynb', recursive=True)"),
                           ZERO, True, "imports `glob`", {}),
    "writes_gradebook": (_tampering("import sqlite3\ndb = sqlite3.connect('../../../gradebook.db')\n"
                                    "db.execute('update grade set manual_score = 3')\ndb.commit()"), ZERO, True,
                         "imports `sqlite3`", {}),
    "reads_other_students": (_tampering("import os\nothers = os.listdir('../..')"), ZERO, True, "imports `os`", {}),
    "network": (_tampering("import urllib.request\nurllib.request.urlopen('http://example.com').read()"),
                ZERO, True, "the network", {}),
    "exec_hidden": (_tampering("exec('imp' + 'ort os')"), ZERO, True, "calls `exec`", {}),
    "getattr_hidden": (_tampering("ls = getattr(torch, 'log_' + 'softmax')"), ZERO, True, "`getattr`", {}),
    "frame_walk": (_tampering("import inspect\nframe = inspect.currentframe()"), ZERO, True, "imports `inspect`", {}),
    "ignores_alarm": (_tampering("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)"), ZERO, True,
                      "imports `signal`", {}),
    "sys_modules": (_tampering("import sys\nsys.modules['numpy'] = None"), ZERO, True, "sys.modules", {}),
    "forges_outputs": (_tampering("import json, sys\nimport numpy as np\njob, out = sys.argv[1], sys.argv[2]\n"
                                  "np.save(out + '/c4_0_0.npy', np.zeros(3))", after="hidden_log_softmax"),
                       ZERO, True, "sys.argv", {}),
    "shell_command": (_tampering("!cat ../../../gradebook.db"), ZERO, True, "system", {}),
    "hidden_import": (_hidden_import, [0, 3, 3, 3, 4], False, "torch.nn.functional.log_softmax", {}),
    "duplicate_test_cell": (_duplicate_test_cell, FULL, False, "second copy", {}),
    "deleted_test_cells": (_deleted_test_cells, FULL, False, "was missing and was restored", {}),
    "deleted_answer_cell": (_deleted_answer_cell, [3, 3, 0, 3, 4], False, "'ffnn_forward' was missing", {}),
    "edited_test_cells": (_edited_test_cells, ZERO, False, "were changed; restored them", {}),
    "hangs_in_answer": (_hangs_in_answer, [3, 3, 0, 3, 4], False, "took too long", {}),
    "unkillable_loop": (_unkillable_loop, [3, 3, 0, 0, 0], False, "ran past its time limit", {}),
    "memory_hog": (_memory_hog, FULL, False, "", {}),
    "output_flood": (_output_flood, FULL, False, "", {}),
    # the code under a timing magic is read (and run) as any code
    "time_magic": (_tampering("%%time\nimport numpy as np\nnp.save('/tmp/c4_0_0.npy', np.zeros(3))"), ZERO, True,
                   "reads or writes files", {}),
    "future_hides_import": (_future_hides_import, [0, 0, 3, 3, 4], False, "torch.nn.functional.log_softmax", {}),
    "honest_patterns": (lambda: _with_cell(fill(GOOD), HONEST_PATTERNS), FULL, False, "", {}),
    "thread_forges_replies": (_tampering(THREAD_FORGER), ZERO, True, "imports `os`", {}),
    "fork_forges_replies": (_tampering(FORK_FORGER), ZERO, True, "imports `os`", {}),
    "huge_image": (lambda: _with_cell(fill(GOOD), HUGE_IMAGE), FULL, False, "", {}),
    **{name: (_answer(code), *READY_MADE_EXPECTED[name], {}) for name, code in READY_MADE.items()},
    **ISSUE_29,
    **ISSUE_45,
}
# Not graded at all (a clear status, 0 points): the file itself is broken.
BROKEN = {
    "invalid_json": ('{"cells": [', "unreadable notebook"),
    "not_a_notebook_schema": ('{"cells": 3, "nbformat": 4, "nbformat_minor": 5, "metadata": {}}',
                              "unreadable notebook"),
}
# Graded normally, from a file in another shape.
RENAMED = ("renamed", "my homework (final).ipynb", FULL, "was renamed")
OLD_FORMAT = ("old_format", FULL, "converted from notebook format 3")


def write_corpus(dest: Path, only=None) -> dict[str, tuple[list[int], bool, str]]:
    """Write every submission (``only``: those named) as a student folder under ``dest``; return
    name -> (points, flagged, phrase)."""
    expected = {}
    for name, (build, points, flagged, phrase, extra) in CORPUS.items():
        if only is not None and name not in only:
            continue
        folder = dest / name
        folder.mkdir(parents=True)
        nbformat.write(build(), folder / NOTEBOOK)
        for fname, text in extra.items():
            (folder / fname).write_text(text)
        expected[name] = (points, flagged, phrase)
    if only is not None:
        return expected
    for name, (text, phrase) in BROKEN.items():
        (dest / name).mkdir(parents=True)
        (dest / name / NOTEBOOK).write_text(text)
        expected[name] = (ZERO, False, phrase)
    name, fname, points, phrase = RENAMED
    (dest / name).mkdir(parents=True)
    nbformat.write(fill(GOOD), dest / name / fname)
    expected[name] = (points, False, phrase)
    name, points, phrase = OLD_FORMAT
    (dest / name).mkdir(parents=True)
    v3 = nbformat.convert(fill(GOOD), 3)
    (dest / name / NOTEBOOK).write_text(json.dumps(v3))
    expected[name] = (points, False, phrase)
    return expected


# ----------------------------------------------------------------------------- known wrong implementations
# Three or more per task, one notebook per column: (answer, the misconception the feedback must name).
# The cross-entropy answers use torch's log-softmax, so each is wrong only in its own way.
TRAIN_TEMPLATE = '''
def train_lm(train_ids, vocab_size):
    window = 4
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(vocab_size, 32), nn.Flatten(start_dim=1), nn.Linear(window * 32, 128),
                          nn.Tanh(), nn.Linear(128, vocab_size))
    contexts, targets = make_windows(train_ids, window)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(EPOCHS):
        order = torch.randperm(len(targets))
        for i in range(0, len(order), 256):
            idx = order[i:i + 256]
            loss = F.cross_entropy(model(contexts[idx]), targets[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return RETURN
'''
WRONG_SETS = {
    "wrong_1": {
        "log_softmax": ("def log_softmax(x, dim=-1):\n    return x - x.exp().sum(dim=dim, keepdim=True).log()",
                        "exp overflows"),
        "cross_entropy": ("def cross_entropy(logits, targets, ignore_index=-100):\n"
                          "    logp = torch.log_softmax(logits, -1).reshape(-1, logits.shape[-1])\n"
                          "    t = targets.reshape(-1)\n    keep = t != ignore_index\n"
                          "    return -logp[keep].gather(1, t[keep].unsqueeze(1)).sum()\n\n"
                          "def perplexity(logits, targets, ignore_index=-100):\n"
                          "    return math.exp(cross_entropy(logits, targets, ignore_index).item())",
                          "returned the sum over positions"),
        "ffnn_forward": ("def ffnn_forward(context, E, W, b, U, c):\n"
                         "    z = E[context.flip(1)].flatten(1)\n    return torch.tanh(z @ W.T + b) @ U.T + c",
                         "reverse order"),
        "sgns_loss": ("def sgns_loss(v_c, u_o, u_neg):\n    pos = (u_o * v_c).sum(-1)\n"
                      "    neg = (u_neg @ v_c.unsqueeze(-1)).squeeze(-1)\n"
                      "    return -(F.logsigmoid(pos) + F.logsigmoid(neg).sum(-1)).mean()",
                      "noise words need σ(-u_k·v_c)"),
        "train_lm": (TRAIN_TEMPLATE.replace("EPOCHS", "0").replace("RETURN", "model, window"),
                     "the target is at most"),
    },
    "wrong_2": {
        "log_softmax": ("def log_softmax(x, dim=-1):\n    return torch.log(torch.softmax(x, dim=dim))",
                        "log of softmax underflows"),
        "cross_entropy": ("def cross_entropy(logits, targets, ignore_index=-100):\n"
                          "    logp = torch.log_softmax(logits, -1).reshape(-1, logits.shape[-1])\n"
                          "    t = targets.reshape(-1)\n    keep = t != ignore_index\n"
                          "    return -logp[keep].gather(1, t[keep].unsqueeze(1)).sum() / t.numel()\n\n"
                          "def perplexity(logits, targets, ignore_index=-100):\n"
                          "    return math.exp(cross_entropy(logits, targets, ignore_index).item())",
                          "averaged over padding positions too"),
        "ffnn_forward": ("def ffnn_forward(context, E, W, b, U, c):\n"
                         "    z = E[context].flatten(1)\n    return (z @ W.T + b) @ U.T + c", "left out the tanh"),
        "sgns_loss": ("def sgns_loss(v_c, u_o, u_neg):\n    pos = (u_o * v_c).sum(-1)\n"
                      "    neg = (u_neg @ v_c.unsqueeze(-1)).squeeze(-1)\n"
                      "    return -(F.logsigmoid(pos) + F.logsigmoid(-neg).sum(-1)).sum()", "summed over the batch"),
        "train_lm": (TRAIN_TEMPLATE.replace("EPOCHS", "1").replace("RETURN", "model"),
                     "return `(model, window)`"),
    },
    "wrong_3": {
        "log_softmax": ("def log_softmax(x, dim=-1):\n    m = x.amax(dim=-1, keepdim=True)\n"
                        "    return x - m - (x - m).exp().sum(dim=-1, keepdim=True).log()",
                        "ignored the `dim` argument"),
        "cross_entropy": ("def cross_entropy(logits, targets, ignore_index=-100):\n"
                          "    logp = torch.log_softmax(logits, -1).reshape(-1, logits.shape[-1])\n"
                          "    t = targets.reshape(-1)\n    keep = t != ignore_index\n"
                          "    return logp[keep].gather(1, t[keep].unsqueeze(1)).mean()\n\n"
                          "def perplexity(logits, targets, ignore_index=-100):\n"
                          "    return 2 ** cross_entropy(logits, targets, ignore_index).item()",
                          "sign error"),
        "ffnn_forward": ("def ffnn_forward(context, E, W, b, U, c):\n"
                         "    z = E[context].flatten(1)\n    return torch.tanh(z @ W.T) @ U.T + c",
                         "left out the hidden bias b"),
        "sgns_loss": ("def sgns_loss(v_c, u_o, u_neg):\n    return -F.logsigmoid((u_o * v_c).sum(-1)).mean()",
                      "left out the negative samples"),
        "train_lm": ("from lmbook.ffnn import FeedforwardLM\n\n"
                     "def train_lm(train_ids, vocab_size):\n    return FeedforwardLM(vocab_size, 3), 3",
                     "FeedforwardLM"),
    },
    "wrong_4": {
        "log_softmax": ("def log_softmax(x, dim=-1):\n    return torch.softmax(x, dim=dim)",
                        "returned probabilities (softmax)"),
        "cross_entropy": ("def cross_entropy(logits, targets, ignore_index=-100):\n"
                          "    logp = torch.log_softmax(logits, -1).reshape(-1, logits.shape[-1])\n"
                          "    t = targets.reshape(-1)\n    keep = t != ignore_index\n"
                          "    return -logp[keep].gather(1, t[keep].unsqueeze(1)).mean() / math.log(2)\n\n"
                          "def perplexity(logits, targets, ignore_index=-100):\n"
                          "    return math.exp(cross_entropy(logits, targets, ignore_index).item())",
                          "measured in bits"),
        "ffnn_forward": ("def ffnn_forward(context, E, W, b, U, c):\n    z = E[context].flatten(1)\n"
                         "    return torch.log_softmax(torch.tanh(z @ W.T + b) @ U.T + c, -1)",
                         "returned log-probabilities"),
        "sgns_loss": ("def sgns_loss(v_c, u_o, u_neg):\n    pos = (u_o * v_c).sum(-1)\n"
                      "    neg = (u_neg @ v_c.unsqueeze(-1)).squeeze(-1)\n"
                      "    return -(F.logsigmoid(pos) + F.logsigmoid(-neg).mean(-1)).mean()",
                      "averaged over the k negatives"),
        "train_lm": (TRAIN_TEMPLATE.replace("EPOCHS", "1").replace("RETURN", "model, 2"),
                     "on (2-word) contexts raised"),
    },
}

# ----------------------------------------------------------------------------- correct, but not the solution
VARIANTS = {
    "loops": {
        "log_softmax": '''
def log_softmax(x, dim=-1):
    moved = x.movedim(dim, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    out = torch.empty_like(rows)
    for i in range(rows.shape[0]):  # one row at a time
        m = rows[i].max()
        total = sum(torch.exp(v - m) for v in rows[i])  # Python's sum over the row's entries
        out[i] = rows[i] - m - torch.log(total)
    return out.reshape(moved.shape).movedim(-1, dim)''',
        "cross_entropy": '''
def cross_entropy(logits, targets, ignore_index=-100):
    logp = log_softmax(logits, dim=-1).reshape(-1, logits.shape[-1])
    total, count = 0.0, 0
    for row, t in zip(logp, targets.reshape(-1).tolist()):
        if t != ignore_index:
            total, count = total - row[t], count + 1
    return total / count

def perplexity(logits, targets, ignore_index=-100):
    return float(torch.exp(cross_entropy(logits, targets, ignore_index)))''',
        "ffnn_forward": '''
def ffnn_forward(context, E, W, b, U, c):
    parts = [E[context[:, j]] for j in range(context.shape[1])]
    z = torch.cat(parts, dim=1)
    return torch.tanh(z @ W.T + b) @ U.T + c''',
        "sgns_loss": '''
def sgns_loss(v_c, u_o, u_neg):
    loss = -F.logsigmoid((u_o * v_c).sum(-1))
    for j in range(u_neg.shape[1]):
        loss = loss - F.logsigmoid(-(u_neg[:, j] * v_c).sum(-1))
    return loss.mean()''',
        "train_lm": '''
class MyLM(nn.Module):
    def __init__(self, V, window, d=24, H=96):
        super().__init__()
        self.emb = nn.Embedding(V, d)
        self.hidden = nn.Linear(window * d, H)
        self.out = nn.Linear(H, V)

    def forward(self, context):
        return self.out(torch.relu(self.hidden(self.emb(context).flatten(1))))

def train_lm(train_ids, vocab_size):
    window = 3
    torch.manual_seed(1)
    model = MyLM(vocab_size, window)
    contexts, targets = make_windows(train_ids, window)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    for epoch in range(3):
        for i in range(0, len(targets), 128):
            loss = F.cross_entropy(model(contexts[i:i + 128]), targets[i:i + 128])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, window''',
    },
    "float64_and_masks": {
        "log_softmax": '''
def log_softmax(x, dim=-1):
    x64 = x.double()  # compute in float64, return in x's dtype (as the statement asks)
    m = torch.max(x64, dim=dim, keepdim=True).values
    return (x64 - m - torch.exp(x64 - m).sum(dim=dim, keepdim=True).log()).to(x.dtype)''',
        "cross_entropy": '''
def cross_entropy(logits, targets, ignore_index=-100):
    mask = (targets != ignore_index)
    safe = torch.where(mask, targets, torch.zeros_like(targets))
    nll = -log_softmax(logits, dim=-1).gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return (nll * mask).sum() / mask.sum()

def perplexity(logits, targets, ignore_index=-100):
    return cross_entropy(logits, targets, ignore_index).exp().item()''',
        "ffnn_forward": '''
def ffnn_forward(context, E, W, b, U, c):
    one_hot = F.one_hot(context, E.shape[0]).to(E.dtype)   # (B, m, V) @ (V, d): embedding lookup as a matmul
    z = (one_hot @ E).reshape(context.shape[0], -1)
    return torch.einsum("bh,vh->bv", torch.tanh(torch.einsum("bi,hi->bh", z, W) + b), U) + c''',
        "sgns_loss": '''
def sgns_loss(v_c, u_o, u_neg):
    pos = torch.bmm(u_o.unsqueeze(1), v_c.unsqueeze(2)).reshape(-1)
    neg = torch.bmm(u_neg, v_c.unsqueeze(2)).squeeze(2)
    return (F.softplus(-pos) + F.softplus(neg).sum(1)).mean()   # -log σ(z) = softplus(-z)''',
        "train_lm": TRAIN_TEMPLATE.replace("EPOCHS", "3").replace("RETURN", "model, window"),
    },
}


def _fill_wrong(name: str):
    return fill({task: code for task, (code, _) in WRONG_SETS[name].items()})


def write_implementations(dest: Path) -> None:
    """The wrong sets and the correct variants, one student folder each."""
    for name in WRONG_SETS:
        (dest / name).mkdir(parents=True)
        nbformat.write(_fill_wrong(name), dest / name / NOTEBOOK)
    for name, answers in VARIANTS.items():
        (dest / name).mkdir(parents=True)
        nbformat.write(fill({**GOOD, **answers}), dest / name / NOTEBOOK)
