"""Submissions as LMS downloads hold them: names in any script, macOS and Windows litter, notebook files from
any Jupyter, symbolic links, big outputs, damaged zips and zip bombs, and a grader stopped half way.

Most tests call lmbook.grading.submissions and .archive directly (fast); one batch grades a class folder
holding many of these cases with ``lmbook-grade`` and checks every student's exact grade and status; one run
is stopped with SIGTERM. Every test checks that the submissions (folder or zip) are byte-identical afterwards.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest
from abort_corpus import FOLDER_CASES, ZIP_CASES, write_folder, write_zip
from abort_corpus import NB as NB5
from grading_outputs import digest as _digest
from grading_outputs import rows as _rows
from grading_outputs import section as _section
from hostile_corpus import FULL, GOOD, WRONG, ZERO
from make_samples import NOTEBOOK, fill

from lmbook.grading.archive import DEFAULT_ZIP_LIMITS, ZipLimits, extract_zip
from lmbook.grading.student import Student
from lmbook.grading.submissions import class_folder, find_class, find_submissions, read_submission, safe_id

ROOT = Path(__file__).resolve().parent.parent
TASKS = ["log_softmax", "cross_entropy", "ffnn_forward", "sgns_loss", "train_lm"]
SOLUTION = ROOT / "solutions" / "ch01" / NOTEBOOK
TINY_NB = json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


# ----------------------------------------------------------------------------- helpers


@contextmanager
def _untouched(path: Path) -> Iterator[None]:
    """The block must leave ``path`` (the submissions) byte-identical."""
    before = _digest(path)
    yield
    after = _digest(path)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"the submissions were modified: {changed}"


def _students(root: Path, problems=None) -> dict[str, Student]:
    with _untouched(root):
        return {st.sid: st for st in find_submissions(root, NOTEBOOK, problems)}


def _write_nb(path: Path, nb) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def _read(path: Path) -> tuple[Student, nbformat.NotebookNode | None]:
    st = Student("s", notebook=path)
    with _untouched(path):
        nb = read_submission(st)
    return st, nb


def _notes(st: Student) -> str:
    return "\n".join(st.notes)


# ----------------------------------------------------------------------------- 1. student ids


@pytest.mark.parametrize("name, sid", [
    ("Zoë Müller", "Zoë_Müller"),
    ("Zoe\u0308", "Zoë"),  # as a Mac spells it (NFD): the same id as the one-letter ë
    ("José", "José"),
    ("李 雷", "李_雷"),
    ("प्रिया", "प्रिया"),  # vowel signs are combining marks: kept with their letter
    ("Ann-Marie.O'Neil", "Ann-Marie.O_Neil"),  # case kept
    ("a/b\\c:d*e", "a_b_c_d_e"),
    ("../..", "student"),
    (".hidden", "hidden"),
])
def test_student_ids_keep_letters_of_any_script_and_their_case(name, sid):
    assert safe_id(name) == sid, f"safe_id({name!r}) = {safe_id(name)!r}, expected {sid!r}"


def test_student_ids_are_always_usable_folder_names():
    for name in ["x" * 400, "é" * 300, "\x00evil", "a\nb", "  ", "~", "ann~2"]:
        sid = safe_id(name)
        assert sid and "/" not in sid and "\x00" not in sid and "\n" not in sid and "~" not in sid, (name, sid)
        assert not sid.startswith(".") and len(sid.encode()) <= 120, (name, sid)


def test_in_an_id_clash_the_folder_named_exactly_as_the_id_keeps_it(tmp_path):
    # "jane doe" sorts first, but grades uploaded by id must reach the student whose folder *is* jane_doe
    for name, answers in (("jane doe", GOOD), ("jane_doe", WRONG)):
        _write_nb(tmp_path / name / NOTEBOOK, fill(answers))
    found = _students(tmp_path)
    assert {sid: st.source for sid, st in found.items()} == {"jane_doe": "jane_doe", "jane_doe~2": "jane doe"}


def test_submissions_whose_ids_collide_are_both_kept_under_distinct_ids(tmp_path):
    for name in ("ann lee", "ann_lee", "Ann_Lee"):
        _write_nb(tmp_path / name / NOTEBOOK, fill(GOOD))
    found = _students(tmp_path)
    # the two folders named exactly as ids come first (they differ only in case: one of them must change)
    assert {sid: st.source for sid, st in found.items()} == {"Ann_Lee": "Ann_Lee", "ann_lee~2": "ann_lee",
                                                             "ann_lee~3": "ann lee"}, f"ids: {sorted(found)}"
    for st in found.values():
        assert st.notebook is not None and st.status == "graded", (st.sid, st.status)
    for sid, other in (("ann_lee~2", "ann_lee"), ("ann_lee~3", "ann lee")):
        for who in (sid, "Ann_Lee"):  # both sides of each clash are told, naming both folders and both ids
            clash = [n for n in found[who].notes if n.startswith("student id clash") and repr(other) in n]
            assert clash, f"{who}: no clash note naming {other!r}: {found[who].notes}"
            assert "'Ann_Lee'" in clash[0] and repr(sid) in clash[0], clash[0]
    assert "differ only in case" in _notes(found["ann_lee~2"])


def test_flat_files_of_the_same_student_are_both_graded(tmp_path):
    _write_nb(tmp_path / "zoë_4411_ch01.ipynb", fill(GOOD))
    _write_nb(tmp_path / "zoë_4411_ch01-1.ipynb", fill(WRONG))
    found = _students(tmp_path)
    assert sorted(found) == ["zoë", "zoë~2"]
    assert found["zoë"].notebook.name == "zoë_4411_ch01-1.ipynb"  # name order: "-" sorts before "."
    assert "zoë_4411_ch01.ipynb" in _notes(found["zoë~2"]) and "zoë_4411_ch01-1.ipynb" in _notes(found["zoë~2"])


# ----------------------------------------------------------------------------- 2. litter


def _litter(folder: Path, nested: bool = True) -> None:
    """What macOS, Windows and Jupyter leave beside a notebook (``nested``: also inside a sub-folder)."""
    for rel in ("__MACOSX/._ch01_feedforward_lm.ipynb", "._ch01_feedforward_lm.ipynb", ".DS_Store", "Thumbs.db",
                "desktop.ini", "DESKTOP.INI", ".ipynb_checkpoints/ch01_feedforward_lm-checkpoint.ipynb",
                *(["sub/.ipynb_checkpoints/x-checkpoint.ipynb", "sub/__MACOSX/x"] if nested else [])):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(b"\x00\x05\x16\x07 AppleDouble")


def test_macos_and_windows_litter_is_never_a_notebook_nor_a_file_of_the_student(tmp_path):
    _write_nb(tmp_path / "zoë" / NOTEBOOK, fill(GOOD))
    _litter(tmp_path / "zoë")
    _write_nb(tmp_path / "renamer" / "my work.ipynb", fill(GOOD))  # one notebook once litter is left out
    _litter(tmp_path / "renamer")
    _litter(tmp_path, nested=False)  # the class folder's own __MACOSX/, .DS_Store, Thumbs.db...
    found = _students(tmp_path)
    assert set(found) == {"zoë", "renamer"}, f"students: {sorted(found)}"
    assert found["zoë"].notebook == tmp_path / "zoë" / NOTEBOOK and found["zoë"].notes == []
    assert found["renamer"].notebook.name == "my work.ipynb"
    assert found["renamer"].notes == [f"graded my work.ipynb as {NOTEBOOK} (the notebook was renamed)"]


# ----------------------------------------------------------------------------- zip helpers


def _patch_entry(archive: Path, name: str, *, flag: int = 0, new_name: bytes | None = None,
                 central_size: int | None = None) -> None:
    """Edit an entry's headers in place, as tools other than Python's zipfile write them (zipfile cannot):
    a general-purpose flag (encryption), a name's raw bytes, or a central directory that lies about the size."""
    raw = bytearray(archive.read_bytes())
    key = name.encode()
    at = raw.find(key)
    while at != -1:
        if raw[at - 30:at - 26] == b"PK\x03\x04":  # local header: flags at +6
            raw[at - 24:at - 22] = (int.from_bytes(raw[at - 24:at - 22], "little") | flag).to_bytes(2, "little")
        elif raw[at - 46:at - 42] == b"PK\x01\x02":  # central directory: flags at +8, size at +24
            raw[at - 38:at - 36] = (int.from_bytes(raw[at - 38:at - 36], "little") | flag).to_bytes(2, "little")
            if central_size is not None:
                raw[at - 22:at - 18] = central_size.to_bytes(4, "little")
        if new_name is not None:
            assert len(new_name) == len(key)
            raw[at:at + len(key)] = new_name
        at = raw.find(key, at + 1)
    archive.write_bytes(bytes(raw))


