""""Expected result" boxes: what the benchmark machine measured, next to this run's own figure.

`make bench` runs every chapter with several seeds and writes, for each headline result, its median, its
tolerance (:func:`seed_tolerance`: where 99% of other seeds' runs should fall, from the seeds' spread) and the
values themselves to ``bench/results.json``. A chapter shows a box under the result, so that a reader can tell
whether their run is right. What the box may claim depends on the kind of result:

- a *quality* figure (a perplexity, a loss, an accuracy) is reproducible: other seeds move it little, so a
  tight band and a verdict (inside or outside it) help; when the seeds spread wider than the value itself,
  one run cannot be judged, and the box gives the seeds' range for comparison instead;
- a *timing* (seconds, a speed-up, a time ratio, a utilisation) belongs to the machine it was taken on and to
  what else that machine ran: the box shows what the benchmark machine measured, named, with its spread, for
  comparison, and never a verdict;
- a run on another device than the benchmarks' is compared, never judged.

Every figure is written in its quantity's own format: three significant figures, percentages for shares
and small relative gaps, percentage points for a difference of two accuracies.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from IPython.display import Markdown

# kind: (timing?, unit)
KINDS: dict[str, tuple[bool, str]] = {
    "seconds": (True, " s"),  # a wall-clock time
    "speed": (True, "×"),  # a ratio of two timings: speed-up, time ratio
    "utilisation": (True, "%"),  # a share of the hardware's peak (MFU)
    "timing": (True, ""),  # another number fitted to timings (an exponent)
    "percent": (False, "%"),  # a share: accuracy, exact match, a relative gap above a floor
    "points": (False, " points"),  # a difference of two shares, in percentage points
    "ratio": (False, "×"),  # a reproducible ratio (memory allocated)
    "value": (False, ""),  # anything else: a perplexity, a loss, BLEU, bits per byte
}
# Student's t at 0.995 by degrees of freedom (scipy.stats.t.ppf(0.995, df)); beyond 10 the value at 10, which
# is a little wider than the exact one.
T_995 = {1: 63.657, 2: 9.925, 3: 5.841, 4: 4.604, 5: 4.032, 6: 3.707, 7: 3.499, 8: 3.355, 9: 3.250, 10: 3.169}


def seed_tolerance(values: list[float]) -> float:
    """How far one more seed's run may fall from the seeds' median: a 99% prediction interval.

    With n seeds of standard deviation s, a new run differs from their mean by at most t · s · √(1 + 1/n) in 99%
    of cases (t: Student's, n − 1 degrees of freedom). Three seeds say little about the spread itself, and t
    says how little: from three seeds, ± 3 s would leave out about one run in eight (another processor's run,
    which rounds differently and so is in effect another seed, fell outside it). The band is centred on the
    median, which for a few seeds is close to their mean. At least 1% of the median."""
    n = len(values)
    floor = 0.01 * abs(statistics.median(values))
    if n < 2:
        return floor
    t = T_995[min(n - 1, max(T_995))]
    return max(t * statistics.stdev(values) * math.sqrt(1 + 1 / n), floor)


_SHARE_WORDS = ("accuracy", "exact match", "share", "agreement", "examples right", "grammatical", "first guess right",
                "weight on")


def headline_kind(label: str, key: str = "") -> str:
    """The kind of a headline result, read from its label as `bench/run.py` declares it (see ``KINDS``)."""
    text = label.lower()
    if "seconds" in text or key.endswith("_seconds"):
        return "seconds"
    if "mfu" in text:
        return "utilisation"
    if "exponent" in text and "time" in text:
        return "timing"
    if ("speed" in text or "time" in text) and ("÷" in text or "speed-up" in text or "speedup" in text):
        return "speed"
    if "÷" in text and "memory" in text:
        return "ratio"
    if any(w in text for w in _SHARE_WORDS):
        return "points" if ("minus" in text or "−" in text) else "percent"
    if "above the floor" in text:
        return "percent"
    return "value"


def _decimals(x: float) -> int:
    """Decimals that give ``x`` three significant figures (none for 100 and above)."""
    return 0 if x == 0 or abs(x) >= 100 else max(0, 2 - math.floor(math.log10(abs(x))))


def _number(x: float, decimals: int) -> str:
    text = f"{round(x, decimals) + 0.0:,.{decimals}f}"  # + 0.0: never "-0.00"
    return text.replace("-", "−")


def _scale(kind: str) -> float:
    return 100.0 if KINDS[kind][1] in ("%", " points") else 1.0


def fmt(x: float, kind: str) -> str:
    """``x`` in its quantity's format: 6.11, 0.704%, 47.5 points, 7.18×, 19.1 s."""
    v = x * _scale(kind)
    return _number(v, _decimals(v)) + KINDS[kind][1]


def _band(median: float, tol: float, kind: str) -> str:
    """median ± tolerance, the tolerance as precise as the median (and at least one significant figure)."""
    m, t = median * _scale(kind), tol * _scale(kind)
    d = _decimals(m)
    if t > 0 and round(t, d) == 0:
        d = max(d, -math.floor(math.log10(t)))
    unit = KINDS[kind][1]
    if kind in ("percent", "utilisation") and m + t > 100:  # a share stays within 0% to 100%
        return f"{_number(m, d)}{unit} (at least {_number(m - t, d)}{unit})"
    if kind in ("percent", "utilisation") and m - t < 0:
        return f"{_number(m, d)}{unit} (at most {_number(m + t, d)}{unit})"
    return f"{_number(m, d)} ± {_number(t, d)}{unit}"


def _machine(data: dict, device: str, measured: str | None = None) -> str:
    """Where and when a figure was measured: ``measured`` is its row's own date, where it was re-measured later
    than the run's."""
    m = data.get("machine", {})
    if device == "cpu":
        cpu = " ".join(m.get("cpu", "CPU").replace("(R)", "").replace("(TM)", "").split())
        where = f"a {m.get('cores', '?')}-core {cpu}" + ("" if cpu.endswith(("CPU", "Processor")) else " CPU")
    else:
        where = m.get("gpu") or f"a {device} device"
    software = f", torch {m['torch']}" if m.get("torch") else ""
    date = measured or m.get("date")
    return f"{where}{software}{f', {date}' if date else ''}"


def _what_carries_over(values: list[float]) -> str:
    """What a reader can rely on in a figure whose seeds spread widely: its sign, where every seed agrees on it,
    and its order of magnitude, where every seed's is the same."""
    said = []
    if all(v > 0 for v in values) or all(v < 0 for v in values):
        said.append("its sign")
    if all(v != 0 for v in values) and len({math.floor(math.log10(abs(v))) for v in values}) == 1:
        said.append("its order of magnitude")
    return " and ".join(said) if said else "only the seeds' range, which even the sign does not hold to"


def box_text(data: dict | None, chapter: str, key: str, value: float, device: str) -> str:
    """The box's text (Markdown) for this run's ``value`` of headline ``key`` of ``chapter`` on ``device``."""
    device = str(device).split(":")[0]
    by_device = (data or {}).get("chapters", {}).get(chapter, {})
    measured_on = device if device in by_device else next(iter(by_device), None)
    model = by_device[measured_on]["models"].get(key) if measured_on else None
    if model is None:
        return ("> **Expected result:** this result has not been benchmarked yet, so there is no figure to "
                "compare this run with.")
    label, median, tol = model["label"], float(model["median"]), float(model["tolerance"])
    values = [float(v) for v in model.get("values", [median])]
    kind = model.get("kind") or headline_kind(label, key)
    timing = KINDS[kind][0]
    n = len(values)
    runs = f"{n} {'run' if timing else 'seed'}{'s' if n != 1 else ''}"
    where = _machine(data, measured_on, by_device[measured_on].get("date"))
    lo, hi = min(values), max(values)
    this_run = f"**This run** (on {device}): {fmt(value, kind)}."
    if timing:
        return (f"> **For comparison:** {label} = {fmt(median, kind)} on the benchmark machine ({where}; median of "
                f"{runs}, from {fmt(lo, kind)} to {fmt(hi, kind)}). {this_run} Timings belong to the machine "
                f"and to whatever else it is running: expect the same order of magnitude, not the same digits.")
    if measured_on != device:
        return (f"> **For comparison:** {label} = {_band(median, tol, kind)} on {measured_on} ({where}; median of "
                f"{runs}). {this_run} The benchmarks have not run on {device}, whose arithmetic differs "
                f"slightly: expect a figure close to this one, not inside its band.")
    if tol > 0 and tol > abs(median) / 2:  # "64.3 ± 44.6" would say the band, not the figure: no band is shown
        return (f"> **For comparison:** {label} = {fmt(median, kind)} on the benchmark machine ({where}; median of "
                f"{runs}, which ranged from {fmt(lo, kind)} to {fmt(hi, kind)}). {this_run} From one seed to "
                f"another this figure moves by more than half its size, so one run is compared with the seeds', "
                f"not judged by a band: what carries over is {_what_carries_over(values)}.")
    inside = abs(value - median) <= tol
    verdict = ("within that band" if inside else
               "outside that band, where fewer than one seed in a hundred should fall: a changed cell or other "
               "library versions are the likely cause")
    return (f"> **Expected result:** {label} = {_band(median, tol, kind)}: the median of {runs}, and where 99% "
            f"of other seeds' runs should fall, on {where}. **This run:** {fmt(value, kind)}, {verdict}.")


def expected_box(results: str | Path, chapter: str, key: str, value: float, device: str) -> Markdown:
    """A short note comparing ``value`` (this run's) with what the benchmarks measured for it."""
    path = Path(results)
    data = json.loads(path.read_text()) if path.exists() else None
    return Markdown(box_text(data, chapter, key, value, device))
