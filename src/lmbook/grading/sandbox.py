"""Run :mod:`lmbook.grading.runner` on one submission inside a bubblewrap sandbox, with limits.

The sandbox sees the Python installation (read-only), the job folder
(read-only: the student's cells and the grader's inputs) and an output
folder; nothing else of the machine. It has no network, its own process and
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


@dataclass
class RunResult:
    events: list[dict] = field(default_factory=list)  # in the order they arrived
    killed: str | None = None  # why the grader stopped the run, if it did
    returncode: int | None = None
    stderr: str = ""

    def step_end(self, i: int) -> dict | None:
        """The first end event of step ``i``: the runner's own (a later one could only be forged)."""
        return next((e for e in self.events if e.get("step") == i and e.get("event") == "end"), None)


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


def command(job_dir: Path, out_dir: Path, limits: Limits, sandbox: bool = True) -> list[str]:
    runner = [sys.executable, "-m", "lmbook.grading.runner", str(job_dir), str(out_dir)]
    prlimit = ["prlimit", f"--as={limits.memory_bytes}", f"--cpu={limits.cpu_seconds}",
               f"--fsize={limits.file_bytes}", f"--nproc={limits.processes}", f"--nofile={limits.open_files}",
               "--core=0", "--"]
    if not sandbox:
        return prlimit + runner
    as_root = os.geteuid() == 0
    cmd = [bwrap_path() or "bwrap", *_privileges(), "--die-with-parent", "--new-session",
           "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/home/student",
           "--setenv", "OMP_NUM_THREADS", "1", "--setenv", "MKL_NUM_THREADS", "1",
           "--setenv", "MPLBACKEND", "Agg", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
           "--setenv", "LMBOOK_DEVICE", os.environ.get("LMBOOK_DEVICE", "cpu")]
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
    for d in ("/tmp", "/home/student"):
        parents(d)
        cmd += ["--size", str(limits.tmp_bytes), "--perms", "1777", "--tmpfs", d]
        made.add(Path(d))
    for d in _readable_roots():
        bind("--ro-bind", d)
    bind("--ro-bind", str(job_dir))
    bind("--bind", str(out_dir))
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


def _pids_cgroup(limit: int) -> Path | None:
    """A cgroup (v1 or v2) capping the number of processes, where this machine lets us make one.

    RLIMIT_NPROC does not bind root, so when root runs notebooks unsandboxed this is what stops a fork
    bomb (sandboxed, it bounds bubblewrap's own processes too)."""
    for base in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
        if not (base / "cgroup.procs").exists() or not os.access(base, os.W_OK):
            continue
        group = base / f"lmbook-{os.getpid()}-{time.monotonic_ns()}"
        try:
            group.mkdir()
            (group / "pids.max").write_text(str(limit))
            return group
        except OSError:
            try:
                group.rmdir()
            except OSError:
                pass
    return None


def run(job_dir: Path, out_dir: Path, step_timeouts: list[float], limits: Limits = Limits(),
        sandbox: bool = True, keep_dir: Path | None = None) -> RunResult:
    """Run the job; kill it when a step or the whole run overruns. Returns the events it recorded.

    After each step, the ``.npy`` files the runner wrote are copied to ``keep_dir`` (if given) before the
    runner may go on: later student code can no longer change them there.
    """
    if sandbox:
        check_available()
    if sandbox and os.geteuid() == 0:  # student code runs as sandbox_uid(): it reads the job, writes only out_dir
        for path in [job_dir, *job_dir.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        os.chown(out_dir, sandbox_uid(), sandbox_uid())
    cgroup = _pids_cgroup(limits.processes) if os.geteuid() == 0 else None

    def enter_cgroup() -> None:  # in the child, before exec: everything it starts stays in the group
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    # Unsandboxed (trusted notebooks only), the student's files still go to a scratch folder, not to ours.
    scratch = out_dir.parent / "home"
    scratch.mkdir(exist_ok=True)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(command(job_dir, out_dir, limits, sandbox), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                preexec_fn=enter_cgroup, cwd=scratch)
        return _watch(proc, out_dir, keep_dir, step_timeouts, limits, start)
    finally:
        if cgroup is not None:
            for _ in range(50):  # the group can be removed once its last process is reaped
                try:
                    cgroup.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def _keep(out_dir: Path, keep_dir: Path | None) -> None:
    """Copy the outputs written so far; the first copy of a file is the one that counts."""
    if keep_dir is None:
        return
    for path in out_dir.glob("*.npy"):
        dest = keep_dir / path.name
        if not dest.exists() and path.is_file() and not path.is_symlink():
            shutil.copyfile(path, dest)


def _watch(proc: subprocess.Popen, out_dir: Path, keep_dir: Path | None, step_timeouts: list[float],
           limits: Limits, start: float) -> RunResult:
    result = RunResult()
    stderr_chunks: list[bytes] = []
    pending = b""
    step, step_started = -1, start
    killed = None
    streams = [proc.stdout, proc.stderr]
    for s in streams:
        os.set_blocking(s.fileno(), False)
    while True:
        ready, _, _ = select.select([s for s in streams if not s.closed], [], [], 0.2)
        eof = False
        for s in ready:
            chunk = s.read(1 << 16)
            if not chunk:
                eof = eof or s is proc.stdout
                continue
            if s is proc.stderr:
                if sum(map(len, stderr_chunks)) < 65536:
                    stderr_chunks.append(chunk)
                continue
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue  # not the runner's
                if not isinstance(e, dict):
                    continue
                result.events.append(e)
                if e.get("event") == "start" and isinstance(e.get("step"), int) and e["step"] != step:
                    step, step_started = e["step"], time.monotonic()
                if e.get("event") == "end":
                    _keep(out_dir, keep_dir)
                    try:
                        proc.stdin.write(b"k")
                        proc.stdin.flush()
                    except OSError:
                        pass
        now = time.monotonic()
        if 0 <= step < len(step_timeouts) and now - step_started > step_timeouts[step] + limits.step_grace_s:
            killed = f"a cell ran past its time limit ({step_timeouts[step]:.0f} s) and was stopped"
        elif now - start > limits.total_s:
            killed = f"the notebook ran past the time limit for a whole submission ({limits.total_s:.0f} s)"
        if killed:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        if eof or (proc.poll() is not None and not ready):
            break
    proc.wait()
    try:
        stderr_chunks.append(proc.stderr.read() or b"")
    except OSError:
        pass
    stderr = b"".join(stderr_chunks)[-65536:].decode(errors="replace")
    result.killed, result.returncode, result.stderr = killed, proc.returncode, stderr
    if killed is None and not any(e.get("event") == "done" for e in result.events):
        if proc.returncode == -signal.SIGXCPU or "SIGXCPU" in stderr:
            result.killed = f"the notebook used more than {limits.cpu_seconds} s of CPU time"
        elif "MemoryError" in stderr or "can't allocate memory" in stderr:
            result.killed = f"the notebook ran out of memory (limit {limits.memory_bytes / 1024**3:.1f} GiB)"
        else:
            result.killed = f"the Python process died (exit status {proc.returncode})"
    return result
