"""``make lab`` as a student meets it: the exercises, each notebook's link to its chapter working, and none of
nbgrader's instructor tools. Started with the Makefile's own command (as root here, which it must allow and say).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
TOKEN = "lmbook-test"
INSTRUCTOR_TOOLS = ["@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                    "@jupyter/nbgrader:course-list", "@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:menu",
                    # Validate runs nbgrader's own validation, which knows none of the grader's rules
                    "@jupyter/nbgrader:validate-assignment"]
pytestmark = pytest.mark.slow


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, ""


def _checkpoints() -> set:
    return {p for top in ("exercises", "book", "solutions") for p in (ROOT / top).glob("**/.ipynb_checkpoints")}


def _notebooks() -> dict[Path, bytes]:
    return {p: p.read_bytes() for top in ("exercises", "book", "solutions") for p in (ROOT / top).glob("**/*.ipynb")}


@pytest.fixture(scope="module")
def lab():
    # Opening a notebook makes JupyterLab write a .ipynb_checkpoints folder beside it, and its autosave (every
    # two minutes) writes the kernel's details into a notebook left open: the test removes the folders it made
    # and puts back every notebook's bytes, so the repository is left as it was found.
    checkpoints_before, notebooks_before = _checkpoints(), _notebooks()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = f"--no-browser --ServerApp.port={port} --ServerApp.port_retries=0 --IdentityProvider.token={TOKEN}"
    proc = subprocess.Popen(["make", "--no-print-directory", "lab", f"LAB_ARGS={args}"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if _get(f"{base}/api/status?token={TOKEN}")[0] == 200:
                break
        except OSError:
            pass
        time.sleep(1)
    try:
        assert proc.poll() is None, f"make lab stopped: {proc.communicate()[0][-3000:]}"
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        output = proc.communicate(timeout=60)[0]
        for made in _checkpoints() - checkpoints_before:
            shutil.rmtree(made, ignore_errors=True)
        for path, content in notebooks_before.items():
            if not path.exists() or path.read_bytes() != content:
                path.write_bytes(content)
        if os.getuid() == 0:
            assert "make lab: running as root, so JupyterLab gets --allow-root" in output, output[-2000:]


def test_the_lab_opens_on_the_exercises(lab):
    with urllib.request.urlopen(f"{lab}/?token={TOKEN}", timeout=30) as r:
        assert r.geturl().split("?")[0] == f"{lab}/lab/tree/exercises", r.geturl()


def test_no_nbgrader_instructor_tool_reaches_the_students_lab(lab):
    _, page = _get(f"{lab}/lab?token={TOKEN}")
    config = json.loads(re.search(r'id="jupyter-config-data"[^>]*>\s*(\{.*?\})\s*</script>', page, re.S).group(1))
    assert set(INSTRUCTOR_TOOLS) <= set(config["disabledExtensions"]), config["disabledExtensions"]
    for path in ("formgrader", "formgrader/api/assignments", "courses", "assignments", "assignments/validate"):
        assert _get(f"{lab}/{path}?token={TOKEN}")[0] == 404, f"/{path} answers in the student's lab"


def test_every_exercise_links_to_a_chapter_the_lab_serves(lab):
    for nb in sorted(ROOT.glob("exercises/ch*/*.ipynb")):
        text = "".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"][:1])
        links = re.findall(r"\]\((\.\./[^)]+\.md)\)", text)
        assert links, f"{nb.name}: no link to its chapter in its first cell"
        target = posixpath.normpath(posixpath.join(str(nb.parent.relative_to(ROOT)), links[0]))
        assert _get(f"{lab}/api/contents/{target}?token={TOKEN}&content=0")[0] == 200, f"{nb.name}: {target}"


@pytest.mark.skipif(os.environ.get("LMBOOK_SKIP_BROWSER_TESTS") == "1", reason="LMBOOK_SKIP_BROWSER_TESTS=1")
def test_clicking_the_chapter_link_opens_the_chapter(lab):
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), f"{CHROMIUM} is missing (make system-deps)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{lab}/lab/tree/exercises/ch05/ch05_self_attention.ipynb?token={TOKEN}")
        link = page.locator(".jp-MarkdownOutput a", has_text="Chapter 5").first
        link.wait_for(timeout=120_000)
        menus = page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
        validate_buttons = page.locator(".jp-Toolbar").get_by_text("Validate", exact=True).count()
        link.click()
        # generous waits: beside make test's book build, JupyterLab took over a minute to render the chapter
        page.locator(".lm-TabBar-tab", has_text="ch05_self_attention.md").first.click(timeout=300_000)
        # the chapter's own title: has_text alone is a case-blind substring, which the exercise's hidden title
        # "Exercise 5: self-attention" also matches
        page.locator(".jp-RenderedMarkdown h1", has_text=re.compile(r"^Self-attention")).first.wait_for(
            timeout=300_000)
        browser.close()
    assert "Nbgrader" not in menus, menus
    assert not validate_buttons, "nbgrader's Validate button is in the student's notebook toolbar"
