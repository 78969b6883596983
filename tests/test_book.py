"""The online book: a clean, offline build with every cell executed, and pages that load nothing external."""

import re
import subprocess
from html import unescape
from pathlib import Path

import pytest
import yaml
from page_figures import drawing_cells, executed_notebook, has_outputs, linked_images

from lmbook.tasks import ASSIGNMENTS

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


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


PAGES = re.findall(r"file: book/(ch\d\d_\w+)", (ROOT / "_toc.yml").read_text())
# A long chapter is split into pages (ch09_gpt, ch09_pretraining, ...): its first page names the chapter.
CHAPTERS = [page for i, page in enumerate(PAGES) if i == 0 or page[:4] != PAGES[i - 1][:4]]
# The tables of contents find the exercises by folder: one per released exercise.
EXERCISES = [(a, next((ROOT / "exercises" / a).glob("*.ipynb")).stem) for a in ASSIGNMENTS]


@pytest.mark.parametrize(("folder", "name"), EXERCISES)
def test_every_exercise_is_built_and_titled_by_its_heading(site, folder, name):
    html = (site / "exercises" / folder / f"{name}.html").read_text()
    number = int(folder[2:])
    assert re.search(rf"<title>Exercise {number}: ", html), f"{folder}'s page is not titled 'Exercise {number}'"


@pytest.mark.parametrize("page", PAGES)
def test_every_chapter_page_has_an_interactive_figure_with_saved_widget_state(site, page):
    html = (site / "book" / f"{page}.html").read_text()
    assert "application/vnd.jupyter.widget-state+json" in html
    assert '"model_name": "LinkModel"' in html and '"model_name": "StackModel"' in html


# The book's own pages (not the exercises) that run code: each has an executed notebook beside the site.
CODE_PAGES = [page for page in re.findall(r"(?:file|root): (book/\S+)", (ROOT / "_toc.yml").read_text())
              if "{code-cell}" in (ROOT / f"{page}.md").read_text()]


@pytest.mark.parametrize("page", CODE_PAGES)
def test_every_figure_a_page_draws_is_on_the_page(site, page):
    notebook = executed_notebook(site, page)
    cells = drawing_cells(notebook)
    assert cells, f"{page} draws no figure at all: every chapter shows its results and its architecture"
    # (myst-nb writes a page it takes from its execution cache without outputs; book/_ext merges them back)
    assert has_outputs(notebook), f"{notebook} holds no outputs at all: were the cached outputs merged back?"
    on_page = linked_images((site / f"{page}.html").read_text())
    missing = []
    for cell in cells:
        where = f"{page}, cell {cell.index} ({cell.first_line[:50]!r})"
        if not cell.images:
            missing.append(f"{where} draws a figure but output no image (a kernel with MPLBACKEND set?)")
        missing += [f"{where}: its image {name} is not on the page" for name in cell.images if name not in on_page]
        missing += [f"{where}: its image {name} is not in the site" for name in cell.images
                    if not (site / "_images" / name).exists()]
    assert not missing, "\n".join(missing)


def test_every_image_on_a_page_has_alt_text(site):
    """Plots and diagrams alike: a screen reader reads the alt text, and so does a reader whose image did not
    load. (The chapters' sources set it per cell: tests/test_page_layout.py.)"""
    bare = []
    for page in _pages(site):
        for tag in re.findall(r"<img\b[^>]*>", page.read_text()):
            # Quoted either way: an interactive figure's images are written with single quotes, in its widget state
            alt = re.search(r"""\balt=(?:"([^"]*)"|'([^']*)')""", tag)
            if alt is None or not unescape(alt.group(1) or alt.group(2) or "").strip():
                bare.append(f"{page.relative_to(site)}: {tag[:120]}")
    assert not bare, f"{len(bare)} images with no alt text:\n" + "\n".join(bare[:20])


