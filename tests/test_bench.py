"""The benchmark scripts work (at their smallest settings) and report every figure. No timing is asserted:
the arithmetic that turns measurements into rows (extrapolations, budgets, what a row says it measured) is
checked on fabricated measurements, the scripts themselves on tiny runs."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def load_bench(name: str):
    """bench/<name>.py as a module (bench/ is not a package; run.py imports its neighbour worktree.py)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location(f"lmbook_bench_{name}", ROOT / "bench" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return module


@pytest.fixture(scope="module")
def bench():
    return load_bench("run")


COMMIT = "c0ffee" + "0" * 34


def page(seconds: float, peak_mib: float, commit: str = COMMIT, **extra) -> dict:
    """A chapter page's CPU row as bench/run.py writes it, with made-up figures."""
    return {"date": "2026-11-26", "commit": commit, "clean": True,
            "seconds": {"median": seconds, "min": seconds, "max": seconds, "n": 3},
            "peak_rss_mib": {"median": peak_mib, "min": peak_mib, "max": peak_mib, "n": 3}, "models": {}, **extra}


def results(chapters: dict, **extra) -> dict:
    """A results.json of a run, with made-up figures: what report() reads."""
    return {"mode": "full", "git": {"commit": COMMIT, "clean": True, "changed": [], "subject": "x"},
            "machine": {"cpu": "test CPU", "cores": 2, "page_cores": 2, "python": "3.11", "torch": "2", "gpu": None,
                        "date": "2026-11-26", "started": "2026-11-26 07:00 UTC", "load_at_start": 0.5,
                        "load_at_end": 0.7}, "chapters": chapters, **extra}


# ----------------------------------------------------------------------------- a class of any size


# What lmbook-grade's summary.json says of a class of 10 graded by 2 workers: 100 s in all, of which the
# sandboxed runs took 60 s, nbgrader's recording 12 s and its feedback 8 s.
SUMMARY = {"seconds": 100.0, "graded": 10,
           "phase_seconds": {"generate": 5.0, "reference": 10.0, "run": 60.0, "record": 12.0, "feedback": 8.0}}


def test_grading_cost_splits_the_class_into_fixed_parallel_and_serial_parts(bench):
    cost = bench.grading_cost(SUMMARY, students=10, workers=2)
    assert cost["fixed_s"] == pytest.approx(100 - 60 - 12 - 8), "fixed: everything but the runs, record, feedback"
    assert cost["parallel_s_per_student"] == pytest.approx(60 * 2 / 10), "runs: 60 s on 2 workers = 12 core-s each"
    assert cost["serial_s_per_student"] == pytest.approx((12 + 8) / 10), "record + feedback, one after another"


def test_class_time_extrapolates_a_thousand_students_by_hand(bench):
    cost = bench.grading_cost(SUMMARY, students=10, workers=2)
    # By hand: 20 s once, 1,000 × 12 core-seconds spread over the cores, 1,000 × 2 s one after another.
    assert bench.class_time(1000, 2, cost) == pytest.approx(20 + 1000 * 12 / 2 + 1000 * 2)  # 8,020 s
    assert bench.class_time(1000, 32, cost) == pytest.approx(20 + 1000 * 12 / 32 + 1000 * 2)  # 2,395 s
    assert bench.class_time(10, 2, cost) == pytest.approx(SUMMARY["seconds"]), "the measured class comes back"


def test_grading_cost_of_a_class_smaller_than_the_workers_counts_only_busy_workers(bench):
    cost = bench.grading_cost({**SUMMARY, "seconds": 70.0, "phase_seconds": {"run": 60.0}}, students=1, workers=2)
    assert cost["parallel_s_per_student"] == pytest.approx(60.0), "one student keeps one worker busy, not two"


# ----------------------------------------------------------------------------- page budgets


def test_over_budget_names_each_page_over_two_minutes_or_two_gib_and_no_other(bench):
    over = bench.over_budget({"ch_slow": {"cpu": page(130.0, 500.0)}, "ch_big": {"cpu": page(60.0, 2100.0)},
                              "ch_ok": {"cpu": page(119.0, 2000.0)}, "ch_gpu_only": {"cuda": page(500.0, 9000.0)}})
    assert len(over) == 2, over
    slow, big = sorted(over, reverse=True)
    assert slow.startswith("ch_slow:") and "130 s" in slow and "120 s" in slow, slow
    assert big.startswith("ch_big:") and "2100 MiB" in big and "2048 MiB" in big, big


def test_an_update_judges_only_the_pages_it_measured(bench):
    chapters = {"ch_old": {"cpu": page(300.0, 500.0, commit="old")}, "ch_new": {"cpu": page(121.0, 500.0)}}
    assert [line.split(":")[0] for line in bench.over_budget(chapters, since=COMMIT)] == ["ch_new"]


def test_a_run_over_budget_fails_naming_the_page_after_writing_everything(bench, capsys):
    with pytest.raises(SystemExit) as stop:
        bench._fail_if_over_budget(bench.over_budget({"ch_slow": {"cpu": page(130.0, 500.0)}}))
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert "OVER THE BOOK'S BUDGET" in err and "ch_slow: 130 s" in err and "every figure was written" in err, err
    bench._fail_if_over_budget([])  # within the budget: nothing happens


def test_the_report_marks_the_page_over_budget_in_its_row_and_at_the_end(bench):
    text = bench.report(results({"ch_slow": {"cpu": page(130.0, 500.0)}, "ch_ok": {"cpu": page(60.0, 500.0)}}))
    table = text.split("## Chapter pages", 1)[1].split("\n## ", 1)[0]
    rows = {line.split(" |")[0].strip("| "): line for line in table.splitlines() if line.startswith("| ch_")}
    assert rows["ch_slow"].endswith("| **over** |") and rows["ch_ok"].endswith("| within |"), rows
    assert "**Over the budget**" in text and "- ch_slow: 130 s" in text


# ----------------------------------------------------------------------------- what each row says it measured


def test_the_header_names_the_commit_and_says_when_it_was_not_recorded(bench):
    assert "commit `c0ffee000000` (x), clean working tree" in bench.report(results({}))
    old = results({})
    del old["git"], old["machine"]["load_at_start"]
    text = bench.report(old)
    assert "**Code**: not recorded by this run" in text and "commit `unknown`" not in text, text[:800]
    assert "**Load average**: not recorded" in text


def test_grading_measured_later_says_so_in_the_header_and_in_its_section(bench):
    # the grader changed after the whole run: `--update grading` re-measures it alone, and a reader must not
    # take the comparison for the run's
    side = {"seconds": 100.0, "cpu_seconds": 150.0, "per_minute": 60.0, "peak_rss_mib": 900.0, "includes": "x"}
    grading = {"assignment": "ch01", "submissions": 100, "workers": 2, "lmbook_grade": side,
               "nbgrader_autograde": {**side, "seconds": 300.0, "per_minute": 20.0}, "throughput_ratio": 3.0,
               "same_total": 100, "different_total": {}, "date": "2026-11-27", "commit": "feed" + "0" * 36}
    update = {"date": "2026-11-27", "commit": "feed" + "0" * 36, "clean": True, "load_at_start": 0.4,
              "load_at_end": 0.6, "parts": ["grading"]}
    text = bench.report(results({}, grading=grading, updates=[update]))
    assert ("Re-measured later** by `python bench/run.py --update grading` on 2026-11-27 at commit `feed00000000`, "
            "load average 0.4 at the start and 0.6 at the end: the grading comparison") in text, text[:1500]
    section = text.split("## Grading", 1)[1]
    assert "graded by both in the same run (measured 2026-11-27, commit `feed00000000`)" in section, section[:600]


def test_book_builds_measured_later_say_so_in_the_header_and_in_their_section(bench):
    # the book grew after the whole run: `--update book` re-measures its builds alone, and a reader must not
    # take them for the run's
    stamp = {"date": "2026-11-27", "commit": "feed" + "0" * 36}
    book = {"clean_build_s": {"median": 1500.0, "min": 1500.0, "max": 1500.0, "n": 1},
            "no_change_rebuild_s": {"median": 12.0, "min": 11.0, "max": 13.0, "n": 3}, "pages": 22, **stamp}
    update = {**stamp, "clean": True, "load_at_start": 0.4, "load_at_end": 0.9, "parts": ["book"]}
    text = bench.report(results({}, book=book, updates=[update]))
    assert ("Re-measured later** by `python bench/run.py --update book` on 2026-11-27 at commit `feed00000000`, "
            "load average 0.4 at the start and 0.9 at the end: the book's builds") in text, text[:1500]
    section = text.split("## The book", 1)[1].split("##", 1)[0]
    assert "(22 executed pages)" in section and "(measured 2026-11-27, commit `feed00000000`)" in section, section
    assert "| clean (every page executed) | 1500.0 s (n=1) |" in section, section


def test_headlines_say_whether_they_are_quality_wall_time_or_bytes_allocated(bench):
    assert bench.measure_of("ratio", "causal attention at n = 2048: course ÷ SDPA memory allocated") == (
        "bytes allocated")
    assert bench.measure_of("seconds", "BPE training: seconds") == "wall time"
    assert bench.measure_of(None, "the same cache with n_kv_head = 2: bytes") == "bytes held (tensor sizes)"
    assert bench.measure_of(None, "Llama 2 70B's sizes, 40 GB of 16-bit cache: positions") == "arithmetic"
    assert bench.measure_of(None, "masked LM: test loss at masked words (nats)") == "model quality"
    assert bench.measure_of("speed", "bf16 autocast training speed ÷ float32") == "ratio of wall times"
    assert bench.measure_of("value", "LSTM LM: test perplexity") == "model quality"


def test_every_published_headline_has_a_kind_the_expected_boxes_know(bench):
    from lmbook.expected import KINDS

    for chapter in bench.HEADLINES:
        for label, key, kind in bench.headline_rows(chapter):
            assert kind in KINDS, f"{chapter} {key} ({label!r}): kind {kind!r}"


# ----------------------------------------------------------------------------- GPU rows


def test_without_a_gpu_run_every_page_says_not_measured_on_cuda(bench):
    text = bench.report(results({"ch_a": {"cpu": page(60.0, 500.0)}, "ch_b": {"cpu": page(60.0, 500.0)}}))
    gpu = text.split("## On a GPU", 1)[1].split("\n## ", 1)[0]
    assert "Not measured" in gpu
    assert "| ch_a | not measured |" in gpu and "| ch_b | not measured |" in gpu, gpu


def test_each_cuda_headline_stands_next_to_the_cpus(bench):
    ppl = {"label": "LSTM LM: test perplexity", "kind": "value"}
    cpu = page(60.0, 500.0, models={"ppl": {**ppl, "median": 6.10, "tolerance": 0.06, "values": [6.1]}})
    one = {"n": 1, "min": 0.0, "max": 0.0}  # a GPU check runs each page once
    cuda = page(9.0, 900.0, gpu_peak_mib={**one, "median": 1234.0},
                models={"ppl": {**ppl, "median": 6.12, "tolerance": 0.06, "values": [6.12]}})
    cuda["seconds"] = {**one, "median": 9.0}
    r = results({"ch_a": {"cpu": cpu, "cuda": cuda}, "ch_b": {"cpu": page(60.0, 500.0)}},
                gpu_check={"gpu": "NVIDIA H100", "started": "2026-11-27 10:00 UTC", "commit": COMMIT, "clean": True,
                           "torch": "2.11", "cuda": "13.0", "concurrency": 4,
                           "stages": {"pages": {"summary": "1 of 2 pages", "not_measured": {"ch_b": "out of time"}}}})
    gpu = bench.report(r).split("## On a GPU", 1)[1].split("\n## ", 1)[0]
    assert "| ch_a | LSTM LM: test perplexity | model quality | 6.100 ± 0.060 | 6.120 |" in gpu, gpu
    assert "| ch_a | 9.0 s (n=1) | 1234 MiB (n=1) |" in gpu, gpu
    assert "| ch_b | not measured (out of time) |" in gpu, gpu
    assert "NVIDIA H100" in gpu and "4 at a time" in gpu


@pytest.mark.skipif(torch.cuda.is_available(), reason="a run on a GPU writes its own CUDA rows")
def test_a_cpu_run_keeps_the_cuda_rows_gpu_check_wrote(bench, tmp_path):
    published = tmp_path / "results.json"
    published.write_text(json.dumps({"chapters": {"ch_a": {"cpu": page(1, 1), "cuda": page(2, 2, commit="gpu")}},
                                     "gpu_check": {"gpu": "H100"}}))
    fresh = {"chapters": {"ch_a": {"cpu": page(3, 3)}}}
    bench.keep_gpu_rows(fresh, published)
    assert fresh["chapters"]["ch_a"]["cuda"]["commit"] == "gpu" and fresh["gpu_check"] == {"gpu": "H100"}
    assert fresh["chapters"]["ch_a"]["cpu"]["seconds"]["median"] == 3, "the new CPU row stays"


def test_the_gpu_memory_probe_is_read_from_the_last_cells_output():
    execute = load_bench("execute_notebook")

    def cell(text: str):
        c = nbformat.v4.new_code_cell(execute.GPU_PROBE)
        c.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        return c

    assert execute.gpu_peak_mib(cell("LMBOOK_GPU_PEAK_MIB 1536.0\n")) == 1536.0
    assert execute.gpu_peak_mib(cell("LMBOOK_GPU_PEAK_MIB None\n")) is None, "a page that used no GPU"
    assert execute.gpu_peak_mib(cell("something else\n")) is None
    assert execute.gpu_peak_mib(nbformat.v4.new_code_cell("")) is None, "a probe that printed nothing"


# ----------------------------------------------------------------------------- the micro-benchmarks, tiny


def test_the_kv_cache_is_timed_single_threaded_for_each_length_with_its_spread(bench):
    kv = bench.kv_cache([4, 8], repeats=2)
    assert kv["threads"] == 1 and kv["clock"] == "wall" and kv["repeats"] == 2
    assert kv["config"] == {"vocab_size": 256 + 2000 + 1, "block_size": 1088, "n_layer": 4, "n_head": 4,
                            "d_model": 256}, "not chapter 9's model (book/ch09_gpt.md)"
    assert set(kv["lengths"]) == {"4", "8"}
    for n, e in kv["lengths"].items():
        assert set(e) == {"cached_s", "uncached_s", "speedup"}, n
        for stats in e.values():
            assert stats["n"] == 2 and stats["min"] <= stats["median"] <= stats["max"], (n, stats)
            assert stats["min"] > 0


def test_the_kv_speedup_is_each_repeats_uncached_over_cached_time():
    raw = load_bench("micro").kv([4], repeats=2)["lengths"]["4"]
    assert raw["speedup"] == pytest.approx([b / a for a, b in zip(raw["cached_s"], raw["uncached_s"], strict=True)])


def test_attention_memory_counts_the_scores_matrix_of_chapter_5_and_not_of_sdpa(bench):
    a = bench.attention_memory(128, repeats=1)
    scores = 4 * 128 * 128 * 4  # the (1, 4, n, n) float32 scores: chapter 5's attention allocates them at least once
    assert a["course"]["allocated_bytes"] >= scores, a
    assert a["sdpa"]["allocated_bytes"] < scores, a
    assert a["allocated_ratio"] == pytest.approx(a["course"]["allocated_bytes"] / a["sdpa"]["allocated_bytes"])
    assert a["course"]["peak_rss_increase_bytes"]["n"] == 1 and a["shape"] == [1, 4, 128, 32]


# ----------------------------------------------------------------------------- the whole script, tiny


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "run.py"), "--tiny", "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), (out / "BENCHMARKS.md").read_text()


