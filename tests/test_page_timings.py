"""No page asserts a relation between measured times: timings are shown and discussed, never asserted.

A page's cells run on whatever the reader has, a 2-core laptop with a browser open, a busy build server, a GPU,
and which of two runs is the shorter, how large a speed-up is or which model uses the hardware better depends
on that machine and on what else it runs. An ``assert`` on such a relation fails the book build there (on an
H200, chapter 9's KV cache sped generation up 1.21×, 1.10× and 1.12× at 64, 256 and 1,024 tokens, and the page
asserted that the speed-up grows with the length). Deterministic counts (steps, sizes, parameters, FLOPs,
bytes) and quality figures may be asserted; where the text's words depend on a timing, a sentence chosen
from the measured numbers is pasted into it (``publish(x=Markdown(...))``, ``{glue:md}`x```).

What counts as a timing is read from the code, with Python's ``ast``, cell by cell: an ``assert`` is flagged
when one of its comparisons (``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=``), or its whole condition, mentions a
measured time or throughput. A mention is:

- a name, attribute or string subscript key one of whose words (split at ``_``, at any other non-alphanumeric
  character and at camelCase) is in ``TIMING_WORDS`` (``log.cpu_seconds``, ``time_ratio``, ``attn_ms``,
  ``speedup[0]``, ``wide["mfu"]``), or which holds "per s" (``tokens_per_s``, ``steps_per_sec``);
- a name that, where the assert runs, the page last bound to an expression that mentions a timing
  (``reach = {name: seconds_to(log, target) ...}``; ``t0 = time.perf_counter()``), so that a timing
  renamed is still one; a loop's or a comprehension's variable drawn from a timing is one too. The cells are
  followed in running order: a short name once used for a time (``s``, ``t``) and bound again to a count is
  a count again.

Not timings: "ratio" alone (``mem_ratio`` is allocated bytes over allocated bytes), "flops" (a count of
arithmetic, deterministic; a measured FLOP rate enters through ``mfu``, a time or "per s"), "steps", "cost"
(ch06 counts FLOPs under that name), keyword names and dict keys an expression builds (only the names read
count), and comparisons with ``is``/``in`` (``s is not None`` asks whether a run reached its target, not how
fast). "second" (an ordinal: ``first - second``), "ns" and "us" (``Ns`` is a plural of N) are left out of
the units. Code blocks that are not ``{code-cell}`` (examples shown in the prose) are not run, and not read.

Its limit: a name is one thing. A dict bound to a name from an expression that reads a time (``r = dict(em=em,
s=log.seconds)``) makes every comparison of ``r[...]`` a timing; build such a record with a subscript
(``results[name] = dict(...)``), which binds no name, or keep the timing apart.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from page_source import FENCE, page_lines

ROOT = Path(__file__).resolve().parent.parent
# The book's pages, as the table of contents lists them, that run code.
PAGES = [page for name in re.findall(r"(?:file|root): (book/\S+)", (ROOT / "_toc.yml").read_text())
         if "{code-cell}" in (ROOT / (page := f"{name}.md")).read_text()]

# Words of an identifier that make it a measured time, a ratio of times or a throughput.
TIMING_WORDS = frozenset({
    "seconds", "sec", "secs", "ms",  # durations ("second" is also an ordinal, "Ns" a plural of N)
    "time", "times", "timing", "timings", "elapsed", "duration", "durations", "latency", "wall", "clock", "perf",
    "speed", "speeds", "speedup", "speedups",  # ratios of times
    "throughput", "tps", "mfu", "fps",  # rates: tokens per second, model FLOPs utilisation
})
PER_SECOND = re.compile(r"\bper (s|sec|secs|second|seconds)\b")
ORDER_OPS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)


def words(identifier: str) -> list[str]:
    """``log_att.cpu_seconds`` → [..., "cpu", "seconds"]; ``tokensPerS`` → ["tokens", "per", "s"]."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", identifier)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def is_timing_word(identifier: str) -> bool:
    ws = words(identifier)
    return bool(TIMING_WORDS.intersection(ws)) or bool(PER_SECOND.search(" ".join(ws)))


