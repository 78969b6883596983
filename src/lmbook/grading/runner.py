"""Run one student's notebook inside the sandbox and report what their code computes.

    python -m lmbook.grading.runner JOB_DIR

This is the only grading code that runs next to student code, so it decides
nothing and is trusted with nothing: it executes the student's cells in order
(in an IPython shell, as a kernel would), and where the notebook has a test
cell it calls the student's function on the inputs the grader sends for that
cell, and sends back what came out, as plain arrays and JSON. The verdicts
are made outside the sandbox by :mod:`lmbook.grading.judge`, which never
unpickles anything and recomputes every reference itself.

The conversation is one message each way per step, over pipes: the grader
sends a step's message (a fresh random nonce, and for a test cell its inputs)
only when the step before it has ended, and accepts one reply per step, the
first that carries that nonce. ``JOB_DIR`` holds only the student's own
cells, so nothing the grader knows is readable before the call it is for.

Before any student code runs, this process forks: the child runs the notebook,
the parent becomes the keeper (:mod:`.keeper`), which never runs student
code. A hidden test cell runs in a child the notebook's process forks at the
cell's place (so it holds the notebook as it was there), confined so that it
can leave nothing behind (:mod:`.confine`: no file, shared memory, process or
message) and *parked*: it waits until the notebook's process is gone (its last
cell done, or crashed). Then the keeper stops every other process the notebook
started and releases the parked children one at a time; only then does the
grader send a hidden cell's inputs, which the child reads itself. So no cell
of the notebook runs beside or after a hidden one (none can time it, watch it
or take its inputs off the channel). Whatever the student's code patches or forges
in here can only spoil its own answers: a reply can say no more than the
student's function itself could. What it could do to this runner is looked
for after every step (its code, the watch's hooks) and reported as tampering.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import signal
import sys
import time
import types
from pathlib import Path

MAX_STREAM_CHARS = 20_000  # per cell: a print loop cannot flood the feedback
MAX_OUTPUTS = 20  # per cell
MAX_TEXT_CHARS = 20_000  # one displayed value's text
MAX_IMAGE_CHARS = 2_000_000  # one figure, base64: a plot is ~50 kB (retina ~200 kB)
MAX_CELL_OUTPUT_CHARS = 2_500_000  # everything one cell shows (images included)
MAX_NOTEBOOK_OUTPUT_CHARS = 8_000_000  # everything the notebook shows: what the feedback can hold


class TimeLimit(BaseException):
    """Raised in the student's code when a step runs past its time (a soft limit; the sandbox kills later)."""


def _on_alarm(signum, frame):
    raise TimeLimit("time limit for this cell reached")


class _Budget:
    """What the notebook's outputs may still take, per cell and in all (characters of text and base64)."""

    def __init__(self):
        self.notebook = MAX_NOTEBOOK_OUTPUT_CHARS
        self.cell = MAX_CELL_OUTPUT_CHARS

    def new_cell(self) -> None:
        self.cell = MAX_CELL_OUTPUT_CHARS

    def take(self, n: int) -> bool:
        if n > min(self.cell, self.notebook):
            return False
        self.cell -= n
        self.notebook -= n
        return True


_budget = _Budget()


