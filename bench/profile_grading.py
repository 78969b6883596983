"""Where lmbook-grade's time goes per student: the grader's own phases and the sandboxed run, in CPU seconds.

    .venv/bin/python bench/profile_grading.py [N] [ASSIGNMENT] [--cprofile FILE]   (from the repository root)

Grades N submissions made as the benchmark makes them (run.py's ``_submissions``) one after another in this
process, as one grading worker does (``autograde._phase1``), every protection on. The grader's phases are timed
with this thread's CPU clock; the sandbox is a separate process tree, measured from outside from the kernel's
accounting (``sandbox._tree_cpu``): when the runner says it is ready (bubblewrap, Python, torch and the task
module imported: its start-up) and just before the grader kills it (everything). Not measured here: nbgrader's
own steps (assignment generation, recording, feedback), which run.py's ``grading`` times as a whole.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import sys
import tempfile
import time
from pathlib import Path

import run as bench
from make_samples import notebook_name

from lmbook import autograde
from lmbook.grading import judge, nbgrader_plugin, sandbox, static

PHASES: dict[str, float] = {}


def _timed(name: str, fn):
    def timed(*args, **kwargs):
        start = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            PHASES[name] = PHASES.get(name, 0.0) + time.thread_time() - start
    return timed


def _watch_the_sandbox(record: dict) -> None:
    """Record the sandbox's CPU when its runner is ready (the first reading of a run) and when it is killed."""
    tree_cpu, killpg = sandbox._tree_cpu, sandbox.os.killpg
    first: dict[int, bool] = {}

    def reading(pid: int):
        cpu = tree_cpu(pid)
        if cpu is not None and pid not in first:
            first[pid] = True
            record["start"] = record.get("start", 0.0) + cpu
        return cpu

    def kill(pid: int, sig: int):
        cpu = tree_cpu(pid)
        if cpu is not None:
            record["total"] = record.get("total", 0.0) + cpu
        first.pop(pid, None)  # a later run may get the same pid
        return killpg(pid, sig)

    sandbox._tree_cpu = reading
    sandbox.os.killpg = kill  # os's: in this process only the sandbox kills process groups


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("n", type=int, nargs="?", default=10)
    p.add_argument("assignment", nargs="?", default="ch01")
    p.add_argument("--cprofile", type=Path, help="write the grader's cProfile (CPU clock) here")
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lmbook-profile-"))
    names = bench._submissions(tmp / "subs", a.n, a.assignment)
    course = tmp / "course"
    course.mkdir()
    config_dir, source = bench.ROOT / "autograder", bench.ROOT / "solutions"
    autograde._write_course_config(course, config_dir, source)
    r = autograde._nbgrader(["generate_assignment", a.assignment, "--force"], course, config_dir, source)
    if r.returncode != 0:
        sys.exit(r.stderr[-2000:])

    timed = ((autograde, "_prepare"), (judge, "_plan"), (judge, "_verdicts"), (judge, "case_inputs"),
             (nbgrader_plugin, "load_cached"), (nbgrader_plugin, "store"), (nbgrader_plugin, "notebook_key"))
    for module, name in timed:
        setattr(module, name, _timed({"_prepare": "prepare (nbgrader's sanitizing)", "_plan": "plan (test inputs)",
                                      "_verdicts": "verdicts (references, decisions)",
                                      "case_inputs": "plan: of which case inputs"}.get(name, "results cache"),
                                     getattr(module, name)))
    for name in ("find_tampering", "find_forbidden_use", "unreadable_cells"):
        setattr(static, name, _timed("static analysis", getattr(static, name)))
    sandbox.run = _timed("sandbox run: the grader's side (watch, replies)", sandbox.run)
    box: dict[str, float] = {}
    _watch_the_sandbox(box)

    stem = Path(notebook_name(a.assignment)).stem
    jobs = [(sid, str(tmp / "subs" / sid / notebook_name(a.assignment)), a.assignment, stem,
             f"sqlite:///{course / 'gradebook.db'}", str(course / "lmbook_cache"), True, judge.DEFAULT_TIMEOUT, None)
            for sid in names]
    profile = cProfile.Profile(time.thread_time) if a.cprofile else None
    wall, cpu = time.perf_counter(), time.thread_time()
    if profile:
        profile.enable()
    results = [autograde._phase1(job) for job in jobs]
    if profile:
        profile.disable()
        profile.dump_stats(a.cprofile)
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    problems = {r["sid"]: r.get("error") or r.get("problem") for r in results if r.get("error") or r.get("problem")}

    rows = dict(PHASES)
    rows["sandbox: start-up (bwrap, Python, imports)"] = box.get("start", 0.0)
    rows["sandbox: the notebook's cells and tests"] = box.get("total", 0.0) - box.get("start", 0.0)
    total = cpu + box.get("total", 0.0)
    print(f"{a.n} {a.assignment} submissions, one worker: {wall:.1f} s wall, {total:.1f} s CPU "
          f"({cpu:.1f} grader, {box.get('total', 0.0):.1f} sandbox)")
    print(f"{'phase':55s} {'CPU s/student':>13s} {'share':>6s}")
    for name, seconds in sorted(rows.items(), key=lambda kv: -kv[1]):
        print(f"{name:55s} {seconds / a.n:13.3f} {seconds / total:6.1%}")
    other = cpu - sum(v for k, v in PHASES.items() if not k.startswith("plan:"))
    print(f"{'grader: everything else':55s} {other / a.n:13.3f} {other / total:6.1%}")
    if problems:
        print("problems:", json.dumps(problems)[:1000])


if __name__ == "__main__":
    main()
