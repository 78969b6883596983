"""Positional encodings and biases against their closed forms and the properties they are chosen for."""

from __future__ import annotations

import math

import pytest
import torch

from lmbook.positions import (
    RelativePositionBias,
    alibi_bias,
    alibi_slopes,
    rope,
    shift_matrix,
    sinusoidal,
    t5_bucket,
)


def test_sinusoidal_matches_the_formula_entry_by_entry():
    n, d = 12, 8
    pe = sinusoidal(n, d)
    for p in range(n):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            assert pe[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6), (p, i)
            assert pe[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6), (p, i)


def test_shift_matrix_moves_every_position_by_k():
    d, n = 16, 40
    pe = sinusoidal(n + 10, d).double()
    for k in (1, 3, 10):
        moved = pe[:n] @ shift_matrix(k, d).T
        torch.testing.assert_close(moved, pe[k:n + k], atol=1e-5, rtol=0,
                                   msg=f"M_{k} PE(p) differs from PE(p + {k})")


def test_shift_matrices_are_rotations_that_compose():
    d = 10
    m2, m3 = shift_matrix(2, d), shift_matrix(3, d)
    torch.testing.assert_close(m2 @ m2.T, torch.eye(d, dtype=torch.float64))
    torch.testing.assert_close(m3 @ m2, shift_matrix(5, d))


def test_odd_dimensions_are_refused():
    with pytest.raises(ValueError, match="even"):
        sinusoidal(4, 7)


def test_rope_is_multiplication_by_a_complex_rotation():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    theta = 10000 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    rotation = torch.polar(torch.ones(5, 4, dtype=torch.float64), torch.arange(5.0)[:, None].double() * theta)
    expected = torch.view_as_real(torch.view_as_complex(x.reshape(2, 5, 4, 2)) * rotation).reshape(2, 5, 8)
    torch.testing.assert_close(rope(x), expected)


def test_rope_scores_depend_only_on_the_offset():
    torch.manual_seed(1)
    q, k = torch.randn(1, 16, dtype=torch.float64), torch.randn(1, 16, dtype=torch.float64)
    def score(p: int, p2: int) -> float:
        return (rope(q, torch.tensor([p])) @ rope(k, torch.tensor([p2])).T).item()
    assert score(3, 1) == pytest.approx(score(10, 8), abs=1e-10)
    assert score(3, 1) == pytest.approx(score(102, 100), abs=1e-10)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-6), "a different offset must change the score"


def test_rope_keeps_lengths_and_leaves_position_zero_alone():
    x = torch.randn(3, 6, 8)
    torch.testing.assert_close(rope(x).norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(rope(x)[:, 0], x[:, 0])


def test_half_split_rope_is_interleaved_rope_with_the_dimensions_permuted():
    x = torch.randn(4, 8, dtype=torch.float64)
    perm = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])  # half-split order -> interleaved pairs
    torch.testing.assert_close(rope(x, interleaved=False)[:, perm], rope(x[:, perm]))
    assert not torch.allclose(rope(x, interleaved=False), rope(x)), "the two layouts differ on the same weights"


@pytest.mark.parametrize("n_head, expected", [
    (1, [2 ** -8]),
    (8, [2 ** -(h + 1) for h in range(8)]),
    (4, [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8]),
    # 8 heads' slopes, then every other slope of 16 heads: 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
    (12, [2 ** -(h + 1) for h in range(8)] + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5]),
])
def test_alibi_slopes_are_the_papers(n_head, expected):
    assert alibi_slopes(n_head).tolist() == pytest.approx(expected)


def test_alibi_bias_is_minus_slope_times_distance():
    bias = alibi_bias(2, 4)
    slopes = alibi_slopes(2)
    for h in range(2):
        for i in range(4):
            for j in range(i + 1):
                assert bias[h, i, j].item() == pytest.approx(-slopes[h].item() * (i - j))


def test_alibi_bias_aligns_queries_with_the_last_keys():
    torch.testing.assert_close(alibi_bias(3, 2, 5), alibi_bias(3, 5)[:, 3:])


def test_relative_bias_shares_one_value_per_offset_and_clips_far_ones():
    rel = RelativePositionBias(n_head=2, max_distance=2)
    with torch.no_grad():
        rel.table.copy_(torch.arange(10.0).reshape(5, 2))  # row r: offset r - 2
    b = rel(5)
    assert b.shape == (2, 5, 5)
    for i in range(5):
        for j in range(5):
            offset = max(-2, min(2, j - i))
            assert b[:, i, j].tolist() == rel.table[offset + 2].tolist(), (i, j)


def test_relative_bias_is_learned():
    rel = RelativePositionBias(n_head=1, max_distance=3)
    rel(4).sum().backward()
    assert rel.table.grad is not None and rel.table.grad.abs().sum() > 0


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("n_buckets", "max_distance"), [(32, 128), (16, 64), (8, 20)])
def test_t5_bucket_equals_hugging_faces_t5(bidirectional, n_buckets, max_distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    offset = torch.arange(-400, 401)[None, :] - torch.arange(3)[:, None]
    want = T5Attention._relative_position_bucket(offset, bidirectional, n_buckets, max_distance)
    got = t5_bucket(offset, bidirectional, n_buckets, max_distance)
    assert torch.equal(got, want), f"buckets differ at offsets {offset[got != want][:10].tolist()}"


def test_t5_buckets_are_exact_near_zero_and_logarithmic_beyond():
    offset = -torch.arange(0, 300)  # keys before the query, causal
    bucket = t5_bucket(offset, bidirectional=False)
    assert bucket[:16].tolist() == list(range(16)), "one bucket per distance below 16"
    assert bucket[128:].eq(31).all(), "every distance from 128 on shares the last bucket"
    widths = torch.bincount(bucket[:128])[16:]  # distances 16 … 127 in each far bucket
    assert widths.sum() == 128 - 16 and widths[-1] >= 4 * widths[0], (
        f"the far buckets should widen geometrically: {widths.tolist()}")
