"""Where a class's submissions are, and the one notebook of each that gets graded.

Only reading happens here: submissions are never modified, and a zip is unpacked into a scratch folder.
Submissions are taken as LMS downloads hold them: names in any script, macOS and Windows litter, notebooks
saved by any Jupyter, symbolic links (never followed), damaged zip entries. Whatever goes wrong with one
submission is said in that student's status or notes, and never stops the others.
"""

from __future__ import annotations

import json
import os
import stat
import unicodedata
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .archive import DEFAULT_ZIP_LIMITS, MB, EntryProblem, ZipLimits, extract_zip, is_litter
from .reports import Student

MAX_NOTEBOOK_BYTES = 20 * MB  # code and text, after outputs are removed (lmbook-grade --max-notebook-mb)
# The file as sent, outputs included: past this it is not even opened (parsing JSON takes ~10x its size).
MAX_FILE_BYTES = 500 * MB
MAX_ID_BYTES = 120  # nbgrader makes folders named after ids; file systems allow 255 bytes per name
NOTEBOOK_KEYS = {"cells", "metadata", "nbformat", "nbformat_minor"}
CELL_KEYS = {"code": {"id", "cell_type", "metadata", "source", "outputs", "execution_count"},
             "markdown": {"id", "cell_type", "metadata", "source", "attachments"},
             "raw": {"id", "cell_type", "metadata", "source", "attachments"}}


# ----------------------------------------------------------------------------- student ids


def safe_id(name: str) -> str:
    """A student id nbgrader can use as a folder name and a database key, as close to the name as possible.

    Letters and digits of any script are kept (with their accents and vowel signs), as are ``_.-``; other
    characters become ``_``. Case is kept. NFC first: a zip made on a Mac spells "ë" as two characters.
    """
    out: list[str] = []
    for ch in unicodedata.normalize("NFC", name):
        is_mark = unicodedata.category(ch).startswith("M") and out and out[-1] != "_"  # é, ि after a letter
        out.append(ch if ch.isalnum() or ch in "_.-" or is_mark else "_")
    sid = "".join(out).strip("._")  # never "..", never a hidden folder
    while len(sid.encode()) > MAX_ID_BYTES:
        sid = sid[:-1].rstrip("._")
    return sid or "student"


def _flat_id(filename: str) -> str:
    """LMS flat downloads are named ``<student>_<anything>.ipynb``."""
    return safe_id(Path(filename).stem.split("_")[0])


def _give_unique_ids(students: list[Student]) -> None:
    """Two submissions that make the same id are both graded: the later one (in name order) gets ``~2``.

    Ids are compared ignoring case: on macOS and Windows, nbgrader's folders "Ann" and "ann" are one folder.
    ``~`` is never in an id made by :func:`safe_id`, so a suffixed id cannot clash with a real one.
    """
    taken: dict[str, Student] = {}
    for st in students:
        base, n = st.sid, 1
        first = taken.get(base.casefold())
        while st.sid.casefold() in taken:
            n += 1
            st.sid = f"{base}~{n}"
        if first is not None:
            case = "" if first.sid == base else " (ids that differ only in case count as the same)"
            why = (f"student id clash: the submissions {first.source!r} and {st.source!r} make the same student "
                   f"id{case}, so {first.source!r} was graded as {first.sid!r} and {st.source!r} as {st.sid!r}; "
                   "check which student is which before uploading grades")
            first.notes.append(why)
            st.notes.append(why)
        taken[st.sid.casefold()] = st


# ----------------------------------------------------------------------------- a student's files


@dataclass
class _Listing:
    """What a student's folder holds, found without following any symbolic link."""

    files: list[Path] = field(default_factory=list)  # regular files, litter left out
    links: dict[Path, str] = field(default_factory=dict)  # symbolic link -> where it points
    odd: list[Path] = field(default_factory=list)  # fifos, sockets, devices, unreadable folders


