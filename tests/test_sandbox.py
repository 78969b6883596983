"""The sandbox that runs student code: what it can reach, and the limits it runs under."""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

import pytest

from lmbook.grading import processes, sandbox

ROOT = Path(__file__).resolve().parent.parent



def _run(tmp_path: Path, *cells: str, timeout: float = 30, limits: sandbox.Limits | None = None,
         use_sandbox: bool = True, forked: tuple[int, ...] = (), trains: tuple[int, ...] = ()):
    """Run code cells in the sandbox; return (outputs per cell, RunResult). ``trains``: the cells marked as
    running a training task's check."""
    job = tmp_path / "job"
    job.mkdir()
    steps = [{"kind": "code", "source": c, "fork": i in forked, "trains": i in trains} for i, c in enumerate(cells)]
    (job / "job.json").write_text(json.dumps({"checks_module": None, "steps": steps}))
    for p in (tmp_path, job):
        os.chmod(p, 0o755)
    result = sandbox.run(job, [sandbox.Step(timeout, fork=i in forked) for i in range(len(cells))],
                         limits or sandbox.Limits(), sandbox=use_sandbox)
    outputs = [(result.step_end(i) or {}).get("outputs") for i in range(len(cells))]
    return outputs, result


def _text(outputs: list[dict] | None) -> str:
    if outputs is None:
        return "<did not run>"
    return "".join(o.get("text", "") + o.get("ename", "") + ": " + o.get("evalue", "") + "".join(
        o.get("data", {}).get("text/plain", "")) for o in outputs)


def test_student_code_runs_and_its_outputs_come_back(tmp_path):
    outs, result = _run(tmp_path, "x = 6 * 7\nprint('hello')", "x")
    assert "hello" in _text(outs[0])
    assert outs[1] == [{"output_type": "execute_result", "data": {"text/plain": "42"}, "metadata": {},
                        "execution_count": 2}]
    assert result.killed is None


@pytest.mark.parametrize("trains", [True, False])
def test_torchs_optimizer_imports_are_done_before_the_first_cell_of_a_notebook_with_a_training_task(tmp_path,
                                                                                                    trains):
    """torch imports torch._dynamo when the first optimizer is made; inside a training task, under the watch,
    that import took two thirds of a 15 s time limit. Other notebooks start without it."""
    outs, _ = _run(tmp_path, "import sys\nprint('torch._dynamo' in sys.modules)", "pass",
                   trains=(1,) if trains else ())
    assert _text(outs[0]).split()[0] == str(trains), _text(outs[0])


def test_no_network(tmp_path):
    outs, _ = _run(tmp_path, "import socket\ns = socket.socket()\ns.settimeout(3)\n"
                             "s.connect(('127.0.0.1', 22))")
    assert "OSError" in _text(outs[0]) or "ConnectionRefusedError" in _text(outs[0]) \
        or "unreachable" in _text(outs[0]).lower()


def test_the_course_solutions_and_other_files_are_invisible(tmp_path):
    secret = ROOT / "solutions" / "ch01" / "ch01_feedforward_lm.ipynb"
    outs, _ = _run(tmp_path, f"open({str(secret)!r}).read()", f"open({str(tmp_path / 'job' / 'job.json')!r}, 'a')",
                   f"import os\nprint(sorted(os.listdir({str(ROOT)!r})))")
    assert "FileNotFoundError" in _text(outs[0]) or "PermissionError" in _text(outs[0])
    assert "Error" in _text(outs[1])  # the job is read-only
    # of the repository, only the installed package (and a virtualenv, if it lives there) is visible
    visible = set(ast.literal_eval(_text(outs[2]).split("\n")[0]))
    assert visible <= {"src", ".venv"}, visible


def test_a_private_writable_home_and_tmp(tmp_path):
    outs, _ = _run(tmp_path, "open('notes.txt', 'w').write('x')\nopen('/tmp/t', 'w').write('y')\nimport os\n"
                             "print(os.getcwd(), sorted(os.listdir('.')))")
    cwd, files = _text(outs[0]).split(" ", 1)
    assert cwd == "/home/student" and "notes.txt" in files


