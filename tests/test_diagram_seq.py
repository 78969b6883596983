"""Chapters 1-4's diagrams: clean (nothing cut off or overlapping), at the book's width, and labelled
with the symbols the chapters use."""

import pytest

from lmbook import diagram_seq
from lmbook.diagram import DPI, WIDTH


def labels(d) -> str:
    d.fig.canvas.draw()
    return " ".join(t.get_text() for t in d.ax.texts if t.get_visible())


DIAGRAMS = {
    "feedforward_lm": (lambda: diagram_seq.feedforward_lm(),
                       [r"\mathbf{e}_{t-3}", r"\mathbf{z}", r"\tanh(W\mathbf{z} + \mathbf{b})",
                        r"U\mathbf{h} + \mathbf{c}", "$(md)$", "the"]),
    "unrolled_rnn": (lambda: diagram_seq.unrolled_rnn(),
                     [r"\mathbf{h}_0", r"\mathbf{h}_4", "$W_h$", "$W_x$", r"\mathbf{x}_1", "sleep"]),
    "encoder_decoder": (lambda: diagram_seq.encoder_decoder(),
                        [r"\overrightarrow{\mathbf{h}}_{4}", r"\overleftarrow{\mathbf{h}}_1", r"\mathbf{s}_0",
                         r"\mathbf{c}$ at every step", "$y_0$"]),
    "soft_lookup": (lambda: diagram_seq.soft_lookup([0.1, 0.6, 0.2, 0.1], [10, 20, 30, 40], 21.0,
                                                    [0.3, 2.0, 0.6, 0.1]),
                    ["query", r"\alpha_j", "0.60", "2.0", "21.00", r"\mathbf{q}^\top\mathbf{h}_j"]),
    "attention_step": (lambda: diagram_seq.attention_step(),
                       [r"\mathbf{s}_{t-1}", r"\mathbf{c}_t", r"W_y[\mathbf{c}_t; \mathbf{s}_t]", "GRU",
                        r"\mathbf{e}(y_{t-1})", r"\boldsymbol{\alpha}_t"]),
}


@pytest.mark.parametrize("name", DIAGRAMS)
def test_diagram_is_clean_at_the_book_width_and_labelled_with_the_chapters_symbols(name):
    make, expected = DIAGRAMS[name]
    d = make()
    assert d.problems() == []
    assert d.fig.get_size_inches()[0] == WIDTH
    drawn = labels(d)
    missing = [s for s in expected if s not in drawn]
    assert not missing, f"{name} does not show {missing}"
    assert len(d.png()) > 10_000 and d.fig.dpi == DPI


def test_soft_lookup_draws_the_weights_it_is_given_one_per_key():
    d = diagram_seq.soft_lookup([0.25, 0.75], [1, 3], 2.5)
    drawn = labels(d)
    assert "0.25" in drawn and "0.75" in drawn and "2.50" in drawn


def test_beam_tree_keeps_the_k_best_and_ends_elsewhere_than_greedy():
    logp = diagram_seq.BEAM_EXAMPLE
    score = {p: sum(logp[p[:i + 1]] for i in range(len(p))) for p in logp}
    greedy = ""
    for _ in range(3):  # the best next token after greedy's own prefix
        greedy = max((p for p in logp if len(p) == len(greedy) + 1 and p.startswith(greedy)), key=logp.get)
    d = diagram_seq.beam_search_tree(k=2)
    assert d.problems() == []
    drawn = labels(d)
    assert "B A B   \u22121.8" in drawn and "A C A   \u22122.1" in drawn
    assert greedy == "ACA" and max((p for p in score if len(p) == 3 and p[:2] in ("AC", "BA")), key=score.get) == "BAB"
