"""The class at a glance: ``class.html`` (one self-contained page), ``class/*.png``, and the same in text.

For the night grades are due and the morning after: the grade distribution, which tasks the class got
wrong, the mistakes most students made (named ones, and the failures no named mistake explains grouped by
the checks' words), with who made them, so the instructor knows what to re-teach; scores set by hand and
the resubmissions that met them; answers still to grade by hand; the submissions flagged for review, and
those that could not be run and why; and a table of every student (points per task, status, late, flags,
the first failure, a link to the feedback), sortable and filterable in the page, with no server.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .copies import EXPLANATION, Pair
from .student import Student
from .verdict import CAUSE_SEPARATOR, LIKELY_CAUSE, SEVERAL_CAUSES

# How a check's message names known mistakes (lmbook.grading.verdict.decide): one, or several that all
# explain the outputs.
_ONE = re.compile(rf"^\s*{re.escape(LIKELY_CAUSE)}(.+?)\s*$", re.M)
_SEVERAL = re.compile(rf"^\s*{re.escape(SEVERAL_CAUSES)}(.+?)\s*$", re.M)


def named_mistakes(text: str) -> list[str]:
    """The known mistakes a check's message names, once each, in order."""
    names = _ONE.findall(text) + [m for found in _SEVERAL.findall(text) for m in found.split(CAUSE_SEPARATOR)]
    return list(dict.fromkeys(names))


def _without_case_name(text: str) -> str:
    """A problem without the case's name in front, brackets and all ("[a holds the [SEP] id] segments: ...")."""
    if not text.startswith("["):
        return text
    depth = 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth == 0:
            return text[i + 1:].lstrip()
    return text


def failure_kind(message: str, task: str = "") -> str:
    """A failure's kind in the check's words, with what differs between students taken out: the first
    problem of the message, without the case's name and with every number as ``#``. Students whose answers
    fail the same way get the same kind."""
    lines = [ln.strip().lstrip("✗").strip() for ln in message.splitlines() if ln.strip()]
    bullets = [ln[2:] for ln in lines if ln.startswith("- ")]
    text = bullets[0] if bullets else (lines[0] if lines else "")
    if task and text.startswith(f"{task}: "):
        text = text[len(task) + 2:]
    text = _without_case_name(text)
    text = re.sub(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", "#", text)
    return text[:200] or "failed (no message)"


@dataclass
class ClassSummary:
    assignment: str
    max_points: float
    totals: dict[str, float]  # every student -> total points (0 for one that could not be run)
    ran: int  # notebooks that ran (wholly or in part): the base of the per-task shares
    tasks: dict[str, tuple[int, int, int]]  # task -> (full, partial, zero) among those that ran (pending left out)
    mistakes: list[tuple[str, str, list[str]]]  # (task, mistake, students), most common first
    flagged: list[tuple[str, str]] = field(default_factory=list)  # (student, why)
    not_run: list[tuple[str, str]] = field(default_factory=list)  # (student, why)
    partly_run: list[tuple[str, str]] = field(default_factory=list)  # (student, where it stopped)
    unnamed: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (task, failure kind, students)
    pending: dict[str, list[str]] = field(default_factory=dict)  # task -> students whose answer awaits grading
    manual: list[tuple[str, str, float]] = field(default_factory=list)  # (student, task, points) set by hand
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (student, what to check)
    late: list[tuple[str, str]] = field(default_factory=list)  # (student, the penalty and why)
    late_policy: str = ""  # the policy, in words ("" when none)
    lms: str | None = None
    download_notes: list[str] = field(default_factory=list)
    students: list[Student] = field(default_factory=list)  # the class, for the page's table of every student
    tasks_max: dict[str, float] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)  # students not in the LMS's import file, and why
    alike: list[Pair] = field(default_factory=list)  # students whose answers are alike (copies.py): listed only


