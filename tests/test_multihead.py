"""lmbook.multihead equals torch.nn.MultiheadAttention given the same weights, and its reshapes are exact."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lmbook.multihead import MultiHeadAttention, merge_heads, split_heads
from lmbook.self_attention import causal_mask


def _pair(d=12, h=3, seed=0):
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(d, h, batch_first=True, dtype=torch.float64)
    nn.init.normal_(ref.in_proj_bias)  # torch starts the biases at 0: make them matter
    nn.init.normal_(ref.out_proj.bias)
    return ref.eval(), MultiHeadAttention(d, h).double().load_torch(ref)


def test_split_then_merge_gives_back_the_input_and_split_is_a_view():
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4) and heads.data_ptr() == x.data_ptr()
    torch.testing.assert_close(heads[:, 1, :, :], x[:, :, 4:8])  # head 1 holds features 4..7
    torch.testing.assert_close(merge_heads(heads), x)


def test_self_attention_equals_torch_mha():
    ref, ours = _pair()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    want, want_w = ref(x, x, x, average_attn_weights=False)
    got, got_w = ours(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_w, want_w)


def test_padding_and_causal_masks_equal_torchs_with_their_opposite_convention():
    ref, ours = _pair()
    x = torch.randn(2, 6, 12, dtype=torch.float64)
    key_mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    # torch: key_padding_mask and a boolean attn_mask are True where attention is NOT allowed
    want, _ = ref(x, x, x, key_padding_mask=~key_mask, attn_mask=~causal_mask(6))
    got, _ = ours(x, key_mask=key_mask, causal=True)
    torch.testing.assert_close(got, want)


def test_cross_attention_takes_keys_and_values_from_the_context():
    ref, ours = _pair()
    x, ctx = torch.randn(2, 4, 12, dtype=torch.float64), torch.randn(2, 7, 12, dtype=torch.float64)
    key_mask = torch.ones(2, 7, dtype=torch.bool)
    key_mask[1, 5:] = False
    want, _ = ref(x, ctx, ctx, key_padding_mask=~key_mask)
    got, w = ours(x, ctx, key_mask=key_mask)
    torch.testing.assert_close(got, want)
    assert w.shape == (2, 3, 4, 7) and (w[1, :, :, 5:] == 0).all()


def test_torchs_returned_weights_are_the_mean_over_heads_by_default():
    ref, ours = _pair()
    x = torch.randn(1, 5, 12, dtype=torch.float64)
    _, averaged = ref(x, x, x)
    torch.testing.assert_close(ours(x)[1].mean(1), averaged)


def test_a_width_that_heads_do_not_divide_is_refused():
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(10, 3)