def _expected_boxes(site: Path) -> list[tuple[str, str]]:
    """(page, text) of every "expected result" box (lmbook.expected) the built pages show."""
    boxes = []
    for page in _pages(site):
        for quote in re.findall(r"<blockquote>(.*?)</blockquote>", page.read_text(), re.S):
            text = " ".join(unescape(re.sub(r"<[^>]+>", "", quote)).split())
            if text.startswith(("Expected result", "For comparison")):
                boxes.append((str(page.relative_to(site)), text))
    return boxes


def test_no_expected_result_box_of_the_project_build_says_the_run_is_off(site):
    boxes = _expected_boxes(site)
    assert boxes, "no expected-result box found on any page"
    off = [f"{page}: {text}" for page, text in boxes if "outside that band" in text]
    assert not off, "the project's own build is outside the benchmarks' band:\n" + "\n".join(off)


def test_every_expected_result_box_has_a_benchmark_figure(site):
    missing = [f"{page}: {text}" for page, text in _expected_boxes(site) if "not been benchmarked" in text]
    assert not missing, "`make bench-chapters CHAPTERS=...` measures these:\n" + "\n".join(missing)


def test_no_cell_error_or_warning_text_in_the_pages(site):
    for page in _pages(site):
        text = page.read_text()
        for bad in ("Traceback (most recent call last)", "UserWarning", "DeprecationWarning"):
            assert bad not in text, f"{page.name} shows {bad!r}"


SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS", "hidden=True")


def _site_text(site: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in site.rglob("*") if p.suffix in (".html", ".ipynb", ".md"))


def test_exercises_are_in_the_book_without_solutions_or_hidden_tests(site):
    page = site / "exercises" / "ch01" / "ch01_feedforward_lm.html"
    assert page.exists(), "the exercise should be browsable in the book"
    assert "raise NotImplementedError()" in re.sub(r"<[^>]+>", "", page.read_text()), "stubs should be shown"
    text = _site_text(site)
    for marker in SOLUTION_MARKERS:
        assert marker not in text, f"the reader's edition leaks {marker!r}"
    assert not (site / "solutions").exists()


def test_the_landing_page_links_every_page_of_the_table_of_contents():
    """Its contents are the book's map: a page the sidebar lists and the contents do not is a page readers miss
    (chapter 11 was, when the book grew past chapter 10). Read from the source: every built page's sidebar
    links every page already."""
    toc = (ROOT / "_toc.yml").read_text()
    landing = (ROOT / "book" / "intro.md").read_text()
    pages = re.findall(r"file: book/(\S+)", toc)
    missing = [name for name in pages if f"]({name}.md)" not in landing]
    assert pages and not missing, f"book/intro.md's contents do not link: {missing}"


def test_every_chapter_in_the_toc_has_its_exercise():
    assert [name for _, name in EXERCISES] == CHAPTERS


@pytest.mark.parametrize(("folder", "name"), EXERCISES)
def test_chapter_and_exercise_link_to_each_other(site, folder, name):
    chapter = (site / "book" / f"{name}.html").read_text()
    exercise = (site / "exercises" / folder / f"{name}.html").read_text()
    assert f'href="../exercises/{folder}/{name}.html"' in chapter
    assert f'href="../../book/{name}.html' in exercise


def test_bibliography_lists_the_papers_chapters_cite(site):
    refs = (site / "book" / "references.html").read_text()
    assert "a neural probabilistic language model" in refs.lower()
    chapter = (site / "book" / "ch01_feedforward_lm.html").read_text()
    assert "references.html#id" in chapter, "chapter 1's citations should link to the bibliography"


def _theme_options() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]["html_theme_options"]


