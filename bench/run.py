"""lmbook's benchmarks: what the book, its models and its grader cost, measured (not a test).

    make bench                          # full: BENCHMARKS.md and bench/results.json (about 10 minutes)
    .venv/bin/python bench/run.py --quick   # under 5 minutes, into bench/quick/
    .venv/bin/python bench/run.py --tiny --out DIR   # smallest settings: checks the scripts work

Figures (times are medians of several runs; the spread is min-max):
- the book: a clean build (every notebook executed) and a no-change rebuild (cache);
- each chapter notebook: run time and the kernel's peak RSS, on the CPU and on a GPU when present;
- each trained model's headline quality, taken from the chapter's own glued numbers, run with
  several seeds (LMBOOK_SEED); the median and tolerance become the book's "expected" boxes;
- from-scratch functions against torch's built-ins on the same inputs, timed side by side;
- grading: submissions per minute for `lmbook-grade` and for plain serial `nbgrader autograde`
  on the same generated submissions, in the same run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils import benchmark

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "autograder"))

MODES = {  # repeats of timed runs, seeds per chapter, submissions to grade, micro-benchmark size
    "full": {"repeats": 3, "seeds": 3, "submissions": 12, "size": (512, 10_000), "book": True},
    "quick": {"repeats": 1, "seeds": 1, "submissions": 3, "size": (512, 10_000), "book": True},
    "tiny": {"repeats": 1, "seeds": 1, "submissions": 1, "size": (8, 50), "book": False},
}


def _env(**extra: str) -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


def _stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def machine() -> dict:
    cpu = platform.processor()
    try:
        cpu = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text()).group(1)
    except (OSError, AttributeError):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "gpu": gpu, "date": dt.date.today().isoformat()}


# ----------------------------------------------------------------------------- the book


def _copy_repo(dst: Path) -> None:
    shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(".venv", "node_modules", "_build", ".git", "grading*",
                                                            "quick"))


def book_builds(repeats: int) -> dict:
    clean, rebuild = [], []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "book"
        _copy_repo(src)
        cmd = [str(BIN / "jupyter-book"), "build", str(src), "--all", "-W", "-n", "--keep-going"]
        for _ in range(repeats):
            shutil.rmtree(src / "_build", ignore_errors=True)
            t = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, env=_env())
            clean.append(time.perf_counter() - t)
            t = time.perf_counter()  # nothing changed: the execution cache serves every notebook
            subprocess.run(cmd, check=True, capture_output=True, env=_env())
            rebuild.append(time.perf_counter() - t)
    return {"clean_build_s": _stats(clean), "no_change_rebuild_s": _stats(rebuild)}


# ----------------------------------------------------------------------------- chapters and their models


def run_chapter(path: Path, seed: int, device: str) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "execute_notebook.py"), str(path)], check=True,
                         capture_output=True, text=True, env=_env(LMBOOK_SEED=str(seed), LMBOOK_DEVICE=device))
    return json.loads(out.stdout.strip().splitlines()[-1])


# What each chapter's trained models achieved: (label, glue key, what it is). Extend as chapters land.
HEADLINES = {
    "ch01_feedforward_lm": [
        ("feedforward LM, best window: test perplexity", "best_ppl"),
        ("feedforward LM, window 1: test perplexity", "ffnn1_ppl"),
        ("bigram (add-k): test perplexity", "bigram_ppl"),
        ("true model (floor): test perplexity", "floor_ppl"),
        ("share of the bigram-to-floor gap closed", "gap_closed"),
        ("skip-gram: final training loss", "sgns_loss_last"),
    ],
}


def tolerance(values: list[float]) -> float:
    """What a reader's run may differ by: 3 standard deviations over seeds, at least 1% of the median."""
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return max(3 * spread, 0.01 * abs(statistics.median(values)))


def chapters(seeds: int, devices: list[str]) -> dict:
    results = {}
    for path in sorted((ROOT / "book").glob("ch*.md")):
        for device in devices:
            runs = [run_chapter(path, seed, device) for seed in range(seeds)]
            entry = {"seconds": _stats([r["seconds"] for r in runs]),
                     "peak_rss_mib": _stats([r["peak_rss_mib"] for r in runs]), "models": {}}
            for label, key in HEADLINES.get(path.stem, []):
                values = [float(r["glue"][key]) for r in runs]
                entry["models"][key] = {"label": label, "median": statistics.median(values),
                                        "tolerance": tolerance(values), "values": values}
            floor = entry["models"].get("floor_ppl", {}).get("median")
            if floor:
                for m in entry["models"].values():
                    if m["label"].endswith("test perplexity"):
                        m["ratio_to_floor"] = m["median"] / floor
            by_window = [r["glue"].get("test_ppl_by_window") for r in runs]
            if all(by_window):
                entry["ffnn_test_ppl_by_window"] = {str(w): statistics.median(float(b[w]) for b in by_window)
                                                    for w in by_window[0]}
            results.setdefault(path.stem, {})[device] = entry
            print(f"  {path.stem} on {device}: {entry['seconds']['median']:.1f} s", flush=True)
    return results


