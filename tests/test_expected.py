import json

from lmbook.expected import expected_box

RESULTS = {"machine": {"cpu": "Test CPU", "cores": 2, "date": "2026-01-01"},
           "chapters": {"ch01": {"cpu": {"models": {"ppl": {"label": "test perplexity", "median": 6.4,
                                                            "tolerance": 0.1, "values": [6.3, 6.4, 6.5]}}}}}}


def _box(tmp_path, value, device="cpu", data=RESULTS):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    return expected_box(path, "ch01", "ppl", value, device).data


def test_a_run_within_tolerance_is_said_to_be_within(tmp_path):
    text = _box(tmp_path, 6.45)
    assert "6.40 ± 0.10" in text and "6.45, within that range" in text


def test_a_run_outside_tolerance_is_flagged(tmp_path):
    assert "outside that range" in _box(tmp_path, 6.6)


def test_another_device_falls_back_to_the_measured_one_and_says_so(tmp_path):
    assert "no benchmark on cuda yet" in _box(tmp_path, 6.4, device="cuda:0")


def test_missing_results_file_says_how_to_make_it(tmp_path):
    assert "run `make bench`" in expected_box(tmp_path / "nope.json", "ch01", "ppl", 1.0, "cpu").data


def test_a_result_the_benchmarks_have_not_measured_says_so_and_how_to_measure_it(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(RESULTS))
    text = expected_box(path, "ch01", "new_result", 1.0, "cpu").data
    assert "have not measured new_result in ch01" in text and "run `make bench`" in text
