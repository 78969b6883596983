"""What Canvas, Moodle and Blackboard put in a submissions download, and the grade files each imports.

In: each LMS names its files its own way, and the names carry what the instructor needs back: the student's
id in the LMS, whether the submission was late, which attempt it is. :func:`parse` reads one name of the
download (a file, or Moodle's per-student folder), :func:`detect` tells which LMS made a download.

- Canvas ("Download Submissions"): flat files ``<lastfirst>[_LATE]_<user id>_<attachment id>_<file name>``;
  a file uploaded twice under one name comes back as ``<name>-1.ipynb``; text and URL entries are
  ``<lastfirst>_<user id>_text.html`` / ``..._link.html``.
- Moodle ("Download all submissions"): ``<Full Name>_<participant id>_assignsubmission_file_/`` folders
  (``_assignsubmission_onlinetext_/`` beside them for online text), or, with "download submissions in
  folders" off, flat files ``<Full Name>_<participant id>_assignsubmission_file_<file name>``. The participant
  id is the number Moodle's grading worksheet identifies the student by ("Participant 123").
- Blackboard ("Assignment File Download"): flat files ``<assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>
  _<file name>``, and a receipt ``<assignment>_<username>_attempt_<...>.txt`` per attempt whose first line is
  ``Name: <First Last> (<username>)``.

Out: :func:`write_canvas`, :func:`write_moodle` and :func:`write_blackboard` write the file each LMS's grade
import reads (the column layouts are documented by each function). Only students the LMS knows (an id from
the download) and whose grade is final (nothing awaits manual grading) are written: a row the LMS cannot
match, or a grade that will change, never reaches the gradebook.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .student import Student

LMS_NAMES = ("canvas", "moodle", "blackboard")
LABELS = {"canvas": "Canvas", "moodle": "Moodle", "blackboard": "Blackboard"}

_CANVAS = re.compile(r"^(?P<name>[^_]+?)(?P<late>_LATE)?_(?P<uid>\d+)_(?:(?P<att>\d+)_(?P<file>.+)|(?P<kind>text|link|"
                     r"media|url)\.html?)$")
_MOODLE = re.compile(r"^(?P<name>.+)_(?P<pid>\d+)_assignsubmission_(?P<plugin>[a-z]+)_(?P<file>.*)$")
_STAMP = r"(?P<stamp>\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2})"
_TAIL = r"(?:_(?P<file>.+)|(?P<receipt>\.txt))"  # the uploaded file's name, or the attempt's receipt
_BLACKBOARD = re.compile(rf"^(?P<assignment>.+)_(?P<user>[^_]+)_attempt_{_STAMP}{_TAIL}$")
_RECEIPT_NAME = re.compile(r"^Name:\s*(?P<name>.*?)\s*\((?P<user>[^()\n]+)\)\s*$", re.M)
_RESUBMITTED = re.compile(r"^(?P<stem>.+?)(?:-(?P<n>\d+)| \((?P<m>\d+)\))$")  # ch06-1.ipynb, ch06 (1).ipynb


@dataclass(frozen=True)
class Entry:
    """One name of a download, as its LMS wrote it."""

    lms: str
    key: str  # the student, as the LMS identifies them: Canvas user id, Moodle participant id, Blackboard username
    name: str  # the student's name as the LMS spelt it ("doejane", "Jane Doe", "Jane Doe (jdoe)")
    original: str  # the file's name as the student uploaded it ("" for a folder, a receipt, an online text)
    late: bool = False
    submitted_at: datetime | None = None  # Blackboard's attempt time
    kind: str = "file"  # "file", "folder" (Moodle), "receipt" (Blackboard), "text" (an online text entry)


def parse(name: str, lms: str, is_dir: bool = False, receipts: dict[str, str] | None = None) -> Entry | None:
    """What the name of one entry of a download says, or None when it is not named as ``lms`` names them.

    ``receipts``: Blackboard usernames (from the receipts) -> names; they settle usernames with underscores.
    """
    if lms == "canvas":
        m = _CANVAS.match(name)
        if not m or is_dir:
            return None
        kind = "text" if m["kind"] else "file"
        return Entry("canvas", m["uid"], m["name"], m["file"] or "", bool(m["late"]), kind=kind)
    if lms == "moodle":
        m = _MOODLE.match(name)
        if not m:
            return None
        full = m["name"]
        kind = "folder" if is_dir else ("file" if m["plugin"] == "file" else "text")
        return Entry("moodle", m["pid"], full, "" if is_dir else m["file"], kind=kind)
    if lms == "blackboard":
        for user in sorted(receipts or {}, key=len, reverse=True):  # the receipts' usernames first: "j_doe"
            m = re.match(rf"^(?P<assignment>.+)_{re.escape(user)}_attempt_{_STAMP}{_TAIL}$", name)
            if m:
                break
        else:
            m = _BLACKBOARD.match(name)
            user = m["user"] if m else ""
        if not m or is_dir:
            return None
        when = datetime.strptime(m["stamp"], "%Y-%m-%d-%H-%M-%S")
        return Entry("blackboard", user, (receipts or {}).get(user, ""), m["file"] or "", submitted_at=when,
                     kind="receipt" if m["receipt"] else "file")
    raise ValueError(f"unknown LMS {lms!r}: one of {', '.join(LMS_NAMES)}")


def receipt_user(text: str) -> tuple[str, str] | None:
    """(username, name) from a Blackboard receipt's ``Name: First Last (username)`` line."""
    m = _RECEIPT_NAME.search(text)
    return (m["user"].strip(), m["name"].strip()) if m else None


