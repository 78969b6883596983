"""Task 4 of exercise 7: the relative-position bias."""

from __future__ import annotations

import torch

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_tensor_mismatch
from ...grading.reproduce import sized
from ..common import in_dtype
from ..common import randn as _randn
from .shared import FORBIDDEN


def _rel_case(max_distance: int, n_head: int, n_q: int, n_k: int | None = None, dtype=torch.float32):
    def make(g, device):
        # a learned parameter: it tracks gradients, and the answer must pass them on
        table = in_dtype(_randn((2 * max_distance + 1, n_head), g, device), dtype).requires_grad_(True)
        return ((table, n_q, n_q if n_k is None else n_k), {})
    return make


def _fit(p: dict) -> dict:
    p["n_k"] = max(p["n_k"], p["n_q"])  # the queries are the newest n_q of the n_k positions
    return p


SHRINK = dict(floors={"max_distance": 0, "n_head": 1, "n_q": 1, "n_k": 1}, fit=_fit)


def _rel_ref(table, n_q, n_k):
    D = (table.shape[0] - 1) // 2
    query = torch.arange(n_q, device=table.device)[:, None] + (n_k - n_q)  # the queries are the newest positions
    key = torch.arange(n_k, device=table.device)[None, :]
    # b[h, i, j] = table[clip(j - i, -D, D) + D, h]: an index into the table, so the gradient reaches its rows
    return table[(key - query).clamp(-D, D) + D].permute(2, 0, 1)


def _rel_with(mistake: str):
    def fn(table, n_q, n_k):
        D = (table.shape[0] - 1) // 2
        shift = 0 if mistake == "aligned_at_start" else n_k - n_q
        i = torch.arange(n_q, device=table.device)[:, None] + shift
        j = torch.arange(n_k, device=table.device)[None, :]
        offset = i - j if mistake == "sign" else j - i
        if mistake == "no_clip":
            index = offset + D  # out of range beyond D: an IndexError, or a wrap-around for negatives
        elif mistake == "no_shift":
            index = offset.clamp(-D, D)  # negative offsets read the table from its end
        else:
            index = offset.clamp(-D, D) + D
        out = table[index]  # (n_q, n_k, n_head)
        if mistake == "not_permuted":
            return out
        if mistake == "transposed":
            return out.permute(2, 1, 0)
        return out.permute(2, 0, 1)
    return fn


RELATIVE = Check(
    task="relative_position_bias",
    what="(n_head, n_q, n_k): out[h, i, j] = table[clip(j − i', −D, D) + D, h], query i at position "
         "i' = i + n_k − n_q",
    reference=_rel_ref,
    grad_of=(0,),  # the table is learned (T5): trained through the bias
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=0.0, atol=0.0, dim=None),
    cases=[sized("D=3, 2 heads, n=5", _rel_case, max_distance=3, n_head=2, n_q=5, n_k=5, **SHRINK),
           sized("D=2, 3 heads, n_q=3 queries after n_k=6 keys (offsets beyond ±D are clipped)", _rel_case,
                 max_distance=2, n_head=3, n_q=3, n_k=6, **SHRINK),
           sized("float64 table, D=1, 2 heads, n_q=2, n_k=4", _rel_case, max_distance=1, n_head=2, n_q=2, n_k=4,
                 dtype=torch.float64, **SHRINK)],
    hidden_cases=[Case("a single position, D=2, 2 heads", _rel_case(2, 2, 1)),
                  Case("one head, D=4, n=7", _rel_case(4, 1, 7)),
                  Case("D=0 (one bias for every offset), 2 heads, n=4", _rel_case(0, 2, 4)),
                  Case("far beyond the table, D=2, n=20", _rel_case(2, 3, 20)),
                  Case("new queries after a cache: n_q=2, n_k=7, D=3", _rel_case(3, 2, 2, 7)),
                  Case("n_q=1 (the newest token), n_k=9, D=4", _rel_case(4, 4, 1, 9)),
                  Case("float64 table, D=5, n=8", _rel_case(5, 2, 8, dtype=torch.float64)),
                  Case("8 heads, D=6, n=10", _rel_case(6, 8, 10))],
    mutants=[
        Mutant(_rel_with("sign"), "used the offset i − j: the table is indexed by j − i (key minus query), so a key "
                                  "k places back reads row D − k"),
        Mutant(_rel_with("no_clip"), "did not clip the offsets: offsets beyond ±D share the row of ±D "
                                     "(clamp(j − i, −D, D) + D)"),
        Mutant(_rel_with("no_shift"), "did not add D to the clipped offset: row 0 of the table is offset −D, "
                                      "row D is offset 0"),
        Mutant(_rel_with("not_permuted"), "returned (n_q, n_k, n_head): put the heads first, (n_head, n_q, n_k)"),
        Mutant(_rel_with("transposed"), "returned (n_head, n_k, n_q): the queries index dim 1, the keys dim 2"),
        Mutant(_rel_with("aligned_at_start"), "put the queries at positions 0 … n_q − 1 when n_q < n_k: they are "
                                              "the newest tokens, at positions n_k − n_q … n_k − 1"),
    ],
    keep_dtype=True,
    **FORBIDDEN,
)
