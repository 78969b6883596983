"""Chapter 11's instruction-tuning diagram: clean, the book's width, and colouring as counted exactly the targets
the loss counts (those inside the response)."""

from __future__ import annotations

import pytest
from matplotlib.colors import to_hex

from lmbook.diagram import PALETTE, WIDTH
from lmbook.diagram_instruct import response_mask


def test_the_diagram_is_clean_and_the_books_width():
    d = response_mask()
    assert d.problems() == []
    assert d.fig.get_size_inches()[0] == pytest.approx(WIDTH)


@pytest.mark.parametrize("prompt, response", [(("<plural>", "a", "dog", "runs", ".", "<answer>"),
                                               ("some", "dogs", "run", ".")),
                                              (("<continue>", "the", "<answer>"), ("cat", "runs", "."))])
def test_exactly_the_response_targets_are_drawn_as_counted(prompt, response):
    d = response_mask(prompt, response)
    faces = [to_hex(p.get_facecolor()) for p in d.ax.patches if type(p).__name__ == "FancyBboxPatch"]
    counted, skipped = PALETTE["output"].face, PALETTE["mask"].face
    assert faces.count(counted) == len(response), "every response token, and only those, is a counted target"
    assert faces.count(skipped) == len(prompt) - 1, "every prompt token after the first is a skipped target"
