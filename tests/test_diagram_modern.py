"""Chapter 11's diagrams: clean (no label cut off, overflowing or covering another) and saying what the chapter's
captions say they show."""

from __future__ import annotations

import pytest

from lmbook import diagram_modern as diagrams
from lmbook.diagram import WIDTH


def labels(d) -> list[str]:
    return [t.get_text() for t in d.ax.texts if t.get_visible() and t.get_text()]


@pytest.mark.parametrize("name", ["two_blocks", "grouped_query"])
def test_every_diagram_is_clean_and_the_books_width(name):
    d = getattr(diagrams, name)()
    assert d.problems() == []
    assert d.fig.get_size_inches()[0] == pytest.approx(WIDTH)


def test_the_two_blocks_differ_in_the_four_parts_and_the_biases():
    shown = labels(diagrams.two_blocks())
    for part in ("LayerNorm $(g, b)$", "multi-head attention", "GELU FFN, $4d$", "$E[w_t] + P[t]$",
                 "biases in every linear layer", "RMSNorm $(g)$", "grouped-query attention, RoPE",
                 "SwiGLU, $\\approx\\frac{8}{3}d$", "$E[w_t]$ only", "no biases anywhere"):
        assert part in shown, part
    assert shown.count("$L\\times$") == 2


def test_every_query_head_reads_one_key_value_head_in_each_panel():
    n_head, kv_heads = 4, (4, 2, 1)
    d = diagrams.grouped_query(n_head, kv_heads)
    shown = labels(d)
    for n_kv in kv_heads:
        assert f"cache: {n_kv} of {n_head} heads" in shown
    # one arrow per query head in every panel (every patch that is not a box is an arrow)
    assert len(d.ax.patches) - sum(1 for p in d.ax.patches if type(p).__name__ == "FancyBboxPatch") == \
        n_head * len(kv_heads)
