"""Chapter 11's architecture diagrams, drawn with :mod:`lmbook.diagram` in the book's one style.

- :func:`two_blocks`: GPT-2's block beside a Llama-style block, the four changes marked;
- :func:`grouped_query`: query heads sharing key/value heads, multi-head, grouped-query and multi-query side by side.

Each function returns a checked ``Diagram`` (no label cut off, overflowing its box or covering another).
"""

from __future__ import annotations

from .diagram import MUTED, SMALL_PT, Diagram


def _block(d: Diagram, cx: float, title: str, norm: str, attention: str, ffn: str, bias: str, inputs: str,
           shape: str) -> None:
    """One pre-norm decoder block, bottom to top: input, norm, attention, residual sum, norm, FFN, sum."""
    x_in = d.box((cx, 0.55), inputs, role="input", w=2.0, size=SMALL_PT)
    n1 = d.box((cx, 1.35), norm, role="norm", w=2.0, size=SMALL_PT)
    att = d.box((cx, 2.0), attention, role="attention", w=2.4, size=SMALL_PT)
    add1 = d.plus((cx, 2.6))
    n2 = d.box((cx, 3.15), norm, role="norm", w=2.0, size=SMALL_PT)
    ff = d.box((cx, 3.8), ffn, role="ffn", w=2.4, size=SMALL_PT)
    add2 = d.plus((cx, 4.4))
    d.arrow(x_in.top, n1.bottom, label=shape, label_at=0.5)
    d.arrow(n1.top, att.bottom)
    d.arrow(att.top, add1.bottom)
    d.arrow(add1.top, n2.bottom)
    d.arrow(n2.top, ff.bottom)
    d.arrow(ff.top, add2.bottom)
    d.arrow(add2.top, (cx, 4.85))
    d.skip((cx, 1.02), add1.right, out=1.3, side="right")
    d.skip((cx, 2.8), add2.right, out=1.3, side="right")
    d.group([n1, att, add1, n2, ff, add2], repeat="L", pad=0.27)
    d.text((cx, 5.1), title)
    d.text((cx, 0.12), bias, size=SMALL_PT, color=MUTED)


def two_blocks() -> Diagram:
    """GPT-2: x ← x + MHA(LN(x)), x ← x + FFN(LN(x)), learned positions added to the input, biases everywhere.
    Llama: x ← x + GQA(RMSNorm(x)) with RoPE on q and k, x ← x + SwiGLU(RMSNorm(x)), no position table, no
    biases."""
    d = Diagram(height=5.35)
    _block(d, 1.9, "GPT-2 (chapter 9)", "LayerNorm $(g, b)$", "multi-head attention", "GELU FFN, $4d$",
           "biases in every linear layer", "$E[w_t] + P[t]$", "$(B, n, d)$")
    _block(d, 5.3, "Llama-style", "RMSNorm $(g)$", "grouped-query attention, RoPE", "SwiGLU, $\\approx\\frac{8}{3}d$",
           "no biases anywhere", "$E[w_t]$ only", "$(B, n, d)$")
    return d.check()


def grouped_query(n_head: int = 4, kv_heads: tuple[int, ...] = (4, 2, 1)) -> Diagram:
    """For each number of key/value heads, the query heads (top row) and the key/value head each reads (bottom
    row): query head j reads key/value head j // (n_head / n_kv_head). The cache keeps the bottom row."""
    d = Diagram(height=2.9)
    panel = 7.0 / len(kv_heads)
    names = {n_head: "multi-head", 1: "multi-query"}
    for p, n_kv in enumerate(kv_heads):
        x0 = panel * p + 0.15
        step = (panel - 0.3) / n_head
        qs = [d.box((x0 + step * (j + 0.5), 2.05), f"$q_{j}$", role="attention", w=step * 0.8, h=0.36,
                    size=SMALL_PT) for j in range(n_head)]
        kv_step = (panel - 0.3) / n_kv
        kvs = [d.box((x0 + kv_step * (k + 0.5), 0.85), f"$k_{k}\\,v_{k}$", role="state",
                     w=min(kv_step * 0.85, 1.2), h=0.36, size=SMALL_PT) for k in range(n_kv)]
        group = n_head // n_kv
        for j, q in enumerate(qs):
            d.arrow(kvs[j // group].top, q.bottom, head=True)
        label = names.get(n_kv, "grouped-query")
        d.text((x0 + (panel - 0.3) / 2, 2.6), f"{label}: $h_{{kv}} = {n_kv}$", size=SMALL_PT)
        d.text((x0 + (panel - 0.3) / 2, 0.35), f"cache: {n_kv} of {n_head} heads", size=SMALL_PT, color=MUTED)
    return d.check()
