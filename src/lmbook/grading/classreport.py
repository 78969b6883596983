"""The class at a glance: ``class.html`` (one self-contained page), ``class/*.png``, and the same in text.

For the morning after the deadline: the grade distribution, which tasks the class got wrong, the
mistakes most students made (with who made them, so the instructor knows what to re-teach), the
submissions flagged for review, and those that could not be run and why.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .verdict import CAUSE_SEPARATOR, LIKELY_CAUSE, SEVERAL_CAUSES

if TYPE_CHECKING:
    from .reports import Student

# How a check's message names known mistakes (lmbook.grading.verdict.decide): one, or several that all
# explain the outputs.
_ONE = re.compile(rf"^\s*{re.escape(LIKELY_CAUSE)}(.+?)\s*$", re.M)
_SEVERAL = re.compile(rf"^\s*{re.escape(SEVERAL_CAUSES)}(.+?)\s*$", re.M)


def named_mistakes(text: str) -> list[str]:
    """The known mistakes a check's message names, once each, in order."""
    names = _ONE.findall(text) + [m for found in _SEVERAL.findall(text) for m in found.split(CAUSE_SEPARATOR)]
    return list(dict.fromkeys(names))


@dataclass
class ClassSummary:
    assignment: str
    max_points: float
    totals: dict[str, float]  # every student -> total points (0 for one that could not be run)
    ran: int  # notebooks that ran (wholly or in part): the base of the per-task shares
    tasks: dict[str, tuple[int, int, int]]  # task -> (full, partial, zero) among those that ran
    mistakes: list[tuple[str, str, list[str]]]  # (task, mistake, students), most common first
    flagged: list[tuple[str, str]] = field(default_factory=list)  # (student, why)
    not_run: list[tuple[str, str]] = field(default_factory=list)  # (student, why)
    partly_run: list[tuple[str, str]] = field(default_factory=list)  # (student, where it stopped)


def summarize(assignment: str, students: Sequence[Student], tasks_max: dict[str, float]) -> ClassSummary:
    ran = [st for st in students if st.status.startswith("graded")]
    tasks = {}
    for task, maxp in tasks_max.items():
        scores = [st.tasks.get(task, (0.0, maxp))[0] for st in ran]
        full = sum(s >= maxp > 0 for s in scores)
        zero = sum(s <= 0 for s in scores)
        tasks[task] = (full, len(scores) - full - zero, zero)
    holders: dict[tuple[str, str], list[str]] = {}
    for st in ran:
        for task, names in st.mistakes.items():
            for name in names:
                holders.setdefault((task, name), []).append(st.sid)
    order = list(tasks_max)
    mistakes = sorted(((t, m, sids) for (t, m), sids in holders.items()),
                      key=lambda x: (-len(x[2]), order.index(x[0]) if x[0] in order else len(order), x[1]))
    flagged = [(st.sid, "tampering: " + st.suspicious[0]) for st in students if st.suspicious]
    flagged += [(st.sid, f"{task}: the answer {why}") for st in students if not st.suspicious
                for task, why in st.forbidden.items()]
    return ClassSummary(
        assignment, sum(tasks_max.values()), {st.sid: st.score for st in students}, len(ran), tasks, mistakes,
        flagged, [(st.sid, st.status) for st in students if not st.status.startswith("graded")],
        [(st.sid, st.status.removeprefix("graded what ran: ")) for st in students
         if st.status.startswith("graded what ran")])


def _pct(n: int, total: int) -> str:
    return f"{n} ({100 * n / total:.0f}%)" if total else "0"


def _score_bins(s: ClassSummary) -> list[tuple[float, float, int]]:
    """(low, high, count): one bin per point up to 40 points, else 20 equal bins; the top bin holds the max."""
    n = int(s.max_points) + 1 if s.max_points <= 40 else 20
    width = (s.max_points + 1) / n if s.max_points <= 40 else s.max_points / n
    bins = []
    for i in range(n):
        lo, hi = i * width, (i + 1) * width
        last = i == n - 1
        bins.append((lo, hi, sum(lo <= t < hi or (last and t >= hi) for t in s.totals.values())))
    return bins


def _bin_label(s: ClassSummary, lo: float, hi: float) -> str:
    return f"{lo:g}" if s.max_points <= 40 else f"{lo:.0f}-{hi:.0f}"


