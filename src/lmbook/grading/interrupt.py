"""Stopping ``lmbook-grade`` (SIGTERM, or Ctrl-C) without leaving its temporary folders behind.

Python's default SIGTERM ends a process on the spot: ``finally`` blocks and ``with TemporaryDirectory``
clean-ups never run, so unpacked submissions and sandbox job folders would stay in the temp folder. Here
SIGTERM and SIGINT raise instead, in the grader and in each grading worker, so the stack unwinds and every
clean-up runs. SIGKILL (``kill -9``, the out-of-memory killer) cannot be caught by any process: after it,
``lmbook-grade-*`` folders may remain in the temp folder, to be removed by hand.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

SIGNALS = (signal.SIGTERM, signal.SIGINT)
T = TypeVar("T")
_stopped_by: int | None = None  # in a worker: the signal that stopped it


class Stopped(BaseException):
    """The grader was asked to stop. Not a SystemExit: ``grade_several`` goes on after those; this must not."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def _ignore_further() -> None:
    # A second Ctrl-C must not cut the clean-up of the first short; SIGKILL still ends everything.
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def _raise_stopped(signum: int, frame) -> None:
    _ignore_further()
    raise Stopped(signum)


@contextmanager
def stop_cleanly() -> Iterator[None]:
    """In the grader's main process: SIGTERM and SIGINT raise :class:`Stopped`; the old handlers come back after."""
    old = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, _raise_stopped)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


# ----------------------------------------------------------------------------- grading workers


def _own_children() -> list[int]:
    """This process's child processes (Linux: /proc), e.g. the sandbox running a student's notebook."""
    me, found = os.getpid(), []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == me:
            found.append(int(d.name))
    return found


def _kill_children() -> None:
    """Stop the student code this process started before its folder is removed under it."""
    for pid in _own_children():
        try:
            os.killpg(pid, signal.SIGKILL)  # the sandbox is started in its own session: all of it
        except OSError:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # reaped, so the sandbox's process group can be removed
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
            time.sleep(0.02)


def _unwind(signum: int, frame) -> None:
    global _stopped_by
    _ignore_further()
    _stopped_by = signum
    _kill_children()
    raise SystemExit(128 + signum)


def unwind_on_signals() -> None:
    """In a grading worker (or nbgrader's own process): SIGTERM and SIGINT stop the sandbox it runs, then
    raise SystemExit, so the judge's ``finally`` removes the job's temporary folder."""
    try:
        for sig in SIGNALS:
            signal.signal(sig, _unwind)
    except ValueError:  # not the main thread: signals go to the main thread, which handles them
        pass


@contextmanager
def unwinding() -> Iterator[None]:
    """:func:`unwind_on_signals` for the duration of the block only (in nbgrader's process, say)."""
    try:
        old = {sig: signal.getsignal(sig) for sig in SIGNALS}
    except ValueError:
        old = {}
    unwind_on_signals()
    try:
        yield
    finally:
        try:
            for sig, handler in old.items():
                signal.signal(sig, handler)
        except ValueError:
            pass


def call_in_worker(fn: Callable[[T], dict], arg: T) -> dict:
    """``fn(arg)``; if a signal stopped it, the worker ends here (after the clean-ups), taking no further job."""
    try:
        return fn(arg)
    except SystemExit:
        if _stopped_by is not None:
            os._exit(128 + _stopped_by)
        raise


def stop_workers(pool: Executor, grace_s: float = 30.0) -> None:
    """Cancel the jobs not started; ask the running workers to stop (each removes its folder); kill stragglers."""
    pool.shutdown(wait=False, cancel_futures=True)
    workers = multiprocessing.active_children()
    for p in workers:
        p.terminate()  # SIGTERM: unwind_on_signals in the worker
    deadline = time.monotonic() + grace_s
    for p in workers:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in workers:
        if p.is_alive():
            p.kill()


def run_subprocess(cmd: list[str], grace_s: float = 30.0, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True)``, but a grader that is stopped asks the child to
    stop too (SIGTERM, so its own clean-up runs) instead of killing it outright."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs) as proc:
        try:
            out, err = proc.communicate()
        except BaseException:
            proc.terminate()
            try:
                proc.communicate(timeout=grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