class _Stream(io.TextIOBase):
    def __init__(self, name: str, sink: list):
        self.name, self.sink, self.size = name, sink, 0

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        n = len(s)
        if s and self.size < MAX_STREAM_CHARS:
            s = s[: MAX_STREAM_CHARS - self.size]
            if not _budget.take(len(s)):
                s = ""
                self.size = MAX_STREAM_CHARS
            self.size += len(s)
            if self.size >= MAX_STREAM_CHARS:
                s += "\n[output truncated by the grader]\n"
            if self.sink and self.sink[-1].get("name") == self.name:
                self.sink[-1]["text"] += s
            elif len(self.sink) < MAX_OUTPUTS:
                self.sink.append({"output_type": "stream", "name": self.name, "text": s})
        return n

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _keep(data: dict) -> dict:
    # Plain text and PNG only: student HTML or JavaScript never reaches an instructor's browser.
    kept = {}
    if isinstance(data.get("text/plain"), str):
        text = data["text/plain"][:MAX_TEXT_CHARS]
        if _budget.take(len(text)):
            kept["text/plain"] = text
    if isinstance(data.get("image/png"), str):
        size = len(data["image/png"])
        if size <= MAX_IMAGE_CHARS and _budget.take(size):
            kept["image/png"] = data["image/png"]
        else:
            kept["text/plain"] = (f"<an image of {size // 1000} kB: more than the grader keeps "
                                  f"({MAX_IMAGE_CHARS // 1000} kB per image, {MAX_CELL_OUTPUT_CHARS // 1000} kB per "
                                  f"cell, {MAX_NOTEBOOK_OUTPUT_CHARS // 1000} kB per notebook)>")
    return kept or {"text/plain": "<output of a type the grader does not keep>"}


def _plumbing() -> None:
    from lmbook.grading import watch

    # What printing (to stdout or stderr: print, warnings, logging, progress bars) and the time limit run,
    # called from the student's code: not the grader's.
    watch.plumbing(_Stream.write, _Stream.flush, _Stream.isatty, _keep, _on_alarm)


_plumbing()


def make_shell(outputs: list):
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets import Type

    from lmbook.grading import watch

    class Hook(DisplayHook):
        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            if len(outputs) < MAX_OUTPUTS:
                outputs.append({"output_type": "execute_result", "data": _keep(format_dict), "metadata": {},
                                "execution_count": self.prompt_count})

    class Publisher(DisplayPublisher):
        def publish(self, data, metadata=None, *args, **kwargs):
            if len(outputs) < MAX_OUTPUTS:
                outputs.append({"output_type": "display_data", "data": _keep(data), "metadata": {}})

    class Shell(InteractiveShell):
        displayhook_class = Type(Hook)
        display_pub_class = Type(Publisher)

        def enable_gui(self, gui=None):
            pass  # `%matplotlib inline` as in a kernel: figures are shown through the display publisher

        def _showtraceback(self, etype, evalue, stb):
            outputs.append({"output_type": "error", "ename": etype.__name__, "evalue": str(evalue)[:2000],
                            "traceback": [str(line)[:5000] for line in stb[-30:]]})

    # What displaying runs, called from the student's code: not the grader's.
    watch.plumbing(Hook.write_output_prompt, Hook.write_format_data, Publisher.publish, Shell._showtraceback,
                   Shell.enable_gui)
    return Shell.instance(colors="nocolor", history_length=0, cache_size=0)


def _limit_threads() -> None:
    """torch's thread settings keep their effect in Jupyter and none in the sandbox: one thread per notebook,
    so that a notebook asking for every core does not slow the class down (or run out its CPU time)."""
    import torch

    from lmbook.grading import watch

    set_threads, set_interop = torch.set_num_threads, torch.set_num_interop_threads
    # One thread from the start, whatever the environment says (unsandboxed, the grader's): torch's OpenMP pool
    # does not survive the fork of a hidden test's process, whose first parallel op would wait for it forever.
    set_threads(1)

    def set_num_threads(n: int) -> None:
        set_threads(1)

    def set_num_interop_threads(n: int) -> None:
        try:
            set_interop(1)
        except RuntimeError:  # already set, or work already started: as in Jupyter
            pass

    torch.set_num_threads, torch.set_num_interop_threads = set_num_threads, set_num_interop_threads
    watch.plumbing(set_num_threads, set_num_interop_threads)


# ----------------------------------------------------------------------------- values in and out


def _load(spec: dict, arrays: dict, device):
    from lmbook.grading.values import decode, wire_loader

    return decode(spec, wire_loader(arrays), device, inputs=True)


