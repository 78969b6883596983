"""The architecture diagrams of Parts I and II (chapters 1-4), drawn with :mod:`lmbook.diagram`.

Each function returns a checked :class:`~lmbook.diagram.Diagram` (no label cut off, overflowing its
box or covering another), labelled with its chapter's symbols and shapes:

- :func:`feedforward_lm`: chapter 1's window, embeddings, concatenation, hidden layer and softmax;
- :func:`unrolled_rnn`: chapter 2's recurrence unrolled over a sentence, one softmax per state;
- :func:`encoder_decoder`: chapter 3's bidirectional encoder, context vector and decoder;
- :func:`soft_lookup`: chapter 4's attention as a soft lookup, one row of weights;
- :func:`attention_step`: chapter 4's Bahdanau decoder step.

A chapter shows one as the last value of a ``remove-input`` cell with a caption and alt text.
"""

from __future__ import annotations

from collections.abc import Sequence

from .diagram import MUTED, SMALL_PT, Diagram


def _route(d: Diagram, points: Sequence[tuple[float, float]]) -> None:
    """An arrow along a path of straight segments (the last one carries the head)."""
    for a, b in zip(points[:-2], points[1:-1], strict=True):
        d.arrow(a, b, head=False)
    d.arrow(points[-2], points[-1])


def feedforward_lm(words: Sequence[str] = ("the", "big", "cat"), next_word: str = "sleeps") -> Diagram:
    """Chapter 1: the m = len(words) previous words are looked up in the one matrix E, their
    embeddings concatenated into z, then h = tanh(W z + b) and P(w_t | ...) = softmax(U h + c)."""
    m = len(words)
    d = Diagram(height=4.7)
    y_word, y_look, y_emb, y_mid, y_z, y_h, y_out, y_top = 0.35, 1.0, 1.75, 2.15, 2.55, 3.2, 3.85, 4.4
    step, cols, cell = 1.45, 4, 0.16
    xs = [1.3 + step * i for i in range(m)]
    zc = (xs[0] + xs[-1]) / 2
    seg = cols * cell  # the width of one embedding in z
    for i, (x, w) in enumerate(zip(xs, words, strict=True)):
        k = m - i  # w_{t-k}
        d.text((x, y_word), f"{w}  $w_{{t-{k}}}$")
        look = d.box((x, y_look), f"$E[w_{{t-{k}}}]$", role="input", w=0.95, size=SMALL_PT)
        d.arrow((x, y_word + 0.15), look.bottom)
        e = d.tensor((x, y_emb), rows=1, cols=cols, name=f"$\\mathbf{{e}}_{{t-{k}}}$",
                     shape="$(d)$" if i == m - 1 else "", role="input", name_side="left",
                     shape_side="right")
        d.arrow(look.top, e.bottom)
        s_x = zc + (i - (m - 1) / 2) * seg  # this word's slot in z
        d.tensor((s_x, y_z), rows=1, cols=cols, role="input",
                 name="$\\mathbf{z}$" if i == 0 else "", shape="$(md)$" if i == m - 1 else "",
                 name_side="left", shape_side="right")
        _route(d, [e.top, (x, y_mid), (s_x, y_mid), (s_x, y_z - cell / 2)])
    d.text((xs[-1] + 1.25, y_look), "one matrix $E$\n$(V, d)$ for all", size=SMALL_PT, color=MUTED)
    hid = d.box((zc, y_h), "$\\mathbf{h} = \\tanh(W\\mathbf{z} + \\mathbf{b})$   $(H)$", role="ffn",
                w=3.4)
    d.arrow((zc, y_z + cell / 2), hid.bottom)
    out = d.box((zc, y_out), "$\\mathrm{softmax}(U\\mathbf{h} + \\mathbf{c})$   $(V)$",
                role="output", w=3.4)
    d.arrow(hid.top, out.bottom)
    d.text((zc, y_top), f"$P(w_t \\mid w_{{t-{m}}}, \\dots, w_{{t-1}})$ for every word: {next_word}?")
    d.arrow(out.top, (zc, y_top - 0.15))
    d.text((xs[-1] + 1.25, (y_h + y_out) / 2), "$W$: $(H, md)$\n$U$: $(V, H)$", size=SMALL_PT,
           color=MUTED)
    return d.check()


