"""Task 1 of exercise 6: split_heads."""

from __future__ import annotations

import torch

from ...grading.checks import Case, Check, Mutant
from ...grading.reproduce import sized
from ..common import in_dtype
from ..common import randn as _randn
from .shared import FORBIDDEN, exact_compare


def _split_case(B: int, n: int, d: int, n_head: int, dtype=torch.float32):
    def make(g, device):
        return ((in_dtype(_randn((B, n, d), g, device), dtype), n_head), {})
    return make


def _split_ref(x, n_head):
    B, n, d = x.shape
    return x.view(B, n, n_head, d // n_head).transpose(1, 2)


def _split_with(mistake: str):
    def fn(x, n_head):
        B, n, d = x.shape
        d_head = d // n_head
        if mistake == "no_transpose":
            return x.view(B, n_head, n, d_head)
        if mistake == "interleaved":
            return x.view(B, n, d_head, n_head).permute(0, 3, 1, 2)
        if mistake == "forgot_transpose":
            return x.view(B, n, n_head, d_head)
        if mistake == "head_size":  # n_head used as the size of a head
            return x.view(B, n, d_head, n_head).transpose(1, 2)
        raise ValueError(mistake)
    return fn


def _split_sized(B: int, n: int, n_head: int, d_head: int, dtype=torch.float32):
    return _split_case(B, n, n_head * d_head, n_head, dtype)


SMALLEST = {"B": 1, "n": 1, "n_head": 1, "d_head": 1}


def _split_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [sized("batch 2, n=5, d=6, n_head=2", _split_sized, B=2, n=5, n_head=2, d_head=3, floors=SMALLEST),
                sized("batch 3, n=4, d=12, n_head=3", _split_sized, B=3, n=4, n_head=3, d_head=4, floors=SMALLEST),
                sized("float64 inputs, batch 2, n=3, d=6, n_head=3", _split_sized, B=2, n=3, n_head=3, d_head=2,
                      dtype=torch.float64, floors=SMALLEST)]
    return [Case("a batch of one, n=7, d=8, n_head=4", _split_case(1, 7, 8, 4)),
            Case("length 1, d=6, n_head=3", _split_case(3, 1, 6, 3)),
            Case("n_head = 1 (one head of size d)", _split_case(2, 5, 8, 1)),
            Case("n_head = d (heads of size 1)", _split_case(2, 3, 6, 6)),
            Case("float64 inputs, d=16, n_head=4", _split_case(2, 6, 16, 4, dtype=torch.float64)),
            Case("batch 4, n=9, d=24, n_head=6", _split_case(4, 9, 24, 6))]


SPLIT_HEADS = Check(
    task="split_heads",
    what="(B, n, d) → (B, n_head, n, d/n_head), head i holding features i·d/h … (i+1)·d/h − 1",
    reference=_split_ref,
    grad_of=(0,),  # x: multi-head attention is trained through the split
    compare=exact_compare,
    cases=_split_cases(hidden=False),
    hidden_cases=_split_cases(hidden=True),
    mutants=[
        Mutant(_split_with("no_transpose"), "reshaped (B, n, d) straight to (B, n_head, n, d_head): that cuts the "
                                            "flattened positions-and-features into pieces, not each vector into "
                                            "heads; view as (B, n, n_head, d_head), then swap dims 1 and 2"),
        Mutant(_split_with("interleaved"), "split the features interleaved (head i got features i, i + n_head, "
                                           "…): head i holds the block of d_head consecutive features starting "
                                           "at i·d_head, so view as (B, n, n_head, d_head)"),
        Mutant(_split_with("forgot_transpose"), "returned (B, n, n_head, d_head): swap dims 1 and 2 so that the "
                                                "heads come before the positions, (B, n_head, n, d_head)"),
        Mutant(_split_with("head_size"), "used n_head as the size of a head: there are n_head heads, each of "
                                         "size d_head = d / n_head"),
    ],
    keep_dtype=True,
    **FORBIDDEN,
)
