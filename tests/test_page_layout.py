"""How the chapters lay out their code: a page shows the reader the experiment, and keeps the code that only
draws its figure one click away (``hide-input``) or out of sight, as every chapter does."""

import ast
from pathlib import Path

import nbformat
import pytest
from myst_nb.core.read import read_myst_markdown_notebook
from page_figures import drawing_cells

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "book").glob("ch*.md")) + [ROOT / "book" / "appendix_gpu.md"]
OUT_OF_SIGHT = {"hide-input", "remove-input", "remove-cell"}


def _calls_interactive_figure(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", "")) == "interactive_figure"
               for s in tree.body for n in ast.walk(s))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_a_cell_that_only_draws_a_figure_keeps_its_code_out_of_the_way(page, tmp_path):
    nb = read_myst_markdown_notebook(page.read_text())  # as Jupyter Book reads the page
    path = tmp_path / "page.ipynb"
    nbformat.write(nb, path)
    drawing = {c.index for c in drawing_cells(path)}
    drawing |= {i for i, c in enumerate(nb.cells) if c.cell_type == "code" and _calls_interactive_figure(c.source)}
    shown = [nb.cells[i].source.splitlines()[0] for i in sorted(drawing)
             if not OUT_OF_SIGHT & set(nb.cells[i].metadata.get("tags", []))]
    assert not shown, (f"{page.name}: cells that draw a figure show their code in full; tag them hide-input "
                       f"(one click away) as the other chapters do: {shown}")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_every_figure_a_cell_draws_has_alt_text(page, tmp_path):
    """A reader who cannot see the plot (a screen reader, an image that failed to load) gets a sentence
    saying what it shows: ``mystnb: image: alt:`` in the cell's options, which myst-nb writes as the image's
    ``alt``. The site's own test checks the built pages' ``<img>`` tags."""
    nb = read_myst_markdown_notebook(page.read_text())
    path = tmp_path / "page.ipynb"
    nbformat.write(nb, path)
    missing = [nb.cells[c.index].source.splitlines()[0] for c in drawing_cells(path)
               if not str(nb.cells[c.index].metadata.get("mystnb", {}).get("image", {}).get("alt", "")).strip()]
    assert not missing, f"{page.name}: cells that draw a figure with no alt text: {missing}"