@pytest.mark.slow
def test_a_chapter_is_measured_with_time_memory_and_models(tiny):
    results, _ = tiny
    assert set(results["chapters"]) == {"ch01_feedforward_lm"}  # --tiny measures one; full runs measure all
    for chapter, by_device in results["chapters"].items():
        cpu = by_device["cpu"]
        assert cpu["seconds"]["median"] > 0 and cpu["peak_rss_mib"]["median"] > 50, chapter
        assert cpu["models"], f"{chapter}: no trained model's result was read from the chapter's glue"


@pytest.mark.slow
def test_chapter_one_results_are_the_chapters_own_and_respect_the_floor(tiny):
    models = tiny[0]["chapters"]["ch01_feedforward_lm"]["cpu"]["models"]
    floor = models["floor_ppl"]["median"]
    assert models["best_ppl"]["ratio_to_floor"] == pytest.approx(models["best_ppl"]["median"] / floor)
    assert floor < models["best_ppl"]["median"] < models["bigram_ppl"]["median"]


@pytest.mark.slow
def test_builtin_comparisons_and_grading_throughput_are_reported(tiny):
    results, text = tiny
    assert {"log_softmax", "cross_entropy", "gpt_forward", "llama_forward"} <= set(results["builtins"])
    assert all(e["ratio"] > 0 for e in results["builtins"].values())
    g = results["grading"]
    assert g["lmbook_grade"]["per_minute"] > 0 and g["nbgrader_autograde"]["per_minute"] > 0
    for heading in ("## Chapter pages", "## Trained models", "## On a GPU", "## Per-token steps: the KV cache",
                    "## Memory of causal attention", "## From scratch", "## Grading", "### Every exercise"):
        assert heading in text


