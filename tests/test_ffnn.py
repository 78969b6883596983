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
