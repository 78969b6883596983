"""Task 2 of exercise 6: merge_heads."""

from __future__ import annotations

import torch

from ...grading.checks import Case, Check, Mutant
from ...grading.reproduce import sized
from ..common import in_dtype, stored_transposed
from ..common import randn as _randn
from .shared import FORBIDDEN, exact_compare


def _merge_case(B: int, h: int, n: int, d_head: int, dtype=torch.float32, as_split: bool = False):
    def make(g, device):
        x = in_dtype(_randn((B, h, n, d_head), g, device), dtype)
        # as_split: laid out as split_heads returns its heads, positions before heads in memory
        return ((stored_transposed(x, 1, 2) if as_split else x,), {})
    return make


def _merge_ref(x):
    B, h, n, d_head = x.shape
    return x.transpose(1, 2).reshape(B, n, h * d_head)


def _merge_with(mistake: str):
    def fn(x):
        B, h, n, d_head = x.shape
        if mistake == "no_transpose":
            return x.reshape(B, n, h * d_head)
        if mistake == "interleaved":
            return x.permute(0, 2, 3, 1).reshape(B, n, h * d_head)
        if mistake == "not_merged":
            return x.transpose(1, 2)
        if mistake == "mean":
            return x.mean(dim=1)
        raise ValueError(mistake)
    return fn


SMALLEST = {"B": 1, "h": 1, "n": 1, "d_head": 1}


def _merge_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [sized("batch 2, n_head=2, n=5, d_head=3", _merge_case, B=2, h=2, n=5, d_head=3, floors=SMALLEST),
                sized("batch 3, n_head=3, n=4, d_head=4", _merge_case, B=3, h=3, n=4, d_head=4, floors=SMALLEST),
                sized("float64 inputs, batch 2, n_head=2, n=3, d_head=2", _merge_case, B=2, h=2, n=3, d_head=2,
                      dtype=torch.float64, floors=SMALLEST)]
    return [Case("a batch of one, n_head=4, n=7, d_head=2", _merge_case(1, 4, 7, 2)),
            Case("length 1, n_head=3, d_head=2", _merge_case(3, 3, 1, 2)),
            Case("n_head = 1", _merge_case(2, 1, 5, 8)),
            Case("heads of size 1 (d_head = 1)", _merge_case(2, 6, 3, 1)),
            Case("float64 inputs, n_head=4, d_head=4", _merge_case(2, 4, 6, 4, dtype=torch.float64)),
            Case("batch 4, n_head=6, n=9, d_head=4", _merge_case(4, 6, 9, 4)),
            Case("heads as split_heads returns them (not contiguous), n_head=3, n=5, d_head=2",
                 _merge_case(2, 3, 5, 2, as_split=True))]


MERGE_HEADS = Check(
    task="merge_heads",
    what="(B, n_head, n, d_head) → (B, n, n_head·d_head), the inverse of split_heads",
    reference=_merge_ref,
    grad_of=(0,),  # x: multi-head attention is trained through the merge
    compare=exact_compare,
    cases=_merge_cases(hidden=False),
    hidden_cases=_merge_cases(hidden=True),
    mutants=[
        Mutant(_merge_with("no_transpose"), "reshaped (B, n_head, n, d_head) to (B, n, d) without transposing "
                                            "back: swap dims 1 and 2 first, so each position's heads sit side by "
                                            "side, then reshape"),
        Mutant(_merge_with("interleaved"), "interleaved the heads' features (feature j of every head, then "
                                           "feature j + 1): head i's d_head features are one block, at "
                                           "i·d_head … (i+1)·d_head − 1"),
        Mutant(_merge_with("not_merged"), "returned (B, n, n_head, d_head): after the transpose, reshape to "
                                          "(B, n, n_head·d_head)"),
        Mutant(_merge_with("mean"), "averaged the heads: merging concatenates them, each head keeps its own "
                                    "d_head features of the output"),
    ],
    keep_dtype=True,
    **FORBIDDEN,
)