def _list_folder(folder: Path) -> _Listing:
    listing = _Listing()
    todo = [folder]
    while todo:
        current = todo.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            listing.odd.append(current)
            continue
        for e in entries:
            path = Path(e.path)
            if is_litter(e.name):
                continue
            if e.is_symlink():
                listing.links[path] = _link_target(path)
            elif e.is_dir(follow_symlinks=False):
                todo.append(path)
            elif e.is_file(follow_symlinks=False):
                listing.files.append(path)
            else:
                listing.odd.append(path)
    listing.files.sort()
    return listing


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)  # the link's own text: the file it points to is never opened
    except OSError:
        return "?"


def _pick_notebook(st: Student, folder: Path, found: _Listing, notebook_name: str) -> Path | None:
    """Set the notebook to grade (or the status saying why none); the link the status names, if any."""
    nbs = [p for p in found.files if p.suffix == ".ipynb"]
    exact = [p for p in nbs if p.name == notebook_name]
    linked = {p: t for p, t in found.links.items() if p.suffix == ".ipynb"}
    exact_link = next((p for p in linked if p.name == notebook_name), None)
    if exact:
        st.notebook = exact[0]
    elif exact_link is not None or (linked and not nbs):  # never grade another file in place of a linked one
        link = exact_link or min(linked)
        st.status = (f"not graded: the notebook {link.relative_to(folder)} is a symbolic link (to {linked[link]}), "
                     "which the grader never follows; ask the student for the notebook itself")
        return link
    elif len(nbs) == 1:  # renamed by the student or the LMS: still theirs
        st.notebook = nbs[0]
        st.notes.append(f"graded {nbs[0].name} as {notebook_name} (the notebook was renamed)")
    else:
        st.status = (f"no notebook found (expected {notebook_name})" if not nbs
                     else f"{len(nbs)} notebooks and none named {notebook_name}")
    return None


def _folder_student(folder: Path, notebook_name: str) -> Student:
    st = Student(safe_id(folder.name), source=folder.name)
    found = _list_folder(folder)
    in_status = _pick_notebook(st, folder, found, notebook_name)
    st.notes += [f"ignored a symbolic link: {link.relative_to(folder)} (to {target})"
                 for link, target in sorted(found.links.items()) if link != in_status]
    extra = [str(p.relative_to(folder)) for p in found.files if p != st.notebook]
    if extra:
        st.notes.append(f"ignored {len(extra)} other file(s): {', '.join(extra[:8])}" + (" ..." if len(extra) > 8
                                                                                       else ""))
    if found.odd:
        st.notes.append("ignored what is neither a file nor a folder: "
                        + ", ".join(str(p.relative_to(folder)) for p in found.odd[:8]))
    return st


def _student_of(entry: Path, notebook_name: str) -> Student | None:
    """The submission at one entry of the class folder; None for a file that is not a submission."""
    if entry.is_symlink():
        sid = _flat_id(entry.name) if entry.suffix == ".ipynb" else safe_id(entry.name)
        return Student(sid, source=entry.name, status=f"not graded: the submission {entry.name} is a symbolic link "
                       f"(to {_link_target(entry)}), which the grader never follows")
    if entry.is_dir():
        return _folder_student(entry, notebook_name)
    if entry.suffix == ".ipynb" and entry.is_file():
        return Student(_flat_id(entry.name), notebook=entry, source=entry.name)
    return None


def _add_zip_problems(st: Student, problems: list[EntryProblem], notebook_name: str) -> None:
    """A zip entry of this student that was not unpacked: a note; the status when it was their notebook."""
    st.notes += [f"zip: {p.message}" for p in problems]
    lost_notebook = next((p for p in problems if p.is_notebook), None)
    graded_exact = st.notebook is not None and st.notebook.name == notebook_name
    if st.notebook is None or (lost_notebook is not None and not graded_exact):
        st.notebook = None  # never grade another notebook in place of the one that could not be unpacked
        st.status = f"not graded: {(lost_notebook or problems[0]).message}"


