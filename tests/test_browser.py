"""The built site in a real browser (Debian's chromium driven by Playwright), served on localhost.

For every page: no console error, no failed or external request, math typeset, every image loaded,
every interactive figure responds to its controls. Plus: the sidebar reaches every page of the toc,
and search finds chapter 1. Screenshots of every page go to _build/screenshots/ for review.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
SHOTS = ROOT / "_build" / "screenshots"
# Skipped only when asked for; otherwise a missing chromium fails these tests (see the browser fixture).
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.environ.get("LMBOOK_SKIP_BROWSER_TESTS") == "1",
                                 reason="LMBOOK_SKIP_BROWSER_TESTS=1: the browser tests were not run")]

VISIBLE_IMAGES = ("() => [...document.querySelectorAll('.jupyter-widgets img')]"
                  ".filter(i => i.offsetParent !== null).map(i => i.src)")


@pytest.fixture(scope="module")
def server(site):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), (f"{CHROMIUM} is missing: `make system-deps` (as root) or `sudo apt-get install "
                               "chromium` installs it; LMBOOK_SKIP_BROWSER_TESTS=1 skips these tests")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        yield b
        b.close()


class Visit:
    """One page load, recording console errors and every request that failed or left localhost."""

    def __init__(self, browser, origin: str, path: str):
        self.origin = origin
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.errors: list[str] = []
        self.bad_requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", self._request)
        self.page.on("requestfailed", lambda r: self.bad_requests.append(f"failed: {r.url}"))
        self.page.on("response", lambda r: self.bad_requests.append(f"HTTP {r.status}: {r.url}")
                     if r.status >= 400 else None)
        self.page.goto(f"{origin}/{path}", wait_until="networkidle")

    def _request(self, request) -> None:
        if not request.url.startswith((self.origin, "data:", f"blob:{self.origin}")):
            self.bad_requests.append(f"external: {request.url}")

    def close(self) -> None:
        self.page.close()


def _pages(site: Path) -> list[str]:
    return sorted(str(p.relative_to(site)) for p in site.rglob("*.html")
                  if not {"_static", "_sources", "reports"} & set(p.parts))


def _toc_pages() -> list[str]:
    toc = (ROOT / "_toc.yml").read_text()
    files = re.findall(r"(?:file|root): (\S+)", toc)
    globbed = [str(p.relative_to(ROOT).with_suffix("")) for pattern in re.findall(r"glob: (\S+)", toc)
               for p in sorted(ROOT.glob(pattern + ".ipynb"))]  # the exercises, found by folder
    return [f"{name}.html" for name in files + globbed]


def test_every_page_loads_cleanly_typesets_math_and_shows_its_images(site, server, browser):
    SHOTS.mkdir(parents=True, exist_ok=True)
    problems = []
    for path in _pages(site):
        v = Visit(browser, server, path)
        page = v.page
        has_math = page.locator(".math").count() > 0
        if has_math:
            page.wait_for_function("document.querySelectorAll('mjx-container').length > 0", timeout=20_000)
        page.wait_for_timeout(300)
        text = page.locator("article, .bd-article, body").first.inner_text()
        for raw in ("$$", "\\frac", "\\begin{", "\\mathbf"):
            if raw in text:
                problems.append(f"{path}: untypeset math {raw!r} in the text")
        broken = page.evaluate("() => [...document.images].filter(i => i.offsetParent !== null &&"
                               " !(i.complete && i.naturalWidth > 0)).map(i => i.src)")
        problems += [f"{path}: image did not load: {src[:80]}" for src in broken]
        problems += [f"{path}: console error: {e}" for e in v.errors]
        problems += [f"{path}: {r}" for r in v.bad_requests]
        page.screenshot(path=str(SHOTS / (path.replace("/", "__").removesuffix(".html") + ".png")), full_page=True)
        v.close()
    assert not problems, "\n".join(problems)


def test_every_interactive_figure_responds_to_each_control(site, server, browser):
    checked = 0
    for path in _pages(site):
        v = Visit(browser, server, path)
        page = v.page
        figures = page.locator(".widget-vbox:has(.widget-slider, .widget-dropdown)")
        if figures.count():
            page.wait_for_function(f"({VISIBLE_IMAGES})().length >= {figures.count()}", timeout=20_000)
        for i in range(figures.count()):
            fig = figures.nth(i)
            fig.scroll_into_view_if_needed()
            for j in range(fig.locator(".widget-slider .noUi-handle").count()):
                before = page.evaluate(VISIBLE_IMAGES)
                fig.locator(".widget-slider .noUi-handle").nth(j).focus()
                page.keyboard.press("ArrowRight")
                page.wait_for_timeout(200)
                assert page.evaluate(VISIBLE_IMAGES) != before, f"{path}: figure {i} ignores slider {j}"
                checked += 1
            for j in range(fig.locator(".widget-dropdown select").count()):
                select = fig.locator(".widget-dropdown select").nth(j)
                before = page.evaluate(VISIBLE_IMAGES)
                options = select.locator("option").all_inner_texts()
                select.select_option(label=options[-1])
                page.wait_for_timeout(200)
                assert page.evaluate(VISIBLE_IMAGES) != before, f"{path}: figure {i} ignores dropdown {j}"
                checked += 1
        if path == "book/ch01_feedforward_lm.html":
            page.locator(".widget-vbox:has(.widget-slider)").first.screenshot(path=str(SHOTS / "ch01_interactive.png"))
        v.close()
    assert checked >= 2, "chapter 1's figure (a slider and a dropdown) should have been exercised"


def test_sidebar_navigation_reaches_every_page_of_the_toc(site, server, browser):
    v = Visit(browser, server, "book/intro.html")
    hrefs = v.page.evaluate("() => [...document.querySelectorAll('.bd-sidebar a.reference')].map(a => a.href)")
    v.close()
    reached = {h.removeprefix(server + "/").split("#")[0] for h in hrefs}
    missing = [p for p in _toc_pages() if p not in reached and p != "book/intro.html"]
    assert not missing, f"not in the sidebar: {missing}"
    for path in reached:
        assert (site / path).exists(), f"sidebar link to a page that does not exist: {path}"


def test_search_finds_a_term_from_chapter_one(site, server, browser):
    v = Visit(browser, server, "search.html?q=perplexity")
    v.page.wait_for_selector("#search-results li a", timeout=20_000)
    results = v.page.evaluate("() => [...document.querySelectorAll('#search-results li a')].map(a => a.href)")
    v.close()
    assert any("ch01_feedforward_lm" in r for r in results), f"search results: {results}"


def test_landing_page_and_chapter_one_screenshots_exist_after_the_run(site, server, browser):
    for name in ("book__intro", "book__ch01_feedforward_lm"):
        shot = SHOTS / f"{name}.png"
        if not shot.exists():  # this test may run alone
            v = Visit(browser, server, name.replace("__", "/") + ".html")
            v.page.screenshot(path=str(shot), full_page=True)
            v.close()
        assert shot.stat().st_size > 10_000, f"{shot} looks empty"
    shutil.copy(SHOTS / "book__intro.png", SHOTS / "landing.png")


def _a_class() -> tuple[list, dict[str, float]]:
    """A made-up class of 60: varied totals, named mistakes, a flagged, an unrunnable and a stopped notebook."""
    from lmbook.grading.reports import Student

    tasks = {"log_softmax": 3.0, "cross_entropy": 3.0, "ffnn_forward": 3.0, "sgns_loss": 3.0, "train_lm": 4.0}
    students = []
    for i in range(60):
        st = Student(f"s{i:03d}")
        for k, (task, maxp) in enumerate(tasks.items()):
            st.tasks[task] = (float((i * (k + 3)) % (int(maxp) + 1)), maxp)
        if i % 3 == 0:
            st.mistakes["cross_entropy"] = ["averaged over padding positions too: divide by the number of "
                                            "non-padding targets"]
        if i % 7 == 0:
            st.mistakes["ffnn_forward"] = ["left out the hidden bias b"]
        students.append(st)
    students[5].suspicious = ["patches torch.allclose (line 3)"]
    students[6].status = "unreadable notebook (JSONDecodeError: ...)"
    students[6].tasks = {task: (0.0, maxp) for task, maxp in tasks.items()}
    students[7].status = "graded what ran: cell 12 did not finish"
    return students, tasks


def test_class_report_opens_from_the_file_system_and_loads_nothing_else(browser, tmp_path):
    from lmbook.grading import classreport

    students, tasks = _a_class()
    page_path = classreport.write_class_page(classreport.summarize("ch01", students, tasks), tmp_path)
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(page_path.as_uri(), wait_until="load")
    broken = page.evaluate("() => [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).length")
    shown = page.evaluate("() => document.images.length")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "class_report.png"), full_page=True)
    page.close()
    assert not errors, errors
    assert [u for u in requests if not u.startswith(("data:", page_path.as_uri()))] == [], requests
    assert (shown, broken) == (3, 0), f"{shown} images on the page, {broken} did not load"