def unrolled_rnn(words: Sequence[str] = ("the", "cats", "sleep", ".")) -> Diagram:
    """Chapter 2: h_t = tanh(W_h h_{t-1} + W_x x_t + b) unrolled, the same weights at every step,
    and P(w_{t+1} | w_<=t) = softmax(U h_t + c) on every state."""
    d = Diagram(height=3.4)
    y_word, y_x, y_h, y_out, y_next = 0.3, 0.95, 1.85, 2.65, 3.15
    x0, step = 1.9, 1.3
    prev = d.box((0.55, y_h), "$\\mathbf{h}_0 = \\mathbf{0}$", role="state", size=SMALL_PT, w=0.85)
    for t, w in enumerate(words, start=1):
        x = x0 + step * (t - 1)
        d.text((x, y_word), f"{w}")
        xt = d.box((x, y_x), f"$\\mathbf{{x}}_{t}$", role="input", w=0.5, h=0.36)
        d.arrow((x, y_word + 0.14), xt.bottom)
        h = d.box((x, y_h), f"$\\mathbf{{h}}_{t}$", role="state", w=0.6)
        d.arrow(xt.top, h.bottom, label="$W_x$")
        d.arrow(prev.right, h.left, label="$W_h$")
        out = d.box((x, y_out), "softmax", role="output", size=SMALL_PT, w=0.8, h=0.34)
        d.arrow(h.top, out.bottom)
        d.text((x, y_next), f"$P(w_{{{t + 1}}} \\mid w_{{\\leq {t}}})$", size=SMALL_PT)
        d.arrow(out.top, (x, y_next - 0.12))
        prev = h
    d.arrow(prev.right, (prev.right[0] + 0.6, y_h), label="$W_h$")
    d.text((prev.right[0] + 0.78, y_h), "$\\cdots$")
    return d.check()


def encoder_decoder(source: Sequence[str] = ("$x_1$", "$x_2$", "$x_3$", "$x_4$"),
                    target: Sequence[str] = ("$y_1$", "$y_2$", "$y_3$")) -> Diagram:
    """Chapter 3's model: a bidirectional GRU encoder, h_j = [fwd h_j; bwd h_j], whose two final
    states make the context vector c = [fwd h_S; bwd h_1]; the decoder starts from
    s_0 = tanh(W_init c + b_init) and reads c again at every step, next to y_{t-1}."""
    S, T = len(source), len(target)
    d = Diagram(height=3.9)
    y_tok, y_rnn, y_out, y_word, y_bus, y_over = 0.62, 1.55, 2.75, 3.4, 0.2, 2.35
    step, w = 0.72, 0.55

    # Encoder: one box per source word, read left to right (upper arrows) and right to left (lower).
    hs = []
    for j, word in enumerate(source):
        x = 0.5 + step * j
        h = d.box((x, y_rnn), f"$\\mathbf{{h}}_{j + 1}$", role="state", w=w, h=0.5)
        d.text((x, y_tok), word)
        d.arrow((x, y_tok + 0.16), h.bottom)
        if hs:
            d.arrow(hs[-1].at(1, 0.5), h.at(-1, 0.5))  # forward GRU
            d.arrow(h.at(-1, -0.5), hs[-1].at(1, -0.5))  # backward GRU
        hs.append(h)
    frame = d.group(hs)
    d.text((frame.x, 0.2), "encoder (both directions)", size=SMALL_PT, color=MUTED)

    # c = [forward final state (after the last word); backward final state (after the first)]
    c = d.tensor((hs[-1].x + 0.95, y_rnn), rows=4, cols=1, role="state")
    forward_final = "$\\overrightarrow{\\mathbf{h}}_{" + str(S) + "}$"
    d.arrow(hs[-1].at(1, 0.5), (c.left[0], hs[-1].at(1, 0.5)[1]), label=forward_final, label_at=0.42)
    start = hs[0].top
    _route(d, [start, (start[0], y_over), (c.x, y_over), c.top])
    d.text(((start[0] + c.x) / 2, y_over), "$\\overleftarrow{\\mathbf{h}}_1$", size=SMALL_PT,
           bbox=dict(fc="white", ec="none", pad=1.0))
    d.text((c.x - 0.12, c.bottom[1] - 0.12), "$\\mathbf{c}$", ha="right")

    # Decoder: s_t = GRU([e(y_{t-1}); c], s_{t-1}), P(y_t | y_<t, x) = softmax(W_y s_t + b_y).
    ss, x_first = [], c.x + 0.95
    previous = ["$y_0$"] + list(target[:-1])
    for t in range(T):
        x = x_first + 0.82 * t
        s = d.box((x, y_rnn), f"$\\mathbf{{s}}_{t + 1}$", role="state", w=w, h=0.5)
        d.text((x - 0.11, y_tok), previous[t])
        d.arrow((x - 0.11, y_tok + 0.16), s.at(-0.4, -1))
        d.arrow((x + 0.13, y_bus), s.at(0.47, -1))  # c again, from the line below
        out = d.box((x, y_out), "softmax", role="output", size=SMALL_PT, w=0.74, h=0.36)
        d.arrow(s.top, out.bottom)
        d.text((x, y_word), target[t])
        d.arrow(out.top, (x, y_word - 0.16))
        d.arrow((ss[-1] if ss else c).right, s.left, label="$\\mathbf{s}_0$" if not ss else "")
        ss.append(s)
    d.group(ss, label="decoder")
    d.arrow(c.bottom, (c.x, y_bus), head=False)
    d.arrow((c.x, y_bus), (ss[-1].x + 0.13, y_bus), head=False,
            label="$\\mathbf{c}$ at every step", label_at=0.3)
    return d.check()


