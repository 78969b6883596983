"""Task 1 of exercise 4: dot, multiplicative and additive attention scores."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...grading.checks import Case, Check, Mutant
from ..common import NEG_INF
from ..common import randn as _randn
from .inputs import COURSE, COURSE_ATTRS, TORCH_BILINEAR, encoder_states, in_dtype, real_mask_of, scores_compare


def _score_case(kind: str, B: int, T: int, d_s: int, d_h: int, d_a: int = 0, lengths=None, left=False,
                scale: float = 1.0):
    def make(g, device):
        mask = real_mask_of(B, T, g, lengths, left)
        s = _randn((B, d_s), g, device, scale)
        H = encoder_states(B, T, d_h, mask, g, device, scale)
        if kind == "dot":
            weights = ()
        elif kind == "multiplicative":
            weights = (_randn((d_s, d_h), g, device, 1 / math.sqrt(d_h)),)
        else:
            weights = (_randn((d_a, d_h), g, device, 1 / math.sqrt(d_h)), _randn((d_a, d_s), g, device,
                                                                                1 / math.sqrt(d_s)),
                       _randn((d_a,), g, device))
        return ((s, H, mask.to(device), *weights), {})
    return make


def _dot_ref(s, H, mask):
    """One (sequence, position) pair at a time: e_j = s · h_j, or -inf at padding."""
    B, T, _ = H.shape
    e = torch.full((B, T), NEG_INF, dtype=H.dtype)
    for b in range(B):
        for j in range(T):
            if mask[b, j]:
                e[b, j] = torch.dot(s[b], H[b, j])
    return e


def _multiplicative_ref(s, H, mask, W):
    B, T, _ = H.shape
    e = F.bilinear(s.unsqueeze(1).expand(B, T, -1), H, W.unsqueeze(0)).squeeze(-1)  # sᵀ W h_j
    return e.masked_fill(~mask.bool(), NEG_INF)


def additive_ref(s, H, mask, W1, W2, v):
    B, T, _ = H.shape
    e = torch.full((B, T), NEG_INF, dtype=H.dtype)
    for b in range(B):
        for j in range(T):
            if mask[b, j]:
                e[b, j] = torch.dot(v, torch.tanh(torch.mv(W1, H[b, j]) + torch.mv(W2, s[b])))
    return e


def by_length(mask):
    return torch.arange(mask.shape[1], device=mask.device) < mask.sum(1, keepdim=True)


def _fill(e, mask, how):
    mask = mask.bool()
    if how == "ignore":
        return e
    if how == "invert":
        return e.masked_fill(mask, NEG_INF)
    if how == "big":
        return e.masked_fill(~mask, -1e9)
    if how == "zero":
        return e * mask
    if how == "lengths":  # the first mask.sum() positions taken as the real ones
        return e.masked_fill(~by_length(mask), NEG_INF)
    return e.masked_fill(~mask, NEG_INF)


def _dot_with(mask="inf", scaled=False, squeeze=False):
    def fn(s, H, m):
        e = torch.bmm(H, s.unsqueeze(-1)).squeeze() if squeeze else torch.einsum("bd,btd->bt", s, H)
        return _fill(e / math.sqrt(s.shape[-1]) if scaled else e, m, mask)
    return fn


def _multiplicative_with(mask="inf", transpose=False, no_W=False, scaled=False, squeeze=False):
    def fn(s, H, m, W):
        q = s if no_W else s @ (W.T if transpose else W)
        e = torch.bmm(H, q.unsqueeze(-1)).squeeze() if squeeze else torch.einsum("bd,btd->bt", q, H)
        return _fill(e / math.sqrt(H.shape[-1]) if scaled else e, m, mask)
    return fn


def additive_with(mask="inf", act=torch.tanh, swap=False, use_v=True, tanh_after=False, unsqueeze=True):
    def fn(s, H, m, W1, W2, v):
        if not unsqueeze:
            pre = H @ W1.T + s @ W2.T
        elif swap:
            pre = H @ W2.T + (s @ W1.T).unsqueeze(1)
        else:
            pre = H @ W1.T + (s @ W2.T).unsqueeze(1)
        if tanh_after:
            e = torch.tanh(pre @ v)
        else:
            e = act(pre) @ v if use_v else act(pre).sum(-1)
        return _fill(e, m, mask)
    return fn


LENGTHS = ("took the first mask.sum() positions of each sequence as the real ones: padding can also be on the "
           "left; use the mask itself, position by position")
SQUEEZE = ("called .squeeze() without a dimension: it also drops the batch dimension of a batch of one (or the "
           "position dimension when T = 1); squeeze only the dimension you added, e.g. .squeeze(-1)")
MASK_MUTANTS = {
    "ignore": "gave padded positions an ordinary score: set e_j = -inf where mask is False",
    "invert": "inverted the mask: mask is True at real positions, so -inf goes where it is False",
    "big": "filled padded positions with a large negative number; this exercise asks for exactly -inf",
    "zero": "set padded scores to 0 (multiplied by the mask): 0 is an ordinary score, softmax would still give "
            "those positions weight; put -inf there",
    "lengths": LENGTHS,
}


def _mask_mutants(builder) -> list[Mutant]:
    return [Mutant(builder(mask=how), text) for how, text in MASK_MUTANTS.items()]


def _score_cases(kind: str, hidden: bool) -> list[Case]:
    if kind == "dot":
        dims = [(4, 4, 0), (6, 6, 0), (3, 3, 0), (16, 16, 0), (5, 5, 0)]
    elif kind == "multiplicative":  # square W in some cases, so that W and Wᵀ can both be applied
        dims = [(3, 5, 0), (4, 4, 0), (6, 2, 0), (8, 8, 0), (5, 7, 0)]
    else:  # d_s = d_h in some cases, so that W1 and W2 can be swapped
        dims = [(3, 5, 4), (4, 4, 6), (2, 6, 3), (8, 8, 5), (6, 4, 10)]
    (s0, h0, a0), (s1, h1, a1), (s2, h2, a2), (s3, h3, a3), (s4, h4, a4) = dims
    if not hidden:
        return [Case(f"batch 3, lengths (5, 2, 4), d_s={s0}, d_h={h0}",
                     _score_case(kind, 3, 5, s0, h0, a0, lengths=[5, 2, 4])),
                Case(f"no padding, batch 2, d_s={s1}, d_h={h1}", _score_case(kind, 2, 4, s1, h1, a1, lengths=[4, 4]))]
    return [Case(f"a batch of one without padding, d_s={s2}, d_h={h2}",
                 _score_case(kind, 1, 6, s2, h2, a2, lengths=[6])),
            Case(f"sequences of length 1 among longer ones, d_s={s3}, d_h={h3}",
                 _score_case(kind, 4, 7, s3, h3, a3, lengths=[1, 7, 1, 3])),
            Case(f"padding on the left, d_s={s4}, d_h={h4}",
                 _score_case(kind, 3, 6, s4, h4, a4, lengths=[2, 6, 4], left=True)),
            Case(f"large states (scores in the hundreds), d_s={s3}, d_h={h3}",
                 _score_case(kind, 3, 5, s3, h3, a3, lengths=[5, 3, 2], scale=6.0)),
            Case(f"batch 8, random lengths up to 12, d_s={s2}, d_h={h2}", _score_case(kind, 8, 12, s2, h2, a2)),
            Case(f"batch 5, random lengths up to 9, d_s={s1}, d_h={h1}", _score_case(kind, 5, 9, s1, h1, a1)),
            # T = 1: a .squeeze() that drops the position dimension breaks the shape
            Case(f"source length 1, batch 3, d_s={s0}, d_h={h0}",
                 _score_case(kind, 3, 1, s0, h0, a0, lengths=[1, 1, 1])),
            Case(f"all but one position padded, padding on the left, d_s={s4}, d_h={h4}",
                 _score_case(kind, 4, 7, s4, h4, a4, lengths=[1, 7, 1, 1], left=True)),
            Case(f"float64 inputs, d_s={s1}, d_h={h1}", in_dtype(torch.float64, _score_case(kind, 3, 6, s1, h1, a1)))]


DOT = Check(
    task="dot_scores",
    what="e_j = sᵀ h_j at real positions, -inf at padding",
    reference=_dot_ref,
    grad_of=(0, 1),  # s and H: the decoder and encoder are trained through the scores
    compare=scores_compare,
    keep_dtype=True,
    cases=_score_cases("dot", hidden=False),
    hidden_cases=_score_cases("dot", hidden=True),
    mutants=[*_mask_mutants(_dot_with),
             Mutant(_dot_with(scaled=True), "divided by sqrt(d): that is the scaled dot score; this task asks for "
                                            "the plain dot product sᵀ h_j"),
             Mutant(_dot_with(squeeze=True), SQUEEZE)],
    forbidden_attrs=COURSE_ATTRS,
    forbidden_modules=COURSE,
)

MULTIPLICATIVE = Check(
    task="multiplicative_scores",
    what="e_j = sᵀ W h_j at real positions, -inf at padding",
    reference=_multiplicative_ref,
    grad_of=(0, 1, 3),  # s, H and W: trained through the scores
    compare=scores_compare,
    keep_dtype=True,
    cases=_score_cases("multiplicative", hidden=False),
    hidden_cases=_score_cases("multiplicative", hidden=True),
    mutants=[Mutant(_multiplicative_with(transpose=True), "used Wᵀ instead of W: W has shape (d_s, d_h) and the "
                                                          "score is sᵀ W h_j, i.e. (s @ W) · h_j"),
             Mutant(_multiplicative_with(no_W=True), "left out W: sᵀ h_j is the dot score; this one is sᵀ W h_j"),
             Mutant(_multiplicative_with(scaled=True), "divided by sqrt(d): the multiplicative score has no scaling"),
             Mutant(_multiplicative_with(squeeze=True), SQUEEZE),
             *_mask_mutants(_multiplicative_with)],
    forbidden=TORCH_BILINEAR,
    forbidden_attrs=(*COURSE_ATTRS, "bilinear", "Bilinear"),
    forbidden_modules=COURSE,
)

ADDITIVE = Check(
    task="additive_scores",
    what="e_j = vᵀ tanh(W_1 h_j + W_2 s) at real positions, -inf at padding",
    reference=additive_ref,
    grad_of=(0, 1, 3, 4, 5),  # s, H, W1, W2 and v: trained through the scores
    compare=scores_compare,
    keep_dtype=True,
    cases=_score_cases("additive", hidden=False),
    hidden_cases=_score_cases("additive", hidden=True),
    mutants=[Mutant(additive_with(act=lambda z: z), "left out the tanh: e_j = vᵀ tanh(W_1 h_j + W_2 s)"),
             Mutant(additive_with(swap=True), "swapped W_1 and W_2: W_1 multiplies the encoder state h_j, "
                                               "W_2 the decoder state s"),
             Mutant(additive_with(use_v=False), "summed the entries of tanh(W_1 h_j + W_2 s); take its dot "
                                                 "product with v instead"),
             Mutant(additive_with(tanh_after=True), "applied tanh after v: e_j = vᵀ tanh(W_1 h_j + W_2 s), "
                                                     "the tanh is inside"),
             Mutant(additive_with(act=torch.sigmoid), "used a sigmoid instead of tanh: "
                                                       "e_j = vᵀ tanh(W_1 h_j + W_2 s)"),
             Mutant(additive_with(unsqueeze=False), "added W_2 s, shape (B, d_a), to W_1 h_j, shape (B, T, d_a), "
                                                     "without .unsqueeze(1): it lines up with the positions, not the "
                                                     "batch; add (s @ W2.T).unsqueeze(1)"),
             *_mask_mutants(additive_with)],
    forbidden_attrs=COURSE_ATTRS,
    forbidden_modules=COURSE,
)
