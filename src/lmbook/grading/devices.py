"""Which device student code is graded on: the GPU where it works in the sandbox, else the CPU, said in one line.

The grader's device is ``lmbook-grade --device``, else ``LMBOOK_DEVICE``, else CUDA where the machine has NVIDIA's
device nodes (``/dev/nvidiactl``: without them no process sees a GPU), else the CPU. A GPU is used only where a
notebook can use it in the sandbox as the grader runs notebooks: the sandbox gets the NVIDIA device nodes (each
bound alone, nothing else of the host's ``/dev``) and the driver's folders (read-only), and a probe run there uses
the device in the notebook's process and then in a hidden test's confined, forked process. Where anything of
that fails (no device nodes, Apple's MPS, which no Linux sandbox can reach, a CPU build of torch, or CUDA, which
does not survive ``fork``), the grader prints one line saying why and grades on the CPU: the device never stops
a class from being graded. The choice is put into ``LMBOOK_DEVICE`` of the grader's own process, so that the
references computed outside the sandbox, nbgrader's steps and the sandbox all use the same device.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

DEV = Path("/dev")
NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")  # besides /dev/nvidia<N> and /dev/nvidia-caps/*
GPU_NODE = re.compile(r"nvidia\d+")
DRIVER_FOLDERS = ("/usr/local/nvidia",)  # where NVIDIA's container runtime puts the driver's libraries
PROBE_TIMEOUT_S = 180.0

_settled: dict[tuple, str] = {}


def nvidia_nodes(dev: Path = DEV) -> list[str]:
    """The NVIDIA device nodes under ``dev``, relative to it: none unless ``nvidiactl`` is there."""
    if not (dev / "nvidiactl").exists():
        return []
    names = [n for n in NODES if (dev / n).exists()]
    try:
        gpus = sorted((n for n in os.listdir(dev) if GPU_NODE.fullmatch(n)), key=lambda n: int(n[6:]))
    except OSError:
        gpus = []
    caps = dev / "nvidia-caps"
    extra = [f"nvidia-caps/{n}" for n in sorted(os.listdir(caps))] if caps.is_dir() else []
    return [*names, *gpus, *extra]


def driver_folders(bound: list[str]) -> list[str]:
    """Folders holding the NVIDIA driver's user-space libraries that the sandbox does not bind already:
    NVIDIA's container folder, and the folders of ``LD_LIBRARY_PATH`` that hold ``libcuda.so*``."""
    found = [d for d in DRIVER_FOLDERS if os.path.isdir(d)]
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if d and os.path.isdir(d) and d not in found:
            try:
                if any(n.startswith(("libcuda.so", "libnvidia-ml.so")) for n in os.listdir(d)):
                    found.append(d)
            except OSError:
                pass
    inside = [Path(b) for b in bound]
    return [d for d in found if not any(Path(d) == b or b in Path(d).parents for b in inside)]


def library_path(folders: list[str]) -> str:
    """The grader's ``LD_LIBRARY_PATH`` entries that lie in the driver's folders (the sandbox clears the rest)."""
    keep = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
            if d and any(Path(d) == Path(f) or Path(f) in Path(d).parents for f in folders)]
    return os.pathsep.join(keep)


def requested(flag: str | None = None, dev: Path = DEV) -> tuple[str, str]:
    """(the device asked for, who asked): ``--device``, else ``LMBOOK_DEVICE``, else CUDA where the machine has
    NVIDIA's device nodes (torch sees a GPU only through them; asking torch itself here would start CUDA's
    driver in the grader, whose forked workers could then not use CUDA), else the CPU."""
    if flag:
        return flag.strip(), f"--device {flag.strip()}"
    env = os.environ.get("LMBOOK_DEVICE", "").strip()
    if env:
        return env, f"LMBOOK_DEVICE={env}"
    if sys.platform.startswith("linux") and nvidia_nodes(dev):
        return "cuda", "this machine's GPU"
    return "cpu", ""


