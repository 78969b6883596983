"""Run :mod:`lmbook.grading.runner` on one submission inside a bubblewrap sandbox, with limits.

The sandbox sees the Python installation (read-only) and the job folder
(read-only: the student's own cells); nothing else of the machine. The
grader and the runner talk over two pipes, one message each way per step
(see :mod:`lmbook.grading.runner`): each step's inputs are sent when it
starts, and the first reply that carries the step's nonce is its result. It has no network, its own process and
IPC namespaces, an empty home, a small private ``/tmp``, and never holds a
capability: as root, bubblewrap sets the sandbox up and student code runs as
an unprivileged uid of its own; as a normal user, it runs in a user namespace
with every capability dropped. So no read-only bind can be remounted
writable, not even by a nested user namespace (the kernel locks the mounts it
inherits). Limits: address space (memory), CPU
seconds, file size, number of processes and open files; the grader kills it
when a step overruns its wall-clock time or the whole run overruns its own.
Where bubblewrap is missing, grading refuses (``SandboxUnavailable``) unless
the caller opts out explicitly.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

import lmbook

from . import processes


class SandboxUnavailable(RuntimeError):
    """bubblewrap cannot be used on this machine, and running unsandboxed was not asked for."""


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 4 * 1024**3  # address space: torch alone maps ~0.7 GB
    cpu_seconds: int = 900
    file_bytes: int = 256 * 1024**2
    processes: int = 256
    open_files: int = 1024
    tmp_bytes: int = 256 * 1024**2
    step_grace_s: float = 10.0  # after a step's soft limit, before the kill
    total_s: float = 900.0


# Replies are read whole and parsed as JSON, whose objects take ~20x their text's size in memory: each is
# capped far below memory, in bytes and in JSON items. The largest honest reply is a trained model's logits
# (exercise 1: 10,000 x 47 floats, 2.5 MB as base64) and a cell's outputs (2.5 MB at most, runner.py).
# A cell's time limit is CPU time (a busy server slows a cell down without costing it its limit); a cell that
# waits without computing is stopped after WALL_FACTOR times its limit of wall-clock time.
WALL_FACTOR = 3
CPU_CHECK_S = 2.0  # how often the grader reads the sandbox's CPU time while a cell runs
MAX_REPLY_BYTES = 32 * 1024**2  # one step's reply
MAX_REPLY_ITEMS = 100_000  # JSON objects, lists and their items in one reply (base64 arrays are one item each)
MAX_NOTEBOOK_REPLY_BYTES = 160 * 1024**2  # all of a notebook's replies, held until it is judged


@dataclass(frozen=True)
class Step:
    """One step of a run: its time limit, and what the runner is sent when it starts (e.g. a test's inputs)."""

    timeout: float
    message: dict = field(default_factory=dict)
    fork: bool = False  # a hidden test: forked at its place, run after the notebook's own cells (job.json too)
    timed: bool = False  # measure the CPU time the sandbox spends on it (a training task's budget)


@dataclass
class RunResult:
    ends: dict[int, dict] = field(default_factory=dict)  # step -> the runner's reply (with the step's nonce)
    stray: int = 0  # other lines on the channel: only student code could have written them
    killed: str | None = None  # why the grader stopped the run, if it did
    returncode: int | None = None
    stderr: str = ""
    tampered: list[str] = field(default_factory=list)  # what the runner found changed in the sandbox
    cpu: dict[int, float] = field(default_factory=dict)  # step -> CPU seconds of the whole sandbox (timed steps)
    seconds: float = 0.0  # the run's wall-clock time

    def step_end(self, i: int) -> dict | None:
        """The reply to step ``i``: the first on the channel that carries the nonce sent with it."""
        return self.ends.get(i)

    def complete(self, steps: int) -> bool:
        return len(self.ends) == steps


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def check_available() -> None:
    """Raise :class:`SandboxUnavailable` with a fix, unless bubblewrap works here."""
    path = bwrap_path()
    if path is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed, so student code cannot be sandboxed. Install it "
            "(Debian/Ubuntu: `sudo apt-get install bubblewrap`, or `make system-deps` in the course repository) "
            "or, only for trusted notebooks, pass --no-sandbox (LMBOOK_NO_SANDBOX=1 for nbgrader).")
    r = subprocess.run([path, *_privileges(), "--ro-bind", "/", "/", "--", "true"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SandboxUnavailable(f"bubblewrap is installed but cannot create a sandbox here: {r.stderr.strip()} "
                                 "(user namespaces may be disabled)")


def _readable_roots() -> list[str]:
    """Folders the student's Python needs: the interpreter, its libraries, and lmbook itself."""
    paths = {sys.base_prefix, sys.prefix, sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
             str(Path(lmbook.__file__).resolve().parent.parent), str(Path(sys.executable).resolve().parent)}
    return sorted(p for p in paths if os.path.exists(p))


def _package_path(roots: list[str]) -> str | None:
    """The folder holding the lmbook the grader imported, where the sandbox's Python would not find it by
    itself (lmbook importable only through ``PYTHONPATH``, which the sandbox clears): it goes into the
    sandbox's ``PYTHONPATH``, bound read-only like every root. None where it lies in site-packages."""
    import site

    folder = str(Path(lmbook.__file__).resolve().parent.parent)
    paths = sysconfig.get_paths()
    site_dirs = {str(Path(d).resolve()) for d in (paths["purelib"], paths["platlib"], *site.getsitepackages())
                 if os.path.exists(d)}
    return folder if folder in roots and folder not in site_dirs else None


def command(job_dir: Path | None, limits: Limits, sandbox: bool = True, *, device: str | None = None,
            dev: Path = Path("/dev"), program: list[str] | None = None) -> list[str]:
    """The command that runs ``program`` (default: the runner on ``job_dir``) under the limits, in the sandbox.

    ``device``: the device student code is told to use (default: the grader's ``LMBOOK_DEVICE``, which
    :func:`.devices.settle` chose, else the CPU). For CUDA, the sandbox gets the NVIDIA device nodes found in
    ``dev`` (each bound alone, nothing else of the host's devices) and the driver's folders, read-only; where
    there are none, or for any other device, student code is told to use the CPU: no other device can be
    reached from the sandbox."""
    from . import devices

    runner = program or [sys.executable, "-m", "lmbook.grading.runner", str(job_dir)]
    prlimit = ["prlimit", f"--as={limits.memory_bytes}", f"--cpu={limits.cpu_seconds}",
               f"--fsize={limits.file_bytes}", f"--nproc={limits.processes}", f"--nofile={limits.open_files}",
               "--core=0", "--"]
    if not sandbox:
        return prlimit + runner
    device = (device if device is not None else os.environ.get("LMBOOK_DEVICE", "")).strip() or "cpu"
    nodes = devices.nvidia_nodes(dev) if device.split(":")[0] == "cuda" else []
    if not nodes:
        device = "cpu"
    roots = _readable_roots()
    drivers = devices.driver_folders(roots) if nodes else []
    package = _package_path(roots)
    as_root = os.geteuid() == 0
    cmd = [bwrap_path() or "bwrap", *_privileges(), "--die-with-parent", "--new-session",
           "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/home/student",
           "--setenv", "OMP_NUM_THREADS", "1", "--setenv", "MKL_NUM_THREADS", "1",
           "--setenv", "MPLBACKEND", "Agg", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
           "--setenv", "LMBOOK_DEVICE", device,
           *(["--setenv", "PYTHONPATH", package] if package else []),
           *(["--setenv", "LD_LIBRARY_PATH", devices.library_path(drivers)] if devices.library_path(drivers) else [])]
    bound: list[Path] = []  # binds: what lies under them is already there
    made: set[Path] = {Path("/")}  # empty folders and tmpfs: what goes under them must be made

    def parents(path: str) -> None:
        # bubblewrap makes missing parent folders 0700 (as root), which the unprivileged uid could not
        # cross (pyenv's Python lives under /root): make them 0755 first. They hold nothing but the binds.
        for parent in reversed(Path(path).parents):
            if parent not in made and not any(b == parent or b in parent.parents for b in bound):
                cmd.extend(["--perms", "0755", "--dir", str(parent)])
                made.add(parent)

    def bind(flag: str, path: str) -> None:
        parents(path)
        cmd.extend([flag, path, path])
        bound.append(Path(path))

    for d in ("/usr", "/bin", "/lib", "/lib64", "/lib32", "/sbin", "/etc/alternatives", "/etc/ld.so.cache"):
        if os.path.exists(d):
            bind("--ro-bind", d)
    # The private /tmp and home first: binds made after them show through (a clone or a virtualenv
    # under /tmp, the job folder), binds made before them would be hidden. Made by root, they must be
    # writable by the sandbox's uid; nothing else runs in there.
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    made.add(Path("/dev"))
    for node in nodes:  # the GPU: these device nodes, and nothing else of the host's /dev
        parents(f"/dev/{node}")
        cmd += ["--dev-bind-try", str(dev / node), f"/dev/{node}"]
    for d in ("/tmp", "/home/student"):
        parents(d)
        cmd += ["--size", str(limits.tmp_bytes), "--perms", "1777", "--tmpfs", d]
        made.add(Path(d))
    for d in roots:
        bind("--ro-bind", d)
    for d in drivers:
        bind("--ro-bind", d)
    if job_dir is not None:
        bind("--ro-bind", str(job_dir))
    cmd += ["--chdir", "/home/student", "--"]
    if as_root:  # bubblewrap keeps only what setpriv needs to drop to the sandbox's uid and its last capabilities
        uid = str(sandbox_uid())
        cmd += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all", "--no-new-privs", "--"]
    return cmd + prlimit + runner


def _privileges() -> list[str]:
    """bubblewrap's namespaces and capabilities. Not --unshare-all: as root it would make a user namespace
    in which only uid 0 exists, and so no unprivileged uid to drop to. As a normal user the user namespace
    is what lets bubblewrap work at all; no further one may be made in it where bubblewrap can forbid it."""
    namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if os.geteuid() == 0:
        return [*namespaces, "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                "--cap-add", "CAP_SETPCAP"]
    return [*namespaces, "--unshare-user", *(["--disable-userns"] if _can_disable_userns() else []),
            "--cap-drop", "ALL"]


@functools.cache
def _can_disable_userns() -> bool:  # bubblewrap 0.8 and later
    return "--disable-userns" in subprocess.run([bwrap_path() or "bwrap", "--help"], capture_output=True,
                                                text=True).stdout


def sandbox_uid() -> int:
    """The uid (and gid) student code runs as when the grader is root: in no group, owning nothing of the
    machine, and one per grading process, so that parallel sandboxes do not share a process limit."""
    return 1_000_000 + os.getpid()


def _cgroups(limits: Limits) -> list[Path]:
    """Control groups capping the run as a whole, where this machine lets us make them (root; cgroup v1 or v2):
    the number of processes (RLIMIT_NPROC does not bind root, so unsandboxed this is what stops a fork bomb)
    and the memory of all its processes together (RLIMIT_AS is per process: four children could each hold
    the limit)."""
    name = f"lmbook-{os.getpid()}-{time.monotonic_ns()}"
    v2 = Path("/sys/fs/cgroup")
    if (v2 / "cgroup.controllers").exists():  # one group, both limits
        wanted = [(v2, {"pids.max": limits.processes, "memory.max": limits.memory_bytes})]
    else:
        wanted = [(v2 / "pids", {"pids.max": limits.processes}),
                  (v2 / "memory", {"memory.limit_in_bytes": limits.memory_bytes})]
    groups = []
    for base, settings in wanted:
        if not (base / "cgroup.procs").exists() or not os.access(base, os.W_OK):
            continue
        group = base / name
        try:
            group.mkdir()
            for key, value in settings.items():
                if (group / key).exists():
                    (group / key).write_text(str(value))
            groups.append(group)
        except OSError:
            try:
                group.rmdir()
            except OSError:
                pass
    return groups


def _out_of_memory(groups: list[Path]) -> bool:
    for group in groups:
        for name, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
            try:
                fields = dict(line.split() for line in (group / name).read_text().splitlines())
            except (OSError, ValueError):
                continue
            if int(fields.get(key, 0)) > 0:
                return True
        try:
            if int((group / "memory.failcnt").read_text()) > 0:
                return True
        except (OSError, ValueError):
            pass
    return False


def run(job_dir: Path, steps: list[Step], limits: Limits = Limits(), sandbox: bool = True) -> RunResult:
    """Run the job's steps in order; kill the run when a step or the whole run overruns, and as soon as the
    last step has replied (no student code runs after it). Returns the replies it accepted."""
    if sandbox:
        check_available()
    if sandbox and os.geteuid() == 0:  # student code runs as sandbox_uid(): it can read the job, nothing more
        for path in [job_dir, *job_dir.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    groups = _cgroups(limits) if os.geteuid() == 0 else []

    def enter_cgroups() -> None:  # in the child, before exec: everything it starts stays in the groups
        for group in groups:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    # Unsandboxed (trusted notebooks only), the student's files still go to a scratch folder, not to ours.
    scratch = job_dir.parent / "home"
    scratch.mkdir(exist_ok=True)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(command(job_dir, limits, sandbox), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                preexec_fn=enter_cgroups, cwd=scratch)
        result = _watch(proc, steps, limits, start, sandboxed=sandbox)
        if result.killed and result.killed.startswith("the Python process died") and _out_of_memory(groups):
            result.killed = (f"the notebook ran out of memory (limit {limits.memory_bytes / 1024**3:.1f} GiB "
                             "for all its processes together)")
        return result
    finally:
        for group in groups:
            for _ in range(50):  # a group can be removed once its last process is reaped
                try:
                    group.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def run_order(steps: list[Step]) -> list[int]:
    """The order the steps run in: the notebook's own cells, in order; then its hidden test cells, in order."""
    return [i for i, s in enumerate(steps) if not s.fork] + [i for i, s in enumerate(steps) if s.fork]


def _tree_cpu(root: int) -> float | None:
    """CPU seconds used so far by process ``root`` and all its descendants, live or reaped (kernel accounting:
    nothing inside the sandbox can change it). None where /proc cannot tell."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        stats = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat", "rb") as f:
                        fields = f.read().rsplit(b")", 1)[1].split()
                except OSError:
                    continue  # gone meanwhile
                # after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15), 0-based from state
                stats[int(name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    except (OSError, ValueError, IndexError):
        return None
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
            todo.extend(children.get(pid, []))
    return total / tick if root in stats else None


def _watch(proc: subprocess.Popen, steps: list[Step], limits: Limits, start: float,
           sandboxed: bool = True) -> RunResult:
    """The grader's side of the conversation. It never blocks on the runner: reads and writes are
    non-blocking and multiplexed with the clock, so the time limits hold whatever the sandbox does.
    A line is parsed only if it starts as the runner's reply to the current step does (or is one of its small
    notes): whatever else is on the channel is counted and dropped unread."""
    result = RunResult()
    nonces = [secrets.token_hex(16) for _ in steps]
    stderr_chunks: list[bytes] = []
    pending = bytearray()  # the reply being received: appended to, split only at a newline (linear in its size)
    outbox = b""
    step, step_started = -1, start  # -1: the runner has not said it is ready
    released = False  # the keeper has said the notebook is over (hidden cells may be sent)
    cpu_started: float | None = None
    next_cpu_check = start
    received = 0
    discarding = False
    killed = None
    for s in (proc.stdout, proc.stderr, proc.stdin):
        os.set_blocking(s.fileno(), False)
    readers = [proc.stdout, proc.stderr]

    # Each hidden test cell's inputs are sent only once the keeper has said that the notebook's process is gone
    # and nothing it started is left (keeper.py).
    order = run_order(steps)
    waiting = False  # the current step is a hidden one whose inputs wait for that word
    hidden_steps = {i for i, s in enumerate(steps) if s.fork}
    ended_early = None  # why the notebook's own cells stopped before their end, the run going on to its hidden ones

    def hidden_next() -> bytes:
        """The notebook's cells are over (done, or ended early): on to the first hidden cell not yet run."""
        nxt = next((i for i in order if steps[i].fork and i not in result.ends), None)
        return begin(nxt) if nxt is not None else b""

    def begin(i: int) -> bytes:
        nonlocal step, step_started, cpu_started, next_cpu_check, waiting
        step, step_started = i, time.monotonic()
        cpu_started = _tree_cpu(proc.pid)
        next_cpu_check = step_started + CPU_CHECK_S
        if steps[i].fork and not released:
            waiting = True  # its own time limit runs meanwhile: the word comes within milliseconds
            return b""
        waiting = False
        wall = steps[i].timeout * (WALL_FACTOR if cpu_started is not None else 1)
        message = {**steps[i].message, "step": i, "nonce": nonces[i], "timeout": steps[i].timeout,
                   "wall_timeout": wall, "fork": steps[i].fork}
        return (json.dumps(message) + "\n").encode()

    def ended(i: int, reply: dict) -> bytes:
        result.ends[i] = reply
        if cpu_started is not None and steps[i].timed:
            now = _tree_cpu(proc.pid)
            if now is not None:
                result.cpu[i] = now - cpu_started
        at = order.index(i)
        return begin(order[at + 1]) if at + 1 < len(order) else b""

    while True:
        wants_write = [proc.stdin] if outbox and not proc.stdin.closed else []
        ready, writable, _ = select.select([s for s in readers if not s.closed], wants_write, [], 0.2)
        if writable:
            try:
                outbox = outbox[os.write(proc.stdin.fileno(), outbox[: 1 << 16]):]
            except BlockingIOError:
                pass
            except OSError:  # the runner is gone; what it said is in the replies already read
                outbox = b""
        eof = False
        for s in ready:
            try:
                chunk = s.read(1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                eof = eof or s is proc.stdout
                continue
            if s is proc.stderr:
                if sum(map(len, stderr_chunks)) < 65536:
                    stderr_chunks.append(chunk)
                continue
            if discarding:  # the rest of a line that is no reply: dropped as it comes, never held
                cut = chunk.find(b"\n")
                if cut < 0:
                    continue
                chunk, discarding = chunk[cut + 1:], False
            pending += chunk
            lines = []
            if b"\n" in chunk:
                *lines, rest = pending.split(b"\n")
                pending = bytearray(rest)
            expected = f'{{"step": {step}, "nonce": "{nonces[step]}"'.encode() if 0 <= step < len(steps) else b"\0"
            if len(pending) > 1024 and not pending.startswith(expected):
                pending, discarding = bytearray(), True
                result.stray += 1
            elif len(pending) > MAX_REPLY_BYTES:
                killed = f"the notebook sent the grader more than {MAX_REPLY_BYTES // 1024**2} MiB for one cell"
                break
            for line in lines:
                reply = 0 <= step < len(steps) and step not in result.ends and line.startswith(
                    f'{{"step": {step}, "nonce": "{nonces[step]}"'.encode())
                note = len(line) < 1024 and not reply
                if reply and (received + len(line) > MAX_NOTEBOOK_REPLY_BYTES or _items(line) > MAX_REPLY_ITEMS):
                    killed = ("the notebook sent the grader more than it keeps for one cell or one notebook "
                              f"({MAX_REPLY_ITEMS:,} items per cell, {MAX_NOTEBOOK_REPLY_BYTES // 1024**2} MiB in all)")
                    break
                e = _parse(line) if reply or note else None
                if reply and e is not None and e.get("event") == "end":
                    received += len(line)
                    outbox += ended(step, e)
                elif step == -1 and e == {"event": "ready"}:
                    outbox += begin(order[0]) if steps else b""
                elif note and e == {"event": "hidden"} and not released:
                    problem = processes.hidden_cells_may_start(proc.pid) if sandboxed else None
                    if problem:
                        result.tampered.append(problem)
                        if "only the grader's own program" in problem:
                            killed = "the notebook sent a message that only the grader's own program sends"
                            break
                    released = True
                    if waiting:
                        outbox += begin(step)
                    else:  # the notebook's process ended before its last cell: its hidden cells still run
                        ended_early = ended_early or "the Python process died before the notebook's last cell"
                        outbox += hidden_next()
                elif note and e is not None and e.get("event") in ("child_exit", "not_reached") \
                        and e.get("step") in hidden_steps and released:
                    if e["step"] == step and step not in result.ends:  # the hidden test's process died unreplied
                        why = ("the notebook stopped before this cell" if e["event"] == "not_reached" else
                               "the process running this cell ended before it replied")
                        outbox += ended(step, {"event": "end", "outputs": [], "arrays": {}, "probes": {"crashed": why}})
                elif note and e is not None and e.get("event") == "tampered" and isinstance(e.get("tampered"), str):
                    result.tampered.append(e["tampered"][:300])
                elif line.strip():
                    result.stray += 1
            if killed:
                break
        if result.complete(len(steps)) and steps:
            break  # every step has replied: nothing the student's code does from now on is read
        now = time.monotonic()
        overran = None
        if killed:
            pass
        elif 0 <= step < len(steps) and now - step_started > steps[step].timeout * (
                WALL_FACTOR if cpu_started is not None else 1) + limits.step_grace_s:
            overran = f"a cell ran past its time limit ({steps[step].timeout:.0f} s) and was stopped"
        elif 0 <= step < len(steps) and cpu_started is not None and now >= next_cpu_check:
            next_cpu_check = now + CPU_CHECK_S
            cpu = _tree_cpu(proc.pid)
            if cpu is not None and cpu - cpu_started > steps[step].timeout + limits.step_grace_s:
                overran = (f"a cell ran past its time limit ({steps[step].timeout:.0f} s of CPU time) and was "
                           "stopped")
        elif now - start > limits.total_s:
            killed = f"the notebook ran past the time limit for a whole submission ({limits.total_s:.0f} s)"
        if overran:
            # One of the notebook's own cells: its process is stopped, and its hidden cells run as after a crash
            # (the keeper's word comes within that cell's own time limit). Else the whole run stops.
            found = processes.notebooks_processes(proc.pid) if sandboxed and not released and not steps[step].fork \
                and any(i not in result.ends for i in hidden_steps) else None
            if found is not None and found[0] is not None:
                processes.stop(found[1])
                ended_early = overran
                outbox += hidden_next()
            else:
                killed = overran
        if killed or eof or (proc.poll() is not None and not ready):
            break
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the sandbox and everything the student's code started in it
    except ProcessLookupError:
        pass
    proc.wait()
    try:
        stderr_chunks.append(proc.stderr.read() or b"")
    except OSError:
        pass
    stderr = b"".join(stderr_chunks)[-65536:].decode(errors="replace")
    result.killed, result.returncode, result.stderr = killed, proc.returncode, stderr
    result.seconds = time.monotonic() - start
    if killed is None and not result.complete(len(steps)):
        if proc.returncode == -signal.SIGXCPU or "SIGXCPU" in stderr:
            result.killed = f"the notebook used more than {limits.cpu_seconds} s of CPU time"
        elif "MemoryError" in stderr or "can't allocate memory" in stderr:
            result.killed = f"the notebook ran out of memory (limit {limits.memory_bytes / 1024**3:.1f} GiB)"
        elif ended_early:
            result.killed = ended_early
        else:
            result.killed = f"the Python process died (exit status {proc.returncode})"
    return result


def _items(line: bytes) -> int:
    """An upper bound on the JSON objects, lists and their items in a line (base64 has none of , { [)."""
    return line.count(b",") + line.count(b"{") + line.count(b"[")


def _parse(line: bytes) -> dict | None:
    try:
        e = json.loads(line)
    except ValueError:
        return None
    return e if isinstance(e, dict) else None