def mentions(node: ast.AST) -> list[tuple[str, bool]]:
    """The identifiers an expression reads, each with whether it is a name (True) or an attribute or a string
    key it subscripts with (False). A comprehension's own variables are its business: what they range over is
    read, their names are not."""
    own = {name for n in ast.walk(node) if isinstance(n, ast.comprehension) for name in _bound_names(n.target)}
    found = []
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id not in own:
            found.append((n.id, True))
        elif isinstance(n, ast.Attribute):
            found.append((n.attr, False))
        elif isinstance(n, ast.Subscript):
            keys = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
            found += [(k.value, False) for k in keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return found


def timing_mentions(node: ast.AST, timed: set[str]) -> list[str]:
    """The timings an expression reads: by their own words, or as names that hold one (``timed``; an attribute
    or a key spelled like such a name is another thing)."""
    return sorted({m for m, is_name in mentions(node) if is_timing_word(m) or (is_name and m in timed)})


def _bound_names(target: ast.AST) -> list[str]:
    """The plain names an assignment binds (``a, b = ...`` binds both; ``d[k] = ...`` binds none)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for t in target.elts for name in _bound_names(t)]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return []


class Timings:
    """Which names hold a timing, statement by statement, in the order the page runs its cells.

    A name bound to an expression that mentions a timing holds one (``reach = {k: seconds_to(log, 0.98) ...}``,
    ``t0 = time.perf_counter()``); bound again to anything else, it no longer does, so that ``s``, ``n`` or
    ``t`` once used for a time do not make every later comparison of theirs a timing. A loop's variables hold a
    timing when what they loop over does. Function bodies are not followed (their names are their own)."""

    def __init__(self) -> None:
        self.timed: set[str] = set()

    def mentioned_in(self, node: ast.AST) -> list[str]:
        return timing_mentions(node, self.timed)

    def bind(self, target: ast.AST, timed: bool) -> None:
        for name in _bound_names(target):
            (self.timed.add if timed else self.timed.discard)(name)

    def assign(self, target: ast.AST, value: ast.AST) -> None:
        """``a, b = x.loss, x.seconds``: each name from its own expression, when both sides list them."""
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) and len(
                target.elts) == len(value.elts) and not any(isinstance(e, ast.Starred) for e in target.elts):
            for t, v in zip(target.elts, value.elts, strict=True):
                self.assign(t, v)
        else:
            self.bind(target, bool(self.mentioned_in(value)))

    def loop(self, target: ast.AST, iterable: ast.AST) -> None:
        """A loop's variables: ``for n, s in zip(lengths, seconds)`` and ``for name, c, tps in ((.., small_tps),
        (.., wide_tps))`` make only ``s`` and ``tps`` timings; over anything else, all of them or none."""
        columns = None
        if isinstance(target, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in target.elts):
            k = len(target.elts)
            if (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "zip"
                    and len(iterable.args) == k and all(kw.arg == "strict" for kw in iterable.keywords)
                    and not any(isinstance(a, ast.Starred) for a in iterable.args)):
                columns = [[a] for a in iterable.args]
            elif isinstance(iterable, (ast.Tuple, ast.List)) and iterable.elts and all(
                    isinstance(row, (ast.Tuple, ast.List)) and len(row.elts) == k for row in iterable.elts):
                columns = [[row.elts[i] for row in iterable.elts] for i in range(k)]
        if columns is None:
            self.bind(target, bool(self.mentioned_in(iterable)))
        else:
            for t, column in zip(target.elts, columns, strict=True):
                self.bind(t, any(self.mentioned_in(v) for v in column))

    def statements(self, body: list[ast.stmt]):
        """Each statement in running order, with the names that hold a timing when it runs."""
        for stmt in body:
            yield stmt
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    self.assign(target, stmt.value)
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                self.bind(stmt.target, bool(self.mentioned_in(stmt.value)))
            elif isinstance(stmt, ast.AugAssign):
                self.bind(stmt.target, bool(self.mentioned_in(stmt.value) or self.mentioned_in(stmt.target)))
            elif isinstance(stmt, (ast.For, ast.AsyncFor)):
                self.loop(stmt.target, stmt.iter)
            for n in ast.walk(stmt):  # `(x := ...)` inside an expression
                if isinstance(n, ast.NamedExpr):
                    self.bind(n.target, bool(self.mentioned_in(n.value)))
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for field in ("body", "orelse", "finalbody"):
                yield from self.statements(getattr(stmt, field, []))
            for handler in getattr(stmt, "handlers", []):
                yield from self.statements(handler.body)
            for case in getattr(stmt, "cases", []):
                yield from self.statements(case.body)


def timing_comparisons(test: ast.AST, timed: set[str]) -> list[str]:
    """The timing identifiers an assert's condition compares, or holds as its whole truth value."""
    timed = set(timed)
    for n in ast.walk(test):  # a comprehension's variable drawn from a timing is a timing
        if isinstance(n, ast.comprehension) and timing_mentions(n.iter, timed):
            timed.update(_bound_names(n.target))
    found: set[str] = set()
    parts = [test]
    while parts:  # `assert faster and ok`, `assert not slower`: the truth value itself
        p = parts.pop()
        if isinstance(p, ast.BoolOp):
            parts += p.values
        elif isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.Not):
            parts.append(p.operand)
        elif isinstance(p, (ast.Name, ast.Attribute, ast.Subscript)):
            found.update(timing_mentions(p, timed))
    for n in ast.walk(test):
        if isinstance(n, ast.Compare) and any(isinstance(op, ORDER_OPS) for op in n.ops):
            for operand in [n.left, *n.comparators]:
                found.update(timing_mentions(operand, timed))
    return sorted(found)