def _save(value, name: str, arrays: dict) -> dict:
    """Describe a returned value as JSON; its tensors go into ``arrays`` (sent with the step's reply)."""
    from lmbook.grading.values import encode

    return encode(value, name, arrays)


def reply_of(result: dict, cid: str, out: dict) -> dict:
    """One case's reply: the result (or what it raised), the arguments it changed, and the gradient it gave each
    input the task is trained through; tensors go into ``out``."""
    if "out" not in result:
        return {"raised": result["raised"], "changed": result["changed"]}
    reply = {"ok": _save(result["out"], cid, out), "changed": result["changed"]}
    grads = result.get("grads")
    if grads is not None:
        reply["grads"] = grads if isinstance(grads, str) else [
            None if g is None else _save(g, f"{cid}_grad{j}", out) for j, g in enumerate(grads)]
    return reply


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:500]}"


# ----------------------------------------------------------------------------- probes

_trained: dict = {}  # id(function) -> (function, result, seconds): one training run per function object
_timed_out: dict[int, object] = {}  # id(function) -> function: ran past a step's limit, not run again
_running: list = []  # the function a probe is running (told to the time limit's handler)


def _probe_call(fn, probe: dict, arrays: dict, out: dict, device, check) -> dict:
    from lmbook.grading.fence import Guarded
    from lmbook.grading.values import call_once

    results: dict = {}
    found = tampered = None
    for case in probe["cases"]:
        try:
            args = [_load(a, arrays, device) for a in case["args"]]
            kwargs = {k: _load(v, arrays, device) for k, v in case["kwargs"].items()}
            watch = Guarded(check, strict=True) if check is not None else None  # what the answer calls
            result = call_once(fn, args, kwargs, int(case.get("seed", 0)), around=watch, device=device,
                               grad_of=check.grad_of if check is not None else (),
                               stand_ins=check.builds_on if check is not None else (),
                               trained_outputs=check.trained_outputs if check is not None else 1)
            found = found or (watch.found if watch is not None else None)
            tampered = tampered or (watch.tampered if watch is not None else None)
            results[case["id"]] = reply_of(result, case["id"], out)
        except NotImplementedError:
            return {"not_implemented": True}
        except TimeLimit:
            raise
        except BaseException as e:  # noqa: BLE001 - anything the student's code raises is their result
            results[case["id"]] = {"raised": _error(e)}
    return {"cases": results, **({"forbidden": found} if found else {}), **({"tampered": tampered} if tampered else {})}


def _probe_train(fn, probe: dict, arrays: dict, out: dict, device, check) -> dict:
    import torch

    from lmbook.grading.checks import find_forbidden_use, model_logits
    from lmbook.grading.fence import Guarded

    # Training runs under the watch's Python-call hook only (torch's modes would slow it down); the model's
    # evaluation under all of it. The grader measures the time itself (the step's CPU time, from outside).
    light = Guarded(check, strict=True, torch_calls=False) if check is not None else None
    reply: dict = {}
    if id(fn) not in _trained or _trained[id(fn)][0] is not fn:
        args = [_load(a, arrays, torch.device("cpu")) for a in probe["train_args"]]
        start = time.perf_counter()
        try:
            with light or _nothing():
                result = fn(*args)
        except NotImplementedError:
            return {"not_implemented": True}
        except TimeLimit:
            raise
        except BaseException as e:  # noqa: BLE001
            return {"raised": _error(e), **_seen(light)}
        _trained[id(fn)] = (fn, result, time.perf_counter() - start, _seen(light))
    _, result, seconds, seen = _trained[id(fn)]
    reply = {"seconds": seconds, **seen}
    if not (isinstance(result, tuple) and len(result) == 2 and callable(result[0]) and type(result[1]) is int):
        return {**reply, "bad_return": type(result).__name__}
    model, window = result
    reply["window"] = window
    if check is not None and "forbidden" not in reply:
        held = find_forbidden_use(model, check)  # a ready-made model returned, not one the code trained
        if held:
            reply["forbidden"] = f"returned a model that {held}"
    contexts = _load(probe["contexts"], arrays, torch.device("cpu"))
    if not 1 <= window <= contexts.shape[1]:
        return {**reply, "bad_window": True}
    watch = Guarded(check, strict=True) if check is not None else None
    try:
        with watch or _nothing():
            logits = model_logits(model, window, contexts, device)
            logits = logits.detach().clone() if isinstance(logits, torch.Tensor) else logits
        reply["logits"] = _save(logits, probe["id"] + "_logits", out)
    except TimeLimit:
        raise
    except BaseException as e:  # noqa: BLE001
        reply["eval_raised"] = _error(e)
    for key, value in _seen(watch).items():
        reply.setdefault(key, value)
    return reply


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