def find_submissions(root: Path, notebook_name: str,
                     zip_problems: dict[str, list[EntryProblem]] | None = None) -> list[Student]:
    """One Student per sub-folder (or per flat ``<student>_*.ipynb`` file), with the notebook to grade.

    Only that notebook is ever used: other files in a submission (a planted ``numpy.py``, data, a copy of
    the gradebook) are listed in the student's notes and otherwise ignored; litter (``__MACOSX``, ``._*``,
    ``.DS_Store``...) is not even listed. ``zip_problems``: entries of the class zip that were not unpacked,
    by the class folder's entry (the student) they belong to.
    """
    zip_problems = zip_problems or {}
    students: list[Student] = []
    for name in sorted({p.name for p in root.iterdir()} | set(zip_problems)):
        if name.startswith(".") or is_litter(name):
            continue
        st = _student_of(root / name, notebook_name)
        if st is None and name in zip_problems:  # everything of theirs was refused: still a student
            st = Student(_flat_id(name) if name.endswith(".ipynb") else safe_id(name), source=name)
        if st is None:
            continue
        if name in zip_problems:
            _add_zip_problems(st, zip_problems[name], notebook_name)
        students.append(st)
    _give_unique_ids(students)
    return students


# ----------------------------------------------------------------------------- reading a notebook


class _Unreadable(Exception):
    """The notebook cannot be graded; the message is the student's status."""