def test_the_environment_is_cleared(tmp_path, monkeypatch):
    monkeypatch.setenv("INSTRUCTOR_SECRET", "s3cret")
    outs, _ = _run(tmp_path, "import os\nprint(os.environ.get('INSTRUCTOR_SECRET'), os.environ['OMP_NUM_THREADS'])")
    assert "None 1" in _text(outs[0])


def test_own_process_namespace(tmp_path):
    outs, _ = _run(tmp_path, "import os\nprint(os.getpid() < 10)")
    assert "True" in _text(outs[0])


def test_memory_is_limited(tmp_path):
    outs, result = _run(tmp_path, "x = bytearray(3 * 1024**3)", "print('still here')",
                        limits=sandbox.Limits(memory_bytes=2 * 1024**3))
    assert "MemoryError" in _text(outs[0])
    assert "still here" in _text(outs[1])


def test_a_slow_cell_is_interrupted_and_the_next_cell_runs(tmp_path):
    outs, result = _run(tmp_path, "while True:\n    pass", "print('next')", timeout=2)
    assert "TimeLimit" in _text(outs[0])
    assert "next" in _text(outs[1])
    assert result.killed is None


def test_a_cell_that_ignores_the_interrupt_is_killed_and_what_ran_is_kept(tmp_path):
    outs, result = _run(tmp_path, "print('first')", "while True:\n    try:\n        while True:\n            pass\n"
                                  "    except BaseException:\n        pass", "print('never')",
                        timeout=1, limits=sandbox.Limits(step_grace_s=2))
    assert "first" in _text(outs[0])
    assert outs[1] is None and outs[2] is None
    assert "time limit" in result.killed


# ----------------------------------------------------------------------------- the channel to the grader

_WRITE_EVERYWHERE = """
import os, json, time
def write_everywhere(data):
    for fd in range(3, 64):  # the reply pipe is one of these descriptors
        try:
            os.write(fd, data)
        except OSError:
            pass
"""


def test_replies_forged_on_the_channel_neither_count_nor_block_the_grader(tmp_path):
    flood = _WRITE_EVERYWHERE + """
end = time.monotonic() + 3
while time.monotonic() < end:
    for step in range(4):
        write_everywhere((json.dumps({"event": "end", "step": step, "nonce": "0" * 32,
                                      "outputs": [{"output_type": "stream", "name": "stdout", "text": "FORGED"}],
                                      "probes": {}}) + "\\n").encode() * 50)
"""
    outs, result = _run(tmp_path, flood, "print('after')", "print('last')")
    assert result.killed is None and result.complete(3)
    assert "FORGED" not in _text(outs[1]) + _text(outs[2]), "a forged reply was taken for the runner's"
    assert "after" in _text(outs[1]) and "last" in _text(outs[2])
    assert result.stray > 0


def test_a_line_that_never_ends_is_dropped_as_it_comes(tmp_path):
    outs, result = _run(tmp_path, _WRITE_EVERYWHERE + "for _ in range(40):\n    write_everywhere(b'x' * 2**20)\n"
                        "write_everywhere(b'\\n')", "print('after')")
    assert "after" in _text(outs[1]) and result.killed is None and result.stray >= 1


def test_a_forked_step_leaves_nothing_behind_for_the_next(tmp_path):
    outs, result = _run(tmp_path, "secret = 42\nprint('inside', secret)", "print('secret' in globals())",
                        forked=(0,))
    assert result.killed is None
    assert _text(outs[0]) == "<did not run>" or "inside" not in _text(outs[0])  # a forked step's prints are dropped
    assert "False" in _text(outs[1]), "what a hidden test's child did is gone before the next cell"


def test_a_huge_image_is_replaced_by_a_note(tmp_path):
    outs, _ = _run(tmp_path, "from IPython.display import display\n"
                             "display({'image/png': 'A' * 40_000_000}, raw=True)")
    assert "more than the grader keeps" in _text(outs[0])
    assert len(json.dumps(outs[0])) < 10_000


