"""Measure what the course promises about speed and memory (not a test: numbers for the notes).

    make bench            # or: .venv/bin/python bench/run.py [--skip-book]

- the time of a clean, fully executed book build;
- each chapter notebook's run time and the kernel's peak memory;
- the time to grade one correct submission end to end with `lmbook-grade`.
Results are printed and written to bench/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from myst_nb.core.read import read_myst_markdown_notebook
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "autograder"))


def clean_book_build() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / "book"
        shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(".venv", "node_modules", "_build", ".git", "grading"))
        cfg = dst / "_config.yml"
        cfg.write_text(re.sub(r"execute_notebooks: \w+", "execute_notebooks: force", cfg.read_text()))
        t = time.perf_counter()
        subprocess.run([str(BIN / "jupyter-book"), "build", str(dst), "--all", "-W", "-n", "--keep-going"],
                       check=True, capture_output=True)
        return time.perf_counter() - t


def chapter_run(path: Path) -> dict:
    """Execute one chapter in a fresh kernel; the kernel is our child, so RUSAGE_CHILDREN gives its peak RSS."""
    nb = read_myst_markdown_notebook(path.read_text())
    t = time.perf_counter()
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.perf_counter() - t
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"seconds": round(seconds, 1), "peak_rss_mib_upper_bound": round(peak_mib)}


def grade_one() -> float:
    from make_samples import make_samples

    with tempfile.TemporaryDirectory() as tmp:
        make_samples(Path(tmp) / "all")
        one = Path(tmp) / "one"
        shutil.copytree(Path(tmp) / "all" / "correct", one / "correct")
        env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
        t = time.perf_counter()
        subprocess.run([str(BIN / "lmbook-grade"), str(one), "--out", str(Path(tmp) / "out")], cwd=ROOT, env=env,
                       check=True, capture_output=True)
        return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-book", action="store_true", help="skip the clean book build")
    a = ap.parse_args()
    device = os.environ.get("LMBOOK_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    results = {"machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                           "python": platform.python_version(), "torch": torch.__version__, "device": device}}
    for chapter in sorted((ROOT / "book").glob("ch*.md")):
        results[f"chapter:{chapter.stem}"] = chapter_run(chapter)
        print(chapter.stem, results[f"chapter:{chapter.stem}"], flush=True)
    results["grade_one_submission_s"] = round(grade_one(), 1)
    print("grade one submission:", results["grade_one_submission_s"], "s", flush=True)
    if not a.skip_book:
        results["clean_book_build_s"] = round(clean_book_build(), 1)
        print("clean book build:", results["clean_book_build_s"], "s", flush=True)
    (ROOT / "bench" / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
