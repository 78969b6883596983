"""Where a class's submissions are, and the one notebook of each that gets graded.

Only reading happens here: submissions are never modified, and a zip is unpacked into a scratch folder.
Submissions are taken as LMS downloads hold them: Canvas's, Moodle's and Blackboard's own names (with the
student's id in the LMS, the late marker and the attempt kept), names in any script and in any byte encoding,
macOS and Windows litter, notebooks saved by any Jupyter, symbolic links (never followed), damaged zip
entries, a stub beside the real notebook. Whatever goes wrong with one submission is said in that student's
status or notes, and never stops the others.
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

from . import lms as lms_names
from .archive import DEFAULT_ZIP_LIMITS, MB, EntryProblem, ZipLimits, display_name, extract_zip, is_litter
from .student import Student

MAX_NOTEBOOK_BYTES = 20 * MB  # code and text, after outputs are removed (lmbook-grade --max-notebook-mb)
# The file as sent, outputs included: past this it is not even opened (parsing JSON takes ~10x its size).
MAX_FILE_BYTES = 500 * MB
MAX_ID_BYTES = 120  # nbgrader makes folders named after ids; file systems allow 255 bytes per name
MAX_METADATA_DEPTH = 32  # deeper metadata is no editor's: it is dropped (and said) before anything reads it
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
    """Flat downloads not named by a known LMS are taken as ``<student>_<anything>.ipynb``."""
    return safe_id(Path(filename).stem.split("_")[0])


def _give_unique_ids(students: list[Student]) -> None:
    """Two submissions that make the same id are both graded: one keeps it, the other gets ``~2``.

    The one whose folder (or LMS name) is exactly the id keeps it, so that grades uploaded by id reach the
    student the id names; otherwise the first in name order. Ids are compared ignoring case: on macOS and
    Windows, nbgrader's folders "Ann" and "ann" are one folder. ``~`` is never in an id made by
    :func:`safe_id`, so a suffixed id cannot clash with a real one.
    """
    taken: dict[str, Student] = {}
    for st in sorted(students, key=lambda st: st.source != st.sid):  # stable: name order otherwise
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
class _Item:
    """One file of a student's submission, found without following any symbolic link."""

    path: Path
    shown: str  # where it is, for the instructor (decoded, relative to the class folder or the student's folder)
    original: str  # its name as the student uploaded it (the LMS's prefix removed)
    attempt: tuple = ()  # later attempts sort last (Blackboard's attempt time)
    link: str | None = None  # a symbolic link: where it points (never opened)
    odd: bool = False  # neither a file nor a folder (a fifo, a device), or a folder that cannot be read

    @property
    def is_notebook(self) -> bool:
        return self.original.endswith(".ipynb") and not self.odd


def _link_target(path: Path) -> str:
    try:
        return display_name(os.readlink(path))[0]  # the link's own text: the file it points to is never opened
    except OSError:
        return "?"


def _walk(folder: Path, prefix: str = "", attempt: tuple = ()) -> list[_Item]:
    """Every file under ``folder`` (litter left out), links and odd entries marked, none followed."""
    items: list[_Item] = []
    todo = [(folder, prefix)]
    while todo:
        current, shown_dir = todo.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            items.append(_Item(current, shown_dir.rstrip("/") or ".", "", attempt, odd=True))
            continue
        for e in entries:
            if is_litter(e.name):
                continue
            name = display_name(e.name)[0]
            path, shown = Path(e.path), shown_dir + name
            if e.is_symlink():
                items.append(_Item(path, shown, name, attempt, link=_link_target(path)))
            elif e.is_dir(follow_symlinks=False):
                todo.append((path, shown + "/"))
            elif e.is_file(follow_symlinks=False):
                items.append(_Item(path, shown, name, attempt))
            else:
                items.append(_Item(path, shown, name, attempt, odd=True))
    return sorted(items, key=lambda it: it.shown)


def _answers(path: Path) -> dict[str, str] | None:
    """The notebook's answer cells (nbgrader's solution cells) by grade id; None when it cannot be read."""
    try:
        nb = json.loads(_read_file(path).decode("utf-8-sig"))
        cells = nb["cells"] if isinstance(nb, dict) else None
        out = {}
        for cell in cells if isinstance(cells, list) else []:
            meta = cell.get("metadata", {}).get("nbgrader", {}) if isinstance(cell, dict) else {}
            if isinstance(meta, dict) and meta.get("solution") and isinstance(meta.get("grade_id"), str):
                src = cell.get("source", "")
                out[meta["grade_id"]] = ("".join(src) if isinstance(src, list) else str(src)).strip()
        return out
    except Exception:  # noqa: BLE001 - any notebook that cannot be read is simply not a stub
        return None