def test_images_are_kept_within_a_cell_and_a_notebook_budget(tmp_path):
    from lmbook.grading import runner
    shows = ("from IPython.display import display\nfor _ in range(20):\n"
             "    display({'image/png': 'B' * 1_990_000}, raw=True)")
    outs, result = _run(tmp_path, *[shows] * 6)
    kept = [sum(len(o.get("data", {}).get("image/png", "")) for o in cell or []) for cell in outs]
    assert all(k <= runner.MAX_CELL_OUTPUT_CHARS for k in kept), kept
    assert sum(kept) <= runner.MAX_NOTEBOOK_OUTPUT_CHARS, kept
    assert "more than the grader keeps" in _text(outs[-1])
    assert result.killed is None


def test_lines_forged_on_the_channel_are_dropped_unread(tmp_path):
    import resource
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    forge = (_WRITE_EVERYWHERE + "for _ in range(2):\n"
             "    write_everywhere(b'{\"x\": [' + b'{},' * 13_000_000 + b'{}]}\\n')")
    outs, result = _run(tmp_path, forge, "print('after')")
    assert "after" in _text(outs[1]) and result.killed is None
    assert result.stray >= 2
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before  # kB
    assert grew < 400_000, f"the grader's memory grew by {grew / 1024:.0f} MB reading two 39 MB lines"


def test_a_forked_step_writes_nothing_a_later_step_can_read(tmp_path):
    outs, result = _run(tmp_path, "import os\nopen('/tmp/left', 'w').write('x')", "import os\n"
                        "print('LEFT' if os.path.exists('/tmp/left') else 'NOTHING')", forked=(0,))
    assert "NOTHING" in _text(outs[1]), _text(outs[1])


# A hidden test cell (a forked step) runs after the notebook's last cell, from the notebook as it was at its
# place, with nothing of the notebook's alive beside it. A code step run that way replies no outputs: what it
# finds is told by whether the grader has to stop the run (it loops, deaf to the time limit, when it finds what
# it must not, or fails to look).
QUICK = sandbox.Limits(step_grace_s=2)
LOOP_IF = """import os
try:
    found = {}
except Exception:  # not knowing is finding: the test cannot pass by an error
    found = True
if found:
    while True:
        try:
            while True:
                pass
        except BaseException:  # the time limit's interrupt too: the grader stops the run
            pass"""


def test_hidden_cells_run_after_the_notebooks_last_cell_from_the_notebook_at_their_place(tmp_path):
    outs, result = _run(tmp_path, "x = 1", LOOP_IF.format("x != 1"), "x = 2", timeout=3, limits=QUICK, forked=(1,))
    assert list(result.ends) == [0, 2, 1], f"replies came in the order {list(result.ends)}"
    assert result.stray == 0, "the runner's own notes were taken for the notebook's"
    assert result.killed is None, f"the hidden cell saw the notebook as it was after a later cell: {result.killed}"


def test_a_process_the_notebook_started_is_stopped_before_a_hidden_cell_runs(tmp_path):
    finds_it = ("any(open(f'/proc/{p}/cmdline', 'rb').read().startswith(b'sleep') for p in os.listdir('/proc') "
                "if p.isdigit() and os.path.exists(f'/proc/{p}/cmdline'))")
    outs, result = _run(tmp_path, "import subprocess\nkept = subprocess.Popen(['sleep', '300'])",
                        LOOP_IF.format(finds_it), timeout=3, limits=QUICK, forked=(1,))
    assert result.killed is None, f"a process the notebook started ran beside the hidden cell: {result.killed}"


# A student who has read the runner: a thread puts itself between the grader's channel and the runner, passes
# every message on but a hidden cell's, and keeps those.
RELAY = """import os, threading
def reads_a_pipe(fd):
    flags = open(f'/proc/self/fdinfo/{fd}').read().split('flags:')[1].split()[0]
    return os.readlink(f'/proc/self/fd/{fd}').startswith('pipe:') and int(flags, 8) & 3 == 0
channel = next(int(f) for f in sorted(os.listdir('/proc/self/fd'), key=int) if int(f) > 2 and reads_a_pipe(int(f)))
grader = os.dup(channel)
into, out_to = os.pipe()
os.dup2(into, channel)
taken = []
def relay():
    pending = b''
    while chunk := os.read(grader, 1 << 20):
        pending += chunk
        while b'\\n' in pending:
            line, pending = pending.split(b'\\n', 1)
            if b'"fork": true' in line:
                taken.append(line)
            else:
                os.write(out_to, line + b'\\n')
threading.Thread(target=relay, daemon=True).start()
"""


