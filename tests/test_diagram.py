"""The diagram primitives draw what they are given, inside the canvas, at the book's one width."""

import struct

import matplotlib.pyplot as plt
import numpy as np
import pytest
from IPython.core.formatters import DisplayFormatter

from lmbook.diagram import DISPLAY_PX, DPI, PALETTE, WIDTH, Diagram
from lmbook.diagram_examples import encoder_decoder


def shown_texts(d: Diagram) -> list[str]:
    """The labels a reader can see: visible, non-empty text drawn inside the canvas."""
    d.fig.canvas.draw()
    renderer, page = d.fig.canvas.get_renderer(), d.fig.bbox
    out = []
    for t in d.ax.texts:
        bb = t.get_window_extent(renderer)
        if t.get_visible() and t.get_text() and page.x0 <= bb.x0 and bb.x1 <= page.x1 and \
                page.y0 <= bb.y0 and bb.y1 <= page.y1:
            out.append(t.get_text())
    return out


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", png[16:24])


def test_box_draws_its_label_inside_the_box():
    d = Diagram(height=1.0)
    b = d.box((3.5, 0.5), "feed-forward", role="ffn")
    assert "feed-forward" in shown_texts(d)
    assert d.problems() == [], "a box fitted to its label should hold it"
    (t,) = d.ax.texts
    bb = t.get_window_extent(d.fig.canvas.get_renderer())
    assert b.w * DPI > bb.width, "the fitted box is narrower than its label"


def test_box_colours_follow_the_role():
    d = Diagram(height=1.0)
    d.box((2, 0.5), "attention", role="attention")
    (patch,) = d.ax.patches
    assert np.allclose(patch.get_facecolor()[:3], plt.matplotlib.colors.to_rgb(PALETTE["attention"].face))


def test_arrow_draws_its_label():
    d = Diagram(height=1.0)
    d.arrow((1, 0.5), (5, 0.5), label="$W_o$")
    assert shown_texts(d) == ["$W_o$"]


def test_elbow_and_skip_arrows_turn_where_asked():
    d = Diagram(height=2.0)
    elbow = d.elbow((1, 0.5), (3, 1.5), first="v")
    skip = d.skip((2, 0.3), (2, 1.7), out=0.6)
    # (the line stops short of its end by the arrowhead's tip)
    assert np.allclose(elbow.get_path().vertices[:3], [(1, 0.5), (1, 1.5), (3, 1.5)], atol=0.02)
    xs = skip.get_path().vertices[:, 0]
    assert xs.max() == pytest.approx(2.6, abs=0.02), "the skip connection goes out 0.6 in to the right of the block"


def test_tensor_draws_its_name_and_shape_and_one_cell_per_entry():
    d = Diagram(height=1.5)
    d.tensor((3.5, 0.75), rows=3, cols=5, name="$X$", shape="$(n, d)$", role="input")
    assert set(shown_texts(d)) == {"$X$", "$(n, d)$"}
    assert len(d.ax.patches) == 15
    assert d.problems() == []


def test_tensor_labels_on_one_side_do_not_overlap():
    d = Diagram(height=1.5)
    d.tensor((3.5, 0.5), rows=4, cols=1, name="$\\mathbf{c}$", shape="$(d_{\\mathrm{hid}})$",
             name_side="above", shape_side="above")
    assert d.problems() == []


def test_grid_writes_its_values_and_labels_and_masks_minus_infinity():
    d = Diagram(height=2.0)
    scores = np.array([[0.0, -np.inf, -np.inf], [0.5, 1.0, -np.inf], [0.1, 0.2, 0.3]])
    d.grid((3.5, 0.9), scores, row_labels=["the", "cat", "sat"], col_labels=["the", "cat", "sat"], fmt="{:.1f}")
    texts = shown_texts(d)
    assert sorted(texts.count(w) for w in ("the", "cat", "sat")) == [2, 2, 2], "each token labels a row and a column"
    assert {"0.0", "0.5", "1.0", "0.1", "0.2", "0.3"} <= set(texts)
    assert "-inf" not in texts and "inf" not in " ".join(texts), "a masked cell shows no number"
    hatched = [p for p in d.ax.patches if p.get_hatch()]
    assert len(hatched) == 3, "the three -inf entries of a causal mask are drawn as masked"