# ----------------------------------------------------------------------------- from scratch vs built in


def builtins(size: tuple[int, int], repeats: int) -> dict:
    """Median time per call of each pair, measured alternately in one run, and their ratio."""
    from lmbook import functional as LF

    B, V = size
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, V, generator=g)
    t = torch.randint(0, V, (B,), generator=g)
    pairs = {
        "log_softmax": (lambda: LF.log_softmax(x, -1), lambda: torch.log_softmax(x, -1),
                        "torch.log_softmax"),
        "cross_entropy": (lambda: LF.cross_entropy(x, t), lambda: F.cross_entropy(x, t),
                          "torch.nn.functional.cross_entropy"),
    }
    out = {}
    for name, (ours, theirs, ref) in pairs.items():
        torch.testing.assert_close(ours(), theirs())  # same inputs, same answer, else the timing is meaningless
        times = {"lmbook": [], "torch": []}
        for _ in range(max(3, repeats)):
            for who, fn in (("lmbook", ours), ("torch", theirs)):
                times[who].append(benchmark.Timer("fn()", globals={"fn": fn}).blocked_autorange(min_run_time=0.2)
                                  .median)
        ours_s, theirs_s = statistics.median(times["lmbook"]), statistics.median(times["torch"])
        out[name] = {"builtin": ref, "shape": [B, V], "lmbook_ms": ours_s * 1e3, "torch_ms": theirs_s * 1e3,
                     "ratio": ours_s / theirs_s, "threads": torch.get_num_threads()}
    return out


# ----------------------------------------------------------------------------- grading


def _submissions(dest: Path, n: int) -> list[str]:
    """n submissions, cycling through the sample students (correct, blank, partly wrong, ...)."""
    from make_samples import make_samples

    samples = dest.parent / "samples"
    kinds = [k for k in make_samples(samples) if k != "not_a_notebook"]
    names = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        shutil.copytree(samples / kind, dest / f"s{i:03d}_{kind}")
        names.append(f"s{i:03d}_{kind}")
    return names


def grading(n: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        subs = Path(tmp) / "subs"
        names = _submissions(subs, n)
        t = time.perf_counter()
        subprocess.run([str(BIN / "lmbook-grade"), str(subs), "--out", str(Path(tmp) / "lmbook")], cwd=ROOT,
                       env=_env(), check=True, capture_output=True)
        ours = time.perf_counter() - t

        # Plain nbgrader, as an instructor would run it: one serial `autograde` over the class.
        course = Path(tmp) / "plain"
        args = [f"--CourseDirectory.root={course}", f"--CourseDirectory.source_directory={ROOT / 'solutions'}",
                "--CourseDirectory.release_directory=release", "--log-level=ERROR"]
        course.mkdir()
        subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", "ch01", "--force", *args],
                       cwd=ROOT / "autograder", env=_env(), check=True, capture_output=True)
        for name in names:
            dst = course / "submitted" / name / "ch01"
            shutil.copytree(subs / name, dst)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "nbgrader", "autograde", "ch01", "--create", *args],
                       cwd=ROOT / "autograder", env=_env(), check=True, capture_output=True)
        plain = time.perf_counter() - t
    return {"submissions": n,
            "lmbook_grade": {"seconds": ours, "per_minute": 60 * n / ours,
                             "includes": "assignment generation, autograde and feedback, one nbgrader run each"},
            "nbgrader_autograde": {"seconds": plain, "per_minute": 60 * n / plain,
                                   "includes": "autograde only (assignment generated beforehand, untimed)"}}


# ----------------------------------------------------------------------------- report


def _fmt(s: dict, unit: str = "s", digits: int = 1) -> str:
    return f"{s['median']:.{digits}f} {unit} ({s['min']:.{digits}f}–{s['max']:.{digits}f}, n={s['n']})"