def _seen(watch) -> dict:
    if watch is None:
        return {}
    return {**({"forbidden": watch.found} if watch.found else {}),
            **({"tampered": watch.tampered} if watch.tampered else {})}


def run_probe(ns: dict, probe: dict, arrays: dict, out: dict, checks) -> dict:
    from lmbook.device import get_device
    from lmbook.grading.checks import find_forbidden_use

    fn = ns.get(probe["fn"])
    if fn is None:
        return {"missing": True}
    if _timed_out.get(id(fn)) is fn:
        return {"timed_out_before": True}
    result = {}
    check = checks.checks.get(probe["task"]) if checks is not None else None
    if check is not None:
        try:  # a second opinion to the grader's static analysis of the source
            result["forbidden"] = find_forbidden_use(fn, check)
        except Exception:  # noqa: BLE001
            pass
    mode = _probe_train if probe["mode"] == "train" else _probe_call
    _running[:] = [fn]
    try:
        found = mode(fn, probe, arrays, out, get_device(), check)
    except TimeLimit:
        _timed_out[id(fn)] = fn
        raise
    finally:
        _running.clear()
    if result.get("forbidden") and "forbidden" in found:
        del found["forbidden"]  # the first opinion stands
    result.update(found)
    return result


# ----------------------------------------------------------------------------- what the student's code changed


# torch.compile adds these to the globals of every module whose frames it compiles, the watch's hooks
# included: names added beside the grader's functions, which change none of them.
_COMPILER_GLOBALS = ("__compiled_fn_", "__resume_at_", "__transformed_code_", "___")


def _fingerprint(checks) -> tuple:
    """The runner's own code and the task registry as they are now (identities, not values)."""
    from lmbook.grading import audit, fence, readymade, values, watch

    parts = []
    for module in (sys.modules[__name__], watch, fence, values, readymade, audit,
                   sys.modules["lmbook.grading.checks"]):
        for name, obj in sorted(vars(module).items()):
            if name.startswith(_COMPILER_GLOBALS):
                continue
            if isinstance(obj, types.FunctionType | type):
                parts.append((module.__name__, name, id(obj), id(getattr(obj, "__code__", None))))
            if isinstance(obj, type) and obj.__module__ == module.__name__:  # the grader's own classes' methods
                parts += [(name, k, id(v), id(v.__code__)) for k, v in sorted(vars(obj).items())
                          if isinstance(v, types.FunctionType)]
    if checks is not None:
        for task, check in sorted(checks.checks.items()):
            parts.append((task, id(check), id(check.forbidden), id(check.forbidden_attrs),
                          id(check.forbidden_modules)))
    return tuple(parts)


def _tampering_seen(expected: tuple, checks) -> str | None:
    from lmbook.grading import audit, watch

    if refused := audit.refused():
        return refused
    if not watch._hooks_in_place():
        return "the notebook replaced the grader's hook on new threads (_thread.start_new_thread) in the sandbox"
    if _fingerprint(checks) != expected:
        return "the notebook changed the grader's own code or the task definitions in the sandbox"
    return None


# ----------------------------------------------------------------------------- main loop