def test_grid_colours_larger_values_darker():
    d = Diagram(height=1.0)
    d.grid((3.5, 0.5), [[0.0, 0.5, 1.0]])
    darkness = [1 - np.mean(p.get_facecolor()[:3]) for p in d.ax.patches]
    assert darkness[0] < darkness[1] < darkness[2]


def test_grid_rejects_a_vector():
    with pytest.raises(ValueError, match="2-d"):
        Diagram(height=1.0).grid((1, 0.5), [1.0, 2.0])


def test_group_draws_its_title_and_repeat_count():
    d = Diagram(height=2.0)
    a = d.box((3.5, 0.6), "attention", role="attention")
    b = d.box((3.5, 1.2), "feed-forward", role="ffn")
    d.group([a, b], label="block", repeat="N")
    assert {"block", "$N\\times$"} <= set(shown_texts(d))
    assert d.problems() == []


def test_problems_catch_what_a_reader_would_see_as_broken():
    d = Diagram(height=1.0)
    d.box((1.0, 0.5), "a label far too long for its box", w=0.6)
    d.text((3.0, 0.5), "one label")
    d.text((3.05, 0.5), "another label")
    d.text((6.95, 0.5), "off the edge")
    found = "\n".join(d.problems())
    assert "overflows its box" in found
    assert "'one label' and 'another label' overlap" in found
    assert "'off the edge' is cut off" in found
    with pytest.raises(AssertionError, match="not clean"):
        d.check()


def test_every_diagram_has_the_book_width_whatever_its_height():
    for height in (1.0, 3.5):
        d = Diagram(height=height)
        d.box((0.5, 0.5), "x")  # a drawing hugging one corner is not cropped to it
        assert png_size(d.png()) == (round(WIDTH * DPI), round(height * DPI))


def test_a_notebook_shows_the_diagram_as_a_png_of_the_display_width():
    d = Diagram(height=1.0)
    d.box((3.5, 0.5), "softmax", role="output")
    data, metadata = DisplayFormatter().format(d)
    assert png_size(data["image/png"])[0] == round(WIDTH * DPI)
    assert metadata["image/png"] == {"width": DISPLAY_PX}


def test_a_diagram_is_not_shown_twice_by_pyplot():
    before = plt.get_fignums()
    Diagram(height=1.0)
    assert plt.get_fignums() == before, "pyplot (and so the inline backend) must not know the diagram's figure"


def test_encoder_decoder_draws_every_state_and_word_inside_the_canvas():
    d = encoder_decoder()
    texts = shown_texts(d)
    for s in ["$\\mathbf{h}_1$", "$\\mathbf{h}_4$", "$\\mathbf{c}$", "$\\mathbf{s}_1$", "$\\mathbf{s}_3$",
              "$\\mathbf{s}_0$", "$x_1$", "$y_0$", "$y_3$", "encoder", "decoder"]:
        assert s in texts, f"{s} is not on the diagram"
    renderer, page = d.fig.canvas.get_renderer(), d.fig.bbox
    for artist in [*d.ax.patches, *d.ax.lines, *d.ax.texts]:
        bb = artist.get_window_extent(renderer)
        assert page.x0 - 1 <= bb.x0 and bb.x1 <= page.x1 + 1 and page.y0 - 1 <= bb.y0 and bb.y1 <= page.y1 + 1, \
            f"{artist} is drawn outside the canvas"
    assert d.problems() == []


def test_encoder_decoder_labels_a_page_own_sentence():
    d = encoder_decoder(source=["the", "cat", "sat", "<eos>"], target=["le", "chat", "<eos>"])
    assert {"the", "<eos>", "chat", "$\\mathbf{s}_3$"} <= set(shown_texts(d))
