"""Chapter 11's induction circuit: clean (no label cut off, overflowing or covering another), the book's width,
and showing the parts its caption names."""

from __future__ import annotations

import pytest

from lmbook.diagram import WIDTH
from lmbook.diagram_induction import induction_circuit


def test_the_circuit_is_clean_and_the_books_width():
    d = induction_circuit()
    assert d.problems() == []
    assert d.fig.get_size_inches()[0] == pytest.approx(WIDTH)


def test_the_circuit_shows_both_heads_the_matched_key_and_the_prediction():
    shown = [t.get_text() for t in induction_circuit().ax.texts if t.get_visible() and t.get_text()]
    for part in ("previous-token head", "induction head", "$B$, after $A$", "query $A$",
                 "key matches, value $B$", "predict $B$", "layer 1", "layer 2"):
        assert part in shown, f"{part!r} is not in the diagram: {shown}"
    assert shown.count("$A$") == 3, shown  # the two tokens A and the query's position in layer 1