def summary_markdown(s: ClassSummary) -> list[str]:
    """The class summary as Markdown lines: what report.md starts with."""
    total = len(s.totals)
    mean = sum(s.totals.values()) / total if total else 0.0
    lines = [f"# Class report: {s.assignment}", "",
             f"{total} submissions, maximum {s.max_points:g} points; mean {mean:.1f}. Ran: {s.ran}; could not be "
             f"run: {len(s.not_run)} (counted as 0); stopped part way: {len(s.partly_run)}; to review: "
             f"{len(s.flagged)}.", "", "## Grade distribution", "", "| points | students |", "|---|---|"]
    lines += [f"| {_bin_label(s, lo, hi)} | {count} |" for lo, hi, count in _score_bins(s)]
    lines += ["", f"## Tasks (among the {s.ran} notebooks that ran)", "",
              "| task | full marks | partial | zero |", "|---|---|---|---|"]
    lines += [f"| {t} | {_pct(f, s.ran)} | {_pct(p, s.ran)} | {_pct(z, s.ran)} |" for t, (f, p, z) in s.tasks.items()]
    lines += ["", "## Common mistakes, most common first", ""]
    lines += [f"- {len(sids)} × {task}: {m} ({', '.join(sids)})" for task, m, sids in s.mistakes] or ["None named."]
    for title, rows in (("To review (flagged, or a ready-made answer)", s.flagged), ("Could not be run", s.not_run),
                        ("Stopped part way (graded what ran)", s.partly_run)):
        lines += ["", f"## {title}", ""]
        lines += [f"- {sid}: {why}" for sid, why in rows] or ["None."]
    return [*lines, ""]


# ----------------------------------------------------------------------------- figures

FULL, PARTIAL, ZERO = "#2b7bba", "#f2b134", "#d1495b"  # distinguishable without relying on red vs green


def _figures(s: ClassSummary) -> dict[str, object]:
    """The page's matplotlib figures by file name (Figure objects: no pyplot, so no GUI backend is touched)."""
    from matplotlib.figure import Figure

    figs: dict[str, object] = {}
    bins = _score_bins(s)
    fig = Figure(figsize=(7, 3), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    if s.max_points <= 40:  # one bar per point, centred on it
        ax.bar([lo for lo, _, _ in bins], [c for _, _, c in bins], width=0.85, color=FULL)
        ax.set_xlim(-0.6, s.max_points + 0.6)
        ax.xaxis.get_major_locator().set_params(integer=True)
    else:
        ax.bar([lo for lo, _, _ in bins], [c for _, _, c in bins], width=[0.9 * (hi - lo) for lo, hi, _ in bins],
               align="edge", color=FULL)
    ax.set(xlabel=f"points (of {s.max_points:g})", ylabel="students", title="Grade distribution")
    ax.yaxis.get_major_locator().set_params(integer=True)
    figs["grades.png"] = fig

    names = list(s.tasks)[::-1]  # first task at the top
    fig = Figure(figsize=(7, 0.5 * len(names) + 1.2), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    left = [0.0] * len(names)
    for k, (label, color) in enumerate((("full marks", FULL), ("partial", PARTIAL), ("zero", ZERO))):
        share = [100 * s.tasks[t][k] / s.ran if s.ran else 0.0 for t in names]
        ax.barh(names, share, left=left, color=color, label=label)
        left = [a + b for a, b in zip(left, share, strict=True)]
    ax.set(xlim=(0, 100), xlabel=f"% of the {s.ran} notebooks that ran", title="Marks per task")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.12), ncol=3, frameon=False)
    figs["tasks.png"] = fig

    if s.mistakes:
        top = s.mistakes[:12][::-1]
        fig = Figure(figsize=(8, 0.55 * len(top) + 1.0), dpi=110, layout="constrained")
        ax = fig.add_subplot()
        counts = [len(sids) for _, _, sids in top]
        bars = ax.barh(range(len(top)), counts, color=ZERO, height=0.6)
        # the mistake's words over its bar: long labels beside the axis would squeeze the bars away
        for y, (task, m, _) in enumerate(top):
            ax.annotate(f"{task}: {m if len(m) <= 90 else m[:89] + '…'}", (0, y + 0.32), xytext=(3, 0),
                        textcoords="offset points", fontsize=8, va="bottom")
        ax.bar_label(bars, padding=3, fontsize=8)
        ax.set_yticks([])
        ax.set(xlabel="students", title="Most common mistakes", ylim=(-0.5, len(top) - 0.1),
               xlim=(0, max(counts) * 1.1))
        ax.xaxis.get_major_locator().set_params(integer=True)
        figs["mistakes.png"] = fig
    return figs


