"""Task 3 of exercise 7: the ALiBi bias."""

from __future__ import annotations

import torch

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_tensor_mismatch
from ..common import NEG_INF
from .shared import FORBIDDEN


def _alibi_case(n_head: int, n: int):
    def make(g, device):
        return ((n_head, n), {})
    return make


def _paper_slopes(n_head: int) -> list[float]:
    def geometric(n):  # 2^(-8/n), 2^(-16/n), …, 2^(-8)
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    m = 1
    while m * 2 <= n_head:
        m *= 2
    return geometric(m) + geometric(2 * m)[0::2][: n_head - m]


def _alibi_ref(n_head, n):
    slopes = _paper_slopes(n_head)
    out = torch.full((n_head, n, n), NEG_INF, dtype=torch.float64)
    for h in range(n_head):
        for i in range(n):
            for j in range(i + 1):
                out[h, i, j] = -slopes[h] * (i - j)
    return out


def _alibi_with(mistake: str):
    def fn(n_head, n):
        if mistake == "power_of_two_formula":
            slopes = [2.0 ** (-8.0 * (h + 1) / n_head) for h in range(n_head)]
        elif mistake == "halving":
            slopes = [2.0 ** -(h + 1) for h in range(n_head)]
        else:
            slopes = _paper_slopes(n_head)
        if mistake == "reversed":
            slopes = slopes[::-1]
        m = torch.tensor(slopes, dtype=torch.float64)[:, None, None]
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        distance = (i - j).double()
        bias = m * distance if mistake == "sign" else -m * distance
        if mistake == "symmetric":  # -m |i - j| everywhere, no mask
            return -m * distance.abs()
        if mistake == "no_mask":
            return bias.expand(n_head, n, n).clone()
        if mistake == "future_zero":
            return bias.masked_fill(j > i, 0.0)
        return bias.masked_fill(j > i, NEG_INF)
    return fn


def _alibi_compare(out, ref):
    if isinstance(out, torch.Tensor) and tuple(out.shape) == tuple(ref.shape) and out.is_floating_point():
        future = torch.isinf(ref)
        o = out.detach().cpu()
        if future.any() and not (o[future] == NEG_INF).all():
            return ("the future keys (j > i) must get -inf, so that the softmax gives them weight exactly 0: "
                    f"you returned {float(o[future & ~(o == NEG_INF)][0]):.6g} there")
    return describe_tensor_mismatch(out, ref, rtol=1e-5, atol=1e-6, dim=None)


ALIBI = Check(
    task="alibi_bias",
    what="(n_head, n, n): -m_h (i - j) for j ≤ i, -inf for j > i, with the ALiBi paper's slopes m_h",
    reference=_alibi_ref,
    compare=_alibi_compare,
    cases=[Case("8 heads, n=5", _alibi_case(8, 5)), Case("6 heads (not a power of two), n=4", _alibi_case(6, 4))],
    hidden_cases=[Case("1 head (slope 2^-8), n=4", _alibi_case(1, 4)),
                  Case("4 heads, n=3", _alibi_case(4, 3)),
                  Case("12 heads (not a power of two), n=3", _alibi_case(12, 3)),
                  Case("3 heads, n=4", _alibi_case(3, 4)),
                  Case("a single position, n=1, 2 heads", _alibi_case(2, 1)),
                  Case("16 heads, n=9", _alibi_case(16, 9)),
                  Case("5 heads, n=12", _alibi_case(5, 12))],
    mutants=[
        Mutant(_alibi_with("power_of_two_formula"), "used 2^(-8(h+1)/n) for every number of heads: that formula is "
                                                    "the paper's only when n_head is a power of two; otherwise take "
                                                    "the slopes of the largest power of two m below n_head, then "
                                                    "every other slope of 2m for the heads left"),
        Mutant(_alibi_with("halving"), "used the slopes 1/2, 1/4, 1/8, … for any number of heads: they are "
                                       "2^(-8/n), 2^(-16/n), …, 2^(-8), which is 1/2, 1/4, … only for 8 heads"),
        Mutant(_alibi_with("reversed"), "gave the heads their slopes in reverse order: head 0 has the steepest "
                                        "slope, 2^(-8/n)"),
        Mutant(_alibi_with("sign"), "added +m (i - j): the bias is a penalty, −m_h (i − j), so that far keys get "
                                    "lower scores"),
        Mutant(_alibi_with("symmetric"), "used −m |i − j| for every key: in a causal model the future keys (j > i) "
                                         "get -inf"),
        Mutant(_alibi_with("no_mask"), "left the future unmasked: keys j > i get -inf"),
        Mutant(_alibi_with("future_zero"), "put 0 at the future keys: adding 0 leaves them visible; they get -inf"),
    ],
    **FORBIDDEN,
)
