"""Complete diagrams drawn with ``lmbook.diagram``: to show in a chapter, and to read as examples.

Each function returns a checked ``Diagram`` (``check()`` has passed: no label cut off, overflowing its
box or covering another). Show one as the last value of a ``remove-input`` cell, with a caption that
reads the diagram and alt text for readers who cannot see it (myst-nb cell metadata)::

    ```{code-cell} ipython3
    ---
    tags: [remove-input]
    mystnb:
      figure:
        caption: The encoder reads the source into states $\\mathbf{h}_j$; its last state, ...
        name: fig-encoder-decoder
      image:
        alt: Four encoder states h1 to h4 in a row feed the context vector c, ...
    ---
    from lmbook.diagram_examples import encoder_decoder

    encoder_decoder()
    ```
"""

from __future__ import annotations

from collections.abc import Sequence

from .diagram import SMALL_PT, Diagram


def encoder_decoder(source: Sequence[str] = ("$x_1$", "$x_2$", "$x_3$", "$x_4$"),
                    target: Sequence[str] = ("$y_1$", "$y_2$", "$y_3$")) -> Diagram:
    """Chapter 3's encoder-decoder: the encoder reads the source into states h_1..h_S, its last state is
    the context vector c, and the decoder's states s_t start from c (s_0 = tanh(W_init c + b_init)) and
    receive c again at every step, next to the previous target word y_{t-1}.

    ``source`` and ``target`` label the words (mathtext or plain), so a page can draw its own sentence.
    """
    T = len(target)
    d = Diagram(height=3.55)
    y_tok, y_rnn, y_out, y_word, y_bus = 0.62, 1.55, 2.55, 3.2, 0.22
    step, w = 0.75, 0.55

    # Encoder: h_j = GRU(E_x x_j, h_{j-1}), one state per source word.
    hs = []
    for j, word in enumerate(source):
        x = 0.55 + step * j
        h = d.box((x, y_rnn), f"$\\mathbf{{h}}_{j + 1}$", role="state", w=w)
        d.text((x, y_tok), word)
        d.arrow((x, y_tok + 0.16), h.bottom)
        if hs:
            d.arrow(hs[-1].right, h.left)
        hs.append(h)
    d.group(hs, label="encoder")

    # The context vector: everything the decoder will know about the source, one vector of d_hid numbers.
    c = d.tensor((hs[-1].x + 0.75, y_rnn), rows=4, cols=1, name="$\\mathbf{c}$", shape="$(d_{\\mathrm{hid}})$",
                 role="state", name_side="above", shape_side="above")
    d.arrow(hs[-1].right, c.left)

    # Decoder: s_t = GRU([e(y_{t-1}); c], s_{t-1}), then P(y_t | y_<t, x) = softmax(W_o s_t + b_o).
    ss, x_first = [], c.x + 1.05
    previous = ["$y_0$"] + list(target[:-1])
    for t in range(T):
        x = x_first + 0.85 * t
        s = d.box((x, y_rnn), f"$\\mathbf{{s}}_{t + 1}$", role="state", w=w)
        d.text((x - 0.12, y_tok), previous[t])
        d.arrow((x - 0.12, y_tok + 0.16), s.at(-0.44, -1))
        d.arrow((x + 0.12, y_bus), s.at(0.44, -1))  # c again, from the line below
        out = d.box((x, y_out), "softmax", role="output", size=SMALL_PT, w=0.75, h=0.36)
        d.arrow(s.top, out.bottom)
        d.text((x, y_word), target[t])
        d.arrow(out.top, (x, y_word - 0.16))
        d.arrow((ss[-1] if ss else c).right, s.left, label="$\\mathbf{s}_0$" if not ss else "")
        ss.append(s)
    d.group(ss, label="decoder")
    # The line that carries c to every decoder step.
    d.arrow(c.bottom, (c.x, y_bus), head=False)
    d.arrow((c.x, y_bus), (ss[-1].x + 0.12, y_bus), head=False, label="$\\mathbf{c}$ at every step", label_at=0.3)
    return d.check()
