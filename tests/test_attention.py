"""lmbook.attention against torch's attention op and against the formulas computed pair by pair."""

import math

import pytest
import torch
import torch.nn.functional as F

from lmbook.attention import AdditiveScore, MultiplicativeScore, attend, dot_scores, masked_softmax, scaled_dot_scores

torch.manual_seed(0)
B, T, D = 3, 7, 8


def _inputs():
    s, h = torch.randn(B, D, dtype=torch.double), torch.randn(B, T, D, dtype=torch.double)
    mask = torch.arange(T)[None, :] < torch.tensor([7, 4, 1])[:, None]
    return s, h, mask


def test_scaled_dot_attention_equals_torchs_sdpa_with_a_padding_mask():
    s, h, mask = _inputs()
    context, alpha = attend(scaled_dot_scores(s, h), h, mask)
    ref = F.scaled_dot_product_attention(s[:, None, :], h, h, attn_mask=mask[:, None, :])[:, 0]
    torch.testing.assert_close(context, ref)
    assert (alpha[~mask] == 0).all() and torch.allclose(alpha.sum(-1), torch.ones(B, dtype=torch.double))


def test_dot_scores_are_dot_products_pair_by_pair():
    s, h, _ = _inputs()
    expected = torch.tensor([[float(s[b] @ h[b, t]) for t in range(T)] for b in range(B)], dtype=torch.double)
    torch.testing.assert_close(dot_scores(s, h), expected)
    torch.testing.assert_close(scaled_dot_scores(s, h), expected / math.sqrt(D))


def test_multiplicative_and_additive_scores_follow_their_formulas():
    s, h, _ = _inputs()
    mult = MultiplicativeScore(D, D).double()
    add = AdditiveScore(D, D, 5).double()
    for b in range(B):
        for t in range(T):
            assert torch.isclose(mult(s, h)[b, t], s[b] @ mult.W @ h[b, t])
            by_hand = add.v.weight[0] @ torch.tanh(add.W1.weight @ h[b, t] + add.W2.weight @ s[b])
            assert torch.isclose(add(s, h)[b, t], by_hand)


def test_masked_positions_get_exactly_zero_weight_and_cannot_change_the_context():
    s, h, mask = _inputs()
    context, _ = attend(dot_scores(s, h), h, mask)
    h2 = h.clone()
    h2[~mask] = 1e6  # garbage in the padding
    context2, _ = attend(dot_scores(s, h2).masked_fill(~mask, 0), h2, mask)
    torch.testing.assert_close(context, context2)


@pytest.mark.parametrize("wrong", ["no_mask", "softmax_over_batch", "unscaled"])
def test_known_wrong_attention_differs_from_torch(wrong):
    s, h, mask = _inputs()
    ref = F.scaled_dot_product_attention(s[:, None, :], h, h, attn_mask=mask[:, None, :])[:, 0]
    scores = scaled_dot_scores(s, h)
    if wrong == "no_mask":
        context, _ = attend(scores, h, None)
    elif wrong == "softmax_over_batch":
        context = torch.einsum("bt,btd->bd", torch.softmax(scores.masked_fill(~mask, -math.inf), dim=0), h)
    else:
        context, _ = attend(dot_scores(s, h), h, mask)
    assert not torch.allclose(context.nan_to_num(), ref)


def test_masked_softmax_without_mask_is_softmax():
    x = torch.randn(4, 5)
    torch.testing.assert_close(masked_softmax(x, None), torch.softmax(x, -1))
