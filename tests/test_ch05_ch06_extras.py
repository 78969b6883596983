"""Chapters 5 and 6's additions to lmbook: the long-phrase agreement test, the two-lookup task, the
choice between decoupled weight decay and an L2 penalty in train_lm, and the chapters' diagrams."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from matplotlib.patches import Rectangle

from lmbook.agreement import agrees, long_phrase_windows
from lmbook.attention_diagrams import attention_row, causal_mask, multihead_flow
from lmbook.causal_lm import CausalLM, LMConfig, train_lm
from lmbook.corpus import ADJS, EOS, NOUNS_PL, NOUNS_SG, PREPS, load_corpus
from lmbook.two_lookups import lookup_weights, two_lookup_accuracy, two_lookup_batch, vocab_size


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(n_train=2000, n_val=500, n_test=3000)


# ----------------------------------------------------------------------------- long_phrase_windows

def test_long_phrase_windows_end_with_subject_phrase_and_an_attractor_of_the_other_number(corpus):
    vocab = corpus.vocab
    test = long_phrase_windows(corpus.test, vocab, n_adj=5, count=40, length=20, seed=3)
    assert test.windows.shape == (40, 20) and test.dist == 9
    singular = {vocab.stoi[w] for w in NOUNS_SG}
    plural = {vocab.stoi[w] for w in NOUNS_PL}
    for row, right in zip(test.windows.tolist(), test.right.tolist(), strict=True):
        subject, attractor = row[20 - test.dist], row[-1]
        assert vocab.itos[row[20 - test.dist + 1]] in PREPS and vocab.itos[row[20 - test.dist + 2]] == "the"
        assert all(vocab.itos[w] in ADJS for w in row[-6:-1]), "the phrase holds the 5 adjectives"
        assert (subject in plural) != (attractor in plural), "the phrase's noun has the other number"
        assert (subject in singular) == vocab.itos[right].endswith("s"), "the right form agrees with the subject"
        assert vocab.itos[row[20 - test.dist - 2]] == EOS, "real text ending in '.' comes before the sentence"


def test_the_true_model_prefers_the_right_form_in_every_long_phrase_sentence(corpus):
    # the sentences are grammatical toy English: the HMM that generates the corpus agrees at every one
    test = long_phrase_windows(corpus.test, corpus.vocab, n_adj=12, count=30, length=32, seed=1)
    # from the "." that ends the text before the sentence: the true model starts in its "." state
    sentences = test.windows[:, -(12 + 5 + 1):].numpy()
    assert (sentences[:, 0] == corpus.vocab.stoi[EOS]).all()
    probs = torch.tensor(np.stack([corpus.hmm.next_word_probs(row) for row in sentences]))
    assert bool(agrees(probs, test).all())
    assert bool((probs.gather(1, test.wrong[:, None]) == 0).all()), "the wrong form is ungrammatical there"


def test_long_phrase_windows_refuse_a_phrase_longer_than_the_window(corpus):
    with pytest.raises(ValueError, match="longer than 20"):
        long_phrase_windows(corpus.test, corpus.vocab, n_adj=15, count=2, length=20)


# ----------------------------------------------------------------------------- two_lookups

def test_two_lookup_answers_are_the_ordered_pair_of_the_first_and_the_previous_symbol():
    m = 5
    x, y = two_lookup_batch(7, 9, m, torch.Generator().manual_seed(0))
    for b in range(7):
        for t in range(1, 9):
            assert y[b, t - 1] == m + m * x[b, 0] + x[b, t - 1]
    assert y.min() >= m and y.max() < vocab_size(m)


class _Oracle(torch.nn.Module):
    """Names (x_0, x_{t-1}) at every position, or only x_0 with a fixed guess for the other symbol."""

    def __init__(self, m, first_only=False):
        super().__init__()
        self.m, self.first_only, self.w = m, first_only, torch.nn.Parameter(torch.zeros(1))

    def forward(self, x, return_weights=False):
        prev = torch.cat([x[:, :1], x[:, :-1]], 1)
        answer = self.m + self.m * x[:, :1] + (0 * prev if self.first_only else prev)
        logits = torch.nn.functional.one_hot(answer, vocab_size(self.m)).float()
        n = x.shape[1]
        first = torch.zeros(n, n)
        first[:, 0] = 1.0  # every row on position 0
        weights = [first.expand(x.shape[0], 1, n, n)]
        return (logits, weights) if return_weights else logits


def test_two_lookup_accuracy_scores_the_pair_and_each_symbol():
    m = 4
    assert two_lookup_accuracy(_Oracle(m), 8, m) == {"both": 1.0, "first": 1.0, "previous": 1.0}
    half = two_lookup_accuracy(_Oracle(m, first_only=True), 8, m, count=4000)
    assert half["first"] == 1.0
    assert abs(half["previous"] - 1 / m) < 0.03 and abs(half["both"] - 1 / m) < 0.03


def test_lookup_weights_read_the_weight_on_position_0_and_on_the_previous_position():
    w = lookup_weights(_Oracle(3), 8, 3)
    assert w.shape == (1, 1, 2)
    torch.testing.assert_close(w[0, 0], torch.tensor([1.0, 0.0]))


# ----------------------------------------------------------------------------- weight decay in train_lm

@pytest.mark.parametrize("decoupled", [True, False])
def test_train_lm_decays_a_weight_without_gradient_as_its_method_says(decoupled):
    # word 5 never occurs, so its embedding gets no gradient; after one step AdamW shrinks it by
    # (1 - lr·λ), while Adam with an L2 penalty takes a full Adam step towards 0: lr·sign(θ)
    torch.manual_seed(0)
    model = CausalLM(LMConfig(vocab_size=6, block_size=4, d_model=8, n_layer=1, d_ff=16))
    before = model.wte.weight[5].detach().clone()
    train = torch.randint(0, 5, (200,))
    lr, wd, warmup = 1e-2, 0.5, 10
    train_lm(model, train, steps=1, batch_size=2, lr=lr, warmup=warmup, weight_decay=wd, decoupled=decoupled)
    lr_0 = lr / warmup  # the first step of the warm-up
    after = model.wte.weight[5].detach()
    expected = before * (1 - lr_0 * wd) if decoupled else before - lr_0 * torch.sign(before)
    torch.testing.assert_close(after, expected, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- diagrams

def _texts(d):
    return [t.get_text() for t in d.ax.texts if t.get_text()]


def test_attention_row_draws_every_word_with_its_key_value_and_weight():
    words = ["the", "dogs", "near", "the", "cat"]
    d = attention_row(words, [0.1, 0.6, 0.1, 0.1, 0.1])
    texts = _texts(d)
    for j, w in enumerate(words):
        assert w in texts and f"$\\mathbf{{k}}_{{{j + 1}}}$" in texts and f"$\\mathbf{{v}}_{{{j + 1}}}$" in texts
    assert "0.60" in texts and "$\\mathbf{q}_{5}$" in texts
    assert d.problems() == []


def test_attention_row_without_weights_writes_the_symbols():
    texts = _texts(attention_row(["a", "b", "c"]))
    assert {"$\\alpha_{31}$", "$\\alpha_{32}$", "$\\alpha_{33}$"} <= set(texts)


def test_causal_mask_diagram_hatches_exactly_the_future():
    n = 4
    scores = np.random.default_rng(0).normal(size=(n, n))
    scores[np.triu_indices(n, 1)] = -np.inf
    weights = np.exp(scores) / np.exp(scores).sum(1, keepdims=True)
    d = causal_mask(scores, weights)
    hatched = [p for p in d.ax.patches if isinstance(p, Rectangle) and p.get_hatch()]
    assert len(hatched) == 2 * n * (n - 1) // 2, "the upper triangle of both grids"
    assert f"{weights[n - 1, 0]:.2f}" in _texts(d)


@pytest.mark.parametrize("h", [2, 3])
def test_multihead_flow_shows_every_head_and_the_shapes(h):
    texts = " ".join(_texts(multihead_flow(h)))
    for i in range(1, h + 1):
        assert f"head {i}" in texts and f"Q_{i}" in texts
    for shape in ("$(B, n, d)$", "d_{\\mathrm{head}}", "$W_o$", "Concat"):
        assert shape in texts
    assert math.isclose(multihead_flow(h).width, 7.0)
