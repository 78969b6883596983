"""nbgrader preprocessors that make ``nbgrader autograde`` run lmbook's hardened grading.

``autograder/nbgrader_config.py`` puts :class:`Hygiene` first in nbgrader's
sanitizing preprocessors and :class:`SandboxedExecute` in place of its
``Execute``, so ``nbgrader autograde``, ``export`` and ``generate_feedback``
(and ``lmbook-grade``, which drives them) give the same, hardened, grades:

* :class:`Hygiene` takes only what a submission may change: the answers.
  Cell tags that change how cells run (``skip-execution``, ``raises-exception``...)
  are dropped, a copy-pasted test cell (a duplicate ``grade_id``) and metadata the
  assignment does not have are demoted to ordinary cells, and deleted test or
  answer cells are put back from the gradebook. It notes what it changed.
* :class:`SandboxedExecute` grades the notebook with :mod:`lmbook.grading.judge`
  (student code in a sandbox, verdicts outside it) and writes the outputs into the
  notebook, so nbgrader's ``SaveAutoGrades`` reads a test cell with an error as 0
  points and one without as full points. Results are cached in the course folder
  by the notebook's content and the grader's code, so ``lmbook-grade`` can grade a
  class in parallel first and let nbgrader record the grades afterwards.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
from pathlib import Path

import nbformat
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool, Float, Unicode

from . import interrupt
from .graded import DEFAULT_TIMEOUT, Graded, ReferenceFailed, Verdict, is_test_cell

# Tags that change whether or how a cell runs (nbclient, Jupyter Book, nbval...).
EXECUTION_TAGS = {"skip-execution", "raises-exception", "skip", "remove-cell", "remove-input", "nbval-skip",
                  "nbval-ignore-output", "nbval-raises-exception", "skip-test"}


def _source_cells(resources) -> list:
    from nbgrader.api import Gradebook

    info = resources["nbgrader"]
    with Gradebook(info["db_url"]) as gb:
        notebook = gb.find_notebook(info["notebook"], info["assignment"])
        points = {c.name: float(c.max_score) for c in notebook.grade_cells}
        solutions = {c.name for c in notebook.solution_cells}
        return [{"name": c.name, "cell_type": c.cell_type, "source": c.source, "locked": c.locked,
                 "metadata": {"grade": c.name in points, "grade_id": c.name, "locked": c.locked,
                              "schema_version": 3, "solution": c.name in solutions, "task": False,
                              **({"points": points[c.name]} if c.name in points else {})}}
                for c in notebook.source_cells]


def _restore(cell, src: dict) -> None:
    """The assignment's own role (and, for a locked cell, text) for a cell the student may not change."""
    if cell.cell_type != src["cell_type"]:
        fresh = (nbformat.v4.new_code_cell if src["cell_type"] == "code" else nbformat.v4.new_markdown_cell)("")
        cell.clear()
        cell.update(fresh)
    cell.metadata["nbgrader"] = dict(src["metadata"])
    if src["locked"]:
        cell.source = src["source"]


def _kept_copies(nb, known: dict) -> dict[str, int]:
    """For each grade_id of the assignment, the cell that keeps it: where a student copied a cell (a test cell
    pasted above its answer, to run it early, or below), the copy in the original's place.

    That is the one whose position agrees best with the assignment's order of the cells whose grade_id appears
    once (fewest of them on the wrong side of it); of copies alike, the first."""
    cells: dict[str, list[int]] = {}
    for i, cell in enumerate(nb.cells):
        meta = cell.get("metadata")
        meta = meta.get("nbgrader") if isinstance(meta, dict) else None
        gid = meta.get("grade_id") if isinstance(meta, dict) else None
        if isinstance(gid, str) and gid in known:
            cells.setdefault(gid, []).append(i)
    rank = {name: k for k, name in enumerate(known)}
    single = [(at[0], rank[gid]) for gid, at in cells.items() if len(at) == 1]

    def misplaced(gid: str, i: int) -> int:
        return sum((r < rank[gid]) != (j < i) for j, r in single)

    return {gid: min(at, key=lambda i: (misplaced(gid, i), i)) for gid, at in cells.items()}


