"""How the chapters lay out their code: a page shows the reader the experiment, and keeps the code that only
draws its figure one click away (``hide-input``) or out of sight, as every chapter does."""

import ast
import re
from pathlib import Path

import nbformat
import pytest
from myst_nb.core.read import read_myst_markdown_notebook
from page_figures import drawing_cells

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "book").glob("ch*.md")) + [ROOT / "book" / "appendix_gpu.md"]
OUT_OF_SIGHT = {"hide-input", "remove-input", "remove-cell"}


def _interactive_figure_calls(source: str) -> list[ast.Call]:
    """The cell's calls of ``interactive_figure``, by its name or as an attribute (``plot.interactive_figure``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and getattr(n.func, "id", getattr(n.func, "attr", "")) == "interactive_figure"]


def _page(page: Path, tmp_path: Path) -> tuple[nbformat.NotebookNode, Path]:
    """The page as Jupyter Book reads it, and that notebook written to a file (what drawing_cells reads)."""
    nb = read_myst_markdown_notebook(page.read_text())
    path = tmp_path / "page.ipynb"
    nbformat.write(nb, path)
    return nb, path


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_a_cell_that_only_draws_a_figure_keeps_its_code_out_of_the_way(page, tmp_path):
    nb, path = _page(page, tmp_path)
    drawing = {c.index for c in drawing_cells(path)}
    drawing |= {i for i, c in enumerate(nb.cells) if c.cell_type == "code" and _interactive_figure_calls(c.source)}
    shown = [nb.cells[i].source.splitlines()[0] for i in sorted(drawing)
             if not OUT_OF_SIGHT & set(nb.cells[i].metadata.get("tags", []))]
    assert not shown, (f"{page.name}: cells that draw a figure show their code in full; tag them hide-input "
                       f"(one click away) as the other chapters do: {shown}")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_every_figure_a_cell_draws_has_alt_text(page, tmp_path):
    """A reader who cannot see the plot (a screen reader, an image that failed to load) gets a sentence
    saying what it shows: ``mystnb: image: alt:`` in the cell's options, which myst-nb writes as the image's
    ``alt``. The site's own test checks the built pages' ``<img>`` tags."""
    nb, path = _page(page, tmp_path)
    missing = [nb.cells[c.index].source.splitlines()[0] for c in drawing_cells(path)
               if not str(nb.cells[c.index].metadata.get("mystnb", {}).get("image", {}).get("alt", "")).strip()]
    assert not missing, f"{page.name}: cells that draw a figure with no alt text: {missing}"


CHAPTER_PAGES = sorted((ROOT / "book").glob("ch*.md"))
# the first page of each chapter, as _toc.yml lists it (a chapter's other pages are its "sections")
FIRST_PAGES = re.findall(r"^      - file: book/(ch\d\d_\w+)$", (ROOT / "_toc.yml").read_text(), re.M)


@pytest.mark.parametrize("page", CHAPTER_PAGES, ids=lambda p: p.stem)
def test_every_page_has_a_summary(page):
    assert re.search(r"^## Summary$", page.read_text(), re.M), f"{page.name} has no Summary section"


@pytest.mark.parametrize("name", FIRST_PAGES)
def test_every_chapter_sends_the_reader_to_its_exercise_from_an_exercises_section(name):
    text = (ROOT / "book" / f"{name}.md").read_text()
    section = text.split("\n## Exercises\n", 1)
    assert len(section) == 2, f"{name}.md has no Exercises section"
    assert f"](../exercises/{name[:4]}/{name}.ipynb)" in section[1].split("\n## ", 1)[0], (
        f"{name}.md's Exercises section does not link exercises/{name[:4]}/{name}.ipynb")


def test_every_page_of_chapter_11_has_an_exercises_section():
    missing = [p.name for p in CHAPTER_PAGES if p.name.startswith("ch11") and "\n## Exercises\n" not in p.read_text()]
    assert not missing, f"no Exercises section: {missing}"


def test_the_table_of_contents_names_a_first_page_for_every_chapter():
    assert len(FIRST_PAGES) == len({p.name[:4] for p in CHAPTER_PAGES}), FIRST_PAGES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_every_interactive_figure_says_what_it_shows(page):
    """An interactive figure's images are widgets, not cell outputs: its alt text is ``interactive_figure``'s
    ``alt=`` (each image's title, with the values it is drawn for)."""
    nb = read_myst_markdown_notebook(page.read_text())
    bare = []
    for cell in nb.cells:
        for node in _interactive_figure_calls(cell.source) if cell.cell_type == "code" else []:
            alt = next((k.value for k in node.keywords if k.arg == "alt"), None)
            if not (isinstance(alt, ast.Constant) and str(alt.value).strip()
                    or isinstance(alt, ast.JoinedStr | ast.BinOp | ast.Name)):
                bare.append(ast.get_source_segment(cell.source, node)[:80])
    assert not bare, f"{page.name}: interactive figures with no alt= text: {bare}"
