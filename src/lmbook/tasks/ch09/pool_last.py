"""Task 5 of exercise 9: pooling at the last real token."""

from __future__ import annotations

import torch

from ... import gpt as _course_gpt
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_tensor_mismatch
from ...grading.reproduce import sized
from ..common import fit_lengths, in_dtype, lengths_of
from ..common import randn as _randn
from .shared import ATTRS, MODULES

_G = _course_gpt


def _pool_case(B: int, n: int, d: int, lengths=None, dtype=torch.float32):
    def make(g, device):
        lens = lengths_of(B, n, g, lengths)
        h = _randn((B, n, d), g, device)
        pad = (torch.arange(n).unsqueeze(0) >= lens.unsqueeze(1)).to(device)
        h = torch.where(pad.unsqueeze(-1), 50.0 + 10.0 * h, h)  # made-up large states at padding
        return ((in_dtype(h, dtype), lens.to(device)), {})
    return make


def _pool_ref(h, lengths):
    idx = (lengths.long() - 1).view(-1, 1, 1).expand(-1, 1, h.shape[-1])
    return h.gather(1, idx).squeeze(1)


def _pool_with(mistake: str):
    def fn(h, lengths):
        B = h.shape[0]
        rows = torch.arange(B, device=h.device)
        if mistake == "last":
            return h[:, -1]
        if mistake == "first":
            return h[:, 0]
        if mistake == "no_minus_one":
            return h[rows, lengths]
        if mistake == "columns":
            return h[:, lengths - 1]
        if mistake == "mean_all":
            return h.mean(1)
        real = (torch.arange(h.shape[1], device=h.device) < lengths[:, None]).to(h.dtype)
        return (h * real[..., None]).sum(1) / real.sum(1, keepdim=True)
    return fn


SHRINK = dict(floors={"B": 1, "n": 1, "d": 1}, fit=fit_lengths)


POOL_LAST = Check(
    task="pool_last",
    what="row b of the output is h[b, lengths[b] − 1], the last real token's state",
    reference=_pool_ref,
    grad_of=(0,),  # h: the classifier's model is fine-tuned through the pooled state
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-6, atol=1e-6, dim=None),
    cases=[sized("batch 3, n=6, lengths (6, 2, 4), d=5", _pool_case, B=3, n=6, d=5, lengths=[6, 2, 4], **SHRINK),
           sized("batch 4, n=5, random lengths, d=8", _pool_case, B=4, n=5, d=8, **SHRINK),
           sized("float64 states, batch 2, n=3, lengths (3, 1), d=2", _pool_case, B=2, n=3, d=2, lengths=[3, 1],
                 dtype=torch.float64, **SHRINK)],
    hidden_cases=[Case("a batch of one, no padding", _pool_case(1, 7, 6, [7])),
                  Case("all but one sequence of length 1", _pool_case(3, 6, 4, [1, 6, 1])),
                  Case("length one everywhere (n=1)", _pool_case(2, 1, 4, [1, 1])),
                  Case("fresh: batch 6, n=9, random lengths", _pool_case(6, 9, 16)),
                  Case("float64 states", _pool_case(3, 5, 8, dtype=torch.float64))],
    mutants=[Mutant(_pool_with("last"), "took the last position, h[:, -1]: in a right-padded batch it is padding; "
                                        "take position lengths[b] − 1 of each row"),
             Mutant(_pool_with("first"), "took the first position ([start]): under causal attention it has seen "
                                         "only itself; the last real token ([extract]) has read the whole input"),
             Mutant(_pool_with("no_minus_one"), "indexed with lengths instead of lengths − 1: the last real token "
                                                "of a sequence of length L is at position L − 1 (position L is "
                                                "padding, or past the end)"),
             Mutant(_pool_with("columns"), "indexed h[:, lengths - 1], which takes every sequence at every length "
                                           "(B, B, d): pair each row with its own position, "
                                           "h[torch.arange(B), lengths - 1]"),
             Mutant(_pool_with("mean_all"), "averaged over all positions, padding included: take the last real "
                                            "token's state"),
             Mutant(_pool_with("mean_real"), "averaged the real positions: GPT reads the last real token's state "
                                             "([extract]), which has attended to all the others")],
    forbidden=(_G.last_token_state, _G.GPTClassifier),
    forbidden_attrs=(*ATTRS, "last_token_state"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)
