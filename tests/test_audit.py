"""The runner's audit hook: the student's own code gets no process, program or raw memory, by any route;
libraries asking for themselves (a DataLoader's workers, matplotlib) and honest habits are left alone.

The hook cannot be removed once installed, so it is tried in a child interpreter, never in the test runner's
own process: each snippet runs there as a notebook cell runs (code compiled under IPython's cell name).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from grading_outputs import rows

ROOT = Path(__file__).resolve().parent.parent

# the student's own code starting processes and programs, or reading memory, by any name: refused
REFUSED = {
    "os_fork": "import os\nif os.fork() == 0:\n    os._exit(0)",
    "posix_fork_by_a_computed_name": "import posix\nstart = getattr(posix, 'fo' + 'rk')\nif start() == 0:\n"
                                     "    posix._exit(0)",
    "fork_handed_to_functools": "import functools, os\nif functools.partial(os.fork)() == 0:\n    os._exit(0)",
    "fork_through_tempfile": "import tempfile\nif tempfile._os.fork() == 0:\n    tempfile._os._exit(0)",
    "subprocess_run": "import subprocess\nsubprocess.run(['true'])",
    "os_system": "import os\nos.system('true')",
    "os_exec": "import os\nos.execv('/bin/true', ['true'])",
    "ctypes_libc": "import ctypes\nctypes.CDLL(None).getpid()",
    "ctypes_raw_read": "import ctypes\nctypes.string_at(id(1), 8)",
    "gc_live_objects": "import gc\nhooks = [o for o in gc.get_objects() if callable(o)]",
    "code_under_a_librarys_name": "import os\nexec(compile('x = 1', os.__file__, 'exec'))",
}
# honest habits, and libraries starting processes for themselves: left alone
HONEST = {
    "warnings_logging_dataclass": "import warnings, logging, dataclasses\nwarnings.warn('large logits')\n"
                                  "logging.getLogger().info('step')\n@dataclasses.dataclass\nclass Config:\n"
                                  "    d: int = 32\nConfig()",
    "dataloader_workers": "import torch\nfrom torch.utils.data import DataLoader\n"
                          "batches = list(DataLoader(list(range(4)), batch_size=2, num_workers=1))\n"
                          "assert len(batches) == 2",
    "matplotlib_figure": "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
                         "plt.plot([1, 2])\nplt.gcf().canvas.draw()",
    "code_made_from_a_string": "exec(compile('y = 2', '<string>', 'exec'))",
}
SNIPPETS = {**REFUSED, **HONEST}

CHILD = textwrap.dedent("""
    import json, sys
    from lmbook.grading import audit
    audit.refuse()
    results = {}
    for name, source in json.loads(sys.argv[1]).items():
        try:
            exec(compile(source, f"<ipython-input-1-{name}>", "exec"), {"__name__": "__main__"})
            results[name] = {"ran": True}
        except PermissionError as e:
            results[name] = {"ran": False, "error": str(e)}
        results[name]["recorded"] = audit.refused()
        audit._refuser.refused.clear()
    print(json.dumps(results))
""")


@pytest.fixture(scope="module")
def outcomes() -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(SNIPPETS)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_students_own_request_is_refused_and_recorded(outcomes, name):
    got = outcomes[name]
    assert not got["ran"], f"{name}: ran under the hook"
    assert "does not let a notebook" in got["error"], got
    assert got["recorded"] and "which the sandbox refuses" in got["recorded"], got


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_code_and_libraries_own_processes_are_left_alone(outcomes, name):
    assert outcomes[name] == {"ran": True, "recorded": None}, outcomes[name]


def test_a_hook_of_the_students_own_is_never_added():
    # Python drops any Exception a hook raises on ``sys.addaudithook`` and does not add the new hook: the
    # student's code goes on, its hook sees nothing, and the notebook is flagged
    source = ("import sys\nseen = []\nsys.addaudithook(lambda event, args: seen.append(event))\n"
              "compile('1', '<string>', 'eval')\nprint(json.dumps({'seen': seen, 'recorded': audit.refused()}))")
    child = CHILD.split("results = {}")[0] + f"exec(compile({source!r}, '<ipython-input-2-x>', 'exec'))"
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["seen"] == [], f"the student's hook was added and saw {got['seen'][:5]}"
    assert got["recorded"] == "the notebook tried to add an audit hook (`sys.addaudithook`), which the sandbox " \
                              "refuses", got


def test_the_record_names_the_event_and_nothing_the_student_chose(outcomes):
    assert outcomes["os_fork"]["recorded"] == "the notebook tried to start a process (`os.fork`), which the " \
                                              "sandbox refuses"
    assert outcomes["posix_fork_by_a_computed_name"]["recorded"] == outcomes["os_fork"]["recorded"]


@pytest.mark.slow
def test_a_model_compiled_with_torch_compile_is_graded_like_any_other_in_the_sandbox(tmp_path):
    # torch.compile runs a C++ compiler (a program) from torch's own code: a library's process, left alone by
    # the hook, in the notebook's run and in the hidden test's
    from hostile_corpus import GOOD, NOTEBOOK, fill

    compiled = GOOD["train_lm"].replace("    contexts, targets =", "    fast = torch.compile(model)\n"
                                        "    contexts, targets =", 1).replace("F.cross_entropy(model(",
                                                                               "F.cross_entropy(fast(", 1)
    assert "torch.compile(model)" in compiled and "F.cross_entropy(fast(" in compiled, compiled
    (tmp_path / "subs" / "compiled").mkdir(parents=True)
    nbformat.write(fill({**GOOD, "train_lm": compiled}), tmp_path / "subs" / "compiled" / NOTEBOOK)
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    r = subprocess.run([sys.executable, "-m", "lmbook.autograde", str(tmp_path / "subs"), "--out",
                        str(tmp_path / "out"), "--course", str(ROOT / "autograder")],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    row = rows(tmp_path / "out")["compiled"]
    assert (row["train_lm"], row["flagged"]) == ("4", ""), row
