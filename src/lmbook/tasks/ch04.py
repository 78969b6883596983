"""Checks for exercise 4 (chapter 4: attention).

References are plain loops over one (query, key) pair at a time, torch's own ops
given the student's weights (``F.bilinear``, ``F.scaled_dot_product_attention``,
``nn.GRUCell``, ``F.embedding``, ``F.linear``), never the course's answers in
``lmbook.attention`` or ``lmbook.seq2seq``. Usage in a notebook:
``from lmbook.tasks.ch04 import check``.

Shapes, as in the chapter: a decoder state s (B, d_s) queries the encoder states
H (B, T, d_h); ``mask`` (B, T) is True at real source positions. A score at a
padded position is exactly -inf, and its attention weight exactly 0.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..grading.checks import Case, Check, Mutant, Registry
from ..grading.compare import compare_parts, describe_tensor_mismatch, describe_value, to_reference
from .common import TORCH_RNN_NAMES, load_weights
from .common import randn as _randn

COURSE = ("lmbook.attention", "lmbook.seq2seq")
# `lmbook.attention.attend` reached through the package: flag the attribute on the way
COURSE_ATTRS = ("attention", "seq2seq")
TORCH_ATTENTION = (F.scaled_dot_product_attention, nn.MultiheadAttention, F.multi_head_attention_forward)
TORCH_ATTENTION_ATTRS = ("scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward")
TORCH_BILINEAR = (F.bilinear, nn.Bilinear, torch.bilinear)
NEG_INF = float("-inf")


def _pos(flat_index: int, shape) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_index), tuple(shape)))


def _scores_compare(out, ref) -> str | None:
    """(B, T) scores: exactly -inf where ``ref`` is (padding), close to ``ref`` elsewhere."""
    if not isinstance(out, torch.Tensor):
        return f"returned {describe_value(out)}, expected a (B, T) torch.Tensor of scores"
    if tuple(out.shape) != tuple(ref.shape):
        return f"returned shape {tuple(out.shape)}, expected {tuple(ref.shape)}: one score per (sequence, position)"
    out = to_reference(out)
    if not out.is_floating_point():
        return f"returned dtype {out.dtype}, expected floating point scores"
    pad = torch.isneginf(ref)
    wrong_pad = pad & ~torch.isneginf(out)
    if wrong_pad.any():
        b, j = _pos(int(wrong_pad.flatten().nonzero()[0]), ref.shape)
        got = float(out[b, j])
        if math.isfinite(got) and got < -1e3:
            return (f"position {j} of sequence {b} is padding and you gave it {got:.4g}: return exactly -inf "
                    "(float('-inf')) at padded positions, not a large negative number")
        return (f"position {j} of sequence {b} is padding (mask False): its score must be -inf, "
                f"you returned {got:.6g}; {int(wrong_pad.sum())} padded position(s) in all")
    wrong_real = ~pad & ~torch.isfinite(out)
    if wrong_real.any():
        b, j = _pos(int(wrong_real.flatten().nonzero()[0]), ref.shape)
        return (f"position {j} of sequence {b} is a real position (mask True), but you returned {float(out[b, j])} "
                f"there (expected {float(ref[b, j]):.6g}); {int(wrong_real.sum())} such position(s) in all")
    # float32 sums of large products: allow an error relative to the largest score
    scale = float(ref[~pad].abs().max()) if (~pad).any() else 1.0
    problem = describe_tensor_mismatch(out.masked_fill(pad, 0.0), ref.masked_fill(pad, 0.0), rtol=1e-4,
                                       atol=1e-5 * max(1.0, scale), dim=None)
    return None if problem is None else f"at real positions, {problem}"


# ----------------------------------------------------------------------------- inputs

def _mask(B: int, T: int, g: torch.Generator, lengths=None, left: bool = False) -> torch.Tensor:
    """(B, T) bool, True at real positions; the longest sequence fills the batch. ``left``: padding first."""
    lens = torch.tensor(lengths) if lengths is not None else torch.randint(1, T + 1, (B,), generator=g)
    if lengths is None:
        lens[int(torch.randint(0, B, (1,), generator=g))] = T
    mask = torch.arange(T).unsqueeze(0) < lens.unsqueeze(1)
    return mask.flip(1) if left else mask


def _states(B: int, T: int, d_h: int, mask: torch.Tensor, g: torch.Generator, device, scale: float = 1.0):
    """Encoder states; padded positions hold large made-up states: they must not matter."""
    H = _randn((B, T, d_h), g, device, scale)
    garbage = _randn((B, T, d_h), g, device, 5.0).abs() + 2.0
    return torch.where(mask.to(device).unsqueeze(-1), H, garbage)


def _in(dtype, make):
    """``make``'s inputs with every floating tensor in ``dtype`` (the statement: the result keeps the inputs' dtype)."""
    def made(g, device):
        args, kwargs = make(g, device)
        return tuple(a.to(dtype) if a.is_floating_point() else a for a in args), kwargs
    return made


# ----------------------------------------------------------------------------- Task 1: scores

def _score_case(kind: str, B: int, T: int, d_s: int, d_h: int, d_a: int = 0, lengths=None, left=False,
                scale: float = 1.0):
    def make(g, device):
        mask = _mask(B, T, g, lengths, left)
        s = _randn((B, d_s), g, device, scale)
        H = _states(B, T, d_h, mask, g, device, scale)
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


def _additive_ref(s, H, mask, W1, W2, v):
    B, T, _ = H.shape
    e = torch.full((B, T), NEG_INF, dtype=H.dtype)
    for b in range(B):
        for j in range(T):
            if mask[b, j]:
                e[b, j] = torch.dot(v, torch.tanh(torch.mv(W1, H[b, j]) + torch.mv(W2, s[b])))
    return e


def _by_length(mask):
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
        return e.masked_fill(~_by_length(mask), NEG_INF)
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


def _additive_with(mask="inf", act=torch.tanh, swap=False, use_v=True, tanh_after=False, unsqueeze=True):
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
            Case(f"float64 inputs, d_s={s1}, d_h={h1}", _in(torch.float64, _score_case(kind, 3, 6, s1, h1, a1)))]


DOT = Check(
    task="dot_scores",
    what="e_j = sᵀ h_j at real positions, -inf at padding",
    reference=_dot_ref,
    compare=_scores_compare,
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
    compare=_scores_compare,
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
    reference=_additive_ref,
    compare=_scores_compare,
    keep_dtype=True,
    cases=_score_cases("additive", hidden=False),
    hidden_cases=_score_cases("additive", hidden=True),
    mutants=[Mutant(_additive_with(act=lambda z: z), "left out the tanh: e_j = vᵀ tanh(W_1 h_j + W_2 s)"),
             Mutant(_additive_with(swap=True), "swapped W_1 and W_2: W_1 multiplies the encoder state h_j, "
                                               "W_2 the decoder state s"),
             Mutant(_additive_with(use_v=False), "summed the entries of tanh(W_1 h_j + W_2 s); take its dot "
                                                 "product with v instead"),
             Mutant(_additive_with(tanh_after=True), "applied tanh after v: e_j = vᵀ tanh(W_1 h_j + W_2 s), "
                                                     "the tanh is inside"),
             Mutant(_additive_with(act=torch.sigmoid), "used a sigmoid instead of tanh: "
                                                       "e_j = vᵀ tanh(W_1 h_j + W_2 s)"),
             Mutant(_additive_with(unsqueeze=False), "added W_2 s, shape (B, d_a), to W_1 h_j, shape (B, T, d_a), "
                                                     "without .unsqueeze(1): it lines up with the positions, not the "
                                                     "batch; add (s @ W2.T).unsqueeze(1)"),
             *_mask_mutants(_additive_with)],
    forbidden_attrs=COURSE_ATTRS,
    forbidden_modules=COURSE,
)


# ----------------------------------------------------------------------------- Task 2: weights and context

def _attend_case(B: int, T: int, d_h: int, lengths=None, left=False, pad="large", scale=2.0, offset=0.0):
    """``offset``: a number, or one per row (row maxima hundreds apart); ``pad``: "-inf", "large" (a little above
    the real scores) or "far" (hundreds above them: exp of the real scores minus the padded maximum underflows)."""
    def make(g, device):
        mask = _mask(B, T, g, lengths, left)
        shift = torch.as_tensor(offset, dtype=torch.float32).reshape(-1, 1).to(device)
        scores = _randn((B, T), g, device, scale) + shift
        if pad == "-inf":  # as Task 1 returns them
            pad_scores = torch.full((B, T), NEG_INF, device=device)
        else:  # large made-up scores: a softmax over them would put all the weight on padding
            above = 300.0 if pad == "far" else 3.0
            pad_scores = _randn((B, T), g, device, 2.0).abs() + scores.abs().amax() + above
        scores = torch.where(mask.to(device), scores, pad_scores)
        H = _states(B, T, d_h, mask, g, device)
        return ((scores, H, mask.to(device)), {})
    return make


def _attend_ref(scores, H, mask):
    """torch's scaled_dot_product_attention with the scores as the query, the identity as the keys, scale 1.

    q Kᵀ with K = I is q itself, so softmax(q Kᵀ + mask) V = softmax(e) V: V = H gives the context, V = I the weights.
    """
    B, T = scores.shape
    mask = mask.bool()
    q = scores.masked_fill(~mask, 0.0).unsqueeze(1)  # (B, 1, T); padded entries are masked below
    eye = torch.eye(T, dtype=scores.dtype).expand(B, T, T)
    keep = mask.unsqueeze(1)  # (B, 1, T), True: takes part
    context = F.scaled_dot_product_attention(q, eye, H, attn_mask=keep, scale=1.0).squeeze(1)
    alpha = F.scaled_dot_product_attention(q, eye, eye, attn_mask=keep, scale=1.0).squeeze(1)
    return context, alpha


def _attend_with(how="mask", dim=-1, weights="alpha", swap=False, squeeze=False):
    def fn(scores, H, mask):
        mask = mask.bool()
        if how == "lengths":
            alpha = torch.softmax(scores.masked_fill(~_by_length(mask), NEG_INF), dim=dim)
        elif how == "mask":
            alpha = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=dim)
        elif how == "none":
            alpha = torch.softmax(scores, dim=dim)
        elif how == "after":
            alpha = torch.softmax(scores, dim=dim) * mask
        elif how == "multiply":
            alpha = torch.softmax(scores * mask, dim=dim)
        elif how == "renormalise":
            alpha = torch.softmax(scores, dim=dim) * mask
            alpha = alpha / alpha.sum(-1, keepdim=True)
        elif how == "global":
            e = scores.masked_fill(~mask, NEG_INF)
            ex = torch.exp(e - e.max())
            alpha = ex / ex.sum(-1, keepdim=True)
        else:  # exp without subtracting the maximum
            ex = torch.exp(scores) * mask
            alpha = ex / ex.sum(-1, keepdim=True)
        w = scores.masked_fill(~mask, 0.0) if weights == "scores" else alpha
        context = torch.bmm(w.unsqueeze(1), H).squeeze() if squeeze else (w.unsqueeze(-1) * H).sum(1)
        return (alpha, context) if swap else (context, alpha)
    return fn


ATTEND = Check(
    task="attend",
    what="α = softmax(e) over the real positions (0 at padding), c = Σ_j α_j h_j",
    reference=_attend_ref,
    compare=compare_parts("context", "alpha", rtol=1e-4, atol=1e-6),
    keep_dtype=True,
    cases=[Case("batch 3, lengths (5, 2, 4), large made-up scores at padding",
                _attend_case(3, 5, 4, lengths=[5, 2, 4])),
           Case("scores already -inf at padding (as Task 1 returns them), lengths (4, 1)",
                _attend_case(2, 4, 3, lengths=[4, 1], pad="-inf"))],
    hidden_cases=[Case("a batch of one without padding", _attend_case(1, 6, 5, lengths=[6])),
                  Case("sequences of length 1 among longer ones", _attend_case(4, 7, 3, lengths=[1, 7, 1, 3])),
                  Case("padding on the left", _attend_case(3, 6, 4, lengths=[2, 6, 4], left=True)),
                  Case("large scores (exp overflows in float32 unless the maximum is subtracted)",
                       _attend_case(3, 5, 4, lengths=[5, 3, 2], scale=20.0, offset=150.0)),
                  Case("very negative scores (exp underflows to 0 unless the maximum is subtracted)",
                       _attend_case(3, 5, 4, lengths=[5, 4, 1], scale=20.0, offset=-200.0, pad="-inf")),
                  Case("source length 1", _attend_case(3, 1, 4, lengths=[1, 1, 1])),
                  Case("batch 8, random lengths up to 12, d_h=16", _attend_case(8, 12, 16)),
                  Case("padded scores hundreds above the real ones",
                       _attend_case(3, 6, 4, lengths=[6, 3, 1], pad="far")),
                  Case("row maxima hundreds apart across the batch, -inf at padding",
                       _attend_case(4, 5, 3, lengths=[5, 2, 4, 3], pad="-inf", offset=[0.0, -150.0, 120.0, -300.0])),
                  Case("all but one position padded, padding on the left, padded scores hundreds above",
                       _attend_case(4, 6, 3, lengths=[1, 6, 1, 1], left=True, pad="far")),
                  Case("float64 inputs", _in(torch.float64, _attend_case(3, 5, 4, lengths=[5, 2, 4])))],
    mutants=[
        Mutant(_attend_with(dim=0), "took the softmax over the batch (dim=0): normalise over the source positions "
                                    "j of each sequence (the last dimension)"),
        Mutant(_attend_with(how="none"), "gave padded positions weight: set their scores to -inf before the softmax "
                                         "(mask is False there)"),
        Mutant(_attend_with(how="after"), "zeroed the padded weights after the softmax without renormalising: mask "
                                          "the scores (-inf) before the softmax, so the real weights sum to 1"),
        Mutant(_attend_with(how="multiply"), "multiplied the scores by the mask: a score of 0 still gets weight "
                                             "e^0 / Z; set padded scores to -inf"),
        Mutant(_attend_with(how="exp"), "computed exp(e) directly: exp overflows (or underflows) for large scores; "
                                        "subtract each row's maximum first, as torch.softmax does"),
        Mutant(_attend_with(how="renormalise"),
               "excluded the padding only after exponentiating (softmax then zero the padding and renormalise, "
               "or exp(e − max) with the maximum taken over padded positions too): when the padded scores are far "
               "above the real ones, every real exp underflows to 0 and the weights are 0/0; put -inf at padding "
               "before the softmax"),
        Mutant(_attend_with(how="global"),
               "subtracted one maximum for the whole batch: in a row whose scores are far below the batch's "
               "maximum every exp underflows to 0 (0/0); subtract each row's own maximum, over dim=-1"),
        Mutant(_attend_with(weights="scores"), "weighted the h_j by the raw scores e_j: the context is Σ_j α_j h_j, "
                                               "with α = softmax(e)"),
        Mutant(_attend_with(swap=True), "returned (alpha, context): return the context first, (context, alpha)"),
        Mutant(_attend_with(how="lengths"), LENGTHS),
        Mutant(_attend_with(squeeze=True), SQUEEZE),
    ],
    forbidden=TORCH_ATTENTION,
    forbidden_attrs=(*COURSE_ATTRS, *TORCH_ATTENTION_ATTRS),
    forbidden_modules=COURSE,
)


# ----------------------------------------------------------------------------- Task 3: one decoder step

def _step_case(B: int, T: int, V: int, m: int, d_h: int, d_s: int, d_a: int, lengths=None, left=False,
               scale: float = 0.5, v_scale: float = 1.0):
    def make(g, device):
        mask = _mask(B, T, g, lengths, left)
        y_prev = torch.randint(0, V, (B,), generator=g).to(device)
        s_prev = _randn((B, d_s), g, device)
        H = _states(B, T, d_h, mask, g, device)
        E = _randn((V, m), g, device)
        W1, W2, v = _randn((d_a, d_h), g, device, scale), _randn((d_a, d_s), g, device, scale), \
            _randn((d_a,), g, device, v_scale)
        W_ih, W_hh = _randn((3 * d_s, m + d_h), g, device, scale), _randn((3 * d_s, d_s), g, device, scale)
        b_ih, b_hh = _randn((3 * d_s,), g, device, scale), _randn((3 * d_s,), g, device, scale)
        W_o, b_o = _randn((V, d_h + d_s), g, device, scale), _randn((V,), g, device, scale)
        return ((y_prev, s_prev, H, mask.to(device), E, W1, W2, v, W_ih, W_hh, b_ih, b_hh, W_o, b_o), {})
    return make


def _step_ref(y_prev, s_prev, H, mask, E, W1, W2, v, W_ih, W_hh, b_ih, b_hh, W_o, b_o):
    e = _additive_ref(s_prev, H, mask, W1, W2, v)  # e_tj = score(s_{t-1}, h_j)
    context, alpha = _attend_ref(e, H, mask)
    d_s = s_prev.shape[1]
    cell = load_weights(nn.GRUCell(W_ih.shape[1], d_s), {"weight_ih": W_ih, "weight_hh": W_hh, "bias_ih": b_ih,
                                                         "bias_hh": b_hh})
    s = cell(torch.cat([F.embedding(y_prev, E), context], dim=-1), s_prev)
    return F.linear(torch.cat([context, s], dim=-1), W_o, b_o), s, alpha


def _gru(x, h, W_ih, W_hh, b_ih, b_hh, order="rzn", swap_z=False, bias_outside=False):
    xs = dict(zip(order, (x @ W_ih.T + b_ih).chunk(3, dim=-1), strict=True))
    hs = dict(zip(order, (h @ W_hh.T + b_hh).chunk(3, dim=-1), strict=True))
    r, z = torch.sigmoid(xs["r"] + hs["r"]), torch.sigmoid(xs["z"] + hs["z"])
    b_hn = dict(zip(order, b_hh.chunk(3), strict=True))["n"]
    n = torch.tanh(xs["n"] + r * (hs["n"] - b_hn) + b_hn) if bias_outside else torch.tanh(xs["n"] + r * hs["n"])
    return z * n + (1 - z) * h if swap_z else (1 - z) * n + z * h


def _step_with(mask="inf", gru_in="emb_c", out_in="c_s", order="rzn", swap_z=False, new_state=True, naive=False,
               bias_outside=False, probs=False):
    def fn(y_prev, s_prev, H, m, E, W1, W2, v, W_ih, W_hh, b_ih, b_hh, W_o, b_o):
        e = _additive_with(mask=mask)(s_prev, H, m, W1, W2, v)
        alpha = torch.exp(e) / torch.exp(e).sum(-1, keepdim=True) if naive else torch.softmax(e, dim=-1)
        c = (alpha.unsqueeze(-1) * H).sum(1)
        emb = E[y_prev]
        x = torch.cat([emb, c] if gru_in == "emb_c" else [c, emb], dim=-1)
        s = _gru(x, s_prev, W_ih, W_hh, b_ih, b_hh, order=order, swap_z=swap_z, bias_outside=bias_outside)
        parts = {"c_s": [c, s], "s_c": [s, c], "c_sprev": [c, s_prev]}[out_in]
        logits = torch.cat(parts, dim=-1) @ W_o.T + b_o
        return (torch.softmax(logits, dim=-1) if probs else logits), (s if new_state else s_prev), alpha
    return fn


def _step_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("batch 3, lengths (5, 2, 4), V=7, m=3, d_h=5, d_s=4, d_a=6",
                     _step_case(3, 5, 7, 3, 5, 4, 6, lengths=[5, 2, 4])),
                Case("no padding, batch 2, V=5, m=4, d_h=d_s=3, d_a=2",
                     _step_case(2, 4, 5, 4, 3, 3, 2, lengths=[4, 4]))]
    return [Case("a batch of one without padding", _step_case(1, 6, 6, 2, 4, 5, 3, lengths=[6])),
            Case("sequences of length 1 among longer ones", _step_case(4, 7, 9, 3, 6, 4, 5, lengths=[1, 7, 1, 3])),
            Case("padding on the left", _step_case(3, 6, 8, 4, 5, 5, 4, lengths=[2, 6, 4], left=True)),
            Case("large weights (saturated gates and tanh)",
                 _step_case(3, 5, 6, 3, 4, 6, 5, lengths=[5, 3, 2], scale=3.0)),
            Case("batch 8, random lengths up to 12, V=30, d_h=16, d_s=12",
                 _step_case(8, 12, 30, 8, 16, 12, 10)),
            # |e| up to a few hundred: exp(e) overflows in float32 unless the maximum is subtracted
            Case("a large v (scores in the hundreds)",
                 _step_case(3, 5, 6, 3, 4, 5, 6, lengths=[5, 2, 4], v_scale=40.0)),
            Case("all but one position padded, padding on the left",
                 _step_case(4, 6, 7, 3, 5, 4, 4, lengths=[1, 6, 1, 1], left=True)),
            Case("float64 inputs", _in(torch.float64, _step_case(3, 5, 7, 3, 5, 4, 6, lengths=[5, 2, 4])))]


BAHDANAU_STEP = Check(
    task="bahdanau_step",
    what="e = vᵀ tanh(W_1 h_j + W_2 s_{t-1}), α = softmax(e), c = Σ α_j h_j, s_t = GRU([emb(y_{t-1}); c], s_{t-1}), "
         "logits = W_o [c; s_t] + b_o",
    reference=_step_ref,
    compare=compare_parts("logits", "s_t", "alpha", order=(2, 1, 0)),  # α_t, then s_t, then the logits
    keep_dtype=True,
    cases=_step_cases(hidden=False),
    hidden_cases=_step_cases(hidden=True),
    mutants=[
        Mutant(_step_with(mask="ignore"), "attended to padded source positions: their scores must be -inf before the "
                                       "softmax (mask is False there)"),
        Mutant(_step_with(gru_in="c_emb"), "fed [c_t; emb(y_{t-1})] to the GRU: the input is [emb(y_{t-1}); c_t], "
                                           "embedding first"),
        Mutant(_step_with(out_in="s_c"), "computed the logits from [s_t; c_t]: the output layer reads [c_t; s_t], "
                                         "context first"),
        Mutant(_step_with(out_in="c_sprev"), "computed the logits from the previous state s_{t-1}: use the new "
                                             "state, W_o [c_t; s_t] + b_o"),
        Mutant(_step_with(swap_z=True), "swapped the GRU update gate's roles: s_t = (1 − z) ⊙ n + z ⊙ s_{t-1}"),
        Mutant(_step_with(order="zrn"), "split the GRU gates in the wrong order: torch stacks them as reset r, "
                                        "update z, new n"),
        Mutant(_step_with(naive=True), "computed the attention weights as exp(e) / Σ exp(e): exp overflows for scores "
                                       "in the hundreds; subtract the row's maximum first, or use torch.softmax"),
        Mutant(_step_with(bias_outside=True), "put the GRU's b_hn outside the reset gate: n = tanh(W_in x + b_in + "
                                              "r ⊙ (W_hn s_{t-1} + b_hn)), b_hn is multiplied by r too"),
        Mutant(_step_with(probs=True), "applied a softmax to the output: return the logits W_o [c_t; s_t] + b_o "
                                       "themselves, not probabilities"),
        Mutant(_step_with(mask="lengths"), LENGTHS),
        Mutant(_step_with(new_state=False), "returned the previous state s_{t-1}: return the new state s_t"),
    ],
    forbidden=(*TORCH_ATTENTION, nn.GRUCell, nn.GRU, torch.gru_cell),
    forbidden_attrs=(*COURSE_ATTRS, *TORCH_ATTENTION_ATTRS, *TORCH_RNN_NAMES),
    forbidden_modules=COURSE,
)

CHECKS = [DOT, MULTIPLICATIVE, ADDITIVE, ATTEND, BAHDANAU_STEP]

from .questions.ch04 import QUESTIONS  # noqa: E402 (the thinking questions, after the code tasks)

check = Registry(CHECKS + QUESTIONS)