@pytest.mark.slow
def test_a_run_records_its_commit_machine_and_where_grading_time_went(tiny):
    results, text = tiny
    assert len(results["git"]["commit"]) == 40 and results["machine"]["page_cores"] >= 1
    cpu = results["chapters"]["ch01_feedforward_lm"]["cpu"]
    assert cpu["commit"] == results["git"]["commit"] and cpu["cpu_seconds"]["median"] > 0
    assert "gpu_peak_mib" not in cpu, "a CPU run has no GPU memory to report"
    phases = results["grading"]["cost"]["phases_s"]
    assert {"generate", "reference", "run", "record", "feedback"} <= set(phases), phases
    assert f"commit `{results['git']['commit'][:12]}`" in text


@pytest.mark.slow
def test_an_exercise_is_graded_from_its_samples(tiny):
    (e,) = tiny[0]["grading_each_exercise"].values()  # --tiny grades one exercise; full runs grade every one
    assert e["correct_full_marks"] and e["blank_zero"], e
    assert e["submissions"] == len(e["samples"]) >= 4 and e["per_submission_s"] > 0
    assert e["cost"]["parallel_s_per_student"] > 0 and e["cost"]["serial_s_per_student"] > 0, e["cost"]


def test_published_results_cover_every_chapter_the_book_has():
    published = json.loads((ROOT / "bench" / "results.json").read_text())
    assert published["mode"] == "full", "bench/results.json should come from a full `make bench` run"
    pages = [*(ROOT / "book").glob("ch*.md"), *(ROOT / "book").glob("appendix*.md")]
    missing = {p.stem for p in pages} - set(published["chapters"])
    assert not missing, f"not benchmarked: {missing}; run `make bench-chapters CHAPTERS=...`"
    for chapter, by_device in published["chapters"].items():
        assert by_device["cpu"]["models"], f"{chapter}: no headline results (bench/run.py HEADLINES)"
    assert (ROOT / "BENCHMARKS.md").read_text().startswith("# lmbook benchmarks")