def _run_step(shell, step: dict, frame: dict, outputs: list, checks) -> tuple[dict, dict]:
    """Run one step under its soft time limit; return (probe results, arrays of the reply)."""
    probes: dict = {}
    out: dict = {}
    _budget.new_cell()
    # The limit is CPU time (a busy server does not cost the cell its limit); waiting counts in wall-clock time.
    signal.setitimer(signal.ITIMER_PROF, float(frame["timeout"]))
    signal.setitimer(signal.ITIMER_REAL, float(frame.get("wall_timeout", frame["timeout"])))
    real_stdout, real_stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Stream("stdout", outputs), _Stream("stderr", outputs)
    try:
        if step["kind"] == "code":
            shell.run_cell(step["source"], store_history=True)
        else:
            for probe in frame["probes"]:
                probes[probe["id"]] = run_probe(shell.user_ns, probe, frame.get("arrays", {}), out, checks)
    except TimeLimit:
        outputs.append({"output_type": "error", "ename": "TimeLimit",
                        "evalue": f"stopped after {float(frame['timeout']):.0f} s", "traceback": []})
        probes["timeout"] = True
    except BaseException as e:  # noqa: BLE001 - e.g. SystemExit from the student's code
        outputs.append({"output_type": "error", "ename": type(e).__name__, "evalue": str(e)[:500],
                        "traceback": []})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.setitimer(signal.ITIMER_PROF, 0)
        sys.stdout, sys.stderr = real_stdout, real_stderr
    return probes, out


def main(job_dir: Path) -> None:
    from lmbook.grading import confine, keeper

    job = json.loads((job_dir / "job.json").read_text())
    # Replies go to the grader through the original stdout, a pipe, and its messages come on the original
    # stdin; fds 0 and 1 are pointed at /dev/null so that nothing the student's code prints or reads uses
    # them by accident.
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    messages = os.fdopen(os.dup(0), "rb", buffering=0)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    # Before any student code: the keeper (this process) and the notebook's (a child). Per hidden cell, a pipe
    # that releases its parked child (the keeper writes) and one the child holds until it exits (the keeper reads).
    hidden = {i: (os.pipe(), os.pipe()) for i, step in enumerate(job["steps"]) if step.get("fork")}
    notebook = os.fork()
    if notebook:
        messages.close()
        for (go_read, _), (_, done_write) in hidden.values():
            os.close(go_read)
            os.close(done_write)
        stop = keeper.in_sandbox(job) and confine.supported()  # the parked children are told by their filter
        keeper.keep(notebook, replies.fileno(), {i: (go[1], done[0]) for i, (go, done) in hidden.items()}, stop)
    for (_, go_write), (done_read, _) in hidden.values():
        os.close(go_write)
        os.close(done_read)
    try:
        _notebook(job, replies, messages, {i: (go[0], done[1]) for i, (go, done) in hidden.items()})
    finally:
        os._exit(0)  # no atexit, finalizer or thread of the student's holds the keeper up