def summarize(assignment: str, students: Sequence[Student], tasks_max: dict[str, float], *,
              late_policy: object = None, lms: str | None = None, download_notes: Sequence[str] = (),
              manual_tasks: Sequence[str] = (), alike: Sequence[Pair] = ()) -> ClassSummary:
    ran = [st for st in students if st.status.startswith("graded")]
    tasks = {}
    for task, maxp in tasks_max.items():
        scores = [st.tasks.get(task, (0.0, maxp))[0] for st in ran if task not in st.pending]
        full = sum(s >= maxp > 0 for s in scores)
        zero = sum(s <= 0 for s in scores)
        tasks[task] = (full, len(scores) - full - zero, zero)
    holders: dict[tuple[str, str], list[str]] = {}
    kinds: dict[tuple[str, str], list[str]] = {}
    for st in ran:
        for task, names in st.mistakes.items():
            for name in names:
                holders.setdefault((task, name), []).append(st.sid)
        for task, (score, maxp) in st.tasks.items():
            if score < maxp and task not in st.pending and not st.mistakes.get(task) and task in st.messages \
                    and task not in st.manual and task not in st.forbidden and not st.suspicious:  # those: to review
                kinds.setdefault((task, failure_kind(st.messages[task], task)), []).append(st.sid)
    order = list(tasks_max)

    def ranked(found: dict[tuple[str, str], list[str]]) -> list[tuple[str, str, list[str]]]:
        return sorted(((t, m, sids) for (t, m), sids in found.items()),
                      key=lambda x: (-len(x[2]), order.index(x[0]) if x[0] in order else len(order), x[1]))

    flagged = [(st.sid, "tampering: " + st.suspicious[0]) for st in students if st.suspicious]
    flagged += [(st.sid, f"{task}: the answer {why}") for st in students if not st.suspicious
                for task, why in st.forbidden.items()]
    return ClassSummary(
        assignment, sum(tasks_max.values()), {st.sid: st.score for st in students}, len(ran), tasks,
        ranked(holders), flagged, [(st.sid, st.status) for st in students if not st.status.startswith("graded")],
        [(st.sid, st.status.removeprefix("graded what ran: ")) for st in students
         if st.status.startswith("graded what ran")],
        ranked(kinds),
        {t: [st.sid for st in students if t in st.pending] for t in manual_tasks},
        [(st.sid, t, p) for st in students for t, p in st.manual.items()],
        [(st.sid, w) for st in students for w in st.warnings],
        [(st.sid, st.penalty_why or "late (no late penalty set)") for st in students if st.late],
        str(late_policy) if late_policy else "", lms, list(download_notes), list(students), dict(tasks_max),
        alike=list(alike))


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
             f"{len(s.flagged)}. Late penalty: {s.late_policy or 'none'}.", "",
             *[line for note in s.download_notes for line in (f"{note[0].upper()}{note[1:]}.", "")],
             "## Grade distribution", "", "| points | students |", "|---|---|"]
    lines += [f"| {_bin_label(s, lo, hi)} | {count} |" for lo, hi, count in _score_bins(s)]
    lines += ["", f"## Tasks (among the {s.ran} notebooks that ran)", "",
              "| task | full marks | partial | zero |", "|---|---|---|---|"]
    lines += [f"| {t} | {_pct(f, s.ran)} | {_pct(p, s.ran)} | {_pct(z, s.ran)} |" for t, (f, p, z) in s.tasks.items()]
    lines += ["", "## Common mistakes, most common first", ""]
    lines += [f"- {len(sids)} × {task}: {m} ({', '.join(sids)})" for task, m, sids in s.mistakes] or ["None named."]
    lines += ["", "## Failures no named mistake explains, grouped by the checks' words", ""]
    lines += [f"- {len(sids)} × {task}: {m} ({', '.join(sids)})" for task, m, sids in s.unnamed] or ["None."]
    lines += ["", "## To grade by hand", ""]
    lines += [f"- {task}: {len(sids)} answers ({', '.join(sids)})" for task, sids in s.pending.items() if sids] \
        or ["Nothing."]
    lines += ["", "## Scores set by hand (formgrader)", ""]
    lines += [f"- **{sid}: {w}**" for sid, w in s.warnings]
    lines += [f"- {sid}, {task}: {p:g}" for sid, task, p in s.manual] or ["None."]
    if s.lms:
        lines += ["", f"## The grades to upload: grades-{s.lms}.csv", ""]
        lines += [f"- left out: {why}" for why in s.left_out] or ["Every student is in it."]
    lines += ["", f"## Late ({s.late_policy or 'no late penalty set'})", ""]
    lines += [f"- {sid}: {why}" for sid, why in s.late] or ["None."]
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
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;
color:#222;line-height:1.45}
h1{margin-bottom:.2rem}h2{margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:.25rem .6rem;text-align:left;
vertical-align:top}th{background:#f4f4f4}td.n{text-align:right;white-space:nowrap}
img{max-width:100%;height:auto}.lead{color:#555}.none{color:#777;font-style:italic}
.cards{display:flex;gap:.8rem;flex-wrap:wrap;margin:1rem 0}.card{border:1px solid #ddd;border-radius:6px;
padding:.5rem .9rem;min-width:7rem}.card b{display:block;font-size:1.5rem}
.warn{border:2px solid #d1495b;background:#fdf0f1;border-radius:6px;padding:.4rem 1rem;margin:1rem 0}
.warn h2{border:none;margin:.3rem 0;color:#a3283a;font-size:1.15rem}
#students{font-size:.88rem;width:100%}#students th{cursor:pointer;user-select:none;position:sticky;top:0}
#students th[data-dir=asc]::after{content:" ▲"}#students th[data-dir=desc]::after{content:" ▼"}
#students td.full{background:#e8f1f9}#students td.partial{background:#fdf3dc}#students td.zero{background:#fae3e6}
#students td.pending{background:#eee;font-style:italic}#students td.msg{max-width:26rem;font-size:.82rem}
.wide{overflow-x:auto;max-width:100%}
.tools{display:flex;gap:.8rem;align-items:center;flex-wrap:wrap;margin:.5rem 0}.tools input{min-width:18rem}
.tag{display:inline-block;border-radius:3px;padding:0 .3rem;margin:0 .15rem .1rem 0;font-size:.78rem;
background:#eee}.tag.flagged,.tag.check{background:#d1495b;color:#fff}.tag.late{background:#f2b134}
"""

# Sorting (click a column's title) and filtering (text, and a choice of students) in the page: no server.
_SCRIPT = """
(function () {
  var table = document.getElementById('students');
  if (!table) return;
  var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
  var text = document.getElementById('filter'), show = document.getElementById('show');
  var shown = document.getElementById('shown'), heads = table.tHead.rows[0].cells;
  function apply() {
    var q = text.value.trim().toLowerCase(), tag = show.value, n = 0;
    rows.forEach(function (r) {
      var ok = (!q || r.textContent.toLowerCase().indexOf(q) >= 0) &&
               (!tag || (' ' + r.getAttribute('data-tags') + ' ').indexOf(' ' + tag + ' ') >= 0);
      r.hidden = !ok; if (ok) n += 1;
    });
    shown.textContent = n + ' of ' + rows.length + ' students shown';
  }
  function key(r, i) {  // numbers sort as numbers (data-sort holds a cell's number), words as words
    var c = r.cells[i], v = c.hasAttribute('data-sort') ? c.getAttribute('data-sort') : c.textContent.trim();
    var x = Number(v);
    return v !== '' && !isNaN(x) ? [0, x] : [1, v.toLowerCase()];
  }
  Array.prototype.forEach.call(heads, function (th, i) {
    th.title = 'sort by ' + th.textContent;
    th.addEventListener('click', function () {
      var dir = th.getAttribute('data-dir') === 'asc' ? 'desc' : 'asc';
      Array.prototype.forEach.call(heads, function (h) { h.removeAttribute('data-dir'); });
      th.setAttribute('data-dir', dir);
      rows.sort(function (a, b) {
        var x = key(a, i), y = key(b, i);
        var c = x[0] !== y[0] ? x[0] - y[0] : (x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0);
        return dir === 'asc' ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  text.addEventListener('input', apply);
  show.addEventListener('change', apply);
  apply();
})();
"""

# The choices of the student table's filter: tag -> words
_SHOW = {"": "every student", "notfull": "not full marks", "notrun": "not graded (could not be run)",
         "flagged": "flagged for review", "late": "late", "pending": "answers to grade by hand",
         "manual": "scores set by hand", "check": "to check (a resubmission met a score set by hand)",
         "clash": "id clash"}


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = (),
           css_id: str = "") -> str:
    """An HTML table; every cell is escaped here (student ids and statuses come from submissions)."""
    if not rows:
        return f'<p class="none"{f" id={css_id}-none" if css_id else ""}>None.</p>'
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td{" class=n" if i in numeric else ""}>{html.escape(str(c))}</td>'
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f'<table{f" id={css_id}" if css_id else ""}><tr>{head}</tr>{body}</table>'


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _first_failure(st: Student, tasks_max: dict[str, float]) -> str:
    """The first task the student lost points on, in the checks' words (the named mistake when there is one)."""
    for task, maxp in tasks_max.items():
        score = st.tasks.get(task, (0.0, maxp))[0]
        if task in st.pending or score >= maxp:
            continue
        if st.mistakes.get(task):
            return f"{task}: {st.mistakes[task][0]}"
        if task in st.messages:
            lines = [ln.strip().lstrip("✗").strip() for ln in st.messages[task].splitlines() if ln.strip()]
            bullets = [ln[2:] for ln in lines if ln.startswith("- ")]
            first = bullets[0] if bullets else (lines[0] if lines else "")
            return (first if first.startswith(task) else f"{task}: {first}")[:240]
        return f"{task}: {score:g}/{maxp:g}"
    return ""


def _tags(st: Student, max_points: float) -> list[str]:
    tags = []
    if st.points < max_points - st.pending_points:
        tags.append("notfull")
    if not st.status.startswith("graded"):
        tags.append("notrun")
    tags += [t for t, on in (("flagged", st.suspicious or st.forbidden), ("late", st.late), ("pending", st.pending),
                             ("manual", st.manual), ("check", st.warnings),
                             ("clash", any(n.startswith("student id clash") for n in st.notes))) if on]
    return tags


def _student_table(students: Sequence[Student], tasks_max: dict[str, float], out: Path, lms: str | None) -> str:
    """Every student, one row: points per task, total, status, late, flags, the first failure, feedback."""
    e = html.escape
    max_points = sum(tasks_max.values())
    heads = ["student", *(["name", "LMS id"] if lms else []), "total", *tasks_max, "status", "late", "flags",
             "first failure"]
    rows = []
    for st in students:
        page = out / "feedback" / f"{st.sid}.html"
        who = (f'<a href="feedback/{e(st.sid)}.html">{e(st.sid)}</a>' if page.exists() else e(st.sid))
        cells = [f"<td>{who}</td>"]
        if lms:
            cells += [f"<td>{e(st.name)}</td>", f"<td>{e(st.lms_id)}</td>"]
        pend = f" + {st.pending_points:g} to grade" if st.pending else ""
        cells.append(f'<td class=n data-sort="{st.score:g}">{st.score:g}{pend}</td>')
        for task, maxp in tasks_max.items():
            score = st.tasks.get(task, (0.0, maxp))[0]
            if task in st.pending:
                cells.append('<td class="n pending" data-sort="-1">pending</td>')
                continue
            kind = "full" if score >= maxp > 0 else "zero" if score <= 0 else "partial"
            hand = " (by hand)" if task in st.manual else ""
            cells.append(f'<td class="n {kind}" data-sort="{score:g}">{score:g}{hand}</td>')
        status = ("graded" if st.status == "graded" else "partly run" if st.status.startswith("graded what ran")
                  else "not graded")
        cells.append(f'<td title="{e(st.status)}">{status}</td>')
        cells.append(f"<td>{e(st.penalty_why or ('yes' if st.late else ''))}</td>")
        tags = _tags(st, max_points)
        words = {"flagged": "flagged", "late": "late", "pending": "to grade by hand", "manual": "set by hand",
                 "check": "check", "clash": "id clash"}
        cells.append("<td>" + "".join(f'<span class="tag {t}">{words[t]}</span>' for t in tags if t in words)
                     + "</td>")
        cells.append(f"<td class=msg>{e(_first_failure(st, tasks_max))}</td>")
        rows.append(f'<tr data-tags="{" ".join(tags)}">{"".join(cells)}</tr>')
    options = "".join(f'<option value="{k}">{e(v)}</option>' for k, v in _SHOW.items())
    tools = ('<div class=tools><input id=filter type=search placeholder="filter: a name, a task, a message"'
             ' aria-label="filter the students">'
             f'<label>show <select id=show>{options}</select></label><span id=shown class=lead></span></div>')
    head = "".join(f"<th>{e(h)}</th>" for h in heads)
    return (f'{tools}<div class=wide><table id=students><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
            "</table></div>")


def write_class_page(s: ClassSummary, out: Path) -> Path:
    """Write ``out/class.html`` and ``out/class/*.png``; return the page's path."""
    students = s.students
    pngs = {}
    (out / "class").mkdir(parents=True, exist_ok=True)
    for name, fig in _figures(s).items():
        fig.savefig(out / "class" / name)
        pngs[name] = (out / "class" / name).read_bytes()
    total = len(s.totals)
    mean = sum(s.totals.values()) / total if total else 0.0
    pending = sum(1 for st in students if st.pending)
    counts = (("submissions", total, "submissions"), ("ran", s.ran, "ran"),
              ("not-run", len(s.not_run), "could not be run"), ("partly-run", len(s.partly_run), "stopped part way"),
              ("flagged", len(s.flagged), "to review"), ("pending", pending, "with answers to grade by hand"),
              ("late", len(s.late), "late"), ("mean", f"{mean:.1f}", f"mean points (of {s.max_points:g})"))
    cards = "".join(f'<div class=card id="count-{key}"><b>{value}</b>{html.escape(label)}</div>'
                    for key, value, label in counts)
    task_rows = [(t, _pct(f, s.ran), _pct(p, s.ran), _pct(z, s.ran)) for t, (f, p, z) in s.tasks.items()]
    warnings = ""
    if s.warnings:
        items = "".join(f"<li><b>{html.escape(sid)}</b>: {html.escape(w)}</li>" for sid, w in s.warnings)
        warnings = ("<div class=warn id=manual-warnings><h2>Check before uploading: resubmissions met scores set "
                    f"by hand</h2><ul>{items}</ul></div>")
    lead = ['<p class="lead">Students who could not be run count as 0 in the distribution; the per-task shares are '
            "among the notebooks that ran. "
            + (f"Late penalty: {html.escape(s.late_policy)}." if s.late_policy else "No late penalty set.")
            + (f" Answers graded by hand are not in the totals until graded ({pending} students)."
               if pending else "") + "</p>"]
    lead += [f'<p class="lead">{html.escape(n[0].upper() + n[1:])}.</p>' for n in s.download_notes]
    if s.lms:
        upload = (f"The grades to upload: <b>grades-{s.lms}.csv</b>, {len(students) - len(s.left_out)} students"
                  + (f"; left out: {html.escape('; '.join(s.left_out))}" if s.left_out else ", none left out") + ".")
        lead.append(f'<p class="lead" id=upload>{upload}</p>')
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Class report: {html.escape(s.assignment)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Class report: {html.escape(s.assignment)}</h1>", *lead, f"<div class=cards>{cards}</div>", warnings,
        '<p class=lead>Jump to: <a href="#students-section">every student</a> · <a href="#mistakes-section">'
        'common mistakes</a> · <a href="#pending-section">to grade by hand</a> · <a href="#manual-section">scores set '
        'by hand</a> · <a href="#review-section">to review</a> · <a href="#alike-section">answers alike</a> · '
        '<a href="#not-run-section">could not be run</a></p>',
        "<h2>Grade distribution</h2>", _img(pngs["grades.png"], "histogram of total points"),
        "<details><summary>The numbers</summary>",
        _table(["points", "students"], [(_bin_label(s, lo, hi), n) for lo, hi, n in _score_bins(s)], (1,), "grades"),
        "</details>",
        "<h2>Tasks</h2>", _img(pngs["tasks.png"], "share of full, partial and zero marks per task"),
        _table(["task", "full marks", "partial", "zero"], task_rows, (1, 2, 3), "tasks"),
        "<h2 id=mistakes-section>Common mistakes</h2>",
        '<p class="lead">Mistakes the checks recognised, by how many students made them: what to go over again.</p>',
        _img(pngs["mistakes.png"], "most common mistakes") if "mistakes.png" in pngs else "",
        _table(["students", "task", "mistake", "who"],
               [(len(sids), t, m, ", ".join(sids)) for t, m, sids in s.mistakes], (0,), "mistakes"),
        "<h2>Other failures, grouped by the checks' words</h2>",
        '<p class="lead">Failures no named mistake explains, grouped by the first problem the check reported '
        "(numbers shown as #): students who failed the same way are on one row.</p>",
        _table(["students", "task", "what the check said", "who"],
               [(len(sids), t, m, ", ".join(sids)) for t, m, sids in s.unnamed], (0,), "unnamed"),
        "<h2 id=students-section>Students</h2>",
        '<p class="lead">Click a column\'s title to sort by it; type in the box or choose whom to show. A student\'s '
        "name opens their feedback.</p>",
        _student_table(students, s.tasks_max, out, s.lms),
        "<h2 id=pending-section>To grade by hand</h2>",
        '<p class="lead">Answers nbgrader leaves to a person (free-text questions): grade them in formgrader, then '
        "run lmbook-grade again. Their points are neither earned nor lost until then.</p>",
        _table(["task", "answers", "who"], [(t, len(sids), ", ".join(sids)) for t, sids in s.pending.items() if sids],
               (1,), "pending"),
        "<h2 id=manual-section>Scores set by hand</h2>",
        '<p class="lead">Scores set in nbgrader\'s formgrader: they count, over the autograde.</p>',
        _table(["student", "task", "points"], [(sid, t, f"{p:g}") for sid, t, p in s.manual], (2,), "manual"),
        "<h2>Late</h2>",
        _table(["student", "penalty"], s.late, (), "late"),
        "<h2 id=review-section>To review</h2>",
        '<p class="lead">Flagged for tampering, or using a ready-made answer; the evidence is in suspicious.md.</p>',
        _table(["student", "why"], s.flagged, (), "flagged"),
        "<h2 id=alike-section>Answers alike across students</h2>", f'<p class="lead">{html.escape(EXPLANATION)}</p>',
        _table(["students", "similarity", "tasks alike"], [(p.a + ", " + p.b, p.how_alike(), p.describe())
                                                           for p in s.alike], (), "alike"),
        "<h2 id=not-run-section>Could not be run</h2>", _table(["student", "why"], s.not_run, (), "not-run"),
        "<h2>Stopped part way</h2>", '<p class="lead">Graded up to where the notebook stopped.</p>',
        _table(["student", "where it stopped"], s.partly_run, (), "partly-run"),
        f"<script>{_SCRIPT}</script>",
        "</body></html>",
    ]
    page = out / "class.html"
    page.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return page