def _corrupt_data(archive: Path, marker: bytes) -> None:
    """Change one byte of a stored entry's data: its CRC no longer matches."""
    raw = archive.read_bytes()
    i = raw.index(marker)
    archive.write_bytes(raw[:i] + b"X" + raw[i + 1:])


def _symlink_entry(zf: zipfile.ZipFile, name: str, target: str) -> None:
    info = zipfile.ZipInfo(name)
    info.create_system = 3  # Unix
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    zf.writestr(info, target)


def _unpack(archive: Path, dest: Path, limits: ZipLimits = DEFAULT_ZIP_LIMITS) -> dict[str, Student]:
    with _untouched(archive):
        root, problems = class_folder(archive, dest, limits)
        return {st.sid: st for st in find_submissions(root, NOTEBOOK, problems)}


def test_a_macos_zip_is_one_notebook_per_student_with_the_names_it_had(tmp_path):
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"hw1/ZoeQQ Muller/{NOTEBOOK}", nbformat.writes(fill(GOOD)))
        zf.writestr(f"__MACOSX/hw1/ZoeQQ Muller/._{NOTEBOOK}", b"\x00\x05\x16\x07")
        zf.writestr("hw1/.DS_Store", b"\x00\x00\x00\x01Bud1")
        zf.writestr(f"hw1/ann/{NOTEBOOK}", nbformat.writes(fill(GOOD)))
    # Archive Utility writes UTF-8 names, decomposed (NFD), without the flag that says they are UTF-8
    _patch_entry(archive, "ZoeQQ", new_name="Zoe\u0308".encode())
    found = _unpack(archive, tmp_path / "unpacked")
    assert set(found) == {"Zoë_Muller", "ann"}, f"students: {sorted(found)}"
    assert found["Zoë_Muller"].source == "Zoë Muller" and found["Zoë_Muller"].notes == []
    assert found["Zoë_Muller"].notebook.name == NOTEBOOK and found["Zoë_Muller"].status == "graded"


