"""Checks for exercise 7 (chapter 7: positional information).

The references are written from the formulas with Python's ``math`` and explicit loops, or, for RoPE,
with torch's complex numbers (a rotation of x_2i + i x_2i+1 by e^{i p θ_i}): never the course's answers
in ``lmbook.positions``. Usage in a notebook: ``from lmbook.tasks.ch07 import check``.

Conventions, as in the chapter: θ_i = 10000^(-2i/d) for the pair of dimensions (2i, 2i+1), i = 0 … d/2 - 1;
attention scores are indexed (head, query i, key j); a query is at the end of the keys when n_q < n_k
(its position is i + n_k - n_q), as when new queries attend to a cache.
"""

from __future__ import annotations

import math

import torch

from .. import positions as _course_positions
from ..grading.checks import Case, Check, Mutant, Registry
from ..grading.compare import describe_tensor_mismatch
from .ch05 import COURSE, COURSE_ATTRS
from .common import randn as _randn
from .questions.ch07 import QUESTIONS

BASE = 10000.0
NEG_INF = float("-inf")
_P = _course_positions
FORBIDDEN = dict(
    forbidden=(_P.sinusoidal, _P.rope, _P.alibi_slopes, _P.alibi_bias, _P.RelativePositionBias, _P.shift_matrix,
               _P.frequencies),
    forbidden_attrs=(*COURSE_ATTRS, "positions", "sinusoidal", "rope", "alibi_slopes", "alibi_bias",
                     "RelativePositionBias", "shift_matrix"),
    forbidden_modules=(*COURSE, "lmbook.positions"),
)


def _theta(i: int, d: int) -> float:
    return BASE ** (-2 * i / d)


# ----------------------------------------------------------------------------- Task 1: sinusoidal encodings

def _sin_case(n_pos: int, d: int):
    def make(g, device):
        return ((n_pos, d), {})
    return make