def test_a_notebook_thread_on_the_grader_channel_never_receives_a_hidden_cells_inputs(tmp_path):
    outs, result = _run(tmp_path, RELAY, "y = 1", "z = 2", timeout=5, forked=(1,))
    assert "Error" not in _text(outs[0]), _text(outs[0])  # the relay is in place...
    assert result.ends.get(2, {}).get("event") == "end"  # ...and passes the notebook's own cells on
    # The hidden cell's inputs are sent when the notebook's process (the relay with it) is gone: the parked
    # child then reads a channel the relay had replaced, and fails its cell. The run goes on.
    assert 1 in result.ends and result.killed is None, (result.killed, list(result.ends))


def test_a_notebook_that_dies_still_has_its_earlier_hidden_cells_run_and_not_its_later_ones(tmp_path):
    outs, result = _run(tmp_path, LOOP_IF.format("y != 1").replace("import os", "y = 1"), "import os\nos._exit(3)",
                        "y = 2", timeout=3, limits=QUICK, forked=(0, 2))
    assert result.ends[0]["probes"] == {}, result.ends[0]
    assert result.ends[2]["probes"] == {"crashed": "the notebook stopped before this cell"}, result.ends[2]
    assert 1 not in result.ends
    assert result.killed == "the Python process died before the notebook's last cell", result.killed


def test_a_cell_stopped_for_its_time_limit_still_has_the_earlier_hidden_cells_run(tmp_path):
    deaf = "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass"
    outs, result = _run(tmp_path, "y = 1", deaf, timeout=1, limits=QUICK, forked=(0,))
    assert result.ends.get(0, {}).get("probes") == {}, result.ends
    assert result.killed and "time limit" in result.killed, result.killed


def test_a_cell_that_waits_is_stopped_on_the_wall_clock(tmp_path):
    outs, result = _run(tmp_path, "import time\ntime.sleep(1000)", "print('next')", timeout=1)
    assert "TimeLimit" in _text(outs[0]) and "next" in _text(outs[1])


def test_output_is_truncated(tmp_path):
    outs, _ = _run(tmp_path, "for i in range(100_000):\n    print('spam' * 10)")
    assert len(_text(outs[0])) < 25_000 and "output truncated" in _text(outs[0])


def test_html_and_javascript_outputs_are_not_kept(tmp_path):
    outs, _ = _run(tmp_path, "from IPython.display import HTML, display\ndisplay(HTML('<script>alert(1)</script>'))")
    assert "<script>" not in json.dumps(outs[0])


