"""Chapter 11's induction circuit (Olsson et al., 2022), drawn with :mod:`lmbook.diagram`'s primitives."""

from __future__ import annotations

from .diagram import MUTED, SMALL_PT, Diagram


def induction_circuit() -> Diagram:
    """Tokens ``A B … A`` (bottom); layer 1's previous-token head writes into B's position that A came before it;
    layer 2's induction head, at the second A, matches that and copies B into the prediction (top)."""
    d = Diagram(height=3.6)
    xs = (1.3, 2.9, 4.1, 5.5)  # A, B, …, A
    toks = [d.box((x, 0.45), s, role="input", w=0.7) for x, s in zip(xs, ("$A$", "$B$", "$\\cdots$", "$A$"),
                                                                      strict=True)]
    d.text((0.35, 0.45), "tokens", size=SMALL_PT, color=MUTED)
    d.text((0.35, 1.6), "layer 1", size=SMALL_PT, color=MUTED)
    d.text((0.35, 2.75), "layer 2", size=SMALL_PT, color=MUTED)
    after = d.box((xs[1], 1.6), "$B$, after $A$", role="state", w=1.5)
    d.arrow(toks[1].top, after.bottom)
    d.arrow(toks[0].top, after.left, label="previous-token head", label_at=0.35)
    query = d.box((xs[3], 1.6), "$A$", role="state", w=0.7)
    d.arrow(toks[3].top, query.bottom)
    head = d.box((xs[3], 2.75), "induction head", role="attention")
    d.arrow(query.top, head.bottom, label="query $A$", label_at=0.5)
    d.elbow(after.top, head.left, first="v", label="key matches, value $B$", label_at=0.55)
    out = d.box((xs[3], 3.35), "predict $B$", role="output")
    d.arrow(head.top, out.bottom)
    return d.check()