def _own_metadata(nb) -> dict:
    """The notebook's ``lmbook`` metadata, where the grader writes what it did: a dictionary, whatever was there."""
    if not isinstance(nb.metadata.get("lmbook"), dict):
        nb.metadata["lmbook"] = nbformat.NotebookNode()
    return nb.metadata["lmbook"]


class Hygiene(Preprocessor):
    """Keep only what a student may change; note everything else that was ignored or restored."""

    enabled = Bool(True).tag(config=True)

    def preprocess(self, nb, resources):
        notes: list[str] = []
        source = _source_cells(resources)
        known = {c["name"]: c for c in source}
        # The grader's own metadata (what it did, what it flagged) is written afresh below: a student's is ignored,
        # and noted where it could not have been the grader's (a list, a string, a number...).
        own = nb.metadata.pop("lmbook", None)
        if own is not None and not isinstance(own, dict):
            notes.append(f"malformed lmbook metadata of the notebook (a {type(own).__name__}) was ignored")
        elif own:
            odd = [k for k, v in own.items() if not (isinstance(v, list) and all(isinstance(x, str) for x in v))]
            if odd:
                notes.append(f"malformed lmbook metadata of the notebook ({', '.join(map(repr, odd[:6]))}: not a "
                             "list of lines) was ignored")
        kept = _kept_copies(nb, known)
        for i, cell in enumerate(nb.cells):
            if not isinstance(cell.get("metadata"), dict):
                notes.append(f"cell {i}: malformed cell metadata was ignored")
                cell["metadata"] = nbformat.NotebookNode()
            tags = cell.metadata.pop("tags", None)
            if isinstance(tags, list) and EXECUTION_TAGS & set(map(str, tags)):
                notes.append(f"cell {i}: ignored the tag(s) {sorted(EXECUTION_TAGS & set(map(str, tags)))}")
            meta = cell.metadata.get("nbgrader")
            if meta is None:
                continue
            gid = meta.get("grade_id") if isinstance(meta, dict) else None
            if not isinstance(gid, str):  # a list, a number...: metadata no tool of nbgrader's wrote
                shape = "not a dictionary" if not isinstance(meta, dict) else f"its grade_id is a {type(gid).__name__}"
                notes.append(f"cell {i}: malformed nbgrader metadata ({shape}) was ignored")
                del cell.metadata["nbgrader"]
            elif gid not in known:
                notes.append(f"cell {i}: nbgrader metadata for {gid[:80]!r}, which is not part of the assignment, "
                             "was ignored")
                del cell.metadata["nbgrader"]
            elif kept[gid] != i:
                notes.append(f"cell {i}: a second copy of the cell {gid!r} was graded as an ordinary cell "
                             f"(the one in the assignment's place, cell {kept[gid]}, keeps its role)")
                del cell.metadata["nbgrader"]
            else:
                role = ("grade", "solution", "locked", "points")
                if any(meta.get(k) != known[gid]["metadata"].get(k) for k in role):
                    notes.append(f"cell {i}: the nbgrader settings of {gid!r} were changed; restored them")
                _restore(cell, known[gid])
        # Put back deleted cells of the assignment, each after the cell that precedes it in the original.
        positions = {c.metadata["nbgrader"]["grade_id"]: i for i, c in enumerate(nb.cells)
                     if "nbgrader" in c.metadata}
        for k, src in enumerate(source):
            if src["name"] in positions:
                continue
            before = [positions[s["name"]] for s in source[:k] if s["name"] in positions]
            at = max(before) + 1 if before else 0
            cell = (nbformat.v4.new_code_cell if src["cell_type"] == "code" else nbformat.v4.new_markdown_cell)(
                src["source"])  # a deleted answer cell comes back as the stub, and scores 0
            _restore(cell, src)
            nb.cells.insert(at, cell)
            positions = {g: (p + 1 if p >= at else p) for g, p in positions.items()}
            positions[src["name"]] = at
            notes.append(f"the cell {src['name']!r} was missing and was restored from the assignment")
        _own_metadata(nb)["hygiene"] = notes
        for note in notes:
            self.log.warning("%s: %s", resources["nbgrader"].get("student", "?"), note)
        return nb, resources