def detect(names: Iterable[tuple[str, bool]]) -> tuple[str | None, dict[str, int]]:
    """Which LMS named these (name, is_dir) entries: the one that explains most of them, and each one's count.

    None when no LMS explains at least half of them (a plain folder of student folders).
    """
    names = list(names)
    counts = {lms: sum(parse(n, lms, d) is not None for n, d in names) for lms in LMS_NAMES}
    best = max(LMS_NAMES, key=lambda lms: counts[lms])
    return (best if names and counts[best] * 2 >= len(names) and counts[best] else None), counts


def base_name(original: str) -> tuple[str, int]:
    """A file name without the suffix an LMS or a browser adds to a second upload of the same name, and the
    suffix's number: ``ch06-1.ipynb`` -> (``ch06.ipynb``, 1), ``ch06 (2).ipynb`` -> (``ch06.ipynb``, 2)."""
    stem, dot, ext = original.rpartition(".")
    if not dot:
        stem, ext = original, ""
    m = _RESUBMITTED.match(stem)
    if not m:
        return original, 0
    return m["stem"] + (f".{ext}" if dot else ""), int(m["n"] or m["m"])


# ----------------------------------------------------------------------------- grades out


def _rows(students: Sequence[Student], lms: str) -> tuple[list[Student], list[str]]:
    """The students whose grade goes to the LMS, and why each other one is left out."""
    rows, left_out = [], []
    for st in students:
        if st.lms != lms or not st.lms_id:
            left_out.append(f"{st.sid}: no {LABELS[lms]} id in the download (the submission is not named as "
                            f"{LABELS[lms]} names them): enter this grade by hand")
        elif st.pending:
            left_out.append(f"{st.sid}: {st.pending_points:g} points await manual grading in formgrader: the "
                            "grade is written once they are graded (run lmbook-grade again)")
        else:
            rows.append(st)
    return rows, left_out


def _points(x: float) -> str:
    return f"{round(x, 2):g}"


def write_canvas(students: Sequence[Student], column: str, max_points: float, path: Path) -> list[str]:
    """Canvas's gradebook import (Grades > Import): the layout of Canvas's own gradebook export.

    Header ``Student, ID, SIS User ID, SIS Login ID, Section, <assignment>``; a second row ``Points
    Possible`` with the assignment's points; one row per student. Canvas finds the student by ``ID`` (the user
    id of the download's file names) before the SIS ids and the name; it finds the assignment by the column's
    title, ``Name (assignment id)`` as its export writes it, or creates one. Returns the students left out.
    """
    rows, left_out = _rows(students, "canvas")
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", column])
        w.writerow(["Points Possible", "", "", "", "", _points(max_points)])
        for st in rows:
            w.writerow([st.name or st.sid, st.lms_id, "", "", "", _points(st.score)])
    return left_out


def write_moodle(students: Sequence[Student], max_points: float, path: Path, when: datetime | None = None) -> list[str]:
    """Moodle's offline grading worksheet (Assignment > Upload grading worksheet).

    Moodle's importer finds its columns by their English titles: ``Identifier`` (``Participant <id>``, the id
    of the download's names), ``Grade`` and ``Last modified (grade)`` (it skips a student whose grade was
    changed in Moodle after that time). ``Full name`` and ``Maximum Grade`` are for the reader. There is no
    ``Feedback comments`` column: Moodle would overwrite the comments written there with whatever it held. The
    assignment's maximum grade in Moodle must be at least the grades written (Moodle skips larger ones).
    Returns the students left out.
    """
    rows, left_out = _rows(students, "moodle")
    stamp = (when or datetime.now(UTC)).isoformat(timespec="seconds")  # ISO 8601, which strtotime reads
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["Identifier", "Full name", "Grade", "Maximum Grade", "Last modified (grade)"])
        for st in rows:
            w.writerow([f"Participant {st.lms_id}", st.name, _points(st.score), _points(max_points), stamp])
    return left_out


def write_blackboard(students: Sequence[Student], column: str, path: Path) -> list[str]:
    """Blackboard's Grade Center upload (Work Offline > Upload), comma-delimited.

    Blackboard finds the student by ``Username`` (the one in the download's names) and a column by the
    ``|<column id>`` at the end of its title, as its own download writes it (``Exercise 6 [Total Pts: 16
    Score] |123456``); a title without an id makes a new text column. Every value is quoted, as its
    comma-delimited format requires. ``Last Name`` and ``First Name`` (from the receipts) are not imported.
    Returns the students left out.
    """
    rows, left_out = _rows(students, "blackboard")
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(["Last Name", "First Name", "Username", column])
        for st in rows:
            first, _, last = st.name.rpartition(" ") if " " in st.name else ("", "", st.name)
            w.writerow([last, first, st.lms_id, _points(st.score)])
    return left_out


def default_column(lms: str, assignment: str, max_points: float) -> str:
    """The grade column's title when the instructor names none: a new column in the LMS, named for the
    assignment (Blackboard's titles carry the points, as its download writes them)."""
    return f"{assignment} [Total Pts: {max_points:g} Score]" if lms == "blackboard" else assignment
