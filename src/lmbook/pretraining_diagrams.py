"""Chapters 9 and 10's architecture diagrams, drawn with :mod:`lmbook.diagram` in the book's one style.

- :func:`gpt_model`: GPT from token ids to next-token probabilities (chapter 9, page 1);
- :func:`kv_cache`: the KV cache growing by one row per generated token (chapter 9, page 1);
- :func:`bert_inputs`: BERT's three embeddings summed, on a masked sentence pair, and the labels (chapter 10);
- :func:`bert_heads`: the [CLS] classifier and the span head on one encoder (chapter 10, fine-tuning);
- :func:`three_families`: encoder-only, decoder-only and encoder-decoder side by side (chapter 10).

Each function returns a checked ``Diagram`` (no label cut off, overflowing its box or covering another), labelled
with the chapters' symbols and tensor shapes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .diagram import MUTED, SMALL_PT, Diagram


def gpt_model() -> Diagram:
    """GPT-2: x_t = E[w_t] + P[t]; L pre-LN blocks x ← x + MHA(LN_1(x)), x ← x + FFN(LN_2(x)); h = LN_f(x);
    P(w_{t+1} | w_≤t) = softmax(h_t Eᵀ), the output layer tied to E."""
    d = Diagram(height=6.05)
    cx, up = 3.3, 0.2  # the column of the stream; the block starts above the embeddings' sum
    pos = d.box((cx - 1.15, 0.95), "learned positions $P[t]$", role="input", size=SMALL_PT)
    emb = d.box((cx + 1.1, 0.95), "token embedding $E[w_t]$", role="input", size=SMALL_PT)
    ids = d.tensor((emb.x, 0.3), rows=1, cols=6, name="$w_0 \\dots w_{n-1}$", shape="$(B, n)$",
                   role="input", name_side="left", shape_side="right")
    d.text((pos.x, 0.3), "$t = 0 \\dots n-1$", size=SMALL_PT)
    d.arrow(ids.top, emb.bottom)
    d.arrow((pos.x, 0.45), pos.bottom)
    add0 = d.plus((cx, 1.5))
    d.elbow(pos.top, add0.left, first="v")
    d.elbow(emb.top, add0.right, first="v")
    d.text((cx + 0.2, 1.82), "$\\mathbf{x}$  $(B, n, d)$", size=SMALL_PT, color=MUTED, ha="left")

    ln1 = d.box((cx, 2.35 + up), "$\\mathrm{LN}_1$", role="norm", w=1.6)
    mha = d.box((cx, 2.95 + up), "causal multi-head attention", role="attention", w=2.6)
    add1 = d.plus((cx, 3.5 + up))
    ln2 = d.box((cx, 3.95 + up), "$\\mathrm{LN}_2$", role="norm", w=1.6)
    ffn = d.box((cx, 4.5 + up), "FFN, tanh GELU", role="ffn", w=2.6)
    add2 = d.plus((cx, 5.0 + up))
    d.arrow(add0.top, ln1.bottom)
    d.arrow(ln1.top, mha.bottom)
    d.arrow(mha.top, add1.bottom)
    d.arrow(add1.top, ln2.bottom)
    d.arrow(ln2.top, ffn.bottom)
    d.arrow(ffn.top, add2.bottom)
    d.skip((cx, 2.02 + up), add1.left, out=1.45, side="left")
    d.skip((cx, 3.66 + up), add2.left, out=1.45, side="left")
    d.group([ln1, mha, add1, ln2, ffn, add2], label="pre-LN block", repeat="L", pad=0.3)

    ox = cx + 2.6
    lnf = d.box((ox, add2.y), "$\\mathrm{LN}_f$", role="norm", w=0.9)
    out = d.box((ox, add2.y - 0.8), "$\\mathbf{h}\\,E^\\top$", role="output", w=1.0)
    soft = d.box((ox, add2.y - 1.6), "softmax", role="output", w=1.0)
    d.arrow(add2.right, lnf.left)
    d.arrow(lnf.bottom, out.top, label="$\\mathbf{h}$")
    d.arrow(out.bottom, soft.top, label="$(B, n, V)$")
    d.text((soft.x, soft.y - 0.58), "$P(w_{t+1} \\mid w_{\\leq t})$", size=SMALL_PT)
    d.arrow(soft.bottom, (soft.x, soft.y - 0.44))
    # the output layer is E itself: weight tying
    side = ox + 0.8
    d.elbow(emb.right, (side, 2.4), first="h", dashed=True, head=False)
    d.arrow((side, 2.4), (side, out.y), dashed=True, head=False, label="tied", label_at=0.4)
    d.arrow((side, out.y), out.right, dashed=True)
    return d.check()


def kv_cache(tokens: Sequence[str] = ("The", "jury", "said", "it", "was"), prompt: int = 3,
             steps: int = 3) -> Diagram:
    """One layer's cache over ``steps`` generation steps: step s feeds one token, whose query reads every
    cached key, and appends its k and v, one row each, to K and V (t, d_head) per head."""
    d = Diagram(height=3.3)
    panel_w = 7.0 / steps
    cell = 0.2
    top = 1.45 + cell * (prompt + steps - 1)  # the grids hang from here, one row per cached position
    for s in range(steps):
        t = prompt + s  # positions cached after this step
        cx = panel_w * (s + 0.5)
        values = np.full((t, 4), 0.25)
        values[-1 if s else slice(None)] = 1.0  # what this step wrote
        names = list(tokens[:t])
        k = d.grid((cx - 0.42, top - cell * t / 2), values, role="state", cell=cell, row_labels=names,
                   vmin=0, vmax=1)
        v = d.grid((cx + 0.42, top - cell * t / 2), values, role="state", cell=cell, vmin=0, vmax=1)
        d.text((k.x, top + 0.15), "$K$", size=SMALL_PT)
        d.text((v.x, top + 0.15), "$V$", size=SMALL_PT)
        fed = names[-1] if s else " ".join(names)
        what = "the prompt" if s == 0 else "one token"
        new = d.box((cx, 0.6), f"feed \u201c{fed}\u201d", role="input", size=SMALL_PT, h=0.34)
        d.arrow(new.top, (cx, k.y - k.h / 2 - 0.05))
        d.text((cx + 0.08, (new.y + new.h / 2 + k.y - k.h / 2) / 2), "$\\mathbf{q}, \\mathbf{k}, \\mathbf{v}$",
               size=SMALL_PT, ha="left")
        d.text((cx, top + 0.5), f"step {s + 1}: {what}, $t = {t}$", size=SMALL_PT)
    d.text((3.5, 0.15), "a new row of $K$ and $V$ per step, in every layer: "
                        "$2 \\cdot L \\cdot t \\cdot d$ numbers per sequence", size=SMALL_PT, color=MUTED)
    return d.check()


def bert_inputs() -> Diagram:
    """A masked sentence pair as BERT reads it: [CLS] a [SEP] b [SEP], each position the sum of a token, a
    segment and a position embedding; above, the labels: the true token at the chosen positions, −100 elsewhere."""
    original = ["[CLS]", "the", "dogs", "sleep", "[SEP]", "a", "cat", "runs", "[SEP]"]
    shown = ["[CLS]", "the", "dogs", "[MASK]", "[SEP]", "two", "cat", "runs", "[SEP]"]
    fate = {3: "[MASK]: 80%", 5: "random: 10%", 6: "kept: 10%"}  # the chosen positions
    segment = ["A"] * 5 + ["B"] * 4
    d = Diagram(height=3.85)
    x0, step = 1.5, 0.62
    rows = {"labels": 3.6, "input": 2.95, "token": 2.2, "segment": 1.5, "position": 0.8}
    for name, y in rows.items():
        d.text((x0 - 0.4, y), name, size=SMALL_PT, color=MUTED, ha="right")
    for i, word in enumerate(shown):
        x = x0 + step * i
        role = "mask" if i == 3 else ("attention" if i in fate else "plain")
        d.box((x, rows["input"]), word, role=role, w=0.58, h=0.36, size=SMALL_PT - 1)
        if i in fate:
            d.text((x, rows["input"] + 0.3), fate[i], size=SMALL_PT - 3, color=MUTED)
        name = word.strip("[]") if word.startswith("[") else word
        d.box((x, rows["token"]), f"$E_{{\\mathrm{{{name}}}}}$", role="input", w=0.58, h=0.4, size=SMALL_PT)
        d.box((x, rows["segment"]), f"$E_{segment[i]}$", role="input", w=0.58, h=0.4, size=SMALL_PT)
        d.box((x, rows["position"]), f"$E_{{{i}}}$", role="input", w=0.58, h=0.4, size=SMALL_PT)
        d.text((x, (rows["token"] + rows["segment"]) / 2), "+", size=SMALL_PT)
        d.text((x, (rows["segment"] + rows["position"]) / 2), "+", size=SMALL_PT)
        label = original[i] if i in fate else "\u2212100"
        d.text((x, rows["labels"]), label, size=SMALL_PT - 1, color="#222222" if i in fate else MUTED)
    d.text((x0 + step * 4, 0.25), "each column summed, then LayerNorm: $\\mathbf{x}_t$, $(B, n, d)$, "
                                  "the encoder's input", size=SMALL_PT)
    return d.check()


def bert_heads() -> Diagram:
    """Fine-tuning heads on one encoder: logits = p W + b from the pooled [CLS] vector p = tanh(h_[CLS] W_p + b_p),
    and a start and an end score h_i sᵀ, h_i eᵀ at every passage position."""
    words = ["[CLS]", "who", "sleeps", "[SEP]", "the", "old", "dog", "sleeps", "[SEP]"]
    d = Diagram(height=4.2)
    x0, step = 1.0, 0.62
    xs = [x0 + step * i for i in range(len(words))]
    for x, w in zip(xs, words, strict=True):
        d.text((x, 0.25), w, size=SMALL_PT - 1)
        d.arrow((x, 0.4), (x, 0.72))
    d.box(((xs[0] + xs[-1]) / 2, 0.98), "BERT encoder: $L$ post-LN blocks, every position sees every other",
            role="ffn", w=xs[-1] - xs[0] + 0.55, h=0.48, size=SMALL_PT)
    d.text((xs[-1] + 0.38, 0.98), "$(B, n, d)$", size=SMALL_PT, color=MUTED, ha="left")
    hs = []
    for i, x in enumerate(xs):
        d.arrow((x, 1.22), (x, 1.48))
        hs.append(d.tensor((x, 1.75), rows=3, cols=1, role="state", cell=0.14))
        if i == 0:
            d.text((x - 0.16, 1.75), "$\\mathbf{h}_{[\\mathrm{CLS}]}$", size=SMALL_PT, ha="right")
    # the [CLS] head
    pool = d.box((xs[0] + 0.2, 2.55), "$\\tanh(\\mathbf{h}\\,W_p + \\mathbf{b}_p)$", role="ffn", w=1.55, h=0.4,
                 size=SMALL_PT)
    d.arrow((xs[0], hs[0].y + hs[0].h / 2), (xs[0], pool.y - pool.h / 2))
    cls = d.box((pool.x, 3.35), "class: $\\mathbf{p}\\,W + \\mathbf{b}$", role="output", w=1.55, h=0.4,
                size=SMALL_PT)
    d.arrow(pool.top, cls.bottom, label="$\\mathbf{p}$")
    # the span head: one start and one end score per position, the passage only
    passage = range(4, 8)
    probs_s = np.array([0.7, 0.15, 0.1, 0.05])  # an illustration: darker is more likely
    probs_e = np.array([0.05, 0.1, 0.75, 0.1])
    grid_x = (xs[4] + xs[7]) / 2
    g = d.grid((grid_x, 2.75), np.stack([probs_e, probs_s]), role="output", cell=step, vmin=0, vmax=1,
               row_labels=["$P_{\\mathrm{end}}$", "$P_{\\mathrm{start}}$"])
    for i in passage:
        d.arrow((xs[i], hs[i].y + hs[i].h / 2), (xs[i], g.y - g.h / 2))
    d.text((grid_x, 3.62), "span head: $\\mathrm{softmax}_i(\\mathbf{h}_i \\mathbf{s}^\\top)$, "
                           "$\\mathrm{softmax}_j(\\mathbf{h}_j \\mathbf{e}^\\top)$", size=SMALL_PT)
    d.text((grid_x, 3.95), "best span $i \\leq j$ in the passage: \u201cthe old dog\u201d", size=SMALL_PT)
    return d.check()


def three_families() -> Diagram:
    """Encoder-only (BERT), decoder-only (GPT) and encoder-decoder (T5): what each attends to (its mask: row =
    query, column = key, hatched = hidden) and what it is pretrained to produce."""
    d = Diagram(height=3.95)
    full = np.ones((4, 4))
    causal = np.where(np.tril(np.ones((4, 4))) > 0, 1.0, -np.inf)
    y_cap, y_in, y_grid, y_out = 0.18, 0.55, 1.6, 2.75
    panels = [(1.17, "encoder-only", "BERT"), (3.5, "decoder-only", "GPT"), (5.83, "encoder\u2013decoder", "T5")]
    for cx, family, model in panels:
        d.text((cx, 3.72), family, size=SMALL_PT + 1)
        d.text((cx, 3.44), model, size=SMALL_PT, color=MUTED)

    cx = panels[0][0]
    g = d.grid((cx, y_grid), full, cell=0.24)
    d.text((cx, y_in), "the [MASK] sleeps .", size=SMALL_PT - 1)
    d.arrow((cx, y_in + 0.14), g.bottom)
    out = d.box((cx, y_out), "[MASK] \u2192 dog", role="output", size=SMALL_PT - 1, h=0.36)
    d.arrow(g.top, out.bottom)
    d.text((cx, y_cap), "sees both sides", size=SMALL_PT - 1, color=MUTED)

    cx = panels[1][0]
    g = d.grid((cx, y_grid), causal, cell=0.24)
    d.text((cx, y_in), "the dog sleeps .", size=SMALL_PT - 1)
    d.arrow((cx, y_in + 0.14), g.bottom)
    out = d.box((cx, y_out), "next: dog sleeps . \u2026", role="output", size=SMALL_PT - 1, h=0.36)
    d.arrow(g.top, out.bottom)
    d.text((cx, y_cap), "sees itself and before", size=SMALL_PT - 1, color=MUTED)

    cx = panels[2][0]
    enc = d.grid((cx - 0.55, y_grid), full, cell=0.18)
    dec = d.grid((cx + 0.55, y_grid), causal, cell=0.18)
    d.text((enc.x, enc.y + enc.h / 2 + 0.12), "encoder", size=SMALL_PT - 2, color=MUTED)
    d.text((dec.x, dec.y + dec.h / 2 + 0.12), "decoder", size=SMALL_PT - 2, color=MUTED)
    d.arrow(enc.right, dec.left)
    d.text((cx, enc.y - 0.16), "cross", size=SMALL_PT - 3, color=MUTED)
    d.text((enc.x + 0.2, y_in), "the <X> sleeps .", size=SMALL_PT - 1)
    d.arrow((enc.x, y_in + 0.14), enc.bottom)
    out = d.box((dec.x - 0.1, y_out), "<X> dog <Y>", role="output", size=SMALL_PT - 1, h=0.36)
    d.arrow((dec.x, dec.y + dec.h / 2 + 0.22), (dec.x, out.y - out.h / 2))
    d.text((cx, y_cap), "reads all, writes in order", size=SMALL_PT - 1, color=MUTED)
    return d.check()
