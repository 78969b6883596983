"""Task 3 of exercise 7: the ALiBi bias."""

from __future__ import annotations

import torch

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_pattern, describe_tensor_mismatch, to_reference
from ...grading.reproduce import sized
from ..common import NEG_INF
from .shared import FORBIDDEN


def _alibi_case(n_head: int, n: int):
    def make(g, device):
        return ((n_head, n), {})
    return make


def _geometric(n: int) -> list[float]:  # 2^(-8/n), 2^(-16/n), …, 2^(-8)
    return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]


def _paper_slopes(n_head: int) -> list[float]:
    m = 1
    while m * 2 <= n_head:
        m *= 2
    return _geometric(m) + _geometric(2 * m)[0::2][: n_head - m]


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
        elif mistake == "next_power":  # the slopes of the next power of two, the first n_head of them
            slopes = _geometric(1 << (n_head - 1).bit_length())[:n_head]
        elif mistake == "first_of_2m":  # m slopes, then the first (not every other) slopes of 2m
            m = 1 << (n_head.bit_length() - 1)
            slopes = _geometric(m) + _geometric(2 * m)[: n_head - m]
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
        o = to_reference(out)
        pattern = describe_pattern(o, ref, rtol=1e-5, atol=1e-6)  # a transpose explains the mask too
        if pattern:
            return pattern
        future = torch.isinf(ref)
        if future.any() and not (o[future] == NEG_INF).all():
            return ("the future keys (j > i) must get -inf, so that the softmax gives them weight exactly 0: "
                    f"you returned {float(o[future & ~(o == NEG_INF)][0]):.6g} there")
        problem = describe_tensor_mismatch(out, ref, rtol=1e-5, atol=1e-6, dim=None)
        return problem and problem + _slopes(o, ref)
    return describe_tensor_mismatch(out, ref, rtol=1e-5, atol=1e-6, dim=None)


def _slopes(out: torch.Tensor, ref: torch.Tensor) -> str:
    """The slopes the answer used, read off where query 1 looks at key 0 (a distance of 1), if they differ."""
    if out.shape[1] < 2 or not torch.isfinite(out[:, 1, 0]).all():
        return ""
    got, want = (-out[:, 1, 0]).tolist(), (-ref[:, 1, 0]).tolist()
    if all(abs(a - b) <= 1e-6 for a, b in zip(got, want, strict=True)):
        return ""
    shown = ", ".join(f"{s:.4g}" for s in got[:16]) + (", …" if len(got) > 16 else "")
    right = ", ".join(f"{s:.4g}" for s in want[:16]) + (", …" if len(want) > 16 else "")
    return f"; your slopes (minus [h, 1, 0]) are [{shown}], the paper's for {len(want)} heads are [{right}]"


SHRINK = {"n_head": 1, "n": 1}


ALIBI = Check(
    task="alibi_bias",
    what="(n_head, n, n): -m_h (i - j) for j ≤ i, -inf for j > i, with the ALiBi paper's slopes m_h",
    reference=_alibi_ref,
    compare=_alibi_compare,
    cases=[sized("8 heads, n=5", _alibi_case, n_head=8, n=5, floors=SHRINK),
           sized("6 heads (not a power of two), n=4", _alibi_case, n_head=6, n=4, floors=SHRINK),
           sized("3 heads (not a power of two), n=3", _alibi_case, n_head=3, n=3, floors=SHRINK)],
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
        Mutant(_alibi_with("next_power"), "took the first n_head slopes of the next power of two (for 6 heads, 6 of "
                                          "the 8 slopes of 8 heads): the paper takes the m slopes of the largest "
                                          "power of two m below n_head, then every other slope of 2m"),
        Mutant(_alibi_with("first_of_2m"), "took the first slopes of 2m for the heads beyond m (2m's 1st, 2nd, …): "
                                           "the paper takes every other one of them, the 1st, 3rd, 5th, …"),
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
