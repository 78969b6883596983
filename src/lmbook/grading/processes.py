"""What the grader sees of a sandbox's processes from outside it (the host's ``/proc``, which no process in the
sandbox can write): whether the hidden test cells may be sent, and which processes are the notebook's."""

from __future__ import annotations

import os
import signal


def live_processes_under(root: int) -> dict[int, dict]:
    """The live processes of the tree under ``root`` (host pids): parent, pid in the sandbox, threads, argv."""
    found: dict[int, dict] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                fields = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            found[int(name)] = {"ppid": int(fields["PPid"]), "state": fields["State"].strip()[:1],
                                "threads": int(fields["Threads"]), "nspid": fields.get("NSpid", "").split(),
                                "argv": argv}
        except (OSError, KeyError, ValueError):
            continue  # gone meanwhile
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in found and pid not in tree:
            tree[pid] = found[pid]
            todo.extend(p for p, s in found.items() if s["ppid"] == pid)
    return {pid: s for pid, s in tree.items() if s["state"] not in ("Z", "X")}


def notebooks_processes(root: int) -> tuple[int | None, list[int]] | None:
    """From outside: the keeper (the sandbox's pid 2, the runner's own process) and every other live process of
    the sandbox that is neither bubblewrap's nor a parked hidden cell's (confined). None where the kernel does not
    say which process is the sandbox's pid 2."""
    found = _keeper_and_others(live_processes_under(root), root)
    return None if found is None else found[:2]


def _keeper_and_others(procs: dict[int, dict], root: int) -> tuple[int | None, list[int], int] | None:
    """:func:`notebooks_processes` from a listing, with the keeper's number of threads (0 when there is none)."""
    from .confine import supported
    from .keeper import confined

    if any(not s["nspid"] for s in procs.values()):
        return None
    keeper = next((p for p, s in procs.items() if s["nspid"][-1] == "2"), None)
    bubblewrap = {root, *(p for p, s in procs.items() if s["ppid"] == root and s["nspid"][-1] == "1")}
    others = [p for p in procs if p not in bubblewrap and p != keeper and not (supported() and confined(p))]
    return keeper, others, procs[keeper]["threads"] if keeper is not None else 0


def stop(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def hidden_cells_may_start(root: int) -> str | None:
    """Checked from outside when the keeper says the notebook is over (:mod:`.keeper`), before any hidden cell's
    inputs are sent: the sandbox holds bubblewrap's processes, the keeper (one thread) and the parked hidden
    cells (each under its seccomp filter), and nothing else. A process found beside them is stopped here. None
    when all is so; else what the notebook did."""
    found = _keeper_and_others(live_processes_under(root), root)
    if found is None:
        return None  # nothing to go by
    keeper, others, threads = found
    if keeper is None or threads != 1:
        return "a message on the grader's channel that only the grader's own program sends came from the notebook"
    stop(others)
    if others:
        return "a process of the notebook's was still running when its last cell was over (the grader stopped it)"
    return None
