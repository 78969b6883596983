"""`make system-deps` (which `make test` runs first): installs the Debian packages when it can, else stops in one line.

`id`, `sudo` and `apt-get` are stand-ins on PATH, so these tests install nothing and behave the same for any user.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MISSING = ["BWRAP=no-such-bwrap", "CHROMIUM=/no/such/chromium"]


def _fake_bin(tmp_path: Path, uid: int, sudo_ok: bool) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {"id": f"echo {uid}",
               "sudo": 'if [ "$1" = -n ]; then shift; fi; ' + ('exec "$@"' if sudo_ok else "exit 1"),
               "apt-get": f'echo "$@" >> {tmp_path / "apt-get.log"}'}
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _make(tmp_path: Path, uid: int, sudo_ok: bool, *args: str, target: str = "system-deps"):
    env = dict(os.environ, PATH=f"{_fake_bin(tmp_path, uid, sudo_ok)}{os.pathsep}{os.environ['PATH']}")
    env.pop("LMBOOK_SKIP_BROWSER_TESTS", None)
    for var in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS"):  # under `make test` these would make it a sub-make
        env.pop(var, None)
    r = subprocess.run(["make", "-s", "--no-print-directory", target, *args], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    log = tmp_path / "apt-get.log"
    return r, log.read_text().splitlines() if log.exists() else []


def test_without_root_or_sudo_it_stops_with_one_line_naming_the_packages_and_the_command(tmp_path):
    r, apt = _make(tmp_path, 1000, False, *MISSING)
    ours = [ln for ln in r.stderr.splitlines() if not re.match(r"make(\[\d+\])?: ", ln)]
    assert r.returncode != 0 and apt == [], f"rc={r.returncode}, apt-get ran: {apt}"
    assert len(ours) == 1 and "`sudo apt-get install -y bubblewrap chromium`" in ours[0], r.stderr


def test_make_test_stops_there_before_installing_or_running_anything(tmp_path):
    r, _ = _make(tmp_path, 1000, False, *MISSING, "PYTHON=/no/such/python", "BIN=/no/such/bin", target="test")
    assert r.returncode != 0 and "Missing Debian packages: bubblewrap chromium" in r.stderr, r.stderr
    assert "/no/such" not in r.stdout + r.stderr, f"make test went on past the missing packages:\n{r.stderr}"


def test_as_root_it_installs_the_missing_packages_with_apt_get(tmp_path):
    r, apt = _make(tmp_path, 0, False, *MISSING)
    assert apt == ["update -qq", "install -y -qq bubblewrap chromium"], f"apt-get calls: {apt}\n{r.stderr}"


def test_with_passwordless_sudo_it_installs_through_sudo(tmp_path):
    r, apt = _make(tmp_path, 1000, True, *MISSING)
    assert apt == ["update -qq", "install -y -qq bubblewrap chromium"], f"apt-get calls: {apt}\n{r.stderr}"


def test_skipping_the_browser_tests_drops_chromium_only(tmp_path):
    r, _ = _make(tmp_path, 1000, False, *MISSING, "LMBOOK_SKIP_BROWSER_TESTS=1")
    assert "Missing Debian packages: bubblewrap." in r.stderr, r.stderr
