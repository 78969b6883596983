"""Submissions that once stopped a whole class, each with what its student must get instead.

Every kind of file that made ``lmbook-grade`` end with a traceback (and an empty or partial ``grades.csv``)
is one student here, beside honest students who must be graded as if it were not there. Two downloads:
a folder as ``unzip`` leaves it (names in Latin-1 bytes, notebooks nested deeply) and a zip (a name flagged
UTF-8 that is not, a folder name over 255 bytes, a path nested past the file system's limit, an entry twice).
``FOLDER_CASES[name]`` / ``ZIP_CASES[name]``: (the student id it must get, points per task, a phrase its
status or notes must hold). Exercise 5's tasks: qkv_projections (2 points), masked_attention (4).
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
from make_samples import fill, notebook_name, solution_answers  # noqa: E402

A = "ch05"
NB = notebook_name(A)
FULL, ZERO = [2.0, 4.0], [0.0, 0.0]
WRONG_MASK = "def masked_attention(Q, K, V, key_mask, causal):\n    return V, None"


def _answers() -> dict[str, str]:  # the two tasks only: any thinking question stays blank
    return {k: v for k, v in solution_answers(A).items() if k in ("qkv_projections", "masked_attention")}


def good() -> str:
    return nbformat.writes(fill(_answers(), A))


def wrong() -> str:
    return nbformat.writes(fill({**_answers(), "masked_attention": WRONG_MASK}, A))


def nested(depth: int) -> str:
    """The good notebook with a metadata entry nested ``depth`` levels deep (as a broken extension might)."""
    text = good()
    return text.replace('"metadata": {', '"metadata": {"deep": ' + "[" * depth + "]" * depth + ", ", 1)


# folder name (bytes, as on disk) -> (student id, points, phrase)
FOLDER_CASES: dict[bytes, tuple[str, list[float], str]] = {
    b"honest": ("honest", FULL, ""),
    b"Jos\xe9 Garc\xeda": ("José_García", FULL, "was not UTF-8 on disk"),  # Latin-1, as unzip leaves a Windows zip
    b"Ren\xe9e": ("Renée", FULL, "(the notebook was renamed)"),  # her notebook's own name is Latin-1 too
    b"deep_json": ("deep_json", ZERO, "its JSON is nested deeper than any notebook"),
    b"deep_metadata": ("deep_metadata", FULL, "nested over 32 levels deep"),
}


def write_folder(dest: Path) -> None:
    """The class folder, written with byte names (as unzip writes them) and the notebooks of each case."""
    os.makedirs(dest, exist_ok=True)
    for raw in FOLDER_CASES:
        os.mkdir(os.fsencode(dest) + b"/" + raw)
    base = os.fsencode(dest)
    files = {b"honest/" + NB.encode(): good(), b"Jos\xe9 Garc\xeda/" + NB.encode(): good(),
             b"Ren\xe9e/mon devoir \xe9t\xe9.ipynb": good(), b"Ren\xe9e/r\xe9sum\xe9.txt": "notes",
             b"deep_json/" + NB.encode(): nested(100_000), b"deep_metadata/" + NB.encode(): nested(200)}
    for rel, text in files.items():
        with open(base + b"/" + rel, "w", encoding="utf-8") as f:
            f.write(text)


# zip entry -> (student id, points, phrase); None: the entry's student is the key's first folder
ZIP_CASES: dict[str, tuple[str, list[float], str]] = {
    "honest": ("honest", FULL, ""),
    "JosQ": ("José", FULL, "the zip says the name 'José/"),  # flagged UTF-8, its bytes are Latin-1 (patched below)
    "MQller": ("Müller", FULL, "read it as code page 437"),  # no flag, a DOS name in cp437 bytes (patched below)
    "longfolder": ("longfolder", FULL, "a file name in the zip is too long to unpack (300 bytes"),
    "deeppath": ("deeppath", ZERO, "nested too deep to unpack"),
    "twice": ("twice", FULL, "its last copy was unpacked, as unzip does"),
}


def write_zip(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"honest/{NB}", good())
        zf.writestr(f"JosQ/{NB}", good())
        zf.writestr(f"MQller/{NB}", good())
        zf.writestr(zipfile.ZipInfo(f"longfolder/{'x' * 300}/"), "")  # a folder entry: it made mkdir fail
        zf.writestr(f"longfolder/{NB}", good())
        zf.writestr("deeppath/" + "sub/" * 1100 + NB, good())  # over 4000 bytes of path
        zf.writestr(f"twice/{NB}", wrong())  # the first copy: unzip and the LMS keep the last one
        zf.writestr(f"twice/{NB}", good())
    _flag_utf8_with_latin1_name(path, b"JosQ", b"Jos\xe9")
    _rename(path, b"MQller", b"M\x81ller")  # cp437's ü


def _rename(path: Path, old: bytes, new: bytes) -> None:
    """An entry's name bytes replaced in both its headers (the flags left as they are)."""
    path.write_bytes(path.read_bytes().replace(old, new))


def _flag_utf8_with_latin1_name(path: Path, old: bytes, new: bytes) -> None:
    """Give an entry a Latin-1 name while its headers say UTF-8 (what some Windows tools write)."""
    raw = bytearray(path.read_bytes())
    at = raw.find(old)
    while at != -1:
        if raw[at - 30:at - 26] == b"PK\x03\x04":  # local header: flags at +6
            raw[at - 24:at - 22] = (int.from_bytes(raw[at - 24:at - 22], "little") | 0x800).to_bytes(2, "little")
        elif raw[at - 46:at - 42] == b"PK\x01\x02":  # central directory: flags at +8
            raw[at - 38:at - 36] = (int.from_bytes(raw[at - 38:at - 36], "little") | 0x800).to_bytes(2, "little")
        raw[at:at + len(old)] = new
        at = raw.find(old, at + 1)
    path.write_bytes(bytes(raw))