@dataclass(frozen=True)
class Cell:
    first_line: int  # the file's line number of the cell's first line of code
    source: str


def code_cells(page: str) -> list[Cell]:
    """A page's ``{code-cell}`` cells, each with the file line its code starts on (tests/page_source.py)."""
    raw = (ROOT / page).read_text().splitlines()
    runs: list[list[tuple[int, str]]] = []
    for line in page_lines(ROOT, page):
        if line.kind == "prose":
            continue
        number = int(line.where.rsplit(":", 1)[1])
        if runs and runs[-1][-1][0] == number - 1:
            runs[-1].append((number, line.text))
        else:
            runs.append([(number, line.text)])
    cells = []
    for run in runs:
        opening = next(raw[k] for k in range(run[0][0] - 2, -1, -1) if FENCE.match(raw[k]))
        if FENCE.match(opening).group(2).strip().startswith("{code-cell}"):
            # IPython's magics and shell escapes are not Python: read them as comments, keeping the numbering
            source = "\n".join("#" + t if t.lstrip().startswith(("%", "!")) else t for _, t in run)
            cells.append(Cell(run[0][0], source))
    return cells


def timing_asserts(cells: list[Cell], page: str) -> list[str]:
    """Every assert of the page's cells, run in order, that compares a timing: "page:line: source (names)"."""
    timings = Timings()
    found = []
    for cell in cells:
        tree = ast.parse(cell.source, filename=f"{page}:{cell.first_line}")
        for stmt in timings.statements(tree.body):
            if isinstance(stmt, ast.Assert) and (names := timing_comparisons(stmt.test, timings.timed)):
                source = " ".join(ast.get_source_segment(cell.source, stmt).split())
                found.append(f"{page}:{cell.first_line + stmt.lineno - 1}: {source}  (measured: {', '.join(names)})")
    return found


@pytest.mark.parametrize("page", PAGES)
def test_a_page_asserts_no_relation_between_measured_times(page):
    found = timing_asserts(code_cells(page), page)
    assert not found, (
        f"{page} asserts on measured times, which another machine or a busy one can flip: show and discuss "
        f"them, assert only deterministic counts, and let the measured numbers choose the text's words "
        f"(publish(x=Markdown(...)), {{glue:md}}`x`):\n" + "\n".join(found))


