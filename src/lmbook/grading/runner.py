"""Run one student's notebook inside the sandbox and record what their code computes.

    python -m lmbook.grading.runner JOB_DIR OUT_DIR

This is the only grading code that runs next to student code, so it decides
nothing: it executes the student's cells in order (in an IPython shell, as a
kernel would), and where the notebook has a test cell it calls the student's
function on the inputs the grader wrote to ``JOB_DIR`` and saves what came
back to ``OUT_DIR`` as plain ``.npy`` arrays and JSON. The verdicts are made
outside the sandbox by :mod:`lmbook.grading.judge`, which never unpickles
anything and recomputes every reference itself. Whatever the student's code
patches in here can only spoil their own outputs.

Events go to the grader through a pipe as they happen, so a run that is
killed (timeout, memory, a crash) still tells the grader how far it got.
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


def _keep(data: dict) -> dict:
    # Plain text and PNG only: student HTML or JavaScript never reaches an instructor's browser.
    kept = {k: data[k] for k in ("text/plain", "image/png") if isinstance(data.get(k), str)}
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


def _load(spec: dict, job_dir: Path, device):
    import numpy as np

    from lmbook.grading.values import decode

    return decode(spec, lambda name: np.load(job_dir / name, allow_pickle=False), device, inputs=True)


def _save(value, name: str, out_dir: Path) -> dict:
    """Describe a returned value as JSON, with its tensors written to ``.npy`` files."""
    import numpy as np

    from lmbook.grading.values import encode

    arrays: dict = {}
    spec = encode(value, name, arrays)
    for file, arr in arrays.items():
        np.save(out_dir / file, arr, allow_pickle=False)
    return spec


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:500]}"


# ----------------------------------------------------------------------------- probes

_trained: dict = {}  # id(function) -> (function, result, seconds): one training run per function object


def _probe_call(fn, probe: dict, job_dir: Path, out_dir: Path, device) -> dict:
    from lmbook.grading.values import call_once

    results = {}
    for case in probe["cases"]:
        try:
            args = [_load(a, job_dir, device) for a in case["args"]]
            kwargs = {k: _load(v, job_dir, device) for k, v in case["kwargs"].items()}
            result = call_once(fn, args, kwargs, int(case.get("seed", 0)))  # as in the student's Jupyter run
            if "out" in result:
                results[case["id"]] = {"ok": _save(result["out"], case["id"], out_dir), "changed": result["changed"]}
            else:
                results[case["id"]] = {"raised": result["raised"], "changed": result["changed"]}
        except NotImplementedError:
            return {"not_implemented": True}
        except TimeLimit:
            raise
        except BaseException as e:  # noqa: BLE001 - anything the student's code raises is their result
            results[case["id"]] = {"raised": _error(e)}
    return {"cases": results}


def _probe_train(fn, probe: dict, job_dir: Path, out_dir: Path, device) -> dict:
    import torch

    from lmbook.grading.checks import model_logits

    if id(fn) not in _trained or _trained[id(fn)][0] is not fn:
        args = [_load(a, job_dir, torch.device("cpu")) for a in probe["train_args"]]
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
    out = {"seconds": seconds}
    if not (isinstance(result, tuple) and len(result) == 2 and callable(result[0]) and type(result[1]) is int):
        return {**out, "bad_return": type(result).__name__}
    model, window = result
    out["window"] = window
    contexts = _load({"tensor": probe["contexts"]}, job_dir, torch.device("cpu"))
    if not 1 <= window <= contexts.shape[1]:
        return {**out, "bad_window": True}
    try:
        out["logits"] = _save(model_logits(model, window, contexts, device), probe["id"] + "_logits", out_dir)
    except TimeLimit:
        raise
    except BaseException as e:  # noqa: BLE001
        out["eval_raised"] = _error(e)
    return out


def run_probe(ns: dict, probe: dict, job_dir: Path, out_dir: Path, checks) -> dict:
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
    result.update(mode(fn, probe, job_dir, out_dir, get_device()))
    return result


# ----------------------------------------------------------------------------- main loop


def main(job_dir: Path, out_dir: Path) -> None:
    job = json.loads((job_dir / "job.json").read_text())
    # Events go to the grader through the original stdout, a pipe; fd 1 is pointed at /dev/null so that
    # nothing the student's code prints can land there by accident. After each step the runner waits for
    # the grader's acknowledgement on stdin: by then the grader holds a copy of that step's outputs.
    events = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    acks = os.fdopen(os.dup(0), "rb", buffering=0)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)

    def emit(**kw):
        events.write(json.dumps(kw) + "\n")
        events.flush()

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
    real_stdout, real_stderr = sys.stdout, sys.stderr
    for i, step in enumerate(job["steps"]):
        emit(step=i, event="start")
        outputs.clear()
        sys.stdout, sys.stderr = _Stream("stdout", outputs), _Stream("stderr", outputs)
        probes = {}
        signal.setitimer(signal.ITIMER_REAL, step["timeout"])
        try:
            if step["kind"] == "code":
                shell.run_cell(step["source"], store_history=True)
            else:
                for probe in step["probes"]:
                    probes[probe["id"]] = run_probe(shell.user_ns, probe, job_dir, out_dir, checks)
        except TimeLimit:
            outputs.append({"output_type": "error", "ename": "TimeLimit",
                            "evalue": f"stopped after {step['timeout']:.0f} s", "traceback": []})
            probes["timeout"] = True
        except BaseException as e:  # noqa: BLE001 - e.g. SystemExit from the student's code
            outputs.append({"output_type": "error", "ename": type(e).__name__, "evalue": str(e)[:500],
                            "traceback": []})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.stdout, sys.stderr = real_stdout, real_stderr
        emit(step=i, event="end", outputs=list(outputs), probes=probes)
        if not acks.read(1):
            return  # the grader is gone
    emit(event="done")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
