"""Chapters 9 and 10's diagrams: clean (no label cut off, overflowing or covering another) and saying what the
chapters' text and captions say they show."""

from __future__ import annotations

import pytest

from lmbook import pretraining_diagrams as diagrams
from lmbook.diagram import WIDTH


def labels(d) -> list[str]:
    return [t.get_text() for t in d.ax.texts if t.get_visible() and t.get_text()]


@pytest.mark.parametrize("name", ["gpt_model", "kv_cache", "bert_inputs", "bert_heads", "three_families"])
def test_every_diagram_is_clean_and_the_books_width(name):
    d = getattr(diagrams, name)()
    assert d.problems() == []
    assert d.fig.get_size_inches()[0] == pytest.approx(WIDTH)


def test_gpt_model_shows_the_pre_ln_block_the_final_norm_and_the_tied_output_layer():
    shown = labels(diagrams.gpt_model())
    for part in ("$\\mathrm{LN}_1$", "causal multi-head attention", "$\\mathrm{LN}_2$", "FFN, tanh GELU",
                 "$\\mathrm{LN}_f$", "$\\mathbf{h}\\,E^\\top$", "tied", "$L\\times$"):
        assert part in shown, part


def test_kv_cache_grows_by_one_row_per_step():
    d = diagrams.kv_cache(prompt=3, steps=3)
    shown = labels(d)
    assert [s for s in shown if s.startswith("step")] == [
        "step 1: the prompt, $t = 3$", "step 2: one token, $t = 4$", "step 3: one token, $t = 5$"]
    # the row labels of the K grids: 3, then 4, then 5 tokens
    assert sum(s in ("The", "jury", "said", "it", "was") for s in shown) == 3 + 4 + 5


def test_bert_inputs_mask_one_token_replace_one_keep_one_and_label_only_those():
    shown = labels(diagrams.bert_inputs())
    assert "[MASK]" in shown and "two" in shown
    assert shown.count("\u2212100") == 6  # nine positions, three chosen
    for fate in ("[MASK]: 80%", "random: 10%", "kept: 10%"):
        assert fate in shown


def test_three_families_name_bert_gpt_and_t5():
    shown = labels(diagrams.three_families())
    for part in ("encoder-only", "decoder-only", "encoder\u2013decoder", "BERT", "GPT", "T5"):
        assert part in shown
