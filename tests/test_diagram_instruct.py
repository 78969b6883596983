"""Chapter 11's instruction- and preference-tuning diagrams: clean, the book's width; the first colouring as
counted exactly the targets the loss counts (those inside the response), the second showing a reward model and a
sampling loop for RLHF only."""

from __future__ import annotations

import pytest
from matplotlib.colors import to_hex

from lmbook.diagram import PALETTE, WIDTH
from lmbook.diagram_instruct import preference_tuning, response_mask


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


def test_the_preference_diagram_is_clean_and_the_books_width():
    d = preference_tuning()
    assert d.problems() == []
    assert d.fig.get_size_inches()[0] == pytest.approx(WIDTH)


def test_only_rlhf_has_a_reward_model_and_a_sampling_loop():
    """What the figure is for: RLHF's row fits a reward model and samples as it trains; DPO's row has neither."""
    d = preference_tuning()
    texts = [(t.get_text(), t.get_position()[1]) for t in d.ax.texts]
    top = " ".join(s for s, y in texts if y > d.height / 2)
    bottom = " ".join(s for s, y in texts if y < d.height / 2)
    assert "reward" in top and "sample again" in top, top
    assert "DPO loss" in bottom and "reward model" not in bottom.replace("no reward model", ""), bottom