@functools.cache
def grader_fingerprint() -> str:
    """Changes whenever lmbook's code (checks, references, runner, judge, the corpus...) changes."""
    h = hashlib.sha256()
    package = Path(__file__).resolve().parent.parent
    for path in sorted(package.rglob("*.py")):
        h.update(str(path.relative_to(package)).encode() + path.read_bytes())
    return h.hexdigest()[:16]


def notebook_key(nb) -> str:
    """What a grading result depends on: every code cell's text and role, in order, and the grader."""
    parts = [grader_fingerprint()]
    for cell in nb.cells:
        if cell.cell_type == "code":
            parts.append(json.dumps([is_test_cell(cell), cell.source]))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def cache_dir_for(resources, configured: str) -> Path:
    if configured:
        return Path(configured)
    db = resources["nbgrader"]["db_url"].removeprefix("sqlite:///")
    return Path(db).parent / "lmbook_cache"


def cell_ids(nb) -> dict[int, str]:
    """Each code cell's identity: its role and text (what :func:`notebook_key` hashes), and which of the
    cells alike it is.

    Cached results are stored and applied by these, never by position: a notebook that differs from
    another by a markdown cell has the same code cells at other indices."""
    ids: dict[int, str] = {}
    seen: dict[str, int] = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            h = hashlib.sha256(json.dumps([is_test_cell(cell), cell.source]).encode()).hexdigest()[:24]
            ids[i] = f"{h}-{seen.get(h, 0)}"
            seen[h] = seen.get(h, 0) + 1
    return ids


def load_cached(cache: Path, key: str, nb) -> Graded | None:
    """The cached result for ``nb``, its cells' outputs and verdicts put on ``nb``'s own cells."""
    index = {ident: i for i, ident in cell_ids(nb).items()}
    try:
        d = json.loads((cache / f"{key}.json").read_text())
        for part in ("outputs", "verdicts"):
            d[part] = {str(index[ident]): v for ident, v in d[part].items()}
        return Graded.from_json(d)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # absent, unreadable, or for cells this notebook does not have: grade it afresh


def store(cache: Path, key: str, graded: Graded, nb) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    ids = cell_ids(nb)
    d = graded.to_json()
    for part in ("outputs", "verdicts"):
        d[part] = {ids[int(i)]: v for i, v in d[part].items()}
    tmp = cache / f".{key}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(d))
    os.replace(tmp, cache / f"{key}.json")  # atomic: a killed batch never leaves half a result