# ----------------------------------------------------------------------------- 3. notebook files from any Jupyter


def _saved(minor: int, ids: bool = True, **extra) -> str:
    """The good answers as a Jupyter of format 4.<minor> would save them (with or without cell ids)."""
    d = json.loads(nbformat.writes(fill(GOOD)))
    d["nbformat_minor"] = minor
    for cell in d["cells"]:
        if not ids:
            cell.pop("id", None)
    d.update(extra)
    return json.dumps(d)


@pytest.mark.parametrize("minor", [0, 1, 2, 3, 4, 5])
def test_every_minor_version_of_format_4_is_graded_without_a_note(tmp_path, minor):
    path = tmp_path / NOTEBOOK
    path.write_text(_saved(minor, ids=minor == 5))
    st, nb = _read(path)
    assert nb is not None and st.status == "graded", st.status
    assert nb.nbformat_minor == 5 and st.notes == [], st.notes
    nbformat.validate(nb)
    assert [c.source for c in nb.cells] == [c.source for c in fill(GOOD).cells]


@pytest.mark.parametrize("variant, said", [
    ("ids_in_4_0", "its cells have ids, which format 4.0 does not allow: read it as format 4.5"),
    ("unknown_top_level_key", "removed entries the notebook format does not have: 'jupytext' (top level)"),
    ("unknown_cell_key", "removed entries the notebook format does not have: 'collapsed' (cell 0)"),
])
def test_notebooks_jupyter_opens_but_the_schema_rejects_are_repaired_and_the_notes_say_how(tmp_path, variant, said):
    if variant == "ids_in_4_0":
        text = _saved(0)
    elif variant == "unknown_top_level_key":
        text = _saved(5, jupytext={"formats": "ipynb,py"})
    else:
        d = json.loads(_saved(4, ids=False))
        d["cells"][0]["collapsed"] = True  # what format 3 kept on the cell, left behind by a converter
        text = json.dumps(d)
    path = tmp_path / NOTEBOOK
    path.write_text(text)
    st, nb = _read(path)
    assert nb is not None and st.status == "graded", st.status
    nbformat.validate(nb)
    assert nb.nbformat_minor == 5
    assert len(st.notes) == 1 and st.notes[0].startswith("repaired the notebook file"), st.notes
    assert said in st.notes[0], f"the note does not say {said!r}: {st.notes[0]}"


def test_a_byte_order_mark_does_not_make_a_notebook_unreadable(tmp_path):
    path = tmp_path / NOTEBOOK
    path.write_bytes(b"\xef\xbb\xbf" + _saved(4, ids=False).encode())
    st, nb = _read(path)
    assert nb is not None and st.status == "graded" and st.notes == [], (st.status, st.notes)


@pytest.mark.parametrize("content, status", [
    (b'{"cells": [', "unreadable notebook (the file is not valid JSON: Expecting value: line 1 column 12"),
    (b"\xff\xfe{ }", "unreadable notebook (the file is not UTF-8 text"),
    (b'{"cells": 3, "nbformat": 4, "nbformat_minor": 5, "metadata": {}}', "unreadable notebook"),
    (b'{"cells": [{"cell_type": "code"}], "nbformat": 4, "nbformat_minor": 5, "metadata": {}}',
     "unreadable notebook (not a valid Jupyter notebook: The notebook is invalid and is missing an expected key"),
    (b'{"cells": [{"cell_type": "markdown", "metadata": {}, "source": 5}], "nbformat": 4, "nbformat_minor": 5, '
     b'"metadata": {}}', "unreadable notebook (not a valid Jupyter notebook, even after repair: 5 is not valid"),
    (b'{"nbformat": 9}', "unreadable notebook"),
], ids=["invalid_json", "not_utf8", "cells_not_a_list", "cell_without_source", "source_not_text", "unknown_format"])
def test_files_that_are_not_notebooks_stay_unreadable_with_the_reason(tmp_path, content, status):
    path = tmp_path / NOTEBOOK
    path.write_bytes(content)
    st, nb = _read(path)
    assert nb is None and st.status.startswith(status), f"status {st.status!r}, expected it to start {status!r}"


# ----------------------------------------------------------------------------- 4. symbolic links