def is_stub(path: Path, stub: dict[str, str]) -> bool:
    """Whether the notebook is the released exercise with no answer written: every answer cell as released."""
    answers = _answers(path)
    return bool(stub) and bool(answers) and all(answers.get(gid, src) == src for gid, src in stub.items())


def stub_answers(release: Path | None) -> dict[str, str]:
    """The released exercise's answer cells (the stubs students start from), by grade id."""
    return (_answers(release) or {}) if release is not None and release.exists() else {}


def _choose(st: Student, items: list[_Item], notebook_name: str, stub: dict[str, str]) -> None:
    """Set the notebook to grade among the student's files, or the status saying why none.

    The rule: never a notebook that is the released stub when another has answers; then the one named as the
    assignment (``ch06.ipynb``, also as an LMS renames a second upload, ``ch06-1.ipynb``); then the latest
    attempt, then the latest upload of that name. A notebook that is a symbolic link is never opened, and
    never replaced by another file. Several notebooks with answers and none named as the assignment: not
    graded, and the status names them (the instructor chooses).
    """
    nbs = [it for it in items if it.is_notebook and it.link is None]
    links = [it for it in items if it.is_notebook and it.link is not None]
    named = [it for it in nbs if lms_names.base_name(it.original)[0] == notebook_name]
    named_links = [it for it in links if lms_names.base_name(it.original)[0] == notebook_name]
    if (named_links and not named) or (links and not nbs):
        link = (named_links or links)[0]
        st.status = (f"not graded: the notebook {link.shown} is a symbolic link (to {link.link}), which the grader "
                     "never follows; ask the student for the notebook itself")
        st.notebook = None
        return
    if not nbs:
        st.status = f"no notebook found (expected {notebook_name})"
        return
    stubs = {id(it) for it in nbs if len(nbs) > 1 and is_stub(it.path, stub)}

    def rank(it: _Item) -> tuple:
        name, n = lms_names.base_name(it.original)
        return (id(it) not in stubs, it.attempt, name == notebook_name, n)

    best = max(rank(it) for it in nbs)
    top = [it for it in nbs if rank(it) == best]
    if len(top) > 1 and not best[2]:
        st.status = (f"not graded: {len(top)} notebooks and none named {notebook_name} ("
                     + ", ".join(it.shown for it in top[:6]) + "): grade the right one by hand")
        return
    chosen = top[0]
    st.notebook = chosen.path
    others = [it for it in nbs if it is not chosen]
    if lms_names.base_name(chosen.original)[0] != notebook_name:
        st.notes.append(f"graded {chosen.shown} as {notebook_name} (the notebook was renamed)")
    if others:
        why = []
        if any(id(it) in stubs for it in others):
            why.append("the others are the released exercise with no answer written")
        if chosen.attempt and any(it.attempt < chosen.attempt for it in others):
            why.append("it is the latest attempt")
        st.notes.append(f"graded {chosen.shown} of {len(nbs)} notebooks" + (f" ({'; '.join(why)})" if why else "")
                        + ": not graded: " + ", ".join(it.shown for it in others[:6]))


def _describe_rest(st: Student, items: list[_Item], kept: set[int]) -> None:
    """Notes on what else the student sent: links (never followed), other files, odd entries."""
    st.notes += [f"ignored a symbolic link: {it.shown} (to {it.link})" for it in items
                 if it.link is not None and id(it) not in kept]
    many = sum(it.is_notebook and it.link is None for it in items) > 1  # the notebooks are named by _choose
    extra = [it.shown for it in items if it.link is None and not it.odd and it.path != st.notebook
             and id(it) not in kept and not (many and it.is_notebook)]
    if extra:
        st.notes.append(f"ignored {len(extra)} other file(s): {', '.join(extra[:8])}" + (" ..." if len(extra) > 8
                                                                                       else ""))
    odd = [it.shown for it in items if it.odd]
    if odd:
        st.notes.append("ignored what is neither a file nor a folder: " + ", ".join(odd[:8]))


def _named_student(sid: str, source: str, decoded: bool) -> Student:
    st = Student(sid, source=source)
    if decoded:
        st.notes.append(f"the name {source!r} was not UTF-8 on disk (as unzip leaves the names of a Windows zip): "
                        "read it as Windows-1252 (Latin-1); check the student's name")
    return st


