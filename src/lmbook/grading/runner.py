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
first that carries that nonce. ``JOB_DIR`` holds only the student's own cells,
so nothing the grader knows is readable before the call it is for; a hidden
test cell runs in a forked child that exits when it has replied, so its inputs
and whatever the student's code did with them are gone before the next cell.
Whatever the student's code patches or forges in here can only spoil its own
answers: a reply can say no more than the student's function itself could.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import signal
import sys
import time
from pathlib import Path

MAX_STREAM_CHARS = 20_000  # per cell: a print loop cannot flood the feedback
MAX_OUTPUTS = 20


class TimeLimit(BaseException):
    """Raised in the student's code when a step runs past its time (a soft limit; the sandbox kills later)."""


def _on_alarm(signum, frame):
    raise TimeLimit("time limit for this cell reached")


class _Stream(io.TextIOBase):
    def __init__(self, name: str, sink: list):
        self.name, self.sink, self.size = name, sink, 0

    def write(self, s: str) -> int:
        if s and self.size < MAX_STREAM_CHARS:
            s = s[: MAX_STREAM_CHARS - self.size]
            self.size += len(s)
            if self.size >= MAX_STREAM_CHARS:
                s += "\n[output truncated by the grader]\n"
            if self.sink and self.sink[-1].get("name") == self.name:
                self.sink[-1]["text"] += s
            elif len(self.sink) < MAX_OUTPUTS:
                self.sink.append({"output_type": "stream", "name": self.name, "text": s})
        return len(s)


MAX_TEXT_CHARS = 20_000  # one displayed value's text
MAX_IMAGE_CHARS = 2_000_000  # one figure, base64: a plot is ~50 kB; feedback pages stay small


def _keep(data: dict) -> dict:
    # Plain text and PNG only: student HTML or JavaScript never reaches an instructor's browser.
    kept = {}
    if isinstance(data.get("text/plain"), str):
        kept["text/plain"] = data["text/plain"][:MAX_TEXT_CHARS]
    if isinstance(data.get("image/png"), str):
        if len(data["image/png"]) <= MAX_IMAGE_CHARS:
            kept["image/png"] = data["image/png"]
        else:
            kept["text/plain"] = f"<an image of {len(data['image/png']) // 1000} kB: too large for the grader to keep>"
    return kept or {"text/plain": "<output of a type the grader does not keep>"}


def make_shell(outputs: list):
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets import Type

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

        def _showtraceback(self, etype, evalue, stb):
            outputs.append({"output_type": "error", "ename": etype.__name__, "evalue": str(evalue)[:2000],
                            "traceback": [str(line)[:5000] for line in stb[-30:]]})

    return Shell.instance(colors="nocolor", history_length=0, cache_size=0)


# ----------------------------------------------------------------------------- values in and out


def _load(spec: dict, arrays: dict, device):
    from lmbook.grading.values import decode, wire_loader

    return decode(spec, wire_loader(arrays), device, inputs=True)


def _save(value, name: str, arrays: dict) -> dict:
    """Describe a returned value as JSON; its tensors go into ``arrays`` (sent with the step's reply)."""
    from lmbook.grading.values import encode

    return encode(value, name, arrays)


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:500]}"


# ----------------------------------------------------------------------------- probes

_trained: dict = {}  # id(function) -> (function, result, seconds): one training run per function object


def _probe_call(fn, probe: dict, arrays: dict, out: dict, device, check) -> dict:
    from lmbook.grading.checks import CallWatch
    from lmbook.grading.values import call_once

    results: dict = {}
    found = None
    for case in probe["cases"]:
        try:
            args = [_load(a, arrays, device) for a in case["args"]]
            kwargs = {k: _load(v, arrays, device) for k, v in case["kwargs"].items()}
            watch = CallWatch(check) if check is not None else None  # the second opinion: what the answer calls
            result = call_once(fn, args, kwargs, int(case.get("seed", 0)), around=watch)  # as in Jupyter
            found = found or (watch.found if watch is not None else None)
            if "out" in result:
                results[case["id"]] = {"ok": _save(result["out"], case["id"], out), "changed": result["changed"]}
            else:
                results[case["id"]] = {"raised": result["raised"], "changed": result["changed"]}
        except NotImplementedError:
            return {"not_implemented": True}
        except TimeLimit:
            raise
        except BaseException as e:  # noqa: BLE001 - anything the student's code raises is their result
            results[case["id"]] = {"raised": _error(e)}
    return {"cases": results, **({"forbidden": found} if found else {})}