def test_a_notebook_that_is_a_symlink_is_never_read_and_the_status_says_so(tmp_path):
    (tmp_path / "cheat").mkdir()
    (tmp_path / "cheat" / NOTEBOOK).symlink_to(SOLUTION)
    _write_nb(tmp_path / "honest" / NOTEBOOK, fill(GOOD))
    found = _students(tmp_path)
    cheat = found["cheat"]
    assert cheat.notebook is None
    assert cheat.status == (f"not graded: the notebook {NOTEBOOK} is a symbolic link (to {SOLUTION}), which the "
                            "grader never follows; ask the student for the notebook itself"), cheat.status
    assert found["honest"].notebook is not None and found["honest"].status == "graded"


def test_links_inside_a_student_folder_are_reported_and_skipped(tmp_path):
    folder = tmp_path / "peeker"
    _write_nb(folder / NOTEBOOK, fill(WRONG))
    _write_nb(tmp_path / "other" / NOTEBOOK, fill(GOOD))
    (folder / "backup").mkdir()
    (folder / "backup" / NOTEBOOK).symlink_to(tmp_path / "other" / NOTEBOOK)  # sorts before the real one
    (folder / "passwd").symlink_to("/etc/passwd")
    (folder / "etc").symlink_to("/etc")  # a folder: never walked into
    st = _students(tmp_path)["peeker"]
    assert st.notebook == folder / NOTEBOOK and st.status == "graded"
    for link, target in ((f"backup/{NOTEBOOK}", tmp_path / "other" / NOTEBOOK), ("passwd", "/etc/passwd"),
                         ("etc", "/etc")):
        assert f"ignored a symbolic link: {link} (to {target})" in st.notes, st.notes
    assert not any("other file" in n for n in st.notes), st.notes  # links are not files of the student


def test_a_student_folder_that_is_a_symlink_is_not_followed(tmp_path):
    _write_nb(tmp_path / "elsewhere" / NOTEBOOK, fill(GOOD))
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "mallory").symlink_to(tmp_path / "elsewhere")
    (subs / "eve_1_ch01.ipynb").symlink_to(SOLUTION)
    found = _students(subs)
    assert set(found) == {"mallory", "eve"}
    for st in found.values():
        assert st.notebook is None and "is a symbolic link" in st.status and "never follows" in st.status, st.status


def test_a_notebook_swapped_for_a_link_after_listing_is_not_opened(tmp_path):
    (tmp_path / NOTEBOOK).symlink_to(SOLUTION)
    st, nb = _read(tmp_path / NOTEBOOK)
    assert nb is None and st.status.startswith("unreadable notebook (could not open it"), st.status


# ----------------------------------------------------------------------------- 5. size


def _with_big_output(megabytes: int) -> nbformat.NotebookNode:
    nb = fill(GOOD)
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo" * (megabytes * 90_910)})]
    return nb


def test_a_notebook_large_only_because_of_its_outputs_is_graded(tmp_path):
    path = _write_nb(tmp_path / NOTEBOOK, _with_big_output(30))
    st, nb = _read(path)
    assert nb is not None and st.status == "graded", st.status
    assert all(c.get("outputs", []) == [] for c in nb.cells)
    assert [c.source for c in nb.cells] == [c.source for c in fill(GOOD).cells], "code or text was lost"
    said = "mostly saved outputs or pasted images; they were removed before grading"
    assert any(said in n for n in st.notes), st.notes


def test_a_notebook_with_too_much_code_and_text_is_refused_with_its_size(tmp_path):
    nb = _with_big_output(5)
    nb.cells.append(nbformat.v4.new_markdown_cell("x" * 23_000_000))
    path = _write_nb(tmp_path / NOTEBOOK, nb)
    st, got = _read(path)
    assert got is None
    assert re.fullmatch(r"notebook too large: 23\.\d MB of code and text \(limit 20 MB\) after outputs were removed",
                        st.status), st.status


def test_the_size_limit_is_a_parameter(tmp_path):
    path = _write_nb(tmp_path / NOTEBOOK, fill(GOOD))
    st = Student("s", notebook=path)
    assert read_submission(st, max_bytes=10_000) is None
    assert st.status.endswith("MB of code and text (limit 0.01 MB) after outputs were removed"), st.status


# ----------------------------------------------------------------------------- 6. zip archives


def _class_zip(tmp_path: Path) -> Path:
    """One broken entry of each kind, each owned by its own student, beside students whose entries are fine."""
    good = nbformat.writes(fill(GOOD))
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:
        for student in ("ann", "bob"):
            zf.writestr(f"{student}/{NOTEBOOK}", good)
        zf.writestr(f"longname/{NOTEBOOK}", good)  # graded: the long name is another file of theirs
        zf.writestr("longname/" + "n" * 300 + ".txt", "notes")
        zf.writestr(f"longnb/{'n' * 300}.ipynb", good)  # their only notebook: not graded
        zf.writestr(f"crc/{NOTEBOOK}", good.replace('"cells": [', '"cells": [ ', 1) + " CRCMARK")
        zf.writestr(f"clash/{NOTEBOOK}", good)
        zf.writestr(f"clash/{NOTEBOOK}/inner.txt", "a folder of the same name")
        zf.writestr(f"locked/{NOTEBOOK}", good)
        _symlink_entry(zf, f"linker/{NOTEBOOK}", str(SOLUTION))
        _symlink_entry(zf, "ann/passwd", "/etc/passwd")
        zf.writestr(f"../{NOTEBOOK}", good)
    _patch_entry(archive, f"locked/{NOTEBOOK}", flag=0x1)
    _corrupt_data(archive, b"CRCMARK")
    return archive