def _folder_student(folder: Path, notebook_name: str, stub: dict[str, str]) -> Student:
    source, decoded = display_name(folder.name)
    st = _named_student(safe_id(source), source, decoded)
    items = _walk(folder)
    _choose(st, items, notebook_name, stub)
    link_in_status = {id(it) for it in items if it.link is not None and it.shown in st.status}
    chosen_nb = {id(it) for it in items if it.path == st.notebook}
    _describe_rest(st, items, link_in_status | chosen_nb)
    return st


def _student_of(entry: Path, notebook_name: str, stub: dict[str, str]) -> Student | None:
    """The submission at one entry of a plain class folder; None for a file that is not a submission."""
    source, decoded = display_name(entry.name)
    if entry.is_symlink():
        sid = _flat_id(source) if entry.suffix == ".ipynb" else safe_id(source)
        st = _named_student(sid, source, decoded)
        st.status = (f"not graded: the submission {source} is a symbolic link (to {_link_target(entry)}), which "
                     "the grader never follows")
        return st
    if entry.is_dir():
        return _folder_student(entry, notebook_name, stub)
    if entry.suffix == ".ipynb" and entry.is_file():
        st = _named_student(_flat_id(source), source, decoded)
        st.notebook = entry
        return st
    return None


def _add_zip_problems(st: Student, problems: list[EntryProblem], notebook_name: str) -> None:
    """Zip entries of this student that were not unpacked (or unpacked with a remark): notes; the status when
    it was their notebook."""
    st.notes += [f"zip: {p.message}" for p in problems]
    refused = [p for p in problems if p.refused]
    lost_notebook = next((p for p in refused if p.is_notebook), None)
    base = lms_names.base_name(st.notebook.name)[0] if st.notebook is not None else ""
    graded_exact = base == notebook_name or base.endswith("_" + notebook_name)  # as sent, or LMS-prefixed
    if (st.notebook is None and refused) or (lost_notebook is not None and not graded_exact):
        st.notebook = None  # never grade another notebook in place of the one that could not be unpacked
        st.status = f"not graded: {(lost_notebook or refused[0]).message}"


# ----------------------------------------------------------------------------- LMS downloads


@dataclass
class ClassFolder:
    """The students found in a class folder, and what was found out about the download itself."""

    students: list[Student]
    lms: str | None = None  # the LMS whose names the download has (None: a plain folder of student folders)
    notes: list[str] = field(default_factory=list)  # about the download, for the console and the report


def _top_entries(root: Path, zip_problems: dict[str, list[EntryProblem]]) -> list[tuple[str, bool]]:
    names = []
    for name in sorted({p.name for p in root.iterdir()} | set(zip_problems)):
        if name.startswith(".") or is_litter(name):
            continue
        path = root / name
        names.append((name, path.is_dir() and not path.is_symlink()))
    return names


def _receipts(root: Path, names: list[tuple[str, bool]]) -> dict[str, str]:
    """Blackboard usernames -> student names, from the receipts (``.txt`` files) of the download."""
    found: dict[str, str] = {}
    for name, is_dir in names:
        path = root / name
        if is_dir or not name.endswith(".txt") or path.is_symlink() or not path.is_file():
            continue
        try:
            text = _read_file(path)[:20_000].decode("utf-8", errors="replace")
        except _Unreadable:
            continue
        user = lms_names.receipt_user(text)
        if user:
            found.setdefault(*user)
    return found


@dataclass
class _Gathered:
    """Everything one LMS id has in the download."""

    name: str = ""
    late: bool = False
    submitted_at: object = None  # the latest attempt's time (Blackboard)
    items: list[_Item] = field(default_factory=list)
    tops: list[str] = field(default_factory=list)  # the class folder's entries that are theirs