def _tracked_files() -> set[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return set(out.splitlines())


def test_pages_offer_their_notebook_for_download(site):
    html = (site / "book" / "ch01_feedforward_lm.html").read_text()
    assert "_sources/book/ch01_feedforward_lm" in html, "no download link for the page's source"


def test_the_repository_is_named_in_one_setting_only():
    url = _theme_options()["repository_url"]
    found = subprocess.run(["git", "grep", "-l", "-F", url.removeprefix("https://"), "--", ".", ":!tests"],
                           cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert found == ["_config.yml"], f"the repository URL is also typed in {[f for f in found if f != '_config.yml']}"


def test_every_launch_and_repository_link_is_built_from_the_setting_and_opens_a_file_the_repository_has(site):
    options = _theme_options()
    url, branch = options["repository_url"].rstrip("/"), options["repository_branch"]
    binder = f"{options['launch_buttons']['binderhub_url'].rstrip('/')}/v2/gh/{url.removeprefix('https://github.com/')}"
    tracked, problems, launches = _tracked_files(), [], 0
    for page in _pages(site):
        for attrs in re.findall(r"<a\b([^>]*)>", page.read_text()):
            href = unescape(next(iter(re.findall(r'\bhref="([^"]*)"', attrs)), ""))
            button = "btn" in next(iter(re.findall(r'\bclass="([^"]*)"', attrs)), "")
            if "mybinder.org" in href:
                launches += 1
                m = re.fullmatch(re.escape(binder) + "/" + re.escape(branch) + r"\?urlpath=lab/tree/(.+)", href)
                if m is None:
                    problems.append(f"{page.name}: a Binder link not built from the setting: {href}")
                elif m.group(1) not in tracked:
                    problems.append(f"{page.name}: Binder would open {m.group(1)}, which the repository does not have")
            elif "colab.research.google.com" in href:
                problems.append(f"{page.name}: a Colab link, which cannot open the page: {href}")
            elif button and "github.com/" in href and not href.startswith(url):
                problems.append(f"{page.name}: a repository button not built from the setting: {href}")
    assert launches > 0, "no page offers a Binder button"
    assert not problems, "\n".join(problems)


def test_binder_installs_lmbook_from_the_checkout_in_its_environment():
    tracked = _tracked_files()
    assert {"binder/environment.yml", "binder/postBuild"} <= tracked, "Binder reads binder/ (tracked by git)"
    mode = subprocess.run(["git", "ls-files", "-s", "binder/postBuild"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.split()[0]
    assert mode == "100755", "repo2docker runs postBuild only if it is executable"
    env = yaml.safe_load((ROOT / "binder" / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert any(p.startswith("torch==") for p in pip) and "jupytext" in pip
    assert not [p for p in pip if p.startswith(("-e", ".")) or p.split()[0] in ("-e", "--editable")], \
        "the repository is not there yet when environment.yml is installed"
    assert 'pip install --no-cache-dir -e ".[book]"' in (ROOT / "binder" / "postBuild").read_text()


@pytest.mark.parametrize(("folder", "name"), EXERCISES)
def test_instructor_edition_includes_the_solutions(instructor_site, folder, name):
    page = instructor_site / "solutions" / folder / f"{name}.html"
    assert page.exists(), "the instructor edition should have a page per solution"
    html = page.read_text()
    text = re.sub(r"<[^>]+>", "", html)
    assert "BEGIN SOLUTION" in text and "BEGIN HIDDEN TESTS" in text
    assert re.search(rf"<title>Solution {int(folder[2:])}: ", html), "a solution page should be titled 'Solution N'"
    assert (instructor_site / "book" / f"{name}.html").exists()


def test_a_page_taken_from_the_execution_cache_is_offered_for_download_with_its_outputs(instructor_site):
    # The instructor's edition reuses the reader's edition's executions: every chapter is a cache hit there.
    for notebook in (instructor_site.parent / "jupyter_execute" / "book" / "ch01_feedforward_lm.ipynb",
                     instructor_site / "_sources" / "book" / "ch01_feedforward_lm.ipynb"):
        assert has_outputs(notebook), f"{notebook} has lost its outputs"


def test_site_root_serves_a_favicon(site):
    # Browsers request /favicon.ico for pages without an icon link (the root redirect page):
    # without the file, that request is a 404 in the console.
    assert (site / "favicon.ico").stat().st_size > 0
