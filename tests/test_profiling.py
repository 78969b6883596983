"""lmbook.profiling.allocated_bytes: new tensors count their storage once; views and in-place results nothing."""

import torch

from lmbook.profiling import allocated_bytes


def test_counts_new_tensors_and_not_views_or_in_place_results():
    x = torch.randn(100, 50)
    assert allocated_bytes(lambda: torch.zeros(1000)) == 4000
    assert allocated_bytes(lambda: x.T @ x) == 50 * 50 * 4
    assert allocated_bytes(lambda: x.T) == 0
    assert allocated_bytes(lambda: x.mul_(1.0)) == 0
    assert allocated_bytes(lambda: (x + 1, x.double())) == 100 * 50 * (4 + 8)


def test_attention_scores_grow_with_the_square_of_the_length():
    q = torch.randn(1, 256, 8)
    small = allocated_bytes(lambda: torch.softmax(q @ q.transpose(1, 2), -1))
    q = torch.randn(1, 512, 8)
    large = allocated_bytes(lambda: torch.softmax(q @ q.transpose(1, 2), -1))
    assert small == 2 * 256 * 256 * 4 and large == 4 * small
