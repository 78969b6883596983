"""The keeper: the part of the runner's process that never runs student code, and runs the hidden test cells.

The runner forks before it runs anything of the student's: the child runs the notebook, the parent is the
keeper. At each hidden test cell the notebook's process forks a child that holds the notebook as it is at
that cell; the child confines itself (:mod:`.confine`) and is *parked*: it waits on its own pipe from the
keeper. When the notebook's process is gone (its last cell has replied and it has exited, or it crashed, or
the grader stopped it), the keeper

1. stops every process of the sandbox but itself and the parked children (in the sandbox only: unsandboxed,
   for trusted notebooks, nothing is stopped),
2. tells the grader so (``{"event": "hidden"}``): only then, once it has seen for itself that nothing else is
   left (:func:`.processes.hidden_cells_may_start`), does the grader send a hidden cell's inputs, and
3. releases the parked children in the notebook's order, each once the one before it has exited, and says
   when each has (``child_exit``), or that the notebook never reached the cell (``not_reached``).

So no cell of the notebook runs beside or after a hidden one (none can time it, watch its ``/proc`` entries
or take its inputs off the channel), and a notebook that crashes still has its earlier hidden cells graded.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal

PR_SET_DUMPABLE = 4


def _emit(fd: int, **kw) -> None:
    line = (json.dumps(kw) + "\n").encode()
    while line:
        try:
            line = line[os.write(fd, line):]
        except InterruptedError:
            continue
        except OSError:
            return  # the grader is gone


def confined(pid: int) -> bool:
    """Whether the process runs under a seccomp filter (what a parked child installs before it waits)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.split() == ["Seccomp:", "2"] for line in f)
    except OSError:
        return False


def _live_unconfined(keep: set[int]) -> list[int]:
    """The sandbox's live processes but ``keep``, its init (1) and the confined (the parked children)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in keep or name == "1":
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # gone meanwhile
        if state not in (b"Z", b"X") and not confined(int(name)):
            found.append(int(name))
    return found


def stop_the_rest(keep: set[int], passes: int = 200) -> None:
    """SIGKILL every unconfined process of the sandbox but ``keep``, until none is left (a fork loop makes new
    ones as it goes: each pass kills what the one before missed; the sandbox's process limit bounds them)."""
    for _ in range(passes):
        others = _live_unconfined(keep)
        if not others:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _reap()


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def in_sandbox(job: dict) -> bool:
    """Whether every other process here is the notebook's: the job says it runs in the sandbox, and this
    process namespace's init is bubblewrap's. Anywhere else the keeper stops nothing."""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            init = os.path.basename(f.read().split(b"\0")[0])
    except OSError:
        return False
    return init == b"bwrap" and job.get("sandboxed") is not False


def keep(notebook: int, reply_fd: int, hidden: dict[int, tuple[int, int]], stop_others: bool) -> None:
    """Run as the keeper until the hidden cells are done, then exit. ``hidden``: step -> (the pipe that releases
    its parked child, the pipe its child holds until it exits)."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no process of the notebook's can read or trace it
    except (OSError, AttributeError):
        pass
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            os.waitpid(notebook, 0)
            break
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    if stop_others:
        stop_the_rest({os.getpid()})
    _reap()
    _emit(reply_fd, event="hidden")
    for step in sorted(hidden):
        go, done = hidden[step]
        try:
            os.write(go, b"g")
            reached = True
        except BrokenPipeError:  # nobody holds the other end: the notebook never reached this cell
            reached = False
        os.close(go)
        while reached and os.read(done, 1 << 12):
            pass  # the child holds this pipe's other end until it exits
        os.close(done)
        _reap()
        _emit(reply_fd, step=step, event="child_exit" if reached else "not_reached")
    os._exit(0)