def _lms_students(root: Path, lms: str, names: list[tuple[str, bool]], notebook_name: str,
                  zip_problems: dict[str, list[EntryProblem]], stub: dict[str, str]) -> ClassFolder:
    """One student per LMS id, their files gathered from every name the LMS gave them."""
    receipts = _receipts(root, names) if lms == "blackboard" else {}
    label = lms_names.LABELS[lms]
    by_key: dict[str, _Gathered] = {}
    plain: list[str] = []
    for name, is_dir in names:
        shown = display_name(name)[0]
        entry = lms_names.parse(shown, lms, is_dir, receipts)
        if entry is None:
            plain.append(name)
            continue
        g = by_key.setdefault(entry.key, _Gathered())
        g.tops.append(name)
        g.name = g.name or entry.name
        g.late |= entry.late
        if entry.submitted_at and (g.submitted_at is None or entry.submitted_at > g.submitted_at):
            g.submitted_at = entry.submitted_at
        path = root / name
        attempt = (entry.submitted_at,) if entry.submitted_at else ()
        if entry.kind == "receipt" or (name in zip_problems and not path.exists() and not path.is_symlink()):
            continue
        if is_dir:
            inner = _walk(path, shown + "/", attempt)
            # Moodle's online text beside the files is never the answer: listed, never a notebook
            g.items += [_Item(it.path, it.shown, "", attempt, it.link, it.odd) for it in inner] \
                if entry.kind == "text" else inner
        elif path.is_symlink():
            g.items.append(_Item(path, shown, entry.original, attempt, link=_link_target(path)))
        elif path.is_file():
            g.items.append(_Item(path, shown, entry.original if entry.kind == "file" else "", attempt))
        else:
            g.items.append(_Item(path, shown, entry.original, attempt, odd=True))
    students = []
    for key, g in by_key.items():
        who = g.name or key
        st = Student(safe_id(key if lms == "blackboard" else f"{who}_{key}"), source=display_name(g.tops[0])[0],
                     lms=lms, lms_id=key, name=who, late=g.late, submitted_at=g.submitted_at)
        pool = g.items
        if lms == "blackboard":
            attempts = sorted({it.attempt for it in g.items if it.attempt})
            if len(attempts) > 1:
                st.notes.append(f"{len(attempts)} attempts: graded the latest, of {attempts[-1][0]:%Y-%m-%d %H:%M}")
            latest = [it for it in g.items if attempts and it.attempt == attempts[-1]]
            if latest and any(it.is_notebook for it in latest):
                pool = latest
            elif any(it.is_notebook for it in g.items):
                st.warnings.append("the latest attempt holds no notebook: graded the notebook of an earlier one")
        _choose(st, pool, notebook_name, stub)
        kept = {id(it) for it in g.items if it.path == st.notebook or (it.link is not None and it.shown in st.status)}
        if lms == "blackboard":  # earlier attempts are the LMS's history, not stray files
            kept |= {id(it) for it in g.items if it not in pool}
        _describe_rest(st, g.items, kept)
        for top in g.tops:
            if top in zip_problems:
                _add_zip_problems(st, zip_problems[top], notebook_name)
        students.append(st)
    notes = []
    if plain:
        notes.append(f"{len(plain)} entr{'y' if len(plain) == 1 else 'ies'} of the download not named as {label} "
                     f"names submissions, taken as plain student folders or files: "
                     + ", ".join(display_name(n)[0] for n in plain[:8]))
        for name in plain:
            st = _plain_student(root, name, notebook_name, zip_problems, stub)
            if st is not None:
                st.notes.append(f"not named as {label} names submissions: no {label} id, so this grade is not in "
                                f"grades-{lms}.csv")
                students.append(st)
    return ClassFolder(students, lms, notes)


def _plain_student(root: Path, name: str, notebook_name: str, zip_problems: dict[str, list[EntryProblem]],
                   stub: dict[str, str]) -> Student | None:
    st = _student_of(root / name, notebook_name, stub)
    if st is None and name in zip_problems:  # everything of theirs was refused: still a student
        source = display_name(name)[0]
        st = Student(_flat_id(source) if name.endswith(".ipynb") else safe_id(source), source=source)
    if st is not None and name in zip_problems:
        _add_zip_problems(st, zip_problems[name], notebook_name)
    return st