def test_each_broken_zip_entry_is_reported_for_its_student_only(tmp_path):
    found = _unpack(_class_zip(tmp_path), tmp_path / "unpacked")
    assert set(found) == {"ann", "bob", "longname", "longnb", "crc", "clash", "locked", "linker"}, sorted(found)
    for sid in ("ann", "bob", "longname"):
        assert found[sid].status == "graded" and found[sid].notebook.name == NOTEBOOK, (sid, found[sid].status)
    assert "zip: ignored a symbolic link: ann/passwd" in _notes(found["ann"])
    assert "too long to unpack (304 bytes; file systems allow 255)" in _notes(found["longname"])
    expected = {
        "longnb": "not graded: a file name in the zip is too long to unpack (306 bytes; file systems allow 255)",
        "crc": f"not graded: crc/{NOTEBOOK} is damaged in the zip and could not be unpacked (its checksum does not "
               "match: download the zip again)",
        "clash": f"not graded: the zip holds clash/{NOTEBOOK} both as a file and as a folder; the file was not "
                 "unpacked",
        "locked": f"not graded: locked/{NOTEBOOK} is encrypted (password-protected) in the zip, so it could not be "
                  "unpacked",
        "linker": f"not graded: ignored a symbolic link: linker/{NOTEBOOK} (the grader never follows links)",
    }
    for sid, status in expected.items():
        assert found[sid].notebook is None and found[sid].status.startswith(status), \
            f"{sid}: status {found[sid].status!r}, expected {status!r}"
    assert not (tmp_path / NOTEBOOK).exists(), "an entry was written outside the folder"
    links = [p for p in (tmp_path / "unpacked").rglob("*") if p.is_symlink()]
    assert links == [], f"zip entries were unpacked as links: {links}"
    assert not (tmp_path / "unpacked" / "linker").exists()