# ----------------------------------------------------------------------------- the page

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;
color:#222;line-height:1.45}
h1{margin-bottom:.2rem}h2{margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:.25rem .6rem;text-align:left;
vertical-align:top}th{background:#f4f4f4}td.n{text-align:right;white-space:nowrap}
img{max-width:100%;height:auto}.lead{color:#555}.none{color:#777;font-style:italic}
.cards{display:flex;gap:.8rem;flex-wrap:wrap;margin:1rem 0}.card{border:1px solid #ddd;border-radius:6px;
padding:.5rem .9rem;min-width:7rem}.card b{display:block;font-size:1.5rem}
"""


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = (),
           css_id: str = "") -> str:
    """An HTML table; every cell is escaped here (student ids and statuses come from submissions)."""
    if not rows:
        return '<p class="none">None.</p>'
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td{" class=n" if i in numeric else ""}>{html.escape(str(c))}</td>'
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f'<table{f" id={css_id}" if css_id else ""}><tr>{head}</tr>{body}</table>'


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def write_class_page(s: ClassSummary, out: Path) -> Path:
    """Write ``out/class.html`` and ``out/class/*.png``; return the page's path."""
    pngs = {}
    (out / "class").mkdir(parents=True, exist_ok=True)
    for name, fig in _figures(s).items():
        fig.savefig(out / "class" / name)
        pngs[name] = (out / "class" / name).read_bytes()
    total = len(s.totals)
    mean = sum(s.totals.values()) / total if total else 0.0
    counts = (("submissions", total, "submissions"), ("ran", s.ran, "ran"),
              ("not-run", len(s.not_run), "could not be run"), ("partly-run", len(s.partly_run), "stopped part way"),
              ("flagged", len(s.flagged), "to review"), ("mean", f"{mean:.1f}", f"mean points (of {s.max_points:g})"))
    cards = "".join(f'<div class=card id="count-{key}"><b>{value}</b>{html.escape(label)}</div>'
                    for key, value, label in counts)
    task_rows = [(t, _pct(f, s.ran), _pct(p, s.ran), _pct(z, s.ran)) for t, (f, p, z) in s.tasks.items()]
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Class report: {html.escape(s.assignment)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Class report: {html.escape(s.assignment)}</h1>",
        '<p class="lead">Students who could not be run count as 0 in the distribution; the per-task shares are '
        "among the notebooks that ran.</p>", f"<div class=cards>{cards}</div>",
        "<h2>Grade distribution</h2>", _img(pngs["grades.png"], "histogram of total points"),
        "<details><summary>The numbers</summary>",
        _table(["points", "students"], [(_bin_label(s, lo, hi), n) for lo, hi, n in _score_bins(s)], (1,), "grades"),
        "</details>",
        "<h2>Tasks</h2>", _img(pngs["tasks.png"], "share of full, partial and zero marks per task"),
        _table(["task", "full marks", "partial", "zero"], task_rows, (1, 2, 3), "tasks"),
        "<h2>Common mistakes</h2>",
        '<p class="lead">Mistakes the checks recognised, by how many students made them: what to go over again.</p>',
        _img(pngs["mistakes.png"], "most common mistakes") if "mistakes.png" in pngs else "",
        _table(["students", "task", "mistake", "who"],
               [(len(sids), t, m, ", ".join(sids)) for t, m, sids in s.mistakes], (0,), "mistakes"),
        "<h2>To review</h2>",
        '<p class="lead">Flagged for tampering, or using a ready-made answer; the evidence is in suspicious.md.</p>',
        _table(["student", "why"], s.flagged, (), "flagged"),
        "<h2>Could not be run</h2>", _table(["student", "why"], s.not_run, (), "not-run"),
        "<h2>Stopped part way</h2>", '<p class="lead">Graded up to where the notebook stopped.</p>',
        _table(["student", "where it stopped"], s.partly_run, (), "partly-run"),
        "</body></html>",
    ]
    page = out / "class.html"
    page.write_text("\n".join(parts) + "\n")
    return page
