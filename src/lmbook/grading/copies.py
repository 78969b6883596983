"""Answers alike across students: pairs whose answer cells are the same code, or nearly, once comments,
docstrings, layout and local names are set aside.

Winnowing, as MOSS does it (Schleimer, Wilkerson and Aiken 2003, "Winnowing: local algorithms for document
fingerprinting"): each answer becomes a stream of normalised tokens, every run of ``K`` tokens is hashed, and
in each window of ``W`` consecutive hashes the smallest is kept. Two answers sharing a run of at least
``K + W - 1`` tokens are sure to share a fingerprint; a pair's similarity is the share of the shorter one's
fingerprints the other has too. Fingerprints of the released exercise (its set-up, stubs and tests) and of
code most of the class wrote are dropped first: an untouched notebook is nobody's copy.

The pairs are for the instructor to read, never a verdict: nothing here changes a grade.
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import io
import keyword
import re
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

# A run of K + W - 1 = 12 normalised tokens (about one statement: `V = V . max ( dim = V , keepdim = True )`)
# is always caught. Smaller K makes every `V = V . sum (` idiom a match between unrelated answers.
K = 8
W = 5
# Listed when this share of the shorter answer's fingerprints is in the other one. Renaming, comments and
# layout leave 1.0, a copy with one line changed 0.85; the right answers of tests/students_ch01.py, written
# independently, are at most 0.23 alike where they have enough fingerprints to count (0.67 below that).
THRESHOLD = 0.8
# ...and only with at least this many fingerprints in the shorter answer, once the exercise's own are dropped:
# a one-line answer has 6, a 110-character one 10; a three-line one about 17. A line has few ways to be
# written, and two students writing `return torch.logsumexp(...)` alike is no evidence of anything.
MIN_FINGERPRINTS = 12
# What the instructor reads above the pairs (class.html, suspicious.md).
EXPLANATION = (
    "Pairs of students whose answers are the same code, or nearly, once comments, docstrings, layout and variable "
    "names are set aside (fingerprints as MOSS takes them; the exercise's own code and code most of the class wrote "
    f"left out). Listed from {THRESHOLD:.0%} alike, with at least {MIN_FINGERPRINTS} fingerprints in the shorter "
    "answer (about three lines): one-line answers never. Similarity: the share of the shorter answer found in the "
    "other. No grade was changed, and this is not evidence of copying by itself: students may have worked together "
    "as allowed, or followed the same example. Read the two notebooks side by side before deciding anything.")
OWN_CELLS = "cells of their own"  # code cells a student added: not an answer cell, but their code

_KEEP = set(dir(builtins)) | set(keyword.kwlist) | {"self", "cls"}
_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER, tokenize.TYPE_COMMENT}
# Layout as structure only; any number one token (a changed constant is a detail, not another answer); any string.
_AS = {tokenize.NEWLINE: ";", tokenize.INDENT: "{", tokenize.DEDENT: "}", tokenize.NUMBER: "0", tokenize.STRING: '""'}
_MAGIC = re.compile(r"^\s*[%!?]")  # IPython's magics and shell lines: not Python, and never anyone's answer


@dataclass
class Pair:
    """Two students whose answers are alike."""

    a: str
    b: str
    similarity: float  # over every answer cell of theirs together
    tasks: list[tuple[str, float]] = field(default_factory=list)  # (task, similarity): those alike by themselves
    identical: bool = False  # every answer cell the same text, byte for byte

    def how_alike(self) -> str:
        return f"{self.similarity:.0%}" + (" (the same code, byte for byte)" if self.identical else "")

    def describe(self) -> str:  # the tasks alike: "log_softmax 100%, train_lm 92%"
        return ", ".join(f"{t} {s:.0%}" for t, s in self.tasks) or "no single task; their answers together"


def tokens(source: str) -> list[str]:
    """``source`` as normalised tokens: no comments, docstrings or layout, and every local name ``V``.

    Names the code only reads (``torch``, ``F``, ``math``), builtins, keywords and attributes (``.sum``) are
    kept: they say what the code does. Every other name becomes one placeholder, not a numbered one, so that a
    variable added at the top does not renumber every name after it.
    """
    source = "\n".join("" if _MAGIC.match(line) else line for line in source.splitlines())
    try:
        raw = list(tokenize.generate_tokens(io.StringIO(source + "\n").readline))
    except (tokenize.TokenError, SyntaxError):  # unfinished code: its words and symbols, still comparable
        words = re.findall(r"\w+|[^\w\s]", re.sub(r"#.*", "", source))
        return ["V" if (w[0].isalpha() or w[0] == "_") and w not in _KEEP else w for w in words]
    local = _local_names(source)
    out: list[str] = []
    start = True  # at the start of a statement, where a lone string is a docstring (or a comment by another name)
    docstring = False
    for i, tok in enumerate(raw):
        if docstring and tok.type == tokenize.NEWLINE:
            docstring = False  # the docstring's statement ends: it leaves no trace
            continue
        if tok.type in _SKIP:
            continue
        if tok.type == tokenize.STRING and start and _ends_statement(raw, i):
            docstring = True
            continue
        start = tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
        if tok.type == tokenize.NAME:
            after_dot = bool(out) and out[-1] == "."
            out.append(tok.string if after_dot or tok.string in _KEEP or tok.string not in local else "V")
        else:
            out.append(_AS.get(tok.type, tok.string))
    return out


def _ends_statement(raw: list[tokenize.TokenInfo], i: int) -> bool:
    """Whether the string at ``i`` is a statement by itself (strings concatenated, then the line's end)."""
    j = i + 1
    while j < len(raw) and raw[j].type in (tokenize.STRING, tokenize.COMMENT, tokenize.NL):
        j += 1
    return j >= len(raw) or raw[j].type in (tokenize.NEWLINE, tokenize.ENDMARKER)


@functools.lru_cache(maxsize=4096)
def _local_names(source: str) -> frozenset[str]:
    """The names ``source`` binds: assigned, parameters, defined, loop targets. Not imports: ``torch`` or
    ``np`` say what the code uses."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return frozenset(names)


def fingerprints(source: str) -> set[int]:
    """The winnowed fingerprints of ``source``: in each window of W k-gram hashes, the smallest."""
    toks = tokens(source)
    hashes = [int.from_bytes(hashlib.blake2b("\x1f".join(toks[i:i + K]).encode(), digest_size=8).digest(), "big")
              for i in range(len(toks) - K + 1)]
    if len(hashes) <= W:
        return {min(hashes)} if hashes else set()
    return {min(hashes[i:i + W]) for i in range(len(hashes) - W + 1)}


def similarity(a: set[int], b: set[int]) -> float:
    """Shared fingerprints over the smaller set's: 1.0 when one answer is wholly in the other."""
    return len(a & b) / min(len(a), len(b)) if a and b else 0.0


def answer_cells(nb: nbformat.NotebookNode) -> dict[str, str]:
    """A notebook's answers by task: nbgrader's solution cells by grade id, and the code cells the student
    added (no nbgrader metadata) together under :data:`OWN_CELLS`. Set-up and test cells are not answers."""
    out: dict[str, str] = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and isinstance(meta.get("grade_id"), str):
            out[meta["grade_id"]] = out.get(meta["grade_id"], "") + cell.source + "\n"
        elif not meta:
            out[OWN_CELLS] = out.get(OWN_CELLS, "") + cell.source + "\n"
    return out


def find_alike(notebooks: dict[str, nbformat.NotebookNode], release: nbformat.NotebookNode | None) -> list[Pair]:
    """The pairs of students (by id) whose answers are alike, most alike first."""
    common: set[int] = set()
    for cell in release.cells if release is not None else []:
        if cell.cell_type == "code":
            common |= fingerprints(cell.source)
    answers = {sid: answer_cells(nb) for sid, nb in notebooks.items()}
    prints = {sid: {task: fingerprints(src) for task, src in cells.items()} for sid, cells in answers.items()}
    # Code more than half the class wrote is how the task is done (a hint followed, an idiom of the chapter),
    # not a copy. Held by three at least: in a class of three, the two who are alike are not "most of the class".
    held = Counter(h for tasks in prints.values() for h in set().union(*tasks.values()))
    common |= {h for h, n in held.items() if n >= 3 and n > len(notebooks) / 2}
    prints = {sid: {t: fp - common for t, fp in tasks.items() if fp - common} for sid, tasks in prints.items()}
    pairs = []
    sids = sorted(prints)
    for i, a in enumerate(sids):
        for b in sids[i + 1:]:
            pair = _compare(a, prints[a], b, prints[b])
            if pair is not None:
                pair.identical = answers[a] == answers[b]
                pairs.append(pair)
    return sorted(pairs, key=lambda p: (-p.similarity, p.a, p.b))


def find_alike_in(paths: dict[str, Path], release: Path | None) -> list[Pair]:
    """:func:`find_alike` on notebook files. One that cannot be read is left out: it is reported elsewhere."""
    def read(path: Path | None) -> nbformat.NotebookNode | None:
        try:
            return nbformat.read(path, as_version=4) if path is not None else None
        except Exception:  # noqa: BLE001 - an unreadable notebook has no answers to compare
            return None

    notebooks = {sid: nb for sid, path in paths.items() if (nb := read(path)) is not None}
    return find_alike(notebooks, read(release))


def _alike(x: set[int], y: set[int]) -> float | None:
    s = similarity(x, y)
    return s if s >= THRESHOLD and min(len(x), len(y)) >= MIN_FINGERPRINTS else None


def _compare(a: str, pa: dict[str, set[int]], b: str, pb: dict[str, set[int]]) -> Pair | None:
    """The pair when some task's answers are alike, or all their answers together are (a copy split over
    cells differently); None otherwise."""
    tasks = [(t, s) for t in pa if t in pb and (s := _alike(pa[t], pb[t])) is not None]
    whole_a, whole_b = set().union(*pa.values()), set().union(*pb.values())
    if not tasks and _alike(whole_a, whole_b) is None:
        return None
    return Pair(a, b, similarity(whole_a, whole_b), tasks)
