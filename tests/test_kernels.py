"""Kernels started by `make lab`, `make book` and `make book-instructor`, and by the benchmarks, show figures inline.

ipykernel chooses matplotlib's inline backend (figures as image/png outputs) only when MPLBACKEND is unset;
a value inherited from the user's shell (Agg, say) leaves every figure off the page and out of the lab.
Each make target is run for real with its program replaced by tests/kernel_probe.py, from a shell that sets
MPLBACKEND=Agg, as a user's might.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "tests" / "kernel_probe.py"
sys.path.insert(0, str(ROOT / "bench"))
pytestmark = pytest.mark.slow


def run_probe(tmp_path: Path, command: list[str], env: dict[str, str]) -> dict:
    out = tmp_path / "probe.json"
    r = subprocess.run([*command], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(command)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return json.loads(out.read_text())


@pytest.mark.parametrize(("target", "program"), [("lab", "JUPYTER_LAB"), ("book", "JUPYTER_BOOK"),
                                                 ("book-instructor", "JUPYTER_BOOK")])
def test_make_target_starts_kernels_that_show_a_plot_as_an_image(tmp_path, target, program):
    probe = f"{sys.executable} {PROBE} {tmp_path / 'probe.json'}"
    # -o: the venv and the npm assets count as installed (a test installs nothing); only the target's recipe runs
    command = ["make", "--no-print-directory", "-o", ".venv/.installed", "-o", ".vendor/static/vendor/.done",
               target, f"{program}={probe}"]
    seen = run_probe(tmp_path, command, {**os.environ, "MPLBACKEND": "Agg"})
    assert "image/png" in seen["mimes"], (f"`make {target}` started a kernel whose plot output only {seen['mimes']} "
                                          f"(its MPLBACKEND: {seen['kernel_MPLBACKEND']})")


def test_the_probe_sees_the_figure_go_missing_when_a_kernel_inherits_agg(tmp_path):
    # The failure the tests above guard against, reproduced without make: the probe must be able to see it.
    seen = run_probe(tmp_path, [sys.executable, str(PROBE), str(tmp_path / "probe.json")],
                     {**os.environ, "MPLBACKEND": "Agg"})
    assert "image/png" not in seen["mimes"] and seen["kernel_MPLBACKEND"] == "Agg"


def test_benchmark_runs_of_a_page_show_its_figures_whatever_the_shell_sets(tmp_path, monkeypatch):
    from execute_notebook import main

    page = tmp_path / "page.md"
    page.write_text("---\njupytext:\n  text_representation:\n    format_name: myst\nkernelspec:\n  name: python3\n"
                    "---\n# A page\n\n```{code-cell} ipython3\nimport matplotlib.pyplot as plt\n\n"
                    "fig, ax = plt.subplots()\nax.plot([0, 1], [1, 0])\n```\n")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    assert main(page)["figures"] == 1, "the benchmark's kernel drew the page's figure off the page"
