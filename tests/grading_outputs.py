"""Reading what `lmbook-grade` leaves behind, for the end-to-end grading tests."""

from __future__ import annotations

import csv
import hashlib
import os
import re
from pathlib import Path


def digest(path: Path) -> dict[str, str]:
    """Every file's hash (a link: its own text, never what it points to); a zip is one file."""
    if path.is_file():
        return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()}
    found = {}
    for p in sorted(path.rglob("*")):
        if p.is_symlink():
            found[str(p.relative_to(path))] = "link to " + os.readlink(p)
        elif p.is_file():
            found[str(p.relative_to(path))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return found


def rows(out: Path) -> dict[str, dict]:
    """``out/grades.csv`` (or that file itself), one row per student id."""
    path = out / "grades.csv" if out.is_dir() else out
    with path.open(encoding="utf-8") as f:
        return {row["student"]: row for row in csv.DictReader(f)}


def section(report: str, student: str) -> str:
    """The report's part about one student."""
    m = re.search(rf"^## {re.escape(student)}:.*?(?=^## |\Z)", report, re.M | re.S)
    assert m, f"no report section for {student}"
    return m.group(0)