class SandboxedExecute(Preprocessor):
    """nbgrader's Execute, replaced: sandboxed run, verdicts outside the kernel, outputs into the notebook."""

    enabled = Bool(True).tag(config=True)
    timeout = Float(DEFAULT_TIMEOUT, help="seconds per cell").tag(config=True)
    cache_dir = Unicode("", help="results cache (default: lmbook_cache beside the gradebook)").tag(config=True)
    no_sandbox = Bool(os.environ.get("LMBOOK_NO_SANDBOX") == "1",
                      help="run student code without bubblewrap (trusted notebooks only)").tag(config=True)
    partial_credit = Bool(False, help="a failed hidden-test cell earns its points in proportion to the cases "
                                      "its answer passed (lmbook-grade --partial-credit)").tag(config=True)

    def preprocess(self, nb, resources):
        key = notebook_key(nb)
        cache = cache_dir_for(resources, self.cache_dir)
        graded = load_cached(cache, key, nb)
        if graded is None:
            from . import judge  # here only: torch and the checks cost every nbgrader step seconds to import

            # The reference solution first, in this same sandbox and configuration: a grader that cannot give
            # it full marks grades nobody (ReferenceFailed, one line, for every submission).
            seconds = self._reference_seconds(resources, cache)
            with interrupt.unwinding():  # stopping nbgrader (or lmbook-grade) removes the sandbox's folder too
                graded = judge.grade_notebook(nb, use_sandbox=not self.no_sandbox, timeout=self.timeout,
                                              reference_seconds=seconds)
            store(cache, key, graded, nb)
        apply(nb, graded, self.partial_credit)
        # The one flagging rule, as lmbook-grade applies it: tampering (no credit) and evidence for review.
        _own_metadata(nb)["flagged"] = graded.flagged
        student = resources.get("nbgrader", {}).get("student", "?")
        for line in graded.flagged:
            self.log.warning("%s: flagged: %s", student, line)
        # A hidden training test's figures (perplexity on the hidden text, training time): the instructor's, in
        # nbgrader's log and the autograded notebook's metadata, never in a cell the feedback shows
        _own_metadata(nb)["instructor"] = list(graded.instructor)
        for line in graded.instructor:
            self.log.info("%s: %s", student, line)
        if graded.problem:
            self.log.warning("%s: %s", student, graded.problem)
        return nb, resources

    def _reference_seconds(self, resources, cache: Path) -> float | None:
        """How long the reference solution's run took here; raises ReferenceFailed if it is not full
        marks. None where this nbgrader run has no source folder to take it from."""
        info = resources.get("nbgrader", {})
        converter = self.parent
        while converter is not None and not hasattr(converter, "coursedir"):
            converter = getattr(converter, "parent", None)
        if converter is None or "assignment" not in info or "notebook" not in info:
            return None
        coursedir = converter.coursedir
        source = Path(coursedir.format_path(coursedir.source_directory, ".", info["assignment"])) / (
            info["notebook"] + ".ipynb")
        if not source.exists():
            return None
        memo = (str(source.resolve()), self.no_sandbox, self.timeout)
        if memo not in _references:
            from . import judge

            try:
                with interrupt.unwinding():
                    _references[memo] = judge.preflight(source, use_sandbox=not self.no_sandbox,
                                                        timeout=self.timeout, cache=cache)
            except ReferenceFailed as e:
                _references[memo] = e
        if isinstance(_references[memo], ReferenceFailed):
            raise _references[memo]
        return _references[memo]


_references: dict[tuple, float | ReferenceFailed] = {}  # per process: one preflight per source notebook


def apply(nb, graded: Graded, partial_credit: bool = False) -> None:
    """Write the graded outputs into the notebook's code cells (nothing else).

    ``partial_credit``: a failed hidden-test cell whose answer passed some cases shows the points earned as
    its value (nbgrader's partial credit) instead of an error (no points).
    """
    count = 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        outs = graded.outputs.get(i)
        if outs is None:
            cell.outputs, cell.execution_count = [], None
            if is_test_cell(cell):  # never ran: an error, so it scores 0
                cell.outputs = [nbformat.from_dict(o) for o in Verdict(False, [
                    "not graded: the notebook stopped before this cell"]).outputs()]
            continue
        count += 1
        cell.execution_count = count
        v = graded.verdicts.get(i)
        if partial_credit and v is not None and not v.passed and v.hidden and v.cases and v.cases[0] > 0:
            points = float(cell.metadata["nbgrader"]["points"])
            outs = v.partial_outputs(round(points * v.cases[0] / v.cases[1], 2), points)
        cell.outputs = [nbformat.from_dict(copy.deepcopy(o)) for o in outs]
        for o in cell.outputs:
            if o.output_type == "execute_result":
                o.execution_count = count


def sanitize_preprocessors() -> list[type]:
    """nbgrader's sanitizing steps of ``autograde``, with :class:`Hygiene` first (one list for both users)."""
    from nbgrader.preprocessors import (
        CheckCellMetadata,
        ClearOutput,
        DeduplicateIds,
        OverwriteCells,
        OverwriteKernelspec,
    )

    return [Hygiene, ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata]


def autograde_preprocessors() -> list[type]:
    """nbgrader's grading steps of ``autograde``, with :class:`SandboxedExecute` in place of ``Execute``."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import (
        AssignLatePenalties,
        CheckCellMetadata,
        IgnorePattern,
        LimitOutput,
        SaveAutoGrades,
    )

    return [SandboxedExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput, SaveAutoGrades,
            AssignLatePenalties, CheckCellMetadata]