def _notebook(job: dict, replies, messages, hidden: dict[int, tuple[int, int]]) -> None:
    # Every module of the grader's, before any student code: `lmbook` loads its device helpers on first use and
    # `lmbook.grading` imports nothing (the nbgrader steps need no torch); a first import under student code
    # would run on its stack.
    import lmbook.device  # noqa: F401
    import lmbook.grading.checks  # noqa: F401
    from lmbook.grading import audit, watch
    from lmbook.grading.values import to_wire

    def emit(**kw) -> None:
        replies.write(json.dumps(kw) + "\n")
        replies.flush()

    outputs: list = []
    shell = make_shell(outputs)
    _limit_threads()
    if any(step.get("trains") for step in job["steps"]):
        # torch's optimizers import torch._dynamo when the first one is made (2.7 million calls). Made inside a
        # training task, under the watch's hook, that import took 10 of a 15 s time limit; here, before any
        # student code (which could otherwise hook the import), it is the grader's, and the task's time is
        # what the student's training computes.
        import torch._dynamo  # noqa: F401
    watch.install_thread_hooks()  # before any student code: every thread it starts is watched
    if job.get("audit_hook", True):  # off only in the sandbox's own tests: what holds were the hook defeated
        audit.refuse()  # and no process, program or raw memory for it, however reached
    checks = None
    if job.get("checks_module"):
        try:
            checks = importlib.import_module(job["checks_module"]).check
        except Exception:  # noqa: BLE001 - grading goes on without the in-sandbox second opinion
            checks = None
    expected = _fingerprint(checks)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGPROF, _on_alarm)
    emit(event="ready")
    reader = io.BufferedReader(messages, buffer_size=1 << 20)
    for i, step in enumerate(job["steps"]):
        outputs.clear()
        if step.get("fork"):
            _park(i, step, shell, checks, expected, replies, reader, emit, *hidden[i])
            continue
        line = reader.readline()
        if not line:
            return  # the grader is gone
        frame = json.loads(line)
        del line
        probes, out = _run_step(shell, step, frame, outputs, checks)
        tampered = _tampering_seen(expected, checks)
        emit(step=i, nonce=frame.pop("nonce"), event="end", outputs=list(outputs), probes=probes,
             arrays=to_wire(out), **({"tampered": tampered} if tampered else {}))
        del frame, out


def _park(i: int, step: dict, shell, checks, expected: tuple, replies, reader, emit, go: int, done: int) -> None:
    """A hidden test cell: fork a child that holds the notebook as it is at this cell, confines itself and waits
    for the keeper (:mod:`.keeper`), which releases it once the notebook's process is gone. Then it reads the
    cell's inputs (this process never holds them), runs the answer, replies and exits: no atexit, no finalizers.
    It holds ``done`` until it exits; this process goes on once it is confined."""
    from lmbook.grading import confine
    from lmbook.grading.values import to_wire

    parked_read, parked_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(parked_read)
            # Nothing of the notebook's may run while it waits: its signal handlers are put away (a signal from
            # the notebook would otherwise run them here), the time limit's own come back with the inputs.
            for sig in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP, signal.SIGPIPE}:
                try:
                    signal.signal(sig, signal.SIG_IGN if sig in (signal.SIGALRM, signal.SIGPROF) else signal.SIG_DFL)
                except (OSError, ValueError):
                    pass
            confined = confine.confine(replies.fileno(), {reader.fileno(), go, done, parked_write})
            os.close(parked_write)  # parked: the notebook goes on
            if os.read(go, 1) == b"g":
                signal.signal(signal.SIGALRM, _on_alarm)
                signal.signal(signal.SIGPROF, _on_alarm)
                frame = _own_frame(reader, i)
                if frame is not None:
                    outputs: list = []
                    probes, out = _run_step(shell, step, frame, outputs, checks)
                    tampered = _tampering_seen(expected, checks)
                    emit(step=i, nonce=frame["nonce"], event="end", outputs=[], probes=probes, arrays=to_wire(out),
                         confined=confined, **({"tampered": tampered} if tampered else {}))
                    code = 0
        finally:
            os._exit(code)
    os.close(parked_write)
    os.close(go)  # the child's now, and nobody else's once the keeper has stopped the notebook's processes
    os.close(done)
    while os.read(parked_read, 1):
        pass
    os.close(parked_read)


def _own_frame(reader, i: int) -> dict | None:
    """The grader's message for step ``i`` (one left unread by a process that ended before reading it is
    passed over)."""
    while line := reader.readline():
        try:
            frame = json.loads(line)
        except ValueError:
            continue
        if isinstance(frame, dict) and frame.get("step") == i:
            return frame
    return None

if __name__ == "__main__":
    # Run from the module under its own name: only the student's code is ``__main__`` (the call watch
    # tells the student's frames from the grader's by that name).
    from lmbook.grading import runner

    runner.main(Path(sys.argv[1]))
