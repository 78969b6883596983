"""The online book: a clean, offline build with every cell executed, and pages that load nothing external."""

import functools
import http.server
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """Build a copy of the book from scratch, forcing every notebook to execute (no cache)."""
    src = tmp_path_factory.mktemp("book")
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    assert (ROOT / ".vendor" / "static").is_dir(), "run `make install` first: the npm assets are missing"
    shutil.copytree(ROOT / ".vendor", src / ".vendor")
    config = src / "_config.yml"
    config.write_text(re.sub(r"execute_notebooks: \w+", "execute_notebooks: force", config.read_text()))
    r = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build", str(src), "--all", "-W", "-n",
                        "--keep-going"], capture_output=True, text=True)
    assert r.returncode == 0, f"book build failed:\n{r.stdout[-5000:]}\n{r.stderr[-5000:]}"
    return src / "_build" / "html"


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.parts)


def test_every_chapter_in_the_toc_is_built(site):
    toc = (ROOT / "_toc.yml").read_text()
    for name in re.findall(r"file: (\S+)", toc) + re.findall(r"root: (\S+)", toc):
        assert (site / f"{name}.html").exists(), f"{name} is in _toc.yml but was not built"


def test_no_page_loads_a_script_image_or_frame_from_the_internet(site):
    offenders = []
    for page in _pages(site):
        for url in re.findall(r'src="(https?://[^"]*)"', page.read_text()):
            offenders.append(f"{page.relative_to(site)}: {url}")
    assert not offenders, "external src= URLs:\n" + "\n".join(offenders)


def test_mathjax_and_widgets_are_served_by_the_site(site):
    html = (site / "book" / "ch01_feedforward_lm.html").read_text()
    for asset in ("vendor/mathjax/tex-chtml.js", "vendor/require.js", "vendor/html-manager/embed-amd.js"):
        assert f"_static/{asset}" in html, f"{asset} is not referenced locally"
        assert (site / "_static" / asset).exists(), f"{asset} is missing from the site"


def test_chapter_one_has_an_interactive_figure_with_saved_widget_state(site):
    html = (site / "book" / "ch01_feedforward_lm.html").read_text()
    assert "application/vnd.jupyter.widget-state+json" in html
    assert '"model_name": "LinkModel"' in html and '"model_name": "StackModel"' in html


def test_no_cell_error_or_warning_text_in_the_pages(site):
    for page in _pages(site):
        text = page.read_text()
        for bad in ("Traceback (most recent call last)", "UserWarning", "DeprecationWarning"):
            assert bad not in text, f"{page.name} shows {bad!r}"


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (.ci/run installs it)")
def test_slider_changes_the_figure_in_a_browser_without_a_kernel(site):
    from playwright.sync_api import sync_playwright

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    external = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync"])
            page = browser.new_page()
            page.on("request", lambda r: external.append(r.url)
                    if not r.url.startswith((origin, "data:", f"blob:{origin}")) else None)
            page.goto(f"{origin}/book/ch01_feedforward_lm.html", wait_until="networkidle")
            page.wait_for_selector(".widget-slider", timeout=20_000)
            page.wait_for_function("document.querySelectorAll('mjx-container').length > 0", timeout=20_000)
            shown = ("() => [...document.querySelectorAll('.jupyter-widgets img')]"
                     ".filter(i => i.offsetParent !== null).map(i => i.src)")
            before = page.evaluate(shown)
            page.locator(".widget-slider .noUi-handle").first.focus()
            for _ in range(3):
                page.keyboard.press("ArrowRight")
            page.wait_for_timeout(300)
            after = page.evaluate(shown)
            browser.close()
    finally:
        server.shutdown()
    assert len(before) == 1 and len(after) == 1, f"expected one visible figure, saw {before} then {after}"
    assert before != after, "moving the slider did not change the figure"
    assert external == [], f"the page requested external resources: {external}"