def report(r: dict) -> str:
    m = r["machine"]
    lines = ["# lmbook benchmarks", "",
             f"Measured by `make bench` ({r['mode']} mode) on {m['date']}: {m['cpu']}, {m['cores']} cores, "
             f"Python {m['python']}, torch {m['torch']}, GPU: {m['gpu'] or 'none'}. Times are medians "
             "(min–max, n runs). Regenerate with `make bench`; the chapters' \"expected\" boxes read "
             "`bench/results.json`.", ""]
    if "book" in r:
        b = r["book"]
        lines += ["## The book", "", "| build | time |", "|---|---|",
                  f"| clean (every notebook executed) | {_fmt(b['clean_build_s'])} |",
                  f"| no-change rebuild (execution cache) | {_fmt(b['no_change_rebuild_s'])} |", ""]
    lines += ["## Chapter notebooks", "", "| chapter | device | run time | kernel peak RSS |", "|---|---|---|---|"]
    for chapter, by_device in r["chapters"].items():
        for device, e in by_device.items():
            lines.append(f"| {chapter} | {device} | {_fmt(e['seconds'])} | {_fmt(e['peak_rss_mib'], 'MiB', 0)} |")
    lines += ["", "## Trained models", "",
              "Median over seeds (`LMBOOK_SEED`), ± the tolerance a reader's run should fall within "
              "(3 standard deviations over seeds, at least 1%).", "",
              "| chapter | device | result | value | ratio to the floor |", "|---|---|---|---|---|"]
    for chapter, by_device in r["chapters"].items():
        for device, e in by_device.items():
            for mod in e["models"].values():
                ratio = f"{mod['ratio_to_floor']:.3f}" if "ratio_to_floor" in mod else ""
                lines.append(f"| {chapter} | {device} | {mod['label']} | {mod['median']:.3f} ± "
                             f"{mod['tolerance']:.3f} | {ratio} |")
            if "ffnn_test_ppl_by_window" in e:
                w = e["ffnn_test_ppl_by_window"]
                lines.append(f"| {chapter} | {device} | feedforward LM test perplexity by window "
                             f"({', '.join(w)}) | {', '.join(f'{v:.2f}' for v in w.values())} | |")
    lines += ["", "## From scratch vs torch's built-ins", "",
              "Same inputs, timed alternately in one run (`torch.utils.benchmark`, median).", "",
              "| function | built-in | shape | lmbook | torch | ratio |", "|---|---|---|---|---|---|"]
    for name, e in r["builtins"].items():
        lines.append(f"| {name} | `{e['builtin']}` | {e['shape']} | {e['lmbook_ms']:.3f} ms | {e['torch_ms']:.3f} ms "
                     f"| {e['ratio']:.2f}× |")
    g = r["grading"]
    lines += ["", "## Grading", "", f"{g['submissions']} generated submissions of exercise 1 (correct, blank, "
              "partly wrong, syntax error, imported answer, in turn), graded in the same run.", "",
              "| grader | wall time | submissions per minute | what it includes |", "|---|---|---|---|",
              f"| `lmbook-grade` | {g['lmbook_grade']['seconds']:.1f} s | {g['lmbook_grade']['per_minute']:.1f} | "
              f"{g['lmbook_grade']['includes']} |",
              f"| plain `nbgrader autograde` (serial) | {g['nbgrader_autograde']['seconds']:.1f} s | "
              f"{g['nbgrader_autograde']['per_minute']:.1f} | {g['nbgrader_autograde']['includes']} |", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_const", dest="mode", const="quick", help="under 5 minutes")
    mode.add_argument("--tiny", action="store_const", dest="mode", const="tiny", help="smallest settings")
    ap.add_argument("--out", type=Path, default=None,
                    help="folder for BENCHMARKS.md and results.json (default: repository root and bench/ for a full "
                         "run, bench/quick/ otherwise)")
    a = ap.parse_args(argv)
    a.mode = a.mode or "full"
    cfg = MODES[a.mode]
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    results = {"mode": a.mode, "machine": machine()}
    if cfg["book"]:
        print("book builds...", flush=True)
        results["book"] = book_builds(cfg["repeats"])
    print("chapters...", flush=True)
    results["chapters"] = chapters(cfg["seeds"], devices)
    print("from scratch vs built-ins...", flush=True)
    results["builtins"] = builtins(cfg["size"], cfg["repeats"])
    print("grading...", flush=True)
    results["grading"] = grading(cfg["submissions"])
    text = report(results)
    if a.out is None and a.mode == "full":
        md, js = ROOT / "BENCHMARKS.md", ROOT / "bench" / "results.json"
    else:
        out = a.out or ROOT / "bench" / "quick"
        out.mkdir(parents=True, exist_ok=True)
        md, js = out / "BENCHMARKS.md", out / "results.json"
    md.write_text(text)
    js.write_text(json.dumps(results, indent=2) + "\n")
    print(text)
    print(f"\nwrote {md} and {js}")
    return results


if __name__ == "__main__":
    main()