def soft_lookup(alpha: Sequence[float], values: Sequence[float], output: float,
                scores: Sequence[float] | None = None) -> Diagram:
    """Chapter 4: a query is scored against every key, the softmax turns the scores into one row of
    weights alpha_j, and the output is the weighted sum of the values, c = sum_j alpha_j v_j."""
    S = len(alpha)
    d = Diagram(height=4.1)
    xs = [2.75 + 0.9 * j for j in range(S)]
    y_q, y_key, y_score, y_alpha, y_val, y_bus = 3.75, 2.9, 2.25, 1.6, 0.95, 0.35
    x_lab = xs[0] - 0.6
    q = d.box(((xs[0] + xs[-1]) / 2, y_q), "query $\\mathbf{q}$", role="state", size=SMALL_PT,
              w=1.0, h=0.4)
    d.text((x_lab, y_key), "keys $\\mathbf{h}_j$", size=SMALL_PT, ha="right")
    d.text((x_lab, y_score), "scores $e_j = \\mathbf{q}^\\top\\mathbf{h}_j$", size=SMALL_PT,
           ha="right")
    d.text((x_lab, y_alpha), "weights $\\alpha_j = \\mathrm{softmax}(\\mathbf{e})_j$",
           size=SMALL_PT, ha="right")
    d.text((x_lab, y_val), "values $v_j$", size=SMALL_PT, ha="right")
    for j, x in enumerate(xs):
        key = d.box((x, y_key), f"$\\mathbf{{h}}_{j + 1}$", role="state", w=0.6, h=0.4)
        d.arrow(q.at(-0.75 + 1.5 * j / (S - 1), -1), key.top)
        score = f"{scores[j]:.1f}" if scores is not None else f"$e_{j + 1}$"
        d.text((x, y_score), score, size=SMALL_PT)
        d.arrow(key.bottom, (x, y_score + 0.13))
        cell = d.grid((x, y_alpha), [[alpha[j]]], role="attention", cell=0.55, fmt="{:.2f}",
                      vmin=0, vmax=1)
        d.arrow((x, y_score - 0.13), cell.top)
        v = d.box((x, y_val), f"{values[j]:g}", role="plain", size=SMALL_PT, w=0.6, h=0.38)
        d.text((x, (cell.bottom[1] + v.top[1]) / 2), "$\\times$", size=SMALL_PT)
        d.arrow(v.bottom, (x, y_bus), head=False)
    out = d.box((xs[-1] + 1.0, y_bus), f"$\\mathbf{{c}}$ = {output:.2f}", role="attention",
                size=SMALL_PT, w=0.95, h=0.4)
    d.arrow((xs[0], y_bus), out.left, label="$\\sum_j$", label_at=0.5)
    return d.check()