def settle(flag: str | None = None, use_sandbox: bool = True, *, dev: Path = DEV, probe=None) -> str:
    """Choose the device the class is graded on, print the one line when it is not the one asked for, and put
    it in ``LMBOOK_DEVICE`` (this process's, which the grader's workers and nbgrader's steps inherit).
    Once per process and request: grading several assignments asks once."""
    device, who = requested(flag, dev)
    key = (device, who, use_sandbox, str(dev))
    if key not in _settled:
        chosen, why = choose(device, use_sandbox, dev=dev, probe=probe)
        if why:
            print(f"lmbook-grade: {who} but {why}: grading on the CPU", file=sys.stderr, flush=True)
        _settled[key] = chosen
    if who or _settled[key] != "cpu":  # nothing asked, nothing found: the environment stays as it was
        os.environ["LMBOOK_DEVICE"] = _settled[key]
    return _settled[key]


def choose(device: str, use_sandbox: bool = True, *, dev: Path = DEV, probe=None) -> tuple[str, str | None]:
    """(the device to grade on, why not the one asked for, or None)."""
    kind = device.split(":")[0]
    if kind == "cpu":
        return "cpu", None
    if kind not in ("cuda", "mps"):
        return "cpu", "that is no device the sandbox can use (cpu, cuda)"
    if use_sandbox and kind == "mps":
        return "cpu", "the sandbox has no GPU (Apple's MPS cannot be reached from a Linux sandbox)"
    if use_sandbox and not nvidia_nodes(dev):
        return "cpu", f"the sandbox has no GPU (no {dev / 'nvidiactl'})"
    why = (probe or run_probe)(device, use_sandbox, dev)
    return (device, None) if why is None else ("cpu", why)


def run_probe(device: str, use_sandbox: bool = True, dev: Path = DEV) -> str | None:
    """Use ``device`` where student code runs, as the grader runs it; None where it works, else why not."""
    import tempfile

    from . import sandbox

    limits = sandbox.Limits()
    with tempfile.TemporaryDirectory(prefix="lmbook-grade-device-") as tmp:
        os.chmod(tmp, 0o755)
        cmd = sandbox.command(None, limits, use_sandbox, device=device, dev=dev,
                              program=[sys.executable, "-m", "lmbook.grading.devices", device])
        env = None if use_sandbox else {**os.environ, "LMBOOK_DEVICE": device}
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, cwd=tmp, env=env)
        except subprocess.TimeoutExpired:
            return f"using {device} in the sandbox did not finish within {PROBE_TIMEOUT_S:.0f} s"
        except OSError as e:
            return f"the sandbox could not be started to try {device} ({e})"
    last = (r.stdout.strip().splitlines() or [""])[-1]
    try:
        answer = json.loads(last)
    except ValueError:
        tail = " / ".join((r.stderr.strip().splitlines() or ["no output"])[-2:])
        return f"{device} could not be tried in the sandbox (exit {r.returncode}: {tail[:300]})"
    if answer.get("ok"):
        return None
    return f"student code cannot use it in the sandbox ({answer.get('why', '?')[:300]})"


def _use(device: str) -> None:
    import torch

    x = torch.arange(4.0, device=device)
    if float((x * 2).sum()) != 12.0:
        raise RuntimeError(f"a sum on {device} came out wrong")


def _probe(device: str) -> dict:
    """In the sandbox: the notebook's process uses the device, then a hidden test's confined, forked one does."""
    try:
        _use(device)
    except Exception as e:  # noqa: BLE001 - whatever stops it is the answer
        return {"ok": False, "why": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    from . import confine

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        answer = {"ok": True}
        try:
            confine.confine(write, set())
            _use(device)
        except BaseException as e:  # noqa: BLE001
            answer = {"ok": False, "why": "in a hidden test's process: "
                                          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        try:
            os.write(write, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.waitpid(pid, 0)
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        return {"ok": False, "why": "a hidden test's process died using it"}


if __name__ == "__main__":
    print(json.dumps(_probe(sys.argv[1])), flush=True)
