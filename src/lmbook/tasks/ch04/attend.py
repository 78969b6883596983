"""Task 2 of exercise 4: attention weights and the context vector."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import OVERFLOW_HINT, compare_parts
from ..common import NEG_INF
from ..common import randn as _randn
from .inputs import COURSE, COURSE_ATTRS, TORCH_ATTENTION, TORCH_ATTENTION_ATTRS, encoder_states, in_dtype, real_mask_of
from .scores import LENGTHS, SQUEEZE, by_length


def _attend_case(B: int, T: int, d_h: int, lengths=None, left=False, pad="large", scale=2.0, offset=0.0):
    """``offset``: a number, or one per row (row maxima hundreds apart); ``pad``: "-inf", "large" (a little above
    the real scores) or "far" (hundreds above them: exp of the real scores minus the padded maximum underflows)."""
    def make(g, device):
        mask = real_mask_of(B, T, g, lengths, left)
        shift = torch.as_tensor(offset, dtype=torch.float32).reshape(-1, 1).to(device)
        scores = _randn((B, T), g, device, scale) + shift
        if pad == "-inf":  # as Task 1 returns them
            pad_scores = torch.full((B, T), NEG_INF, device=device)
        else:  # large made-up scores: a softmax over them would put all the weight on padding
            above = 300.0 if pad == "far" else 3.0
            pad_scores = _randn((B, T), g, device, 2.0).abs() + scores.abs().amax() + above
        scores = torch.where(mask.to(device), scores, pad_scores)
        H = encoder_states(B, T, d_h, mask, g, device)
        return ((scores, H, mask.to(device)), {})
    return make


def attend_ref(scores, H, mask):
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
            alpha = torch.softmax(scores.masked_fill(~by_length(mask), NEG_INF), dim=dim)
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
    reference=attend_ref,
    grad_of=(0, 1),  # the scores and H: a seq2seq model is trained through the context
    compare=compare_parts("context", "alpha", rtol=1e-4, atol=1e-6, nan_hint=OVERFLOW_HINT),
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
                  Case("float64 inputs", in_dtype(torch.float64, _attend_case(3, 5, 4, lengths=[5, 2, 4])))],
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
