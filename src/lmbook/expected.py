""""Expected result" boxes: what a reader's run should give, from the published benchmarks.

`make bench` runs every chapter with several seeds and writes the median and a tolerance
of each headline result to ``bench/results.json``. A chapter shows the figure for the
device it runs on next to its own result, so a reader can tell whether their run is right.
"""

from __future__ import annotations

import json
from pathlib import Path

from IPython.display import Markdown


def expected_box(results: str | Path, chapter: str, key: str, value: float, device: str) -> Markdown:
    """A short note comparing ``value`` (this run's) with the benchmarked median ± tolerance."""
    path = Path(results)
    if not path.exists():
        return Markdown(f"> **Expected result:** no benchmark results found ({path}); run `make bench`.")
    data = json.loads(path.read_text())
    by_device = data.get("chapters", {}).get(chapter, {})
    kind = str(device).split(":")[0]
    if not by_device:
        return Markdown(f"> **Expected result:** the benchmarks have not measured {chapter} yet; run `make bench`.")
    measured_on = kind if kind in by_device else next(iter(by_device))
    model = by_device[measured_on]["models"].get(key)
    if model is None:  # a result the chapter gained since its last benchmark
        return Markdown(f"> **Expected result:** the benchmarks have not measured {key} in {chapter} yet; "
                        "run `make bench`.")
    median, tol = model["median"], model["tolerance"]
    machine = data.get("machine", {})
    where = f"{machine.get('cores', '?')}-core {machine.get('cpu', 'CPU')}" if measured_on == "cpu" else \
        machine.get("gpu") or measured_on
    verdict = ("within that range" if abs(value - median) <= tol else
               "**outside that range**: if you changed nothing, your library versions or hardware differ")
    note = "" if measured_on == kind else f" (no benchmark on {kind} yet; this is the {measured_on} figure)"
    return Markdown(f"> **Expected result{note}:** {model['label']} = {median:.2f} ± {tol:.2f} on {measured_on} "
                    f"(median over {len(model['values'])} seeds, `make bench`, {where}, {machine.get('date', '')}). "
                    f"**This run:** {value:.2f}, {verdict}.")