def _zip_of(tmp_path: Path, entries: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> Path:
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w", method) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return archive


def _unpacked_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_a_zip_bomb_is_refused_and_nothing_big_is_written(tmp_path):
    archive = _zip_of(tmp_path, {f"bomber/{NOTEBOOK}": b"0" * 60_000_000, f"ann/{NOTEBOOK}": TINY_NB.encode()})
    assert archive.stat().st_size < 200_000
    found = _unpack(archive, tmp_path / "unpacked")
    assert re.fullmatch(rf"not graded: bomber/{NOTEBOOK} was not unpacked: it expands from \d+\.\d kB to 60\.0 MB, "
                        r"over 200 times, as a zip bomb does\. If it is genuine, unzip the archive yourself and grade "
                        r"the folder", found["bomber"].status), found["bomber"].status
    assert found["ann"].status == "graded"
    assert _unpacked_bytes(tmp_path / "unpacked") < 10_000


def test_a_zip_whose_header_understates_a_size_never_writes_more_than_it_says(tmp_path):
    archive = _zip_of(tmp_path, {f"liar/{NOTEBOOK}": b"0" * 5_000_000, f"ann/{NOTEBOOK}": TINY_NB.encode()})
    _patch_entry(archive, f"liar/{NOTEBOOK}", central_size=1000)  # the ratio from the header looks harmless
    found = _unpack(archive, tmp_path / "unpacked")
    assert found["liar"].status.startswith(f"not graded: liar/{NOTEBOOK} is damaged in the zip"), found["liar"].status
    assert not (tmp_path / "unpacked" / "liar" / NOTEBOOK).exists(), "a half-written entry was left behind"
    assert found["ann"].status == "graded"


def test_the_total_a_zip_may_unpack_to_is_capped_and_notebooks_come_first(tmp_path):
    payload = os.urandom(400_000)  # incompressible: within the ratio, only the total stops it
    archive = _zip_of(tmp_path, {"ann/data.bin": payload, f"ann/{NOTEBOOK}": TINY_NB.encode(),
                                 f"bob/{NOTEBOOK}": TINY_NB.encode() + b" " * 10, "cy/big.bin": payload})
    found = _unpack(archive, tmp_path / "unpacked", ZipLimits(max_total_bytes=500_000))
    assert found["ann"].status == "graded" and found["bob"].status == "graded"
    refused = [n for st in found.values() for n in st.notes if "would unpack to more than" in n]
    assert len(refused) == 1 and "(--max-unzip-gb)" in refused[0], refused
    assert _unpacked_bytes(tmp_path / "unpacked") <= 500_000


def test_an_unreadable_zip_is_a_clear_error(tmp_path):
    archive = tmp_path / "class.zip"
    archive.write_bytes(b"PK\x03\x04 not really")
    with _untouched(archive), pytest.raises(SystemExit, match="not a readable zip file"):
        extract_zip(archive, tmp_path / "unpacked")


# ----------------------------------------------------------------------------- 7. stopping the grader


def _run_until(script: str, tmp_path: Path, ready, sig: int) -> tuple[subprocess.CompletedProcess, Path]:
    """Run ``script`` with its own temp folder, send ``sig`` once ``ready(tmpdir)`` is true."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not ready(tmpdir) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, f"the script ended before it was stopped: {proc.communicate()}"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), tmpdir


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_grader_removes_its_private_temporary_folder(tmp_path, sig):
    script = """
        import sys, tempfile, time
        from lmbook.grading import interrupt
        try:
            with interrupt.stop_cleanly(), tempfile.TemporaryDirectory(prefix="lmbook-grade-unzip-") as d:
                open(d + "/unpacked.ipynb", "w").write("{}")
                time.sleep(600)
        except interrupt.Stopped as e:
            sys.exit(128 + e.signum)
    """
    modes = {}

    def ready(tmpdir: Path) -> bool:
        made = [p for p in tmpdir.iterdir() if (p / "unpacked.ipynb").exists()]
        modes.update({p.name: stat.S_IMODE(p.stat().st_mode) for p in made})
        return bool(made)

    r, tmpdir = _run_until(script, tmp_path, ready, sig)
    assert r.returncode == 128 + sig, r.stderr
    assert list(modes.values()) == [0o700], f"the temporary folder's modes: {modes}"
    assert list(tmpdir.iterdir()) == [], f"left behind: {list(tmpdir.iterdir())}"


def test_stopped_grading_workers_stop_their_student_code_and_remove_their_folders(tmp_path):
    script = """
        import shutil, subprocess, sys, tempfile, time
        from pathlib import Path
        from lmbook.autograde import _run_phase1
        from lmbook.grading import interrupt

        def work(job):  # as judge.grade_notebook: a private folder, a sandbox in its own session, finally
            d = tempfile.mkdtemp(prefix="lmbook-grade-")
            try:
                child = subprocess.Popen(["sleep", "600"], start_new_session=True)
                Path(d, "pid").write_text(str(child.pid))
                time.sleep(600)
            finally:
                shutil.rmtree(d, ignore_errors=True)
            return {"sid": job[0]}

        try:
            with interrupt.stop_cleanly():
                _run_phase1([("ann",), ("bob",), ("cy",), ("dee",)], 2, False, work=work)
        except interrupt.Stopped as e:
            sys.exit(128 + e.signum)
    """
    pids: set[int] = set()

    def ready(tmpdir: Path) -> bool:
        pids.update(int(p.read_text()) for p in tmpdir.glob("lmbook-grade-*/pid") if p.read_text())
        return len(pids) == 2

    r, tmpdir = _run_until(script, tmp_path, ready, signal.SIGTERM)
    assert r.returncode == 143, r.stderr
    assert list(tmpdir.iterdir()) == [], f"left behind: {list(tmpdir.iterdir())}"
    for pid in pids:
        assert not _alive(pid), f"the worker's child process {pid} is still running"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# ----------------------------------------------------------------------------- end to end: lmbook-grade


def _env(tmpdir: Path | None = None) -> dict:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return env


def _grade_cmd(subs: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "lmbook.autograde", str(subs), "--out", str(out), "--course",
            str(ROOT / "autograder"), "--timeout", "60", *extra]


def _old_jupyter_with_extras() -> str:
    d = json.loads(nbformat.writes(fill(GOOD)))
    d["nbformat_minor"] = 0  # with cell ids, which 4.0 does not have, and a key no format has
    d["widgets_state"] = {"saved": True}
    return json.dumps(d)


# name in the class folder -> (student id, per-task points, status (prefix), a phrase the report must hold)
BATCH = {
    "Zoë Müller": ("Zoë_Müller", FULL, "graded", "Submitted as `Zoë Müller`"),
    "José_1234_ch01.ipynb": ("José", ZERO, "graded", "Submitted as `José_1234_ch01.ipynb`"),
    "ann lee": ("ann_lee~2", FULL, "graded", "student id clash: the submissions 'ann_lee' and 'ann lee'"),
    "ann_lee": ("ann_lee", ZERO, "graded", "student id clash: the submissions 'ann_lee' and 'ann lee'"),
    "mac_user": ("mac_user", FULL, "graded", ""),
    "old_jupyter": ("old_jupyter", FULL, "graded", "repaired the notebook file"),
    "symlinked": ("symlinked", ZERO, f"not graded: the notebook {NOTEBOOK} is a symbolic link", ""),
    "peeker": ("peeker", ZERO, "graded", f"ignored a symbolic link: backup/{NOTEBOOK}"),
    "big_outputs": ("big_outputs", FULL, "graded",
                    "mostly saved outputs or pasted images; they were removed before grading"),
    "too_large": ("too_large", ZERO, "notebook too large: 2", ""),
    "bad_json": ("bad_json", ZERO, "unreadable notebook (the file is not valid JSON", ""),
}


def _write_batch(subs: Path) -> None:
    for name in ("Zoë Müller", "ann lee", "big_outputs"):
        _write_nb(subs / name / NOTEBOOK, _with_big_output(50) if name == "big_outputs" else fill(GOOD))
    _write_nb(subs / "José_1234_ch01.ipynb", fill(WRONG))
    _write_nb(subs / "ann_lee" / NOTEBOOK, fill(WRONG))
    _write_nb(subs / "mac_user" / NOTEBOOK, fill(GOOD))
    _litter(subs / "mac_user")
    _litter(subs, nested=False)
    (subs / "old_jupyter").mkdir()
    (subs / "old_jupyter" / NOTEBOOK).write_text(_old_jupyter_with_extras())
    (subs / "symlinked").mkdir()
    (subs / "symlinked" / NOTEBOOK).symlink_to(SOLUTION)  # followed, it would score full marks
    _write_nb(subs / "peeker" / NOTEBOOK, fill(WRONG))
    (subs / "peeker" / "backup").mkdir()
    (subs / "peeker" / "backup" / NOTEBOOK).symlink_to(subs / "ann lee" / NOTEBOOK)
    (subs / "peeker" / "passwd").symlink_to("/etc/passwd")
    big = fill(GOOD)
    big.cells.append(nbformat.v4.new_markdown_cell("y" * 21_000_000))
    _write_nb(subs / "too_large" / NOTEBOOK, big)
    (subs / "bad_json").mkdir()
    (subs / "bad_json" / NOTEBOOK).write_text('{"cells": [')


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lms")
    subs = tmp / "subs"
    _write_batch(subs)
    before = _digest(subs)
    r = subprocess.run(_grade_cmd(subs, tmp / "out"), capture_output=True, text=True, env=_env(), cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return {"subs": subs, "before": before, "out": tmp / "out", "stdout": r.stdout, "tmp": tmp,
            "rows": _rows(tmp / "out" / "grades.csv"), "report": (tmp / "out" / "report.md").read_text()}


@pytest.mark.slow
def test_lms_batch_every_student_gets_exactly_their_grade_and_status(batch):
    rows = batch["rows"]
    assert set(rows) == {sid for sid, *_ in BATCH.values()}, f"students graded: {sorted(rows)}"
    for name, (sid, points, status, phrase) in BATCH.items():
        row = rows[sid]
        got = [float(row[t]) for t in TASKS]
        assert got == points, f"{name} ({sid}): got {got}, expected {points} ({row['status']})"
        assert row["status"].startswith(status), f"{name} ({sid}): status {row['status']!r}, expected {status!r}..."
        if phrase:
            assert phrase in _section(batch["report"], sid), \
                f"{name}: the report does not say {phrase!r}:\n{_section(batch['report'], sid)[:2000]}"
    assert "ann_lee~2: student id clash" in batch["stdout"], "the clash is not shown on the console"


@pytest.mark.slow
def test_lms_batch_litter_is_not_mentioned(batch):
    section = _section(batch["report"], "mac_user")
    for litter in ("__MACOSX", "._", ".DS_Store", "Thumbs.db", "desktop.ini", "checkpoint", "other file"):
        assert litter not in section, f"mac_user's report mentions {litter!r}:\n{section[:1500]}"


@pytest.mark.slow
def test_lms_batch_submissions_are_never_modified(batch):
    assert _digest(batch["subs"]) == batch["before"]


@pytest.mark.slow
def test_lms_batch_nbgrader_accepts_the_ids_and_holds_the_same_grades(batch):
    course = batch["out"] / "course"
    assert (course / "submitted" / "Zoë_Müller" / "ch01" / NOTEBOOK).exists()
    copy_ = nbformat.read(course / "submitted" / "big_outputs" / "ch01" / NOTEBOOK, as_version=4)
    assert all(c.get("outputs", []) == [] for c in copy_.cells), "the course copy kept the 50 MB output"
    dest = batch["tmp"] / "export.csv"
    r = subprocess.run([sys.executable, "-m", "nbgrader", "export", f"--to={dest}",
                        f"--CourseDirectory.root={course}", f"--CourseDirectory.source_directory={ROOT / 'solutions'}",
                        "--CourseDirectory.release_directory=release", "--log-level=ERROR"],
                       capture_output=True, text=True, env=_env(), cwd=ROOT / "autograder")
    assert r.returncode == 0, r.stderr[-2000:]
    with dest.open(encoding="utf-8") as f:
        exported = {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}
    assert exported == {sid: float(row["total"]) for sid, row in batch["rows"].items()}
    with sqlite3.connect(course / "gradebook.db") as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.slow
def test_lmbook_grade_stopped_by_sigterm_removes_its_temporary_folders(tmp_path):
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"ann/{NOTEBOOK}", nbformat.writes(fill(GOOD)))
        zf.writestr(f"bob/{NOTEBOOK}", nbformat.writes(fill(WRONG)))
    before = _digest(archive)
    tmpdir, out = tmp_path / "tmp", tmp_path / "out"
    tmpdir.mkdir()
    proc = subprocess.Popen(_grade_cmd(archive, out, "--workers", "1"), env=_env(tmpdir), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[str, int] = {}
    deadline = time.monotonic() + 400
    # Stopped once a student's notebook is running in the sandbox (its job folder exists): no fixed delay.
    while proc.poll() is None and time.monotonic() < deadline:
        for p in tmpdir.glob("lmbook-grade-*"):
            seen.setdefault(p.name, stat.S_IMODE(p.lstat().st_mode))
        if any(not n.startswith("lmbook-grade-unzip-") for n in seen):
            break
        time.sleep(0.02)
    assert proc.poll() is None, f"lmbook-grade ended before it was stopped: {proc.communicate()[1][-2000:]}"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err[-3000:]
    assert "stopped by SIGTERM" in err and "temporary folders were removed" in err, err[-2000:]
    assert set(seen.values()) == {0o700}, f"temporary folders not private: {seen}"
    left = sorted(p.name for p in tmpdir.iterdir())
    assert left == [], f"left behind in the temp folder: {left}"
    assert _digest(archive) == before, "the zip was modified"
    db = out / "course" / "gradebook.db"
    if db.exists():
        with sqlite3.connect(db) as con:
            assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# ----------------------------------------------------------------------------- what once stopped the class


def _read_all(found: list[Student]) -> dict[str, Student]:
    for st in found:
        if st.notebook is not None:
            read_submission(st)  # what fails here fails for this student only (status), never raises
    return {st.sid: st for st in found}


def _said(st: Student) -> str:
    return "\n".join([st.status, *st.notes])


def test_folder_names_in_latin1_and_deeply_nested_notebooks_stay_with_their_students(tmp_path):
    write_folder(tmp_path / "subs")
    with _untouched(tmp_path / "subs"):
        found = _read_all(find_class(tmp_path / "subs", NB5).students)
    assert set(found) == {sid for sid, _, _ in FOLDER_CASES.values()}, sorted(found)
    for sid, points, phrase in FOLDER_CASES.values():
        st = found[sid]
        assert phrase in _said(st), f"{sid}: {phrase!r} not said:\n{_said(st)}"
        assert (st.status == "graded") == (points != [0.0, 0.0]), (sid, st.status)
    for st in found.values():  # every word about a student can be written to a UTF-8 report
        _said(st).encode("utf-8")
        st.source.encode("utf-8")
    assert "résumé.txt" in _notes(found["Renée"]) and "mon devoir été.ipynb" in _notes(found["Renée"])


def test_zip_names_flagged_utf8_too_long_nested_too_deep_or_twice_stay_with_their_students(tmp_path):
    archive = tmp_path / "class.zip"
    write_zip(archive)
    with pytest.raises(UnicodeDecodeError):  # what stopped the class: Python's zipfile refuses the whole archive
        zipfile.ZipFile(archive)
    with _untouched(archive):
        root, problems = class_folder(archive, tmp_path / "unpacked")
        found = _read_all(find_class(root, NB5, problems).students)
    assert set(found) == {sid for sid, _, _ in ZIP_CASES.values()}, sorted(found)
    for sid, points, phrase in ZIP_CASES.values():
        st = found[sid]
        assert phrase in _said(st), f"{sid}: {phrase!r} not said:\n{_said(st)}"
        assert (st.notebook is not None) == (points != [0.0, 0.0]), (sid, st.status)
    twice = nbformat.read(found["twice"].notebook, as_version=4)
    assert "return V, None" not in "".join(c.source for c in twice.cells), "the first copy was graded, not the last"


@pytest.fixture(scope="module")
def aborts(tmp_path_factory):
    """Both downloads graded by lmbook-grade, one results cache."""
    tmp = tmp_path_factory.mktemp("aborts")
    write_folder(tmp / "folder")
    write_zip(tmp / "class.zip")
    found = {}
    for name, subs in (("folder", tmp / "folder"), ("zip", tmp / "class.zip")):
        out = tmp / f"out-{name}"
        if found:
            shutil.copytree(tmp / "out-folder" / "course" / "lmbook_cache", out / "course" / "lmbook_cache")
        r = subprocess.run(_grade_cmd(subs, out, "--assignment", "ch05"), capture_output=True, text=True, env=_env(),
                           cwd=ROOT)
        found[name] = (r, out)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("download", ["folder", "zip"])
def test_no_submission_stops_the_class_each_gets_its_grade_and_reason(aborts, download):
    r, out = aborts[download]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = _rows(out / "grades.csv")
    report = (out / "report.md").read_text(encoding="utf-8")
    for sid, points, phrase in (FOLDER_CASES if download == "folder" else ZIP_CASES).values():
        row = got[sid]
        assert [float(row["qkv_projections"]), float(row["masked_attention"])] == points, (sid, row)
        assert phrase in _section(report, sid) + row["status"], f"{sid}: {phrase!r} not in its report or status"
