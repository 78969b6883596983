"""`make gpu-check` (bench/gpu_check.py) keeps working where no GPU is: its dry run goes through the same stages
on the CPU, at their smallest, and writes the same rows; without CUDA and without --dry-run it refuses in one line.
No timing is asserted."""

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gpu_check.py"
PUBLISHED = (ROOT / "bench" / "results.json", ROOT / "BENCHMARKS.md")


def gpu_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)


def digest(paths) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_without_cuda_it_says_so_in_one_line_and_fails():
    before = digest(PUBLISHED)
    r = gpu_check()
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout.startswith("gpu-check: no CUDA GPU") and r.stdout.count("\n") == 1, r.stdout
    assert "--dry-run" in r.stdout, "the line should say how to try the plan without a GPU"
    assert digest(PUBLISHED) == before, "a refused run must not touch the published results"


def test_a_missing_package_is_named_in_one_line(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("lmbook_gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "NEEDS", (*module.NEEDS, "no_such_package_for_lmbook"))
    assert module.main(["--dry-run"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("gpu-check: missing Python packages: no_such_package_for_lmbook;"), out
    assert out.count("\n") == 1, out


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    before = digest(PUBLISHED)
    r = gpu_check("--dry-run", "--out", str(out))
    assert digest(PUBLISHED) == before, "a dry run must leave the published results alone"
    return r, json.loads((out / "results.json").read_text()), (out / "BENCHMARKS.md").read_text()


@pytest.mark.slow
def test_the_dry_run_prints_the_whole_plan_and_passes(dry):
    r, _, _ = dry
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    pages = [p.stem for p in [*(ROOT / "book").glob("ch*.md"), *(ROOT / "book").glob("appendix*.md")]]
    full = r.stdout.split("on a GPU, the same stages select:", 1)[1].split("make gpu-check --dry-run", 1)[0]
    assert all(stem in full for stem in pages), f"the plan leaves out pages: {full}"
    assert "tests/test_exercises.py::test_solution_notebook_runs_and_passes_every_test" in full
    for step in ("1. tests, LMBOOK_DEVICE=cpu", "2. grader", "3. pages"):
        assert step in r.stdout, r.stdout[:3000]
    assert "gpu-check passed" in r.stdout


@pytest.mark.slow
def test_the_dry_run_records_every_stage(dry):
    _, results, _ = dry
    check = results["gpu_check"]
    assert check["dry_run"] and check["device"] == "cpu" and len(check["commit"]) == 40
    tests, grader, pages = (check["stages"][s] for s in ("tests", "grader", "pages"))
    assert tests["ok"] and tests["counts"].get("PASSED", 0) >= 3 and not tests["failed"], tests
    assert grader["ok"] and "correct sample full marks" in grader["summary"], grader
    assert set(grader["totals"]) == {"correct", "blank"}, grader
    (stem,) = pages["measured"]
    row = results["chapters"][stem]["cuda"]  # the dry run fills the CUDA slot, marked as the CPU's
    assert row["device"].startswith("cpu") and row["seconds"]["median"] > 0 and row["models"], row
    assert "gpu_peak_mib" not in row, "the CPU has no GPU memory to report"


@pytest.mark.slow
def test_the_dry_runs_report_says_it_was_no_gpu(dry):
    _, results, text = dry
    gpu = text.split("## On a GPU", 1)[1].split("\n## ", 1)[0]
    assert "a dry run on the CPU, not a GPU" in gpu, gpu
    (stem,) = results["gpu_check"]["stages"]["pages"]["measured"]
    assert f"| {stem} | " in gpu and "| not measured |" in gpu, gpu  # the measured page, and the others not


def test_a_page_still_running_when_time_is_up_is_stopped_and_its_row_says_so(tmp_path):
    # 25 s in all, 10 of them kept for writing: the page starts within seconds (on a loaded machine too) and gets
    # less than 15 s, far less than the appendix needs (minutes on the CPU).
    r = gpu_check("--dry-run", "--stages", "pages", "--pages", "appendix_gpu", "--budget", "25", "--out", str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "appendix_gpu stopped, out of time" in r.stdout, r.stdout
    results = json.loads((tmp_path / "results.json").read_text())
    assert "cuda" not in results["chapters"]["appendix_gpu"]
    why = results["gpu_check"]["stages"]["pages"]["not_measured"]["appendix_gpu"]
    assert why.startswith("stopped after") and why.endswith("out of time"), why
    assert f"| appendix_gpu | not measured ({why}) |" in (tmp_path / "BENCHMARKS.md").read_text()


def test_an_unknown_page_is_named(tmp_path):
    r = gpu_check("--dry-run", "--pages", "ch99_nothing", "--out", str(tmp_path))
    assert r.returncode == 2 and "no such page: ch99_nothing" in r.stdout, r.stdout + r.stderr


def test_make_gpu_check_runs_the_script_with_the_given_python_and_arguments():
    r = subprocess.run(["make", "-n", "gpu-check", "GPU_PYTHON=python3", "GPU_CHECK_ARGS=--dry-run"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines() == ["python3 bench/gpu_check.py --dry-run"], (
        "with GPU_PYTHON the target should set nothing up (a GPU machine's own Python) and run only the check")
