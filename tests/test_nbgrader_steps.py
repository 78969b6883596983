"""The grader's own nbgrader steps import no torch.

``lmbook-grade`` runs three nbgrader processes per class (making the release, recording the grades from the
results it cached, writing the feedback pages). Each loads the course's configuration and preprocessors; with
torch and the checks imported there, each paid about 3 seconds more before doing anything (a 1-student class:
39 s → 23 s of grading phases, measured with ``lmbook-grade``'s summary.json).
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "lmbook.grading.judge", "lmbook.grading.checks", "lmbook.device")


def test_recording_a_cached_result_imports_neither_torch_nor_the_checks(tmp_path):
    code = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from traitlets.config.loader import PyFileConfigLoader

        PyFileConfigLoader("nbgrader_config.py", path={str(ROOT / "autograder")!r}).load_config()
        import nbformat
        from lmbook.grading import nbgrader_plugin as plugin

        nb = nbformat.read({str(ROOT / "solutions" / "ch02" / "ch02_rnn_lm.ipynb")!r}, as_version=4)
        tests = [i for i, c in enumerate(nb.cells) if plugin.is_test_cell(c)]
        verdicts = {{i: plugin.Verdict(True, ["✓ right"]) for i in tests}}
        graded = plugin.Graded({{i: v.outputs() for i, v in verdicts.items()}}, verdicts)
        cache = Path({str(tmp_path)!r})
        key = plugin.notebook_key(nb)
        plugin.store(cache, key, graded, nb)
        plugin.apply(nb, plugin.load_cached(cache, key, nb))
        shown = [nb.cells[i].outputs[0]["text"] for i in tests]
        print(json.dumps({{"shown": shown, "loaded": [m for m in {HEAVY!r} if m in sys.modules]}}))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT / "autograder")
    assert r.returncode == 0, r.stderr[-3000:]
    seen = json.loads(r.stdout.splitlines()[-1])
    assert seen["shown"] and all(text == "✓ right\n" for text in seen["shown"]), "the cached result was not applied"
    assert seen["loaded"] == [], f"loading the course's nbgrader steps imported {seen['loaded']}"


def test_importing_lmbook_still_gives_its_device_helpers():
    r = subprocess.run([sys.executable, "-c", "import sys, lmbook; before = 'torch' in sys.modules; "
                        "print(before, lmbook.get_device().type, callable(lmbook.seed_everything))"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["False", "cpu", "True"], r.stdout
