import math

import pytest
import torch
import torch.nn.functional as F

from lmbook.functional import cross_entropy, log_softmax, perplexity


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_log_softmax_matches_torch(dim):
    x = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(log_softmax(x, dim), torch.log_softmax(x, dim))


def test_log_softmax_is_finite_for_huge_logits():
    x = torch.tensor([[1e4, -1e4, 0.0], [-3e4, -3e4 + 1, -3e4 + 2]])
    out = log_softmax(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.log_softmax(x.double(), -1).float())


def test_cross_entropy_matches_torch_and_skips_padding():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 7, 11, generator=g)
    targets = torch.randint(0, 11, (3, 7), generator=g)
    targets[0, 4:] = -100
    expected = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(cross_entropy(logits, targets), expected)


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size():
    V = 37
    logits = torch.zeros(10, V)
    targets = torch.randint(0, V, (10,))
    assert perplexity(cross_entropy(logits, targets)) == pytest.approx(V)


def test_perplexity_is_exp_of_the_mean_nll():
    assert perplexity(math.log(5.0)) == pytest.approx(5.0)