# ----------------------------------------------------------------------------- what the detector reads


def _found(*sources: str) -> list[str]:
    return timing_asserts([Cell(100 * i + 1, s) for i, s in enumerate(sources)], "p.md")


def test_comparisons_of_times_speedups_and_utilisation_are_flagged_with_page_line_and_source():
    found = _found("x = 1\nassert log_att.cpu_seconds < log_none.cpu_seconds, 'the attention run was not the shorter'",
                   "assert 1 < speedup[0] < speedup[2], speedup",
                   'assert wide["mfu"] > small["mfu"], rows\nassert time_ratio > 1.5\nassert r["tokens_per_s"] > 9')
    assert [f.split(": assert")[0] for f in found] == ["p.md:2", "p.md:101", "p.md:201", "p.md:202", "p.md:203"]
    assert found[0] == ("p.md:2: assert log_att.cpu_seconds < log_none.cpu_seconds, 'the attention run was not "
                        "the shorter'  (measured: cpu_seconds)")


def test_a_timing_under_another_name_is_still_a_timing():
    assert _found("reach = {k: seconds_to(log, 0.98) for k, log in logs.items()}",
                  'assert reach["a"] > 1.5 * reach["b"], reach')
    assert _found("t0 = time.perf_counter()\nrun()\nwall = t0 - 1\nassert wall < 5")
    assert _found("assert all(s > 1 for s in speedups)")
    assert _found("faster = secs_a < secs_b\nassert faster")


def test_counts_memory_quality_and_reached_or_not_are_not_timings():
    assert not _found("mem_ratio = ref[-1] / fus[-1]\nassert mem_ratio > 10, mem_ratio",
                      "assert d_none == 2 * d_hid and steps_att < steps_none",
                      "assert len(set(cost.values())) == 1\nassert 1.0 < ratio_6nd < 1.15",
                      "reach = seconds_to(log)\nassert all(s is not None for s in reach.values())",
                      "results[name] = dict(em=em, seconds=log.seconds)\nassert results['a']['em'] > 0.3",
                      "assert sum(p.numel() for p in m.parameters()) < 10_000, 'a message about seconds'",
                      "Ns = np.array(sizes)\nassert Ns[0] < Ns[1]",  # a plural of N, not nanoseconds
                      "drop = (first - second).abs().max()\nassert drop > 0.1")  # an ordinal, not a duration


def test_a_name_holds_a_timing_only_while_it_is_bound_to_one():
    assert not _found("nats, secs = log.val_loss[-1], log.seconds\nassert nats < 3")
    assert not _found("s = log.seconds\ns = len(text)\nassert s > 3")
    assert not _found("for n, s in zip(lengths, seconds):\n    print(n, s)\nn = 4\nassert n > 3")
    assert _found("for n, s in zip(lengths, seconds):\n    assert s < 9")
    assert not _found("for n, s in zip(lengths, seconds, strict=True):\n    assert n > 3")
    assert not _found("for c, tps in ((cfg, small_tps), (cfg2, wide_tps)):\n    assert c.n_layer > 1")
    assert not _found("fpt = 6 * n\nfpt = fpt / seconds\nassert wide['fpt'] == 6 * n")  # a key, not the name


def test_only_code_cells_are_read_and_their_lines_are_the_files():
    cells = code_cells("book/ch09_gpt.md")
    raw = (ROOT / "book/ch09_gpt.md").read_text().splitlines()
    assert all(raw[c.first_line - 1] == c.source.splitlines()[0] for c in cells)
    assert all(re.match(r"^```\{code-cell\}", raw[k]) for c in cells for k in [
        next(k for k in range(c.first_line - 2, -1, -1) if FENCE.match(raw[k]))])
    assert len(cells) == raw.count("```{code-cell} ipython3")