def _probe_train(fn, probe: dict, arrays: dict, out: dict, device, check) -> dict:
    import torch

    from lmbook.grading.checks import model_logits

    # Training is timed against the task's budget, so it runs without the call watch's overhead; the static
    # analysis and the function-object check still apply.
    if id(fn) not in _trained or _trained[id(fn)][0] is not fn:
        args = [_load(a, arrays, torch.device("cpu")) for a in probe["train_args"]]
        start = time.perf_counter()
        try:
            result = fn(*args)
        except NotImplementedError:
            return {"not_implemented": True}
        except TimeLimit:
            raise
        except BaseException as e:  # noqa: BLE001
            return {"raised": _error(e)}
        _trained[id(fn)] = (fn, result, time.perf_counter() - start)
    _, result, seconds = _trained[id(fn)]
    reply = {"seconds": seconds}
    if not (isinstance(result, tuple) and len(result) == 2 and callable(result[0]) and type(result[1]) is int):
        return {**reply, "bad_return": type(result).__name__}
    model, window = result
    reply["window"] = window
    contexts = _load(probe["contexts"], arrays, torch.device("cpu"))
    if not 1 <= window <= contexts.shape[1]:
        return {**reply, "bad_window": True}
    try:
        reply["logits"] = _save(model_logits(model, window, contexts, device), probe["id"] + "_logits", out)
    except TimeLimit:
        raise
    except BaseException as e:  # noqa: BLE001
        reply["eval_raised"] = _error(e)
    return reply


def run_probe(ns: dict, probe: dict, arrays: dict, out: dict, checks) -> dict:
    from lmbook.device import get_device
    from lmbook.grading.checks import find_forbidden_use

    fn = ns.get(probe["fn"])
    if fn is None:
        return {"missing": True}
    result = {}
    check = checks.checks.get(probe["task"]) if checks is not None else None
    if check is not None:
        try:  # a second opinion to the grader's static analysis of the source
            result["forbidden"] = find_forbidden_use(fn, check)
        except Exception:  # noqa: BLE001
            pass
    mode = _probe_train if probe["mode"] == "train" else _probe_call
    found = mode(fn, probe, arrays, out, get_device(), check)
    if result.get("forbidden") and "forbidden" in found:
        del found["forbidden"]  # the first opinion stands
    result.update(found)
    return result


# ----------------------------------------------------------------------------- main loop


def _run_step(shell, step: dict, frame: dict, outputs: list, checks) -> tuple[dict, dict]:
    """Run one step under its soft time limit; return (probe results, arrays of the reply)."""
    probes: dict = {}
    out: dict = {}
    signal.setitimer(signal.ITIMER_REAL, float(frame["timeout"]))
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
        sys.stdout, sys.stderr = real_stdout, real_stderr
    return probes, out


def main(job_dir: Path) -> None:
    from lmbook.grading.values import to_wire

    job = json.loads((job_dir / "job.json").read_text())
    # Replies go to the grader through the original stdout, a pipe, and its messages come on the original
    # stdin; fds 0 and 1 are pointed at /dev/null so that nothing the student's code prints or reads uses
    # them by accident.
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    messages = os.fdopen(os.dup(0), "rb", buffering=0)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)

    def emit(**kw) -> None:
        replies.write(json.dumps(kw) + "\n")
        replies.flush()

    outputs: list = []
    shell = make_shell(outputs)
    checks = None
    if job.get("checks_module"):
        try:
            checks = importlib.import_module(job["checks_module"]).check
        except Exception:  # noqa: BLE001 - grading goes on without the in-sandbox second opinion
            checks = None
    signal.signal(signal.SIGALRM, _on_alarm)
    emit(event="ready")
    reader = io.BufferedReader(messages, buffer_size=1 << 20)
    for i, step in enumerate(job["steps"]):
        line = reader.readline()
        if not line:
            return  # the grader is gone
        frame = json.loads(line)
        outputs.clear()
        if not frame.get("fork"):
            probes, out = _run_step(shell, step, frame, outputs, checks)
            emit(step=i, nonce=frame["nonce"], event="end", outputs=list(outputs), probes=probes,
                 arrays=to_wire(out))
            continue
        # A hidden test cell: its inputs live only in this child, which replies and exits (no atexit or
        # finalizers: os._exit). The parent, which goes on with the next cells, never holds them.
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                probes, out = _run_step(shell, step, frame, outputs, checks)
                emit(step=i, nonce=frame["nonce"], event="end", outputs=[], probes=probes, arrays=to_wire(out))
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if status != 0:  # the child died before it replied
            emit(step=i, nonce=frame["nonce"], event="end", outputs=[], arrays={},
                 probes={"crashed": f"the process running this cell ended abnormally (wait status {status})"})


if __name__ == "__main__":
    # Run from the module under its own name: only the student's code is ``__main__`` (the call watch
    # tells the student's frames from the grader's by that name).
    from lmbook.grading import runner

    runner.main(Path(sys.argv[1]))
