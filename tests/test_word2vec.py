import math

import pytest
import torch
import torch.nn.functional as F

from lmbook.word2vec import nearest_neighbours, noise_distribution, sgns_loss, skipgram_pairs


def test_sgns_loss_equals_k_plus_one_binary_cross_entropies():
    g = torch.Generator().manual_seed(0)
    v, u, un = torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g), torch.randn(6, 3, 4, generator=g)
    scores = torch.cat([(u * v).sum(-1, keepdim=True), (un @ v.unsqueeze(-1)).squeeze(-1)], 1)
    labels = torch.zeros_like(scores)
    labels[:, 0] = 1
    expected = F.binary_cross_entropy_with_logits(scores, labels, reduction="none").sum(1).mean()
    torch.testing.assert_close(sgns_loss(v, u, un), expected)


def test_sgns_loss_of_zero_vectors_is_k_plus_one_log_two():
    k = 5
    loss = sgns_loss(torch.zeros(3, 4), torch.zeros(3, 4), torch.zeros(3, k, 4))
    assert float(loss) == pytest.approx((k + 1) * math.log(2))


def test_skipgram_pairs_take_every_neighbour_within_the_radius_both_ways():
    c, o = skipgram_pairs(torch.tensor([0, 1, 2]), radius=1)
    assert sorted(zip(c.tolist(), o.tolist(), strict=True)) == [(0, 1), (1, 0), (1, 2), (2, 1)]


def test_noise_distribution_is_unigram_to_the_three_quarters():
    ids = torch.tensor([0] * 16 + [1] * 1)
    p = noise_distribution(ids, 3)
    expected = torch.tensor([16**0.75, 1.0, 0.0])
    torch.testing.assert_close(p, (expected / expected.sum()).float())


def test_nearest_neighbours_rank_by_cosine_similarity_excluding_the_word():
    emb = torch.tensor([[1.0, 0.0], [10.0, 1.0], [0.0, 1.0], [-1.0, 0.0]])
    ranked = [i for i, _ in nearest_neighbours(emb, 0, k=3)]
    assert ranked == [1, 2, 3]