def test_grading_refuses_without_bubblewrap(monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install bubblewrap"):
        sandbox.check_available()


def test_lmbook_grade_refuses_without_bubblewrap(tmp_path):
    import subprocess
    import sys
    env = dict(os.environ, PATH=str(tmp_path))  # no bwrap on this PATH
    (tmp_path / "subs").mkdir()
    r = subprocess.run([sys.executable, "-m", "lmbook.autograde", str(tmp_path / "subs"), "--out",
                        str(tmp_path / "out"), "--course", str(ROOT / "autograder")],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode != 0 and "bubblewrap" in r.stderr and "--no-sandbox" in r.stderr


def test_the_number_of_processes_is_limited(tmp_path):
    fork_many = ("import os, time\nn = 0\ntry:\n    for _ in range(200):\n        if os.fork() == 0:\n"
                 "            time.sleep(3)\n            os._exit(0)\n        n += 1\nexcept OSError as e:\n"
                 "    print('stopped after', n, type(e).__name__)")
    outs, _ = _run(tmp_path, fork_many, limits=sandbox.Limits(processes=40))
    assert "stopped after" in _text(outs[0]), _text(outs[0])
    assert int(_text(outs[0]).split("stopped after ")[1].split()[0]) < 40


def test_without_the_sandbox_student_files_go_to_a_scratch_folder(tmp_path):
    # --no-sandbox is for trusted notebooks; it still keeps the limits and the grader's folders clean
    outs, result = _run(tmp_path, "import os\nopen('x.txt', 'w').write('x')\nprint(os.getcwd())",
                        use_sandbox=False)
    assert _text(outs[0]).startswith(str(tmp_path / "home"))
    assert (tmp_path / "home" / "x.txt").exists() and result.killed is None


# --- Nothing in the sandbox can be made writable: not by root's grader, not by a normal user's ---------------
# Each attack creates a file in a read-only folder: by a plain write, else after remounting the folder's bind
# read-write, else from a new user namespace (which holds every capability) after remounting it there.
# The proof is on the host: the file never appears.

_NESTED = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
folder, target = sys.argv[1:]
uid, gid = os.getuid(), os.getgid()
if libc.unshare(0x10000000 | 0x00020000) != 0:  # CLONE_NEWUSER | CLONE_NEWNS
    raise SystemExit("unshare: " + os.strerror(ctypes.get_errno()))
open("/proc/self/setgroups", "w").write("deny")
open("/proc/self/uid_map", "w").write(f"0 {uid} 1")
open("/proc/self/gid_map", "w").write(f"0 {gid} 1")
if libc.mount(b"none", folder.encode(), None, 32 | 4096, None) != 0:
    print("remount:", os.strerror(ctypes.get_errno()))
open(target, "x").write("forged")
print("WROTE")
"""
_ATTACK = f"""
import ctypes, os, subprocess, sys
NESTED = {_NESTED!r}
libc = ctypes.CDLL(None, use_errno=True)
def write(target):
    try:
        open(target, "x").write("forged")
        return "WROTE"
    except OSError as e:
        return f"write refused: {{e}}"
def attack(folder, target):
    tried = [write(target)]
    if libc.mount(b"none", folder.encode(), None, 32 | 4096, None) != 0:  # MS_REMOUNT | MS_BIND: read-write
        tried.append("remount refused: " + os.strerror(ctypes.get_errno()))
    tried.append(write(target))
    # unshare(CLONE_NEWUSER) needs a single-threaded process: a child
    nested = subprocess.run([sys.executable, "-c", NESTED, folder, target], capture_output=True, text=True)
    return tried + ["nested: " + (nested.stdout + nested.stderr).strip().splitlines()[-1]]
"""

_MOUNT_COMMAND = """
import subprocess
print(subprocess.run(["mount", "-o", "remount,rw,bind", {folder!r}], capture_output=True, text=True))
print(write({target!r}))
"""

# attack: (the folder it writes into, its cell's code given that folder and the file to create)
ATTACKS = {
    "remount_the_sources_with_the_mount_command": ("sources", _MOUNT_COMMAND.format),
    "remount_the_sources_with_mount_syscalls": ("sources", "print(attack({folder!r}, {target!r}))".format),
    "write_to_the_lmbook_package": ("package", "print(attack({folder!r}, {target!r}))".format),
    "write_to_the_job_folder": ("job", "print(attack({folder!r}, {target!r}))".format),
    "write_to_site_packages": ("site", "print(attack({folder!r}, {target!r}))".format),
    "write_to_the_virtualenv": ("venv", "print(attack({folder!r}, {target!r}))".format),
}

_GRADE_ATTACKS = """
import json, sys
from pathlib import Path
from lmbook.grading import sandbox
tmp, cells = Path(sys.argv[1]), json.loads(sys.argv[2])
job = tmp / "job"
steps = [{"kind": "code", "source": c} for c in cells]
# without the runner's audit hook, which would refuse the attacks' ctypes and programs: what is tested here is
# the layer below it, the sandbox's mounts, as a notebook that defeated the hook would find them
(job / "job.json").write_text(json.dumps({"checks_module": None, "steps": steps, "audit_hook": False}))
result = sandbox.run(job, [sandbox.Step(60) for _ in cells])
print(json.dumps([(result.step_end(i) or {}).get("outputs") for i in range(len(cells))]))
"""


def _grader_as(user: str) -> list[str]:
    """The command prefix that runs the grader as root or as a normal user (who owns the checkout)."""
    if user == "root":
        if os.geteuid() != 0:
            pytest.skip("the tests do not run as root")
        return []
    if os.geteuid() != 0:
        return []
    # As root, a user namespace stands in for a normal user: uid 1000 and no capability, yet owner of
    # everything root owns (Python under /root, the checkout), as an instructor owns their own clone.
    return ["bwrap", "--dev-bind", "/", "/", "--unshare-user", "--uid", "1000", "--gid", "1000", "--"]


@pytest.fixture(scope="module", params=["root", "non-root"])
def attacks(request, tmp_path_factory):
    """Every attack, each in its own cell of one sandboxed run; yields {attack: (target, cell output)}."""
    import subprocess
    import sys
    import sysconfig
    import uuid

    import lmbook
    prefix = _grader_as(request.param)
    tmp = tmp_path_factory.mktemp(f"attacks-{request.param}")
    (tmp / "job").mkdir()
    package = Path(lmbook.__file__).resolve().parent
    dirs = {"sources": package.parent, "package": package, "job": tmp / "job",
            "site": Path(sysconfig.get_paths()["purelib"]), "venv": Path(sys.prefix)}
    targets, cells = {}, []
    for name, (where, cell) in ATTACKS.items():
        targets[name] = dirs[where] / f"lmbook-attack-{uuid.uuid4().hex}"
        cells.append(_ATTACK + cell(folder=str(dirs[where]), target=str(targets[name])) + "\nprint('ATTEMPTED')")
    try:
        r = subprocess.run([*prefix, sys.executable, "-c", _GRADE_ATTACKS, str(tmp), json.dumps(cells)],
                           capture_output=True, text=True, cwd=tmp)
        assert r.returncode == 0, r.stderr[-3000:]
        outputs = json.loads(r.stdout.splitlines()[-1])
        yield {name: (targets[name], _text(outputs[i])) for i, name in enumerate(ATTACKS)}
    finally:
        for target in targets.values():  # a sandbox that failed must not leave its file in the checkout
            target.unlink(missing_ok=True)


@pytest.mark.parametrize("attack", ATTACKS)
def test_nothing_outside_the_output_folder_can_be_made_writable(attacks, attack):
    target, output = attacks[attack]
    assert "ATTEMPTED" in output, f"the attack did not run to its end: {output}"
    assert not target.exists(), f"student code created {target}; what it printed: {output}"


# What the grader sees from outside when the keeper says the notebook is over: the keeper (the sandbox's pid 2,
# one thread), the parked hidden cells (each under its seccomp filter), and nothing else.
KEEPER = """import os, sys, time
from lmbook.grading import confine
parked, told = os.pipe()
if os.fork() == 0:
    if sys.argv[1] == 'parked':
        confine.confine(1, {told})
    os.close(told)
    time.sleep(60)
os.close(told)
os.read(parked, 1)  # the child is confined, or not, for good
if sys.argv[1] == 'threads':
    import threading
    threading.Thread(target=time.sleep, args=(60,)).start()
print('ready', flush=True)
time.sleep(60)
"""


def _outside_view(tmp_path: Path, kind: str):
    import subprocess
    import time
    script = tmp_path / "keeper.py"
    script.write_text(KEEPER)
    os.chmod(tmp_path, 0o755)
    cmd = sandbox.command(tmp_path, sandbox.Limits(), True, program=[sys.executable, str(script), kind])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, start_new_session=True)
    try:
        proc.stdout.readline()
        problem = processes.hidden_cells_may_start(proc.pid)
        for _ in range(100):  # a process stopped by SIGKILL takes a moment to be gone
            left = processes.live_processes_under(proc.pid)
            if all(s["argv"] != [b""] for s in left.values()):
                break
            time.sleep(0.05)
        return problem, left
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def test_the_keeper_with_its_parked_hidden_cells_may_start_them(tmp_path):
    problem, left = _outside_view(tmp_path, "parked")
    assert problem is None, problem
    assert len(left) == 4, f"two bubblewrap processes, the keeper and one parked cell: {left}"


def test_a_process_of_the_notebooks_beside_the_keeper_is_stopped_and_reported(tmp_path):
    problem, left = _outside_view(tmp_path, "unconfined")
    assert problem and "still running when its last cell was over" in problem, problem
    assert len(left) == 3, f"the notebook's process is still running: {left}"


def test_the_word_that_the_notebook_is_over_sent_by_the_notebook_itself_is_caught(tmp_path):
    problem, _ = _outside_view(tmp_path, "threads")  # pid 2 runs threads: the notebook, not the keeper
    assert problem and "only the grader's own program sends" in problem, problem