def find_class(root: Path, notebook_name: str, zip_problems: dict[str, list[EntryProblem]] | None = None,
               lms: str = "auto", release: Path | None = None) -> ClassFolder:
    """The class's students with the notebook of each to grade, from a plain folder or an LMS download.

    ``lms``: ``canvas``, ``moodle``, ``blackboard``, ``none`` (one sub-folder or ``<student>_*.ipynb`` per
    student), or ``auto`` (the LMS whose names explain most of the folder; said in the notes). ``release``:
    the released exercise, to tell a stub from a notebook with answers. Only the notebook is ever used:
    other files in a submission (a planted ``numpy.py``, data, a copy of the gradebook) are listed in the
    student's notes and otherwise ignored; litter (``__MACOSX``, ``._*``, ``.DS_Store``...) is not even listed.
    ``zip_problems``: entries of the class zip that were not unpacked, by the class folder's entry (the
    student's folder or file) they belong to.
    """
    zip_problems = zip_problems or {}
    stub = stub_answers(release)
    names = _top_entries(root, zip_problems)
    notes = []
    if lms == "auto":
        found, counts = lms_names.detect([(display_name(n)[0], d) for n, d in names])
        lms = found or "none"
        if found:
            notes.append(f"recognised a {lms_names.LABELS[found]} download ({counts[found]} of {len(names)} names "
                         f"are {lms_names.LABELS[found]}'s); --lms none grades it as plain student folders")
    if lms != "none":
        folder = _lms_students(root, lms, names, notebook_name, zip_problems, stub)
        folder.notes[:0] = notes
    else:
        students = [st for name, _ in names if (st := _plain_student(root, name, notebook_name, zip_problems, stub))]
        folder = ClassFolder(students, None, notes)
    _give_unique_ids(folder.students)
    folder.students.sort(key=lambda st: st.sid.casefold())
    return folder


def find_submissions(root: Path, notebook_name: str,
                     zip_problems: dict[str, list[EntryProblem]] | None = None, lms: str = "auto",
                     release: Path | None = None) -> list[Student]:
    """:func:`find_class`'s students."""
    return find_class(root, notebook_name, zip_problems, lms, release).students


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


def _flatten_deep(d: object, limit: int = MAX_METADATA_DEPTH) -> list[str]:
    """Empty every container nested deeper than ``limit`` (a notebook's own structure is 6 deep; metadata an
    editor writes, a few more), without recursion; where it was done, for the notes. Nothing that deep is code
    or text the grader reads, and the grader's own steps (nbformat, nbgrader, copies) would recurse into it."""
    where: list[str] = []
    todo = [(d, 0, "")]
    while todo:
        node, depth, path = todo.pop()
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in list(children):
            if isinstance(v, dict | list):
                if depth + 1 >= limit:
                    node[k] = type(v)()
                    where.append(f"{path}/{k}")
                else:
                    todo.append((v, depth + 1, f"{path}/{k}"))
    return where


def _parse(raw: bytes) -> tuple[nbformat.NotebookNode, object, list[str]]:
    """The notebook as nbformat 4, the major version the file declares, and what was emptied for its depth."""
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark, as some Windows editors write: harmless
    except UnicodeDecodeError as e:
        raise _Unreadable(f"unreadable notebook (the file is not UTF-8 text: byte {e.start})") from None
    try:
        declared = json.loads(text)
    except RecursionError:
        raise _Unreadable("unreadable notebook (its JSON is nested deeper than any notebook: Python's reader "
                          "stops at about 1000 levels); ask the student to save it again from Jupyter") from None
    except ValueError as e:
        raise _Unreadable(f"unreadable notebook (the file is not valid JSON: {e})") from None
    deep = _flatten_deep(declared)
    if deep:
        text = json.dumps(declared)
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
    return nb, declared.get("nbformat") if isinstance(declared, dict) else None, deep


def _strip_outputs(nb: nbformat.NotebookNode) -> None:
    """Outputs are never graded (the grader runs the code again): a 50 MB plot costs nothing."""
    for cell in nb.cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None


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
        nb, version, deep = _parse(raw)
        notes = _repair(nb)
        size = len(nbformat.writes(nb).encode())
    except _Unreadable as e:
        st.status = str(e)
        return None
    except Exception as e:  # noqa: BLE001 - whatever else a file can do to a reader stops this student only
        st.status = f"unreadable notebook ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
        return None
    if deep:
        st.notes.append(f"emptied {len(deep)} entr{'y' if len(deep) == 1 else 'ies'} of the notebook's metadata "
                        f"nested over {MAX_METADATA_DEPTH} levels deep (no editor writes that; code and text are "
                        f"untouched): {', '.join(deep[:3])}")
    if size > max_bytes:
        st.status = (f"notebook too large: {size / MB:.1f} MB of code and text (limit {max_bytes / MB:g} MB) "
                     "after outputs were removed")
        return None
    if isinstance(version, int) and version < 4:
        st.notes.append(f"converted from notebook format {version} to 4")
    if len(raw) > max_bytes:
        st.notes.append(f"the notebook file is {len(raw) / MB:.1f} MB, mostly saved outputs; they were removed "
                        "before grading (the grader runs the code again)")
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
