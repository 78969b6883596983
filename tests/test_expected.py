"""The "expected result" boxes: what each kind of result may claim, in its own format."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from lmbook.expected import KINDS, T_995, box_text, expected_box, fmt, headline_kind, seed_tolerance

ROOT = Path(__file__).resolve().parent.parent
MACHINE = {"cpu": "Intel(R) Xeon(R) Processor", "cores": 2, "torch": "2.13.0+cpu", "date": "2026-11-22"}


def results(label: str, median: float, tolerance: float, values: list[float], kind: str | None = None) -> dict:
    model = {"label": label, "median": median, "tolerance": tolerance, "values": values}
    if kind:
        model["kind"] = kind
    return {"machine": MACHINE, "chapters": {"ch": {"cpu": {"models": {"k": model}}}}}


PPL = results("test perplexity", 6.1108, 0.0611, [6.1108, 6.1050, 6.1161])


def test_a_quality_figure_in_its_band_is_said_to_be_within_it():
    text = box_text(PPL, "ch", "k", 6.13, "cpu")
    assert "test perplexity = 6.11 ± 0.06" in text
    assert "**This run:** 6.13, within that band." in text
    assert ("median of 3 seeds, and where 99% of other seeds' runs should fall, on a 2-core Intel Xeon Processor, "
            "torch 2.13.0+cpu") in text


def test_a_figure_re_measured_after_the_run_is_dated_by_its_own_row():
    later = results("test perplexity", 6.1108, 0.0611, [6.1108, 6.1050, 6.1161])
    later["chapters"]["ch"]["cpu"]["date"] = "2026-11-26"
    text = box_text(later, "ch", "k", 6.13, "cpu")
    assert "torch 2.13.0+cpu, 2026-11-26" in text and "2026-11-22" not in text, text
    assert "torch 2.13.0+cpu, 2026-11-22" in box_text(PPL, "ch", "k", 6.13, "cpu")  # no date of its own: the run's


def test_a_quality_figure_outside_its_band_names_likely_causes_without_blaming_the_reader():
    text = box_text(PPL, "ch", "k", 6.5, "cpu")
    assert "6.50, outside that band, where fewer than one seed in a hundred should fall" in text
    assert "a changed cell or other library versions are the likely cause" in text
    assert "wrong" not in text and "broken" not in text


def test_the_t_quantiles_leave_half_a_percent_in_each_tail():
    """Against Student's t density, integrated numerically (torch's log_prob, the trapezoid rule)."""
    import torch

    for df, t in T_995.items():
        x = torch.linspace(-t, t, 400_001, dtype=torch.float64)
        inside = torch.trapezoid(torch.distributions.StudentT(float(df)).log_prob(x).exp(), x).item()
        assert abs(inside - 0.99) < 2e-4, f"t = {t} with {df} degrees of freedom holds {inside:.5f}, not 0.99"


def test_the_band_of_three_seeds_is_a_99_percent_prediction_interval():
    values = [1.0, 2.0, 3.0]  # standard deviation 1
    assert seed_tolerance(values) == pytest.approx(9.925 * (4 / 3) ** 0.5)
    assert seed_tolerance([5.0]) == pytest.approx(0.05), "one seed: no spread to go by, 1% of the median"
    assert seed_tolerance([100.0, 100.0, 100.0]) == pytest.approx(1.0), "no spread: 1% of the median"
    assert seed_tolerance([float(v) for v in range(30)]) > 3.0 * 8.8, "beyond 10 degrees of freedom: t at 10"


def test_another_processors_run_of_a_seed_is_inside_the_band_of_three_seeds():
    """Chapter 9's verb-agreement gap: three seeds on an AMD EPYC (40.7 points, spread 0.9), and seed 0 on an
    Intel Xeon at 37.2 points, outside ± 3 standard deviations of the three but inside their 99% band."""
    data = results("does the verb agree?, 64 labels: accuracy, pretrained minus from scratch", 0.4074, 0.0,
                   [0.3968, 0.4074, 0.4140], kind="points")
    model = data["chapters"]["ch"]["cpu"]["models"]["k"]
    assert abs(0.372 - model["median"]) > 3 * 0.0087
    model["tolerance"] = seed_tolerance(model["values"])
    assert "37.2 points, within that band" in box_text(data, "ch", "k", 0.372, "cpu")


def test_a_timing_is_shown_for_comparison_with_its_machine_and_spread_and_no_verdict():
    data = results("GPT on Brown: training seconds", 41.23, 2.0, [40.1, 41.23, 43.9])
    text = box_text(data, "ch", "k", 77.0, "cpu")
    assert text.startswith("> **For comparison:** GPT on Brown: training seconds = 41.2 s on the benchmark machine")
    assert "a 2-core Intel Xeon Processor" in text and "median of 3 runs, from 40.1 s to 43.9 s" in text
    assert "**This run** (on cpu): 77.0 s." in text
    assert "within" not in text and "outside" not in text and "±" not in text


def test_a_speed_up_is_a_ratio_shown_for_comparison():
    data = results("KV cache: generation speed-up, 256 tokens", 7.1759, 3.2067, [7.1759, 8.2238, 6.0861])
    text = box_text(data, "ch", "k", 2.9, "cpu")
    assert "= 7.18× on the benchmark machine" in text and "from 6.09× to 8.22×" in text
    assert "2.90×" in text and "outside" not in text and "within" not in text


def test_a_small_relative_gap_is_a_percentage_with_its_band():
    data = results("GPT on the course's corpus: perplexity above the floor", 0.0070356, 0.00093945,
                   [0.0073159, 0.0066907, 0.0070356])
    text = box_text(data, "ch", "k", 0.0073159, "cpu")
    assert "perplexity above the floor = 0.704 ± 0.094%" in text and "**This run:** 0.732%, within" in text


def test_a_difference_of_accuracies_is_in_percentage_points():
    data = results("grammatical?, 256 labels: accuracy, pretrained − from scratch (medians)", 0.47475, 0.013106,
                   [0.47783, 0.47475, 0.46921])
    assert "= 47.5 ± 1.3 points" in box_text(data, "ch", "k", 0.4778, "cpu")


def test_a_large_value_keeps_three_significant_figures():
    data = results("encoder-decoder, greedy: test BLEU", 61.5379, 4.9136, [58.75, 61.64, 61.54])
    assert "test BLEU = 61.5 ± 4.9" in box_text(data, "ch", "k", 58.75, "cpu")
    assert fmt(12345.6, "value") == "12,346" and fmt(0.000123456, "value") == "0.000123"


def test_a_share_band_never_passes_100_percent():
    data = results("attention (additive): test exact match", 1.0, 0.01, [1.0, 0.999, 1.0])
    text = box_text(data, "ch", "k", 1.0, "cpu")
    assert "test exact match = 100% (at least 99%)" in text and "**This run:** 100%, within" in text


def test_a_band_wider_than_its_value_is_not_printed_as_a_band():
    data = results("validation loss, bf16 autocast − float32 (nats)", 0.0048071, 0.045870, [0.0048071, -0.021164,
                                                                                              0.0058025])
    text = box_text(data, "ch", "k", 0.0048071, "cpu")
    assert "±" not in text and "within" not in text and "outside" not in text
    assert "= 0.00481 on the benchmark machine" in text and "ranged from −0.0212 to 0.00580" in text
    assert "what carries over is only the seeds' range" in text  # the seeds disagree even on the sign


def test_a_band_wider_than_half_its_value_is_not_printed_as_a_band_but_says_what_holds():
    data = results("fine-tuned minus from scratch: accuracy (points)", 0.643, 0.446, [0.643, 0.41, 0.92])
    text = box_text(data, "ch", "k", 0.5, "cpu")
    assert "±" not in text and "within" not in text and "outside" not in text, text
    assert "what carries over is its sign and its order of magnitude" in text, text


def test_a_band_narrower_than_half_its_value_is_printed():
    data = results("test perplexity", 6.0, 2.9, [5.0, 6.0, 7.0])
    assert "= 6.00 ± 2.90" in box_text(data, "ch", "k", 6.0, "cpu")


@pytest.mark.parametrize("x", [0.0, -0.0, -1e-9, 1e-9, -0.004, 0.0049, 0.01, -0.01, 0.5, 1.0, 99.96, -123.4])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_no_figure_reads_minus_zero_or_drops_to_zero_digits(x, kind):
    text = fmt(x, kind)
    assert not re.match(r"^[−-]0(\.0*)?\D*$", text), f"{x} as {kind} reads {text!r}"
    if abs(x) >= 1e-6:
        assert re.search(r"[1-9]", text), f"{x} as {kind} lost all its digits: {text!r}"


@pytest.mark.parametrize(("median", "tol"), [(0.01, 0.001), (0.0123, 0.00002), (6.4, 0.064), (250.0, 0.3)])
def test_a_tight_band_never_reads_plus_or_minus_zero(median, tol):
    text = box_text(results("test loss", median, tol, [median]), "ch", "k", median, "cpu")
    assert not re.search(r"± 0(\.0+)?(?![.\d])", text), text


def test_a_run_on_another_device_is_compared_not_judged():
    text = box_text(PPL, "ch", "k", 6.5, "cuda:0")
    assert text.startswith("> **For comparison:**") and "have not run on cuda" in text
    assert "within" not in text and "outside" not in text


@pytest.mark.parametrize("data", [None, {"machine": MACHINE, "chapters": {}}, results("x", 1.0, 0.1, [1.0])],
                         ids=["no results file", "chapter not benchmarked", "result not benchmarked"])
def test_a_result_not_yet_benchmarked_says_so_plainly(data):
    text = box_text(data, "ch", "new_result" if data and data["chapters"] else "k", 1.0, "cpu")
    assert text == ("> **Expected result:** this result has not been benchmarked yet, so there is no figure to "
                    "compare this run with.")


def test_expected_box_reads_the_results_file(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(PPL))
    assert expected_box(path, "ch", "k", 6.11, "cpu").data == box_text(PPL, "ch", "k", 6.11, "cpu")
    assert "not been benchmarked" in expected_box(tmp_path / "none.json", "ch", "k", 6.11, "cpu").data


def test_a_kind_written_by_the_benchmarks_wins_over_the_label():
    data = results("a label that reads like a quality figure", 2.0, 0.1, [1.9, 2.0, 2.1], kind="seconds")
    assert "For comparison" in box_text(data, "ch", "k", 2.0, "cpu")


@pytest.mark.parametrize(("label", "kind"), [
    ("GPT on Brown: training seconds", "seconds"),
    ("Transformer: training seconds to the validation target", "seconds"),
    ("KV cache: generation speed-up, 256 tokens", "speed"),
    ("causal attention at n = 2048: course ÷ SDPA time", "speed"),
    ("training time to the target, Transformer ÷ RNN", "speed"),
    ("torch.compile: compiled ÷ eager speed", "speed"),
    ("MFU of the wider GPT against the measured matmul peak", "utilisation"),
    ("one attention layer: fitted exponent of time in n", "timing"),
    ("causal attention at n = 2048: course ÷ SDPA memory allocated", "ratio"),
    ("attention (additive): test exact match", "percent"),
    ("GPT on the course's corpus: perplexity above the floor", "percent"),
    ("64 labels: test accuracy, pretrained minus from scratch (medians over 5 seeds)", "points"),
    ("who?, 64 labels: exact match, pretrained − from scratch (medians)", "points"),
    ("validation loss, bf16 autocast − float32 (nats)", "value"),
    ("best position scheme, positions ≤ L: perplexity ÷ floor", "value"),
    ("LSTM LM: test perplexity", "value"),
])
def test_the_kind_of_a_headline_is_read_from_its_label(label, kind):
    assert headline_kind(label) == kind


def test_every_benchmark_headline_about_time_or_speed_is_shown_as_a_timing():
    spec = importlib.util.spec_from_file_location("lmbook_bench_run", ROOT / "bench" / "run.py")
    bench = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    for rows in bench.HEADLINES.values():
        for label, key in rows:
            timed = re.search(r"seconds|speed|\btime\b|MFU", label) and "memory" not in label
            assert KINDS[headline_kind(label, key)][0] == bool(timed), f"{label!r} read as {headline_kind(label, key)}"