def attention_step(alpha: Sequence[float] = (0.05, 0.1, 0.75, 0.1)) -> Diagram:
    """Chapter 4: one step of the Bahdanau decoder. The previous state s_{t-1} scores every encoder
    state h_j, the softmax gives the row alpha_t, c_t = sum_j alpha_tj h_j is fed to the GRU with
    e(y_{t-1}), and the output layer reads [c_t; s_t]."""
    d = Diagram(height=4.25)
    xs = [0.6 + 0.75 * j for j in range(len(alpha))]
    mid = (xs[0] + xs[-1]) / 2
    y_h, y_score, y_alpha, y_c, y_top = 0.6, 1.35, 2.1, 2.9, 3.75
    hs = [d.box((x, y_h), f"$\\mathbf{{h}}_{j + 1}$", role="state", w=0.55) for j, x in enumerate(xs)]
    d.group(hs)
    d.text((mid, 0.12), "encoder states $\\mathbf{h}_j$: keys and values", size=SMALL_PT,
           color=MUTED)
    score = d.box((mid, y_score), "$e_{tj} = \\mathrm{score}(\\mathbf{s}_{t-1}, \\mathbf{h}_j)$",
                  role="attention", w=2.9, h=0.4, size=SMALL_PT)
    for h in hs:
        d.arrow(h.top, (h.x, score.bottom[1]))
    row = d.grid((mid, y_alpha), [list(alpha)], role="attention", cell=0.55, fmt="{:.2f}",
                 vmin=0, vmax=1)
    d.arrow(score.top, row.bottom)
    d.text((mid + 0.08, (score.top[1] + row.bottom[1]) / 2), "softmax", size=SMALL_PT - 1, ha="left")
    d.text((row.right[0] + 0.1, y_alpha), "$\\boldsymbol{\\alpha}_t$", ha="left")
    c = d.box((mid, y_c), "$\\mathbf{c}_t = \\sum_j \\alpha_{tj}\\mathbf{h}_j$", role="attention",
              w=2.4, h=0.45)
    d.arrow(row.top, c.bottom)
    s_prev = d.box((4.3, y_h), "$\\mathbf{s}_{t-1}$", role="state", w=0.75)
    d.elbow(s_prev.at(-0.5, 1), score.right, first="v")
    gru = d.box((4.9, y_c), "GRU", role="ffn", w=0.9, h=0.45)
    d.arrow((gru.at(-0.85, -1)[0], s_prev.top[1]), gru.at(-0.85, -1))
    d.arrow(c.right, gru.left)
    d.text((5.85, y_alpha), "$\\mathbf{e}(y_{t-1})$", ha="left")
    d.elbow((5.8, y_alpha), gru.at(0.7, -1), first="h")
    s = d.box((4.9, y_top), "$\\mathbf{s}_t$", role="state", w=0.7)
    d.arrow(gru.top, s.bottom)
    out = d.box((mid, y_top), "$\\mathrm{softmax}(W_y[\\mathbf{c}_t; \\mathbf{s}_t] + \\mathbf{b}_y)$",
                role="output", w=2.9, h=0.45, size=SMALL_PT)
    d.arrow(c.top, out.bottom)
    d.arrow(s.left, out.right)
    return d.check()


# A made-up three-word vocabulary {A, B, C} and log-probabilities, chosen so that greedy decoding
# (A, then C, then A: -2.1) and the beam of two (B, A, B: -1.8) end on different outputs.
BEAM_EXAMPLE: dict[str, float] = {  # prefix -> log P(last token | the rest)
    "A": -0.5, "B": -0.9, "C": -2.3,
    "AA": -1.6, "AB": -1.2, "AC": -0.9, "BA": -0.3, "BB": -2.5, "BC": -1.9,
    "BAA": -1.0, "BAB": -0.6, "BAC": -1.5, "ACA": -0.7, "ACB": -2.0, "ACC": -1.8,
}


def beam_search_tree(k: int = 2, logp: dict[str, float] | None = None) -> Diagram:
    """Chapter 3: beam search with a beam of k over three steps. Each column holds the candidates of one
    step, every extension of every prefix kept at the step before, with its score log P(y_1..y_t | x);
    the k best are kept (purple), the others pruned (grey)."""
    logp = BEAM_EXAMPLE if logp is None else logp
    score = {p: sum(logp[p[:i + 1]] for i in range(len(p))) for p in logp}
    d = Diagram(height=4.0)
    xs, y_top, row = [0.45, 1.75, 3.55, 5.55], 3.3, 0.5
    start = d.box((xs[0], y_top - 2.5 * row), "<bos>", role="input", size=SMALL_PT, w=0.7, h=0.36)
    parents = {"": start}
    for t in (1, 2, 3):
        d.text((xs[t], y_top + 0.45), f"step {t}", size=SMALL_PT, color=MUTED)
        # grouped by parent, in the parents' order from top to bottom, so that no arrows cross
        candidates = [p for parent in parents for p in logp if len(p) == t and p[:-1] == parent]
        kept = sorted(candidates, key=score.get, reverse=True)[:k]
        boxes = {}
        for i, p in enumerate(candidates):
            y = y_top - i * row if len(candidates) > 3 else y_top - (1 + 1.5 * i) * row
            label = f"{' '.join(p)}   {score[p]:.1f}".replace("-", "\u2212")  # a true minus sign
            boxes[p] = d.box((xs[t], y), label,
                             role="state" if p in kept else "mask", size=SMALL_PT, w=1.15, h=0.36)
            d.arrow(parents[p[:-1]].right, boxes[p].left)
        parents = {p: boxes[p] for p in candidates if p in kept}
    d.text((xs[3], y_top - 6 * row + 0.05), f"kept: the {k} best (purple)", size=SMALL_PT, color=MUTED)
    return d.check()
