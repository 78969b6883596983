"""The device student code is graded on: the GPU where the sandbox can use it (its device nodes bound, nothing
else of /dev), else the CPU, said in one line; the device never stops a class from being graded. And the sandbox
finds the lmbook the grader imported, also where it is importable only through ``PYTHONPATH``. These run on the
CPU: device nodes are stood in for by plain files."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import lmbook
from lmbook.grading import devices, sandbox

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))


def fake_dev(tmp_path: Path, *names: str) -> Path:
    dev = tmp_path / "dev"
    dev.mkdir(parents=True)
    for name in names:
        (dev / name).parent.mkdir(parents=True, exist_ok=True)
        (dev / name).write_text("")
    return dev


def dev_binds(cmd: list[str]) -> list[tuple[str, str]]:
    return [(cmd[i + 1], cmd[i + 2]) for i, arg in enumerate(cmd) if arg in ("--dev-bind", "--dev-bind-try")]


def setenv(cmd: list[str]) -> dict[str, str]:
    return {cmd[i + 1]: cmd[i + 2] for i, arg in enumerate(cmd) if arg == "--setenv"}


def never(*args):
    raise AssertionError("the device was tried in the sandbox, where nothing could use it")


def test_a_cuda_request_binds_exactly_the_nvidia_device_nodes(tmp_path):
    dev = fake_dev(tmp_path, "nvidiactl", "nvidia0", "nvidia1", "nvidia-uvm", "nvidia-caps/nvidia-cap1",
                   "nvidia-modeset", "nvme0", "sda", "kvm", "nvidiafoo")
    cmd = sandbox.command(tmp_path, sandbox.Limits(), device="cuda", dev=dev)
    nodes = ("nvidiactl", "nvidia0", "nvidia1", "nvidia-uvm", "nvidia-caps/nvidia-cap1")
    assert sorted(dev_binds(cmd)) == sorted((str(dev / n), f"/dev/{n}") for n in nodes), cmd
    assert {a for a in cmd if a.startswith(str(dev))} == {str(dev / n) for n in nodes}, \
        "nothing else of the host's devices is bound"
    assert setenv(cmd)["LMBOOK_DEVICE"] == "cuda"
    assert cmd.index("--dev") < cmd.index("--dev-bind-try"), "the nodes go into the sandbox's own /dev"


def test_a_cuda_request_without_device_nodes_binds_none_and_runs_on_the_cpu(tmp_path):
    dev = fake_dev(tmp_path, "nvme0", "nvidia0")  # no nvidiactl: no GPU can be used
    for device in ("cuda", "cuda:1", "mps"):
        cmd = sandbox.command(tmp_path, sandbox.Limits(), device=device, dev=dev)
        assert dev_binds(cmd) == [], cmd
        assert setenv(cmd)["LMBOOK_DEVICE"] == "cpu"
    cpu = sandbox.command(tmp_path, sandbox.Limits(), device="cpu", dev=fake_dev(tmp_path / "x", "nvidiactl"))
    assert dev_binds(cpu) == [] and setenv(cpu)["LMBOOK_DEVICE"] == "cpu", "the CPU needs no device node"


@pytest.mark.parametrize("device, node", [("cuda", "no .*/dev/nvidiactl"), ("mps", "Apple's MPS")])
def test_without_a_gpu_in_the_sandbox_one_line_says_so_and_the_cpu_is_used(tmp_path, monkeypatch, capsys, device,
                                                                          node):
    monkeypatch.setenv("LMBOOK_DEVICE", device)
    monkeypatch.setattr(devices, "_settled", {})
    assert devices.settle(None, True, dev=fake_dev(tmp_path), probe=never) == "cpu"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"lmbook-grade: LMBOOK_DEVICE={device} but the sandbox has no "
                                                   "GPU"), err
    assert err.rstrip().endswith(": grading on the CPU"), err
    assert re.search(node, err), err
    assert os.environ["LMBOOK_DEVICE"] == "cpu", "the sandbox and the references use the CPU"
    cmd = sandbox.command(tmp_path, sandbox.Limits(), dev=fake_dev(tmp_path / "x", "nvidiactl", "nvidia0"))
    assert setenv(cmd)["LMBOOK_DEVICE"] == "cpu" and dev_binds(cmd) == []
    assert devices.settle(None, True, dev=fake_dev(tmp_path / "y"), probe=never) == "cpu"
    assert capsys.readouterr().err == "", "said once"


def test_with_device_nodes_the_probe_in_the_sandbox_decides(tmp_path, monkeypatch, capsys):
    dev = fake_dev(tmp_path, "nvidiactl", "nvidia0", "nvidia-uvm")
    monkeypatch.delenv("LMBOOK_DEVICE", raising=False)
    monkeypatch.setattr(devices, "_settled", {})
    tried = []
    assert devices.settle(None, True, dev=dev, probe=lambda d, s, v: tried.append(d)) == "cuda", \
        "with no request, the machine's GPU"
    assert tried == ["cuda"] and capsys.readouterr().err == "" and os.environ["LMBOOK_DEVICE"] == "cuda"
    monkeypatch.setattr(devices, "_settled", {})
    why = "student code cannot use it in the sandbox (in a hidden test's process: RuntimeError: CUDA error)"
    assert devices.settle("cuda", True, dev=dev, probe=lambda *a: why) == "cpu"
    assert capsys.readouterr().err == f"lmbook-grade: --device cuda but {why}: grading on the CPU\n"
    monkeypatch.setenv("LMBOOK_DEVICE", "cuda")
    monkeypatch.setattr(devices, "_settled", {})
    assert devices.settle("cpu", True, dev=dev, probe=never) == "cpu", "--device cpu is obeyed, silently"
    assert capsys.readouterr().err == ""


def test_nothing_asked_and_no_gpu_leaves_the_environment_alone(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("LMBOOK_DEVICE", raising=False)
    monkeypatch.setattr(devices, "_settled", {})
    assert devices.settle(None, True, dev=fake_dev(tmp_path), probe=never) == "cpu"
    assert "LMBOOK_DEVICE" not in os.environ and capsys.readouterr().err == ""


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_the_probe_uses_the_device_in_the_sandbox_and_in_a_hidden_tests_confined_process(tmp_path):
    assert devices.run_probe("cpu", True) is None, "the CPU works where student code runs"
    if not __import__("torch").cuda.is_available():
        why = devices.run_probe("cuda", True, fake_dev(tmp_path, "nvidiactl", "nvidia0", "nvidia-uvm"))
        assert why and why.startswith("student code cannot use it in the sandbox ("), why


def test_lmbook_grade_has_a_device_option():
    r = subprocess.run([sys.executable, "-m", "lmbook.autograde", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--device {cpu,cuda}" in r.stdout, r.stdout
    assert "graded on" in r.stdout.split("--device", 2)[2][:400], "the help says what happens without a GPU"


# ----------------------------------------------------------------------------- lmbook only through PYTHONPATH


def test_lmbook_outside_site_packages_reaches_the_sandbox_as_its_pythonpath(tmp_path, monkeypatch):
    folder = str(Path(lmbook.__file__).resolve().parent.parent)
    cmd = sandbox.command(tmp_path, sandbox.Limits())
    if folder in {str(Path(sysconfig.get_paths()[k]).resolve()) for k in ("purelib", "platlib")}:
        assert "PYTHONPATH" not in setenv(cmd), "installed in site-packages: found without it"
    else:
        assert setenv(cmd)["PYTHONPATH"] == folder
        assert any(cmd[i:i + 3] == ["--ro-bind", folder, folder] for i in range(len(cmd))), "bound read-only"
    site = str(Path(sysconfig.get_paths()["purelib"]).resolve())
    monkeypatch.setattr(lmbook, "__file__", f"{site}/lmbook/__init__.py")
    assert "PYTHONPATH" not in setenv(sandbox.command(tmp_path, sandbox.Limits()))


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_the_sandbox_imports_the_lmbook_the_grader_imported_and_cannot_write_to_it(tmp_path, monkeypatch):
    copy = tmp_path / "elsewhere"
    shutil.copytree(Path(lmbook.__file__).resolve().parent, copy / "lmbook",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for p in [tmp_path, *copy.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    os.chmod(copy, 0o755)
    (copy / "lmbook" / "grading" / "runner.py").write_text(
        (copy / "lmbook" / "grading" / "runner.py").read_text() + "\nCOPY = True\n")
    monkeypatch.setattr(lmbook, "__file__", str(copy / "lmbook" / "__init__.py"))
    job = tmp_path / "job"
    job.mkdir()
    os.chmod(job, 0o755)
    cells = ["import sys\nprint(sys.modules['lmbook.grading.runner'].COPY, sys.modules['lmbook'].__file__)",
             f"open({str(copy / 'lmbook' / 'planted.py')!r}, 'w')"]
    (job / "job.json").write_text(json.dumps({"checks_module": None, "steps": [
        {"kind": "code", "source": c, "fork": False} for c in cells]}))
    result = sandbox.run(job, [sandbox.Step(60), sandbox.Step(60)], sandbox.Limits())
    first, second = ("".join(o.get("text", "") + o.get("evalue", "") for o in (result.step_end(i) or {}).get(
        "outputs", [])) for i in (0, 1))
    assert first.strip() == f"True {copy / 'lmbook' / '__init__.py'}", (first, result.stderr[-2000:])
    assert "Read-only file system" in second or "Permission denied" in second, second
    assert not (copy / "lmbook" / "planted.py").exists()


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_lmbook_grade_asked_for_cuda_without_a_gpu_in_the_sandbox_grades_the_class_on_the_cpu(tmp_path):
    """Before: the reference solution failed in the sandbox ('torch sees no CUDA device') and nobody was graded."""
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("this machine has a GPU's device nodes")
    from make_samples import make_samples

    subs, out = tmp_path / "subs", tmp_path / "out"
    for name in make_samples(subs, "ch05"):
        if name not in ("correct", "blank"):
            shutil.rmtree(subs / name)
    env = {**os.environ, "LMBOOK_DEVICE": "cuda",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    r = subprocess.run([sys.executable, "-m", "lmbook.autograde", str(subs), "--assignment", "ch05", "--out",
                        str(out), "--course", str(ROOT / "autograder"), "--workers", "1"],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    line = ("lmbook-grade: LMBOOK_DEVICE=cuda but the sandbox has no GPU (no /dev/nvidiactl): grading on the CPU")
    assert (r.stdout + r.stderr).count(line) == 1, r.stderr[-3000:]
    assert (r.stdout + r.stderr).count("grading on the CPU") == 1, "one line"
    with (out / "grades.csv").open(newline="") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    assert float(rows["correct"]["total"]) == float(rows["correct"]["max"]) > 0, rows["correct"]
    assert float(rows["blank"]["total"]) == 0, rows["blank"]
