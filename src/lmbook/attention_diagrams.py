"""Chapters 5 and 6's diagrams, drawn with :mod:`lmbook.diagram`: one row of self-attention for a named
sentence, the causal mask before and after the softmax, and multi-head attention's split and merge.

Each function returns a checked :class:`~lmbook.diagram.Diagram`; the chapters show them in hidden cells.
The numbers a diagram prints (scores, weights) are passed in by the page, which computes them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .diagram import MUTED, SMALL_PT, Diagram


def _math(s: str) -> str:
    return f"${s}$"


def _vec(name: str, index) -> str:
    """A vector's label in the chapter's symbols: bold, with its index."""
    return f"$\\mathbf{{{name}}}_{{{index}}}$"


def attention_row(words: Sequence[str], weights: Sequence[float] | None = None, d_k: str = "d_k") -> Diagram:
    """Position i = the last word of ``words`` reads the sentence: its query q_i is scored against every key
    k_j, a softmax over j turns the scores into the weights α_ij (printed when ``weights`` is given), and the
    output y_i is the weighted average of the values v_j. Words are plain text; every x_j makes its own k_j
    and v_j with the same W_k and W_v."""
    n = len(words)
    i = n  # 1-based index of the query position, the last word
    d = Diagram(height=3.75)
    cell = min(0.72, 4.3 / n)  # one weight cell above each word
    x_first = 1.35
    xs = [x_first + cell * j for j in range(n)]
    y_word, y_kv, y_w, y_out = 0.3, 1.0, 2.15, 3.35

    for j, (x, word) in enumerate(zip(xs, words, strict=True)):
        d.text((x, y_word), word, size=SMALL_PT + 1)
        k = d.tensor((x - 0.12, y_kv), rows=3, cols=1, role="attention", cell=0.12)
        v = d.tensor((x + 0.12, y_kv), rows=3, cols=1, role="ffn", cell=0.12)
        d.arrow((x, y_word + 0.14), (x, k.bottom[1] - 0.04))
        d.text((k.x, k.top[1] + 0.12), _vec("k", j + 1), size=SMALL_PT)
        d.text((v.x, v.top[1] + 0.12), _vec("v", j + 1), size=SMALL_PT)
    d.text((0.45, y_kv), "$\\mathbf{k}_j, \\mathbf{v}_j$", size=SMALL_PT, color=MUTED)
    d.text((0.45, y_word), "$\\mathbf{x}_j$", size=SMALL_PT, color=MUTED)

    row = np.asarray(weights, dtype=float)[None] if weights is not None else np.full((1, n), 0.3)
    g = d.grid(((xs[0] + xs[-1]) / 2, y_w), row, role="attention", cell=cell,
               fmt="{:.2f}" if weights is not None else "", vmin=0.0, vmax=1.0)
    if weights is None:
        for x, j in zip(xs, range(n), strict=True):
            d.text((x, y_w), _math(f"\\alpha_{{{i}{j + 1}}}"), size=SMALL_PT)
    for x in xs:  # the score of cell j is q_i · k_j
        d.arrow((x - 0.12, y_kv + 0.36), (x - 0.12, g.bottom[1]), color=MUTED)
    d.text((0.45, y_w), _math(f"\\alpha_{{{i}j}}"), size=SMALL_PT, color=MUTED)

    q = d.tensor((g.right[0] + 0.45, y_w), rows=3, cols=1, role="attention", cell=0.12,
                 name=_vec("q", i), name_side="right")
    d.arrow(q.left, g.right)
    # the query comes from the last word, x_i W_q
    d.elbow((xs[-1] + 0.3, y_word), q.bottom, first="h", label=f"$\\mathbf{{x}}_{i} W_q$", label_at=0.45,
            dashed=True)
    d.text((g.right[0] + 0.1, y_w + 0.55), f"softmax$_j(\\mathbf{{q}}_{i} \\cdot \\mathbf{{k}}_j / \\sqrt{{{d_k}}})$",
           size=SMALL_PT, ha="left")

    y = d.tensor((g.x, y_out), rows=1, cols=3, role="ffn", cell=0.16, name=_vec("y", i), name_side="left",
                 shape=f"$\\mathbf{{y}}_{i} = \\sum_j \\alpha_{{{i}j}} \\mathbf{{v}}_j$", shape_side="right")
    for j, x in enumerate(xs):  # the output averages the values with these weights
        d.arrow((x, g.top[1]), (y.x + (j - (n - 1) / 2) * 0.09, y.bottom[1]), color=MUTED)
    return d.check()


def causal_mask(scores, weights) -> Diagram:
    """The masked scores QKᵀ/√d_k + M (−∞ above the diagonal, hatched) and, after a softmax over each row,
    the weights A (exactly 0 above the diagonal). ``scores`` holds -inf where masked."""
    s, a = np.asarray(scores, dtype=float), np.asarray(weights, dtype=float)
    n = s.shape[0]
    cell = 0.42
    d = Diagram(height=0.75 + n * cell + 0.55)
    y = 0.35 + n * cell / 2
    labels = [str(k + 1) for k in range(n)]
    left = d.grid((1.85, y), s, role="attention", cell=cell, fmt="{:.1f}", row_labels=[f"i={k}" for k in labels],
                  col_labels=[f"j={k}" for k in labels])
    right = d.grid((5.2, y), a, role="attention", cell=cell, fmt="{:.2f}", masked=~np.isfinite(s), vmin=0, vmax=1,
                   col_labels=[f"j={k}" for k in labels])
    d.arrow((left.right[0] + 0.15, y), (right.left[0] - 0.15, y), label="softmax\nover j")
    d.text((left.x, left.top[1] + 0.45), "$QK^\\top/\\sqrt{d_k} + M$", size=SMALL_PT + 1)
    d.text((right.x, right.top[1] + 0.45), "$A$: weights", size=SMALL_PT + 1)
    d.text((left.x, left.bottom[1] - 0.18), "hatched: $M_{ij} = -\\infty$ ($j > i$)", size=SMALL_PT, color=MUTED)
    d.text((right.x, right.bottom[1] - 0.18), "hatched: weight exactly 0", size=SMALL_PT, color=MUTED)
    return d.check()


def multihead_flow(h: int = 2) -> Diagram:
    """Multi-head attention with its shapes: Q, K, V from X; the split into h heads (a view and a transpose:
    head i takes its d_head = d/h columns of each); attention in every head; the merge (a transpose back and a
    reshape) that puts head i's output in the same columns; the output projection W_o that mixes them.
    Columns are shaded by the head that owns them."""
    n_rows, d_head = 4, 2  # positions n, drawn as rows; columns per head
    cell = 0.14
    shade = [0.3 + 0.55 * i / max(h - 1, 1) for i in range(h)]  # head i's columns: a lighter or darker tint

    def by_head(cols_per_head: int, heads=range(h)) -> np.ndarray:
        return np.repeat([[shade[i] for i in heads for _ in range(cols_per_head)]], n_rows, axis=0)

    d = Diagram(height=5.2)
    cx = 3.5
    x = d.tensor((cx, 4.85), rows=n_rows, cols=h * d_head, role="input", cell=cell, name="$X$",
                 shape="$(B, n, d)$", shape_side="right")
    y_qkv, names, roles = 3.8, ("Q", "K", "V"), ("attention", "attention", "ffn")
    qkv = []
    for k, (nm, role) in enumerate(zip(names, roles, strict=True)):
        t = d.grid((cx + (k - 1) * 1.5, y_qkv), by_head(d_head), role=role, cell=cell, vmin=0, vmax=1)
        d.text((t.left[0] - 0.1, y_qkv), f"${nm}$", ha="right")
        d.arrow(x.bottom, t.top, label=f"$W_{nm.lower()}$", label_at=0.6)
        qkv.append(t)
    top = d.group(qkv, pad=0.12)
    d.text((top.right[0] + 0.1, y_qkv), "$(B, n, d)$\neach", size=SMALL_PT, color=MUTED, ha="left")

    y_split, y_att, spread = 2.5, 1.55, 6.2 / h
    outs = []
    for i in range(h):
        hx = cx + (i - (h - 1) / 2) * spread
        parts = []
        for k, (nm, role) in enumerate(zip(names, roles, strict=True)):
            t = d.grid((hx - 0.5 + 0.5 * k, y_split), by_head(d_head, [i]), role=role, cell=cell, vmin=0, vmax=1)
            d.text((t.x, t.top[1] + 0.1), f"${nm}_{i + 1}$", size=SMALL_PT, va="bottom")
            parts.append(t)
        frame = d.group(parts, label=f"head {i + 1}", pad=0.22)
        d.arrow((top.x + (i - (h - 1) / 2) * 0.5, top.bottom[1]), frame.top)
        att = d.box((hx, y_att), f"softmax$(Q_{i + 1}K_{i + 1}^\\top/\\sqrt{{d_{{\\mathrm{{head}}}}}})\\,V_{i + 1}$",
                    role="attention", size=SMALL_PT)
        d.arrow(frame.bottom, att.top)
        outs.append(att)
    d.text((cx, y_split), "view, transpose:\n$(B, h, n, d_{\\mathrm{head}})$", size=SMALL_PT, color=MUTED)

    y_cat = 0.5
    cat = d.grid((cx - 1.3, y_cat), by_head(d_head), role="attention", cell=cell, vmin=0, vmax=1)
    d.text((cat.left[0] - 0.1, y_cat), "Concat", ha="right")
    for i, att in enumerate(outs):
        d.arrow(att.bottom, (cat.left[0] + cell * d_head * (i + 0.5), cat.top[1]))
    d.text((cx + 1.0, 1.0), "transpose, reshape: $(B, n, d)$", size=SMALL_PT, color=MUTED, ha="left")
    wo = d.box((cx + 0.35, y_cat), "$W_o$", role="ffn", w=0.6)
    d.arrow(cat.right, wo.left)
    out = d.tensor((cx + 1.65, y_cat), rows=n_rows, cols=h * d_head, role="output", cell=cell, name="$Y$",
                   shape="$(B, n, d)$", shape_side="right", name_side="left")
    d.arrow(wo.right, (out.left[0] - 0.3, y_cat))
    return d.check()