def _read_file(path: Path) -> bytes:
    """The file's bytes, never through a symbolic link (one could be swapped in after the folder was listed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise _Unreadable(f"unreadable notebook (could not open it: {e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise _Unreadable("unreadable notebook (not a regular file)")
        if info.st_size > MAX_FILE_BYTES:
            raise _Unreadable(f"notebook too large: the file is {info.st_size / MB:.1f} MB, over the "
                              f"{MAX_FILE_BYTES / MB:g} MB the grader opens at all")
        return f.read(MAX_FILE_BYTES + 1)


def _parse(raw: bytes) -> tuple[nbformat.NotebookNode, object]:
    """The notebook as nbformat 4, and the major version the file declares."""
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark, as some Windows editors write: harmless
    except UnicodeDecodeError as e:
        raise _Unreadable(f"unreadable notebook (the file is not UTF-8 text: byte {e.start})") from None
    try:
        declared = json.loads(text)
    except ValueError as e:
        raise _Unreadable(f"unreadable notebook (the file is not valid JSON: {e})") from None
    try:
        # A schema problem is captured, not logged or warned about: it is repaired or reported below.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nb = nbformat.reads(text, as_version=4, capture_validation_error={})
    except nbformat.ValidationError as e:  # what nbformat cannot even normalize: a required part is missing
        raise _Unreadable(f"unreadable notebook (not a valid Jupyter notebook: {str(e).splitlines()[0][:200]})") \
            from None
    except Exception as e:  # a format nbformat cannot convert, not a notebook at all...
        first = str(e).splitlines()[0][:200] if str(e) else ""
        raise _Unreadable(f"unreadable notebook ({type(e).__name__}: {first})") from None
    return nb, declared.get("nbformat") if isinstance(declared, dict) else None


def _strip_outputs(nb: nbformat.NotebookNode) -> None:
    """Outputs are never graded (the grader runs the code again): a 50 MB plot costs nothing."""
    for cell in nb.cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None


# A 1x1 PNG: what a pasted image becomes (the cell still names it, so its feedback page still renders).
PLACEHOLDER_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="


def _strip_attachments(nb: nbformat.NotebookNode) -> int:
    """Images pasted into markdown cells (attachments) are not code or text and are never graded: each becomes
    a 1x1 placeholder under its own name, as outputs are removed. Returns how many cells had some."""
    removed = 0
    for cell in nb.cells:
        attachments = cell.get("attachments") if isinstance(cell, dict) else None
        if cell.get("cell_type") in ("markdown", "raw") and isinstance(attachments, dict) and attachments:
            cell["attachments"] = {str(name): {"image/png": PLACEHOLDER_PNG} for name in attachments}
            removed += 1
    return removed


def _give_cell_ids(nb: nbformat.NotebookNode) -> None:
    """Every cell a valid, unique id, keeping those it has: deterministic, so a re-run writes the same file."""
    seen: set[str] = set()
    for i, cell in enumerate(nb.cells):
        cid = cell.get("id")
        if not (isinstance(cid, str) and 1 <= len(cid) <= 64 and cid.replace("-", "").replace("_", "").isalnum()
                and cid.isascii() and cid not in seen):
            cid = f"cell-{i}"
            while cid in seen:
                cid += "x"
            cell["id"] = cid
        seen.add(cid)


def _upgrade_minor(nb: nbformat.NotebookNode) -> str | None:
    """Format 4.0-4.4 as 4.5 (which has cell ids); what was done, or None when nothing was needed."""
    minor = nb.get("nbformat_minor")
    if not isinstance(minor, int):
        return None
    had_ids = any("id" in cell for cell in nb.cells)
    _give_cell_ids(nb)
    current = nbformat.v4.nbformat_minor
    if minor >= current:
        return None
    nb["nbformat_minor"] = current
    return (f"its cells have ids, which format 4.{minor} does not allow: read it as format 4.{current}" if had_ids
            else f"read notebook format 4.{minor} as 4.{current}")


def _strip_unknown_keys(nb: nbformat.NotebookNode) -> list[str]:
    """Entries the notebook format does not have (an editor's or a converter's own): removed, and named."""
    removed = [f"{k!r} (top level)" for k in sorted(set(nb) - NOTEBOOK_KEYS)]
    for k in set(nb) - NOTEBOOK_KEYS:
        del nb[k]
    for i, cell in enumerate(nb.cells):
        allowed = CELL_KEYS.get(cell.get("cell_type"), set(cell))
        for k in sorted(set(cell) - allowed):
            removed.append(f"{k!r} (cell {i})")
            del cell[k]
    return removed


def _is_valid(nb: nbformat.NotebookNode) -> bool:
    try:
        with warnings.catch_warnings():  # a 4.5 notebook without cell ids: given ids below, no need to warn
            warnings.simplefilter("ignore")
            nbformat.validate(nb)
    except nbformat.ValidationError:
        return False
    return True


def _repair(nb: nbformat.NotebookNode) -> list[str]:
    """Make a notebook Jupyter can open valid for nbgrader; what was done, for the notes."""
    if not isinstance(nb.get("cells"), list) or not all(isinstance(c, dict) for c in nb.cells):
        raise _Unreadable("unreadable notebook (its cells are not a list of cells)")
    _strip_outputs(nb)
    needed = not _is_valid(nb)  # a notebook valid as saved needs no note, whatever its minor version
    done = [_upgrade_minor(nb)]
    removed = _strip_unknown_keys(nb)
    if removed:
        done.append("removed entries the notebook format does not have: " + ", ".join(removed[:6]))
    try:
        changes, fixed = nbformat.validator.normalize(nb, strip_invalid_metadata=True)
        if changes:
            nb.clear()
            nb.update(nbformat.from_dict(fixed))
            done.append(f"removed {changes} invalid metadata entr{'y' if changes == 1 else 'ies'}")
        nbformat.validate(nb)
    except nbformat.ValidationError as e:
        raise _Unreadable("unreadable notebook (not a valid Jupyter notebook, even after repair: "
                          f"{str(e).splitlines()[0][:200]})") from None
    done = [d for d in done if d]
    return [f"repaired the notebook file (Jupyter opens it; nbgrader needs the standard format): {'; '.join(done)}"] \
        if needed and done else []


def read_submission(st: Student, max_bytes: int = MAX_NOTEBOOK_BYTES) -> nbformat.NotebookNode | None:
    """The student's notebook as nbformat 4.5 without outputs, or None with the reason in ``st.status``.

    ``max_bytes``: the most code and text a notebook may hold once its outputs are removed.
    """
    try:
        raw = _read_file(st.notebook)
        nb, version = _parse(raw)
        notes = _repair(nb)
    except _Unreadable as e:
        st.status = str(e)
        return None
    if _strip_attachments(nb):
        notes.append("images pasted into markdown cells (attachments) were replaced by placeholders: they are not "
                     "graded")
    size = len(nbformat.writes(nb).encode())
    if size > max_bytes:
        st.status = (f"notebook too large: {size / MB:.1f} MB of code and text (limit {max_bytes / MB:g} MB) "
                     "after outputs were removed")
        return None
    if isinstance(version, int) and version < 4:
        st.notes.append(f"converted from notebook format {version} to 4")
    if len(raw) > max_bytes:
        st.notes.append(f"the notebook file is {len(raw) / MB:.1f} MB, mostly saved outputs or pasted images; they "
                        "were removed before grading (the grader runs the code again)")
    st.notes += notes
    return nb


# ----------------------------------------------------------------------------- the class folder


def _zip_root(dest: Path, problems: list[EntryProblem]) -> tuple[str, ...]:
    """The path of the folder holding the student folders: a zip of one folder that holds them is common."""
    tops = {p.name for p in dest.iterdir() if not p.name.startswith(".") and not is_litter(p.name)}
    tops |= {p.parts[0] for p in problems if len(p.parts) > 1}
    if len(tops) != 1:
        return ()
    (top,) = tops
    inner = dest / top
    lost_notebook_here = any(len(p.parts) == 2 and p.parts[0] == top and p.is_notebook for p in problems)
    if inner.is_dir() and not inner.is_symlink() and not lost_notebook_here \
            and not any(p.suffix == ".ipynb" and not is_litter(p.name) for p in inner.iterdir()):
        return (top,)
    return ()


def _by_student(problems: list[EntryProblem], prefix: tuple[str, ...]) -> dict[str, list[EntryProblem]]:
    """Each problem under the class folder's entry it belongs to: the student's folder or flat file."""
    owned: dict[str, list[EntryProblem]] = {}
    for p in problems:
        rest = p.parts[len(prefix):] if p.parts[:len(prefix)] == prefix else ()
        if rest:
            owned.setdefault(rest[0], []).append(EntryProblem(rest, p.message))
    return owned


def class_folder(submissions: Path, tmp: Path,
                 limits: ZipLimits = DEFAULT_ZIP_LIMITS) -> tuple[Path, dict[str, list[EntryProblem]]]:
    """The folder of student folders (``submissions`` itself, or an LMS zip unpacked into ``tmp``), and the
    zip's entries that were not unpacked, by student (see :func:`find_submissions`)."""
    if submissions.is_file() and submissions.suffix == ".zip":
        problems = extract_zip(submissions, tmp, limits)
        prefix = _zip_root(tmp, problems)
        return tmp.joinpath(*prefix), _by_student(problems, prefix)
    if not submissions.is_dir():
        raise SystemExit(f"{submissions}: not a folder or a .zip of submissions")
    return submissions, {}


def resolve_assignments(names: list[str], source: Path) -> list[str]:
    """The assignments to grade, in order: as named, or for ``all`` every folder of ``source`` with a notebook."""
    found = sorted(p.name for p in source.iterdir() if p.is_dir() and any(p.glob("*.ipynb"))) \
        if source.is_dir() else []
    if "all" in names:
        if not found:
            raise SystemExit(f"--assignment all: {source} has no assignment folders (folders holding a notebook)")
        return found
    unknown = [n for n in names if n not in found]
    if unknown:
        raise SystemExit(f"unknown assignment {', '.join(unknown)}: not a folder of {source} with a notebook "
                         f"(there are: {', '.join(found) or 'none'})")
    return list(dict.fromkeys(names))