def test_published_results_render_into_the_report(bench):
    text = bench.report(json.loads((ROOT / "bench" / "results.json").read_text()))
    assert text.startswith("# lmbook benchmarks") and "## On a GPU" in text


def test_published_results_hold_every_headline_the_chapters_define(bench):
    published = json.loads((ROOT / "bench" / "results.json").read_text())["chapters"]
    for chapter, rows in bench.HEADLINES.items():
        measured = set(published.get(chapter, {}).get("cpu", {}).get("models", {}))
        missing = [key for _, key in rows if key not in measured]
        assert not missing, f"{chapter}: {missing} not benchmarked; run `make bench-chapters CHAPTERS={chapter}`"


def test_pages_share_one_empty_cache_folder_not_the_users(bench, monkeypatch, tmp_path):
    # A page that reuses a model cached by an earlier page (chapter 11) must pay for training it as on a
    # reader's first build, not find it in the user's cache from some earlier build.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "users-cache"))
    seen = []

    def fake_run(path, seed, device, cpus=None, cache=None):
        seen.append((path.stem, seed, cache, sorted(p.name for p in cache.iterdir())))
        (cache / f"{path.stem}-{seed}.pt").write_text("a model")  # what the page would leave for the next
        return {"seconds": 1.0, "peak_rss_mib": 100.0, "glue": {}}

    monkeypatch.setattr(bench, "run_chapter", fake_run)
    monkeypatch.setattr(bench, "book_pages", lambda: [Path("book/first.md"), Path("book/second.md")])
    monkeypatch.setattr(bench, "headline_rows", lambda stem: [])
    bench.chapters(2, ["cpu"], git={"commit": COMMIT, "clean": True})
    caches = {c for _, _, c, _ in seen}
    assert len(caches) == 1, f"the pages had different cache folders: {caches}"
    cache = caches.pop()
    assert cache != tmp_path / "users-cache", "the pages used the user's cache folder"
    assert not cache.exists(), "the run's cache folder was left behind"
    assert seen[0][3] == [], f"the first page found a non-empty cache: {seen[0][3]}"
    assert seen[2][3] == ["first-0.pt", "first-1.pt"], f"the second page did not see the first's models: {seen[2]}"


