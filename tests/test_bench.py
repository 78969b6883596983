"""The benchmark scripts work (at their smallest settings) and report every figure. No timing is asserted."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "run.py"), "--tiny", "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), (out / "BENCHMARKS.md").read_text()


def test_a_chapter_is_measured_with_time_memory_and_models(tiny):
    results, _ = tiny
    assert set(results["chapters"]) == {"ch01_feedforward_lm"}  # --tiny measures one; full runs measure all
    for chapter, by_device in results["chapters"].items():
        cpu = by_device["cpu"]
        assert cpu["seconds"]["median"] > 0 and cpu["peak_rss_mib"]["median"] > 50, chapter
        assert cpu["models"], f"{chapter}: no trained model's result was read from the chapter's glue"


def test_chapter_one_results_are_the_chapters_own_and_respect_the_floor(tiny):
    models = tiny[0]["chapters"]["ch01_feedforward_lm"]["cpu"]["models"]
    floor = models["floor_ppl"]["median"]
    assert models["best_ppl"]["ratio_to_floor"] == pytest.approx(models["best_ppl"]["median"] / floor)
    assert floor < models["best_ppl"]["median"] < models["bigram_ppl"]["median"]


def test_builtin_comparisons_and_grading_throughput_are_reported(tiny):
    results, text = tiny
    assert {"log_softmax", "cross_entropy"} <= set(results["builtins"])
    assert all(e["ratio"] > 0 for e in results["builtins"].values())
    g = results["grading"]
    assert g["lmbook_grade"]["per_minute"] > 0 and g["nbgrader_autograde"]["per_minute"] > 0
    for heading in ("## Chapter notebooks", "## Trained models", "## From scratch", "## Grading", "### Every exercise"):
        assert heading in text


def test_an_exercise_is_graded_from_its_samples(tiny):
    (e,) = tiny[0]["grading_each_exercise"].values()  # --tiny grades one exercise; full runs grade every one
    assert e["correct_full_marks"] and e["blank_zero"], e
    assert e["submissions"] == len(e["samples"]) >= 4 and e["per_submission_s"] > 0


def test_published_results_cover_every_chapter_the_book_has():
    published = json.loads((ROOT / "bench" / "results.json").read_text())
    assert published["mode"] == "full", "bench/results.json should come from a full `make bench` run"
    pages = [*(ROOT / "book").glob("ch*.md"), *(ROOT / "book").glob("appendix*.md")]
    missing = {p.stem for p in pages} - set(published["chapters"])
    assert not missing, f"not benchmarked: {missing}; run `make bench-chapters CHAPTERS=...`"
    for chapter, by_device in published["chapters"].items():
        assert by_device["cpu"]["models"], f"{chapter}: no headline results (bench/run.py HEADLINES)"
    assert (ROOT / "BENCHMARKS.md").read_text().startswith("# lmbook benchmarks")


def test_published_results_hold_every_headline_the_chapters_define():
    sys.path.insert(0, str(ROOT / "bench"))  # run.py imports its neighbour worktree.py
    try:
        spec = importlib.util.spec_from_file_location("lmbook_bench_run", ROOT / "bench" / "run.py")
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    published = json.loads((ROOT / "bench" / "results.json").read_text())["chapters"]
    for chapter, rows in bench.HEADLINES.items():
        measured = set(published.get(chapter, {}).get("cpu", {}).get("models", {}))
        missing = [key for _, key in rows if key not in measured]
        assert not missing, f"{chapter}: {missing} not benchmarked; run `make bench-chapters CHAPTERS={chapter}`"
