import pytest
import torch

from lmbook.ffnn import FeedforwardLM


def test_forward_is_u_tanh_w_concatenated_embeddings_plus_b_plus_c():
    torch.manual_seed(0)
    m = FeedforwardLM(vocab_size=9, window=3, d_emb=4, d_hidden=5)
    context = torch.tensor([[1, 2, 3], [8, 0, 8]])
    E, W, b, U, c = m.E.weight, m.hidden.weight, m.hidden.bias, m.out.weight, m.out.bias
    x = torch.cat([E[context[:, i]] for i in range(3)], dim=1)  # oldest word first
    expected = torch.tanh(x @ W.T + b) @ U.T + c
    torch.testing.assert_close(m(context), expected)


def test_wrong_window_length_is_a_clear_error():
    m = FeedforwardLM(vocab_size=9, window=3)
    with pytest.raises(ValueError, match="expected contexts of 3 words"):
        m(torch.zeros(2, 4, dtype=torch.long))


def test_parameters_of_w_grow_linearly_with_the_window():
    sizes = [FeedforwardLM(50, n, d_emb=8, d_hidden=16).hidden.weight.numel() for n in (1, 2, 4)]
    assert sizes == [16 * 8 * 1, 16 * 8 * 2, 16 * 8 * 4]


def _by_hand(m, context, keep_x=None, keep_h=None, p=0.0):
    """U (mask_h ⊙ tanh(W (mask_x ⊙ x) + b)) / (1 - p) + c: inverted dropout with the given masks."""
    x = m.E.weight[context].flatten(1)
    if keep_x is not None:
        x = x * keep_x / (1 - p)
    h = torch.tanh(x @ m.hidden.weight.T + m.hidden.bias)
    if keep_h is not None:
        h = h * keep_h / (1 - p)
    return h @ m.out.weight.T + m.out.bias


def test_dropout_changes_nothing_in_eval_mode():
    torch.manual_seed(0)
    m = FeedforwardLM(vocab_size=9, window=3, d_emb=4, d_hidden=5, dropout=0.5).eval()
    context = torch.tensor([[1, 2, 3], [8, 0, 8]])
    torch.testing.assert_close(m(context), _by_hand(m, context))
    torch.testing.assert_close(m(context), m(context))  # deterministic


def test_dropout_in_train_mode_zeroes_the_inputs_of_both_layers_and_rescales_the_rest():
    torch.manual_seed(0)
    p = 0.5
    m = FeedforwardLM(vocab_size=9, window=3, d_emb=4, d_hidden=5, dropout=p).train()
    context = torch.tensor([[1, 2, 3], [8, 0, 8]])
    # nn.Dropout draws bernoulli(1 - p) masks from torch's generator, x's first, then h's
    torch.manual_seed(1)
    out = m(context)
    torch.manual_seed(1)
    keep_x = torch.empty(2, 12).bernoulli_(1 - p)
    keep_h = torch.empty(2, 5).bernoulli_(1 - p)
    torch.testing.assert_close(out, _by_hand(m, context, keep_x, keep_h, p))
    assert not torch.allclose(out, m.eval()(context)), "train mode gave the eval-mode output"


def test_dropout_keeps_the_mean_of_each_unit_in_training():
    torch.manual_seed(0)
    drop = FeedforwardLM(vocab_size=9, window=1, d_emb=2000, d_hidden=4, dropout=0.3).drop.train()
    x = torch.ones(50, 2000)
    y = drop(x)
    assert abs((y == 0).float().mean().item() - 0.3) < 0.01, "about a share p of the entries is zeroed"
    assert abs(y.mean().item() - 1.0) < 0.01, "the survivors are scaled by 1 / (1 - p), keeping the mean"
