"""lmbook.self_attention against torch's own scaled dot-product attention, and the properties chapter 5 shows."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lmbook.self_attention import SelfAttention, causal_mask, key_padding_to_mask, scaled_dot_product_attention

G = torch.Generator().manual_seed(0)


def _qkv(B=2, n=5, d=8, n_k=None, dtype=torch.float64):
    n_k = n_k or n
    return (torch.randn(B, n, d, generator=G, dtype=dtype), torch.randn(B, n_k, d, generator=G, dtype=dtype),
            torch.randn(B, n_k, 3, generator=G, dtype=dtype))


def test_equals_torch_sdpa_without_a_mask():
    q, k, v = _qkv()
    out, _ = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


def test_equals_torch_sdpa_with_its_causal_flag():
    q, k, v = _qkv(n=6)
    out, _ = scaled_dot_product_attention(q, k, v, causal_mask(6))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_equals_torch_sdpa_with_padding_and_causal_masks_combined():
    q, k, v = _qkv(n=6)
    key_mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    mask = key_padding_to_mask(key_mask)[:, 0] & causal_mask(6)  # (B, n, n): SDPA's bool mask is True = attend
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_the_causal_mask_aligns_at_the_end_when_there_are_more_keys_than_queries():
    # the last 2 queries of a 5-token sequence: query 0 is token 3 (sees keys 0..3), query 1 is token 4
    assert causal_mask(2, 5).tolist() == [[True, True, True, True, False], [True, True, True, True, True]]


def test_weights_sum_to_one_and_are_exactly_zero_where_masked():
    q, k, v = _qkv(n=4)
    _, w = scaled_dot_product_attention(q, k, v, causal_mask(4))
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, dtype=torch.float64))
    assert (w[:, ~causal_mask(4)] == 0).all()


def test_under_the_causal_mask_a_future_token_never_changes_an_earlier_output():
    attn = SelfAttention(8, 4).double()
    x = torch.randn(1, 6, 8, generator=G, dtype=torch.float64)
    y, _ = attn(x, causal=True)
    x2 = x.clone()
    x2[0, 4:] = torch.randn(2, 8, generator=G, dtype=torch.float64)
    y2, _ = attn(x2, causal=True)
    torch.testing.assert_close(y[0, :4], y2[0, :4])
    assert not torch.allclose(y[0, 4:], y2[0, 4:])


def test_without_positions_permuting_the_input_permutes_the_output():
    attn = SelfAttention(8, 4).double()
    x = torch.randn(2, 7, 8, generator=G, dtype=torch.float64)
    perm = torch.randperm(7, generator=G)
    y, _ = attn(x)
    y_perm, _ = attn(x[:, perm])
    torch.testing.assert_close(y_perm, y[:, perm])


@pytest.mark.parametrize("d_k", [4, 64, 1024])
def test_scaling_keeps_the_score_variance_near_one(d_k):
    q, k = torch.randn(4000, d_k, generator=G), torch.randn(4000, d_k, generator=G)
    raw = (q * k).sum(-1)
    assert abs(raw.var().item() / d_k - 1) < 0.1  # unscaled: variance grows like d_k
    assert abs((raw / d_k ** 0.5).var().item() - 1) < 0.1
