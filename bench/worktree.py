"""A copy of the repository's working tree, for a clean book build away from the author's caches.

Used by the tests' book fixtures and by the benchmarks' build timings: the files git would commit (tracked,
and new files it does not ignore) plus the npm assets in .vendor/, which the build copies into the site.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def copy_worktree(dst: Path) -> Path:
    """Copy the working tree into ``dst`` (created if missing); return ``dst``."""
    if not (ROOT / ".vendor" / "static").is_dir():
        raise FileNotFoundError("the npm assets (.vendor/) are missing: run `make install` first")
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():  # a tracked file deleted in the working tree is skipped
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dst / f)
    shutil.copytree(ROOT / ".vendor", dst / ".vendor", dirs_exist_ok=True)
    return dst
