"""Where a class's submissions are, and the one notebook of each that gets graded.

Only reading happens here: submissions are never modified, and a zip is unpacked into a scratch folder.
"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path

import nbformat

from .reports import Student


def safe_id(name: str) -> str:
    sid = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip("._")
    return sid or "student"


def extract_zip(path: Path, dest: Path) -> Path:
    """Unpack an LMS zip, skipping (and reporting) entries that would land outside ``dest``."""
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as e:
        raise SystemExit(f"{path}: not a readable zip file ({e})") from None
    with zf:
        for info in zf.infolist():
            target = (dest / info.filename).resolve()
            if not target.is_relative_to(dest.resolve()):
                print(f"warning: {path.name}: skipped an entry that points outside the archive: {info.filename!r}",
                      file=sys.stderr)
                continue
            zf.extract(info, dest)
    return dest


def find_submissions(root: Path, notebook_name: str) -> list[Student]:
    """One Student per sub-folder (or per flat ``<student>_*.ipynb`` file), with the notebook to grade.

    Only that notebook is ever used: other files in a submission (a planted ``numpy.py``, data, a copy of
    the gradebook) are listed in the student's notes and otherwise ignored.
    """
    students: dict[str, Student] = {}
    for entry in sorted(root.iterdir()):
        if entry.name.startswith((".", "__MACOSX")):
            continue
        if entry.is_dir():
            sid = safe_id(entry.name)
            files = sorted(p for p in entry.rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts)
            nbs = [p for p in files if p.suffix == ".ipynb"]
            exact = [p for p in nbs if p.name == notebook_name]
            st = Student(sid)
            if exact:
                st.notebook = exact[0]
            elif len(nbs) == 1:  # renamed by the student or the LMS: still theirs
                st.notebook = nbs[0]
                st.notes.append(f"graded {nbs[0].name} as {notebook_name} (the notebook was renamed)")
            else:
                st.status = (f"no notebook found (expected {notebook_name})" if not nbs
                             else f"{len(nbs)} notebooks and none named {notebook_name}")
            extra = [str(p.relative_to(entry)) for p in files if p != st.notebook]
            if extra:
                st.notes.append(f"ignored {len(extra)} other file(s): {', '.join(extra[:8])}"
                                + (" ..." if len(extra) > 8 else ""))
        elif entry.suffix == ".ipynb":
            sid = safe_id(entry.stem.split("_")[0])
            st = Student(sid, notebook=entry)
        else:
            continue
        if sid in students:
            st.status = f"two submissions map to the student id {sid!r}"
            st.notebook = None
        students[sid] = st
    return list(students.values())


def read_submission(st: Student) -> nbformat.NotebookNode | None:
    """The student's notebook as nbformat 4, or None with the reason in ``st.status``."""
    try:
        raw = st.notebook.read_bytes()
        version = json.loads(raw).get("nbformat") if raw.strip().startswith(b"{") else None
        nb = nbformat.reads(raw.decode("utf-8"), as_version=4)
        nbformat.validate(nb)
    except Exception as e:  # invalid JSON, not a notebook, a format nbformat cannot convert...
        st.status = f"unreadable notebook ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
        return None
    if isinstance(version, int) and version < 4:
        st.notes.append(f"converted from notebook format {version} to 4")
    return nb


def class_folder(submissions: Path, tmp: Path) -> Path:
    """The folder of student folders: ``submissions`` itself, or an LMS zip unpacked into ``tmp``."""
    if submissions.is_file() and submissions.suffix == ".zip":
        root = extract_zip(submissions, tmp)
        inner = [p for p in root.iterdir() if not p.name.startswith((".", "__MACOSX"))]
        if len(inner) == 1 and inner[0].is_dir() and not any(inner[0].glob("*.ipynb")):
            root = inner[0]  # a zip of one folder that holds the student folders
        return root
    if not submissions.is_dir():
        raise SystemExit(f"{submissions}: not a folder or a .zip of submissions")
    return submissions


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
