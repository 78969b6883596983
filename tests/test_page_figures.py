"""The reading of executed notebooks that the site's figure tests rest on (tests/page_figures.py)."""

import base64
import hashlib

import nbformat
from page_figures import drawing_cells, linked_images

PNG = b"\x89PNG\r\n\x1a\n not really an image"


def notebook(tmp_path, *cells):
    """cells: (source, tags, has_image_output)"""
    nb = nbformat.v4.new_notebook()
    for source, tags, image in cells:
        cell = nbformat.v4.new_code_cell(source, metadata={"tags": tags} if tags else {})
        if image:
            cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": base64.b64encode(PNG).decode(),
                                                                         "text/plain": "<Figure>"})]
        nb.cells.append(cell)
    path = tmp_path / "page.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_cell_calling_subplots_draws_and_its_image_is_named_by_its_hash(tmp_path):
    (cell,) = drawing_cells(notebook(tmp_path, ("fig, ax = plt.subplots()\nax.plot([1, 2])", [], True)))
    assert cell.images == [hashlib.sha256(PNG).hexdigest() + ".png"]


def test_a_drawing_cell_that_output_nothing_is_found_with_no_image(tmp_path):
    (cell,) = drawing_cells(notebook(tmp_path, ("import matplotlib.pyplot as plt\nplt.figure()", [], False)))
    assert cell.images == [] and cell.first_line == "import matplotlib.pyplot as plt"


def test_a_page_helper_that_draws_makes_its_callers_draw(tmp_path):
    path = notebook(tmp_path, ("def draw(n):\n    fig, ax = plt.subplots()\n    return fig", [], False),
                    ("for n in (1, 2):\n    draw(n)", ["hide-input"], True))
    assert [c.index for c in drawing_cells(path)] == [1], "defining draw draws nothing; calling it does"


def test_a_figure_drawn_only_for_an_interactive_widget_is_not_a_static_figure(tmp_path):
    path = notebook(tmp_path, ("def draw(n):\n    fig, ax = plt.subplots()\n    return fig\n"
                               "interactive_figure(draw, {'n': [1, 2]})", [], False))
    assert drawing_cells(path) == []


def test_library_drawers_and_diagrams_draw(tmp_path):
    path = notebook(tmp_path, ("plot_history(h)", [], True), ("d = Diagram(height=2)\nd", ["remove-input"], True),
                    ("from lmbook.diagram_examples import encoder_decoder\nencoder_decoder()", [], True))
    assert [c.index for c in drawing_cells(path)] == [0, 1, 2]


def test_diagrams_of_the_examples_module_draw_however_it_is_imported(tmp_path):
    path = notebook(tmp_path, ("import lmbook.diagram_examples as de", [], False), ("de.encoder_decoder()", [], True),
                    ("from lmbook import diagram_examples\ndiagram_examples.encoder_decoder()", [], True),
                    ("from lmbook.diagram_seq import soft_lookup\nsoft_lookup([0.5, 0.5], [1, 2], 1.5)", [], True),
                    ("from lmbook.diagram import heat_cmap\ncmap = heat_cmap('attention')", [], False))
    assert [c.index for c in drawing_cells(path)] == [1, 2, 3]


def test_cells_whose_output_the_author_removed_are_left_out(tmp_path):
    path = notebook(tmp_path, ("fig = plt.figure()", ["remove-output"], False), ("plt.subplots()", ["remove-cell"],
                                                                                    False))
    assert drawing_cells(path) == []


def test_linked_images_are_the_page_own_image_files():
    html = '<img alt="x" src="../_images/abc.png" style="width: 700px;" /><img src="_static/logo.svg">'
    assert linked_images(html) == {"abc.png"}