def test_a_page_kernel_gets_the_cache_folder_it_is_given(bench, monkeypatch, tmp_path):
    envs = []

    def fake_subprocess_run(cmd, **kw):
        envs.append(kw["env"])
        return subprocess.CompletedProcess(cmd, 0, stdout='{"seconds": 1.0}\n', stderr="")

    monkeypatch.setattr(bench.subprocess, "run", fake_subprocess_run)
    bench.run_chapter(Path("book/first.md"), 0, "cpu", cache=tmp_path)
    assert envs[-1]["XDG_CACHE_HOME"] == str(tmp_path)


def test_a_page_measured_again_leaves_the_header_line_of_its_earlier_measurement(bench):
    # The header lists each later re-measurement with the pages it measured: a page measured twice must be
    # named only by the second, or a reader looks for its row at the wrong commit.
    results = {"updates": [{"commit": "a", "chapters": ["ch_x", "ch_y"]}, {"commit": "b", "chapters": ["ch_z"]},
                           {"commit": "c", "parts": ["grading"]}]}
    bench.record_update(results, {"commit": "d", "chapters": ["ch_x", "ch_z"]}, "chapters")
    assert results["updates"] == [{"commit": "a", "chapters": ["ch_y"]}, {"commit": "c", "parts": ["grading"]},
                                  {"commit": "d", "chapters": ["ch_x", "ch_z"]}], results["updates"]
