"""Task 3 of exercise 4: one step of Bahdanau's attention decoder."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import OVERFLOW_HINT, compare_parts
from .. import earlier
from ..common import TORCH_RNN_NAMES, call_with_weights
from ..common import randn as _randn
from .attend import attend_ref
from .inputs import COURSE, COURSE_ATTRS, TORCH_ATTENTION, TORCH_ATTENTION_ATTRS, encoder_states, in_dtype, real_mask_of
from .scores import LENGTHS, additive_ref, additive_with


def _step_case(B: int, T: int, V: int, m: int, d_h: int, d_s: int, d_a: int, lengths=None, left=False,
               scale: float = 0.5, v_scale: float = 1.0):
    def make(g, device):
        mask = real_mask_of(B, T, g, lengths, left)
        y_prev = torch.randint(0, V, (B,), generator=g).to(device)
        s_prev = _randn((B, d_s), g, device)
        H = encoder_states(B, T, d_h, mask, g, device)
        E = _randn((V, m), g, device)
        W1, W2, v = _randn((d_a, d_h), g, device, scale), _randn((d_a, d_s), g, device, scale), \
            _randn((d_a,), g, device, v_scale)
        W_ih, W_hh = _randn((3 * d_s, m + d_h), g, device, scale), _randn((3 * d_s, d_s), g, device, scale)
        b_ih, b_hh = _randn((3 * d_s,), g, device, scale), _randn((3 * d_s,), g, device, scale)
        W_o, b_o = _randn((V, d_h + d_s), g, device, scale), _randn((V,), g, device, scale)
        return ((y_prev, s_prev, H, mask.to(device), E, W1, W2, v, W_ih, W_hh, b_ih, b_hh, W_o, b_o), {})
    return make


def _step_ref(y_prev, s_prev, H, mask, E, W1, W2, v, W_ih, W_hh, b_ih, b_hh, W_o, b_o):
    e = additive_ref(s_prev, H, mask, W1, W2, v)  # e_tj = score(s_{t-1}, h_j)
    context, alpha = attend_ref(e, H, mask)
    d_s = s_prev.shape[1]
    s = call_with_weights(nn.GRUCell(W_ih.shape[1], d_s), {"weight_ih": W_ih, "weight_hh": W_hh, "bias_ih": b_ih,
                                                           "bias_hh": b_hh},
                          torch.cat([F.embedding(y_prev, E), context], dim=-1), s_prev)
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
        e = additive_with(mask=mask)(s_prev, H, m, W1, W2, v)
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
            # |e| in the hundreds or thousands at every seed (e = v·tanh(.), |tanh| ≤ 1, 6 entries of v of scale
            # 400): exp(e) overflows in float32 unless the maximum is subtracted
            Case("a large v (scores in the hundreds)",
                 _step_case(3, 5, 6, 3, 4, 5, 6, lengths=[5, 2, 4], v_scale=400.0)),
            Case("all but one position padded, padding on the left",
                 _step_case(4, 6, 7, 3, 5, 4, 4, lengths=[1, 6, 1, 1], left=True)),
            Case("float64 inputs", in_dtype(torch.float64, _step_case(3, 5, 7, 3, 5, 4, 6, lengths=[5, 2, 4]))),
            Case("a source of one word (T = 1) and an attention of size 1 (d_a = 1)",
                 _step_case(3, 1, 6, 3, 4, 5, 1, lengths=[1, 1, 1]))]


BAHDANAU_STEP = Check(
    task="bahdanau_step",
    what="e = vᵀ tanh(W_1 h_j + W_2 s_{t-1}), α = softmax(e), c = Σ α_j h_j, s_t = GRU([emb(y_{t-1}); c], s_{t-1}), "
         "logits = W_o [c; s_t] + b_o",
    reference=_step_ref,
    grad_of=(1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13),  # s_prev, H and every weight: trained through its steps
    trained_outputs=2,  # the logits and s_t, which the next step reads; not α, returned to be plotted
    builds_on=(("additive_scores", earlier.additive_scores), ("attend", earlier.attend)),
    # α_t, then s_t, then the logits
    compare=compare_parts("logits", "s_t", "alpha", order=(2, 1, 0), nan_hint=OVERFLOW_HINT),
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