def _sin_ref(n_pos, d):
    pe = [[0.0] * d for _ in range(n_pos)]
    for p in range(n_pos):
        for i in range(d // 2):
            pe[p][2 * i] = math.sin(p * _theta(i, d))
            pe[p][2 * i + 1] = math.cos(p * _theta(i, d))
    return torch.tensor(pe, dtype=torch.float64).reshape(n_pos, d)


def _sin_with(mistake: str):
    def fn(n_pos, d):
        p = torch.arange(n_pos, dtype=torch.float64)[:, None]
        i = torch.arange(d // 2, dtype=torch.float64)
        theta = BASE ** (-2 * i / d)
        if mistake == "pair_index":  # 10000^(-i/d): the exponent halved
            theta = BASE ** (-i / d)
        elif mistake == "reciprocal":  # p · 10000^(2i/d)
            theta = BASE ** (2 * i / d)
        elif mistake == "from_one":
            p = p + 1
        angles = p * theta
        if mistake == "per_dimension":  # dimension j's own frequency 10000^(-j/d), sin at even j, cos at odd
            j = torch.arange(d, dtype=torch.float64)
            a = p * BASE ** (-j / d)
            return torch.where(j % 2 == 0, a.sin(), a.cos())
        first, second = (angles.cos(), angles.sin()) if mistake == "swapped" else (angles.sin(), angles.cos())
        if mistake == "halves":
            return torch.cat([first, second], dim=-1)
        return torch.stack([first, second], dim=-1).reshape(n_pos, d)
    return fn


def _sin_compare(out, ref):
    # float32 angles are accurate to about 1e-4 for the positions tested (< 1100)
    return describe_tensor_mismatch(out, ref, rtol=0.0, atol=2e-4, dim=None)


SINUSOIDAL = Check(
    task="sinusoidal_encoding",
    what="PE(p)[2i] = sin(p θ_i), PE(p)[2i+1] = cos(p θ_i), θ_i = 10000^(-2i/d): an (n_pos, d) float tensor",
    reference=_sin_ref,
    compare=_sin_compare,
    cases=[Case("n_pos=6, d=4", _sin_case(6, 4)), Case("n_pos=10, d=8", _sin_case(10, 8))],
    hidden_cases=[Case("one position (p = 0 only)", _sin_case(1, 6)),
                  Case("d = 2 (one pair)", _sin_case(7, 2)),
                  Case("n_pos=50, d=16", _sin_case(50, 16)),
                  Case("far positions, n_pos=1024, d=32", _sin_case(1024, 32)),
                  Case("wide, n_pos=20, d=128", _sin_case(20, 128))],
    mutants=[
        Mutant(_sin_with("swapped"), "put cos at the even dimensions and sin at the odd ones: PE(p)[2i] = "
                                     "sin(p θ_i), PE(p)[2i+1] = cos(p θ_i)"),
        Mutant(_sin_with("halves"), "put all the sines in the first half and all the cosines in the second: here "
                                    "the pairs are interleaved, sin at dimension 2i and cos at 2i+1 beside it"),
        Mutant(_sin_with("pair_index"), "used 10000^(-i/d) for pair i: the exponent is -2i/d (pair i holds "
                                        "dimensions 2i and 2i+1), so the last pair turns at about 10000^(-1)"),
        Mutant(_sin_with("per_dimension"), "gave every dimension j its own frequency 10000^(-j/d): dimensions 2i "
                                           "and 2i+1 share θ_i = 10000^(-2i/d), one sin and one cos of the "
                                           "same angle"),
        Mutant(_sin_with("reciprocal"), "multiplied by 10000^(2i/d): the frequencies shrink with i, "
                                        "θ_i = 10000^(-2i/d) = 1 / 10000^(2i/d)"),
        Mutant(_sin_with("from_one"), "numbered the positions from 1: the first row is position 0, "
                                      "PE(0) = [0, 1, 0, 1, …]"),
    ],
    **FORBIDDEN,
)


# ----------------------------------------------------------------------------- Task 2: RoPE

def _rope_case(shape: tuple[int, ...], positions=None, dtype=torch.float32, start: int = 0):
    def make(g, device):
        x = _randn(shape, g, device).to(dtype)
        T = shape[-2]
        pos = torch.arange(start, start + T) if positions is None else torch.tensor(positions)
        return ((x, pos.to(device)), {})
    return make


def _rope_ref(x, positions):
    d = x.shape[-1]
    theta = torch.tensor([_theta(i, d) for i in range(d // 2)], dtype=torch.float64)
    angles = positions.cpu().double()[:, None] * theta  # (T, d/2)
    z = torch.view_as_complex(x.detach().cpu().double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    turned = z * torch.polar(torch.ones_like(angles), angles)  # (x_2i + i x_2i+1) e^{i p θ_i}
    return torch.view_as_real(turned).reshape(x.shape).to(x.dtype)


def _rope_with(mistake: str):
    def fn(x, positions):
        T, d = x.shape[-2], x.shape[-1]
        i = torch.arange(d // 2, dtype=torch.float64, device=x.device)
        theta = BASE ** (-i / d) if mistake == "per_dimension_exponent" else BASE ** (-2 * i / d)
        pos = torch.arange(T, device=x.device) if mistake == "ignored_positions" else positions
        angles = pos.double()[:, None] * theta
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        if mistake == "backwards":
            sin = -sin
        if mistake == "wrong_axis":  # (B, T, h, d) code run on (B, h, T, d): dim -3 taken for the positions
            angles = torch.arange(x.shape[-3], device=x.device).double()[:, None, None] * theta
            cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        if mistake == "half_split":
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
        else:
            x1, x2 = x[..., 0::2], x[..., 1::2]
        if mistake == "sin_cos_swapped":
            cos, sin = sin, cos
        r1, r2 = x1 * cos - x2 * sin, x1 * sin + x2 * cos
        if mistake == "half_split":
            return torch.cat([r1, r2], dim=-1)
        return torch.stack([r1, r2], dim=-1).flatten(-2)
    return fn


ROPE = Check(
    task="apply_rope",
    what="each pair (x_2i, x_2i+1) of the vector at position p turned by the angle p θ_i, θ_i = 10000^(-2i/d)",
    reference=_rope_ref,
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=2e-4, dim=None),
    cases=[Case("(batch 1, 2 heads, T=5, d=4), positions 0 … 4", _rope_case((1, 2, 5, 4))),
           Case("(batch 2, 3 heads, T=6, d=8), positions 3 … 8", _rope_case((2, 3, 6, 8), start=3))],
    hidden_cases=[Case("a single position (T=1), positions [0]", _rope_case((2, 2, 1, 6))),
                  Case("one position that is not 0 (the newest token of a cache), positions [9]",
                       _rope_case((1, 2, 1, 8), start=9)),
                  Case("positions 12 … 16 (queries after a cache of 12)", _rope_case((2, 2, 5, 8), start=12)),
                  Case("positions in no order, with repeats", _rope_case((1, 1, 6, 4), positions=[5, 0, 3, 3, 9, 1])),
                  Case("d = 2 (one pair)", _rope_case((2, 1, 7, 2))),
                  Case("a 3-d input (batch, T, d), odd T=7", _rope_case((3, 7, 8))),
                  Case("float64 inputs", _rope_case((2, 2, 6, 16), dtype=torch.float64)),
                  Case("far positions 1000 … 1005", _rope_case((1, 2, 6, 8), start=1000)),
                  Case("batch 4, 4 heads, T=10, d=32", _rope_case((4, 4, 10, 32)))],
    mutants=[
        Mutant(_rope_with("half_split"), "paired dimension i with i + d/2 (the half-split layout of GPT-NeoX and "
                                         "Llama): this task pairs neighbours, (2i, 2i+1), as the RoPE paper does"),
        Mutant(_rope_with("backwards"), "turned the pairs the wrong way (by -p θ_i): "
                                        "x'_2i = x_2i cos − x_2i+1 sin, x'_2i+1 = x_2i sin + x_2i+1 cos"),
        Mutant(_rope_with("sin_cos_swapped"), "swapped cos and sin: x'_2i = x_2i cos(p θ_i) − x_2i+1 sin(p θ_i)"),
        Mutant(_rope_with("per_dimension_exponent"), "used θ_i = 10000^(-i/d): pair i turns at 10000^(-2i/d)"),
        Mutant(_rope_with("ignored_positions"), "used 0 … T-1 instead of the positions given: turn each row by its "
                                                "own position, positions[t]"),
        Mutant(_rope_with("wrong_axis"), "turned each vector by its index along dim −3 (the heads, for a "
                                         "(batch, heads, T, d) input) instead of its position along dim −2: code "
                                         "written for (batch, T, heads, d) does this"),
    ],
    keep_dtype=True,
    **FORBIDDEN,
)


# ----------------------------------------------------------------------------- Task 3: ALiBi

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


# ----------------------------------------------------------------------------- Task 4: relative-position bias

def _rel_case(max_distance: int, n_head: int, n_q: int, n_k: int | None = None, dtype=torch.float32):
    def make(g, device):
        table = _randn((2 * max_distance + 1, n_head), g, device).to(dtype)
        return ((table, n_q, n_q if n_k is None else n_k), {})
    return make


def _rel_ref(table, n_q, n_k):
    D = (table.shape[0] - 1) // 2
    t = table.detach().cpu()
    out = torch.empty(table.shape[1], n_q, n_k, dtype=table.dtype)
    for i in range(n_q):
        for j in range(n_k):
            offset = j - (i + n_k - n_q)  # key position minus query position
            out[:, i, j] = t[min(max(offset, -D), D) + D]
    return out


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
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=0.0, atol=0.0, dim=None),
    cases=[Case("D=3, 2 heads, n=5", _rel_case(3, 2, 5)),
           Case("D=2, 3 heads, n_q=3 queries after n_k=6 keys (offsets beyond ±D are clipped)",
                _rel_case(2, 3, 3, 6))],
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

CHECKS = [SINUSOIDAL, ROPE, ALIBI, RELATIVE]
check = Registry(CHECKS + QUESTIONS)
