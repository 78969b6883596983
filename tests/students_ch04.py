"""Exercise 4 (attention) as students write it: wrong answers with the mistake they have, and right ones
written differently from the reference (see test_students.py)."""

from __future__ import annotations

import math

import torch
from check_contract import Student

from lmbook.tasks.ch04 import ADDITIVE, ATTEND, BAHDANAU_STEP, DOT, MULTIPLICATIVE

INF = float("-inf")


def _has(check, start: str) -> str:
    """The misconception of ``check``'s Mutant that begins with ``start`` (word for word)."""
    (text,) = [m.misconception for m in check.mutants if m.misconception.startswith(start)]
    return text


# ----------------------------------------------------------------------------- dot_scores

def dot_no_mask(s, H, mask):
    return torch.einsum("bd,btd->bt", s, H)


def dot_minus_1e9(s, H, mask):
    e = torch.bmm(H, s.unsqueeze(2)).squeeze(2)
    e[mask == 0] = -1e9
    return e


def dot_times_mask(s, H, mask):
    return (H * s.unsqueeze(1)).sum(-1) * mask.float()


def dot_by_lengths(s, H, mask):  # padding assumed at the end
    e = torch.einsum("bd,btd->bt", s, H)
    lengths = mask.sum(dim=1)
    for b in range(e.shape[0]):
        e[b, lengths[b]:] = INF
    return e


def dot_squeeze(s, H, mask):  # .squeeze() also drops the batch dimension of a batch of one
    e = torch.bmm(H, s.unsqueeze(-1)).squeeze()
    return e.masked_fill(~mask, INF)


def dot_scaled(s, H, mask):
    e = (s.unsqueeze(1) @ H.transpose(1, 2)).squeeze(1) / math.sqrt(H.shape[-1])
    return e.masked_fill(~mask, INF)


def dot_loop_float32(s, H, mask):  # a fresh float32 tensor: float64 inputs come back in float32
    B, T, _ = H.shape
    e = torch.full((B, T), INF)
    for b in range(B):
        for j in range(T):
            if mask[b, j]:
                e[b, j] = s[b] @ H[b, j]
    return e.to(H.device)


def dot_zeroes_H(s, H, mask):  # zeroes the caller's padded states in place
    H[~mask] = 0.0
    return torch.einsum("bd,btd->bt", s, H).masked_fill(~mask, INF)


def dot_list(s, H, mask):
    return torch.einsum("bd,btd->bt", s, H).masked_fill(~mask, INF).tolist()


def dot_python_floats(s, H, mask):  # one score at a time, as a Python float, then a new tensor
    B, T, _ = H.shape
    return torch.tensor([[float(s[b] @ H[b, j]) if mask[b, j] else -math.inf for j in range(T)] for b in range(B)],
                        dtype=H.dtype, device=H.device)


def dot_right_where(s, H, mask):
    e = (s[:, None, :] * H).sum(dim=2)
    return torch.where(mask, e, torch.full_like(e, INF))


def dot_right_bmm(s, H, mask):
    e = torch.bmm(H, s.unsqueeze(2)).squeeze(2)
    e[~mask] = INF
    return e


def dot_right_matmul(s, H, mask):
    e = (H @ s.unsqueeze(-1))[..., 0]
    return e + torch.zeros_like(e).masked_fill(mask.logical_not(), INF)


# ----------------------------------------------------------------------------- multiplicative_scores

def mult_transposed(s, H, mask, W):
    q = s @ W.T
    return torch.einsum("bd,btd->bt", q, H).masked_fill(~mask, INF)


def mult_no_W(s, H, mask, W):
    return torch.einsum("bd,btd->bt", s, H).masked_fill(~mask, INF)


def mult_scaled(s, H, mask, W):
    e = torch.einsum("bi,ij,btj->bt", s, W, H) / H.shape[-1] ** 0.5
    return e.masked_fill(~mask, INF)


def mult_minus_1e9(s, H, mask, W):
    e = torch.einsum("bi,ij,btj->bt", s, W, H)
    return e.masked_fill(~mask, -1e9)


def mult_by_lengths(s, H, mask, W):
    e = (H @ W.T @ s.unsqueeze(-1)).squeeze(-1)
    for b, n in enumerate(mask.sum(1).tolist()):
        e[b, n:] = INF
    return e


def mult_squeeze(s, H, mask, W):
    e = torch.bmm(H, (s @ W).unsqueeze(2)).squeeze()
    return e.masked_fill(~mask, INF)


def mult_fills_H(s, H, mask, W):  # masked_fill_ changes the caller's H
    H.masked_fill_(~mask.unsqueeze(-1), 0.0)
    e = torch.einsum("bd,btd->bt", s @ W, H)
    return e.masked_fill(~mask, INF)


def mult_float32(s, H, mask, W):
    e = torch.einsum("bd,btd->bt", (s @ W).float(), H.float())
    return e.masked_fill(~mask, INF)


def mult_right_einsum3(s, H, mask, W):
    return torch.einsum("bi,ij,btj->bt", s, W, H).masked_fill(~mask, INF)


def mult_right_HWt(s, H, mask, W):
    e = ((H @ W.T) * s.unsqueeze(1)).sum(-1)  # W h_j, then its dot product with s
    e[~mask] = INF
    return e


def mult_right_loop(s, H, mask, W):
    rows = []
    for b in range(s.shape[0]):
        e = H[b] @ (W.T @ s[b])
        rows.append(torch.where(mask[b], e, torch.tensor(INF, dtype=e.dtype, device=e.device)))
    return torch.stack(rows)


# ----------------------------------------------------------------------------- additive_scores

def add_no_tanh(s, H, mask, W1, W2, v):
    return ((H @ W1.T + (s @ W2.T).unsqueeze(1)) @ v).masked_fill(~mask, INF)


def add_swapped(s, H, mask, W1, W2, v):
    e = torch.tanh(H @ W2.T + (s @ W1.T)[:, None]) @ v
    return e.masked_fill(~mask, INF)


def add_sum(s, H, mask, W1, W2, v):
    e = torch.tanh(H @ W1.T + (s @ W2.T).unsqueeze(1)).sum(dim=-1)
    return e.masked_fill(~mask, INF)


def add_tanh_outside(s, H, mask, W1, W2, v):
    e = torch.tanh((H @ W1.T + (s @ W2.T).unsqueeze(1)) @ v)
    return e.masked_fill(~mask, INF)


def add_sigmoid(s, H, mask, W1, W2, v):
    e = torch.sigmoid(H @ W1.T + (s @ W2.T).unsqueeze(1)) @ v
    return e.masked_fill(~mask, INF)


def add_mask_hidden(s, H, mask, W1, W2, v):  # zeroes the hidden layer at padding: the score there is 0
    hidden = torch.tanh(H @ W1.T + (s @ W2.T).unsqueeze(1)) * mask.unsqueeze(-1)
    return hidden @ v


def add_no_unsqueeze(s, H, mask, W1, W2, v):  # (B, T, d_a) + (B, d_a) broadcasts only by accident
    e = torch.tanh(H @ W1.T + s @ W2.T) @ v
    return e.masked_fill(~mask, INF)


def add_minus_1e4(s, H, mask, W1, W2, v):
    e = torch.tanh(H @ W1.T + (s @ W2.T).unsqueeze(1)) @ v
    return torch.where(mask, e, torch.full_like(e, -1e4))


def add_by_lengths(s, H, mask, W1, W2, v):
    e = torch.tanh(H @ W1.T + (s @ W2.T).unsqueeze(1)) @ v
    lengths = mask.long().sum(-1)
    return e.masked_fill(torch.arange(e.shape[1], device=e.device)[None] >= lengths[:, None], INF)


def add_right_loop(s, H, mask, W1, W2, v):
    B, T, _ = H.shape
    e = torch.full((B, T), INF, dtype=H.dtype, device=H.device)
    q = s @ W2.T
    for j in range(T):
        e[:, j] = torch.tanh(H[:, j] @ W1.T + q) @ v
    return e.masked_fill(~mask, INF)


def add_right_einsum(s, H, mask, W1, W2, v):
    pre = torch.einsum("ah,bth->bta", W1, H) + torch.einsum("as,bs->ba", W2, s)[:, None, :]
    e = torch.einsum("bta,a->bt", torch.tanh(pre), v)
    return torch.where(mask, e, e.new_full((), INF))


def add_right_linear(s, H, mask, W1, W2, v):
    e = torch.nn.functional.linear(torch.tanh(torch.nn.functional.linear(H, W1) +
                                              torch.nn.functional.linear(s, W2).unsqueeze(-2)), v.unsqueeze(0))
    e = e.squeeze(-1)
    e[~mask] = INF
    return e


# ----------------------------------------------------------------------------- attend

def att_no_mask(scores, H, mask):
    alpha = torch.softmax(scores, dim=-1)
    return (alpha.unsqueeze(-1) * H).sum(1), alpha


def att_zero_after(scores, H, mask):
    alpha = torch.softmax(scores, dim=1) * mask.float()
    return torch.bmm(alpha.unsqueeze(1), H).squeeze(1), alpha


def att_renormalise(scores, H, mask):  # right in exact arithmetic; padding far above the real scores: 0 / 0
    alpha = torch.softmax(scores, dim=-1) * mask
    alpha = alpha / alpha.sum(dim=-1, keepdim=True)
    return (alpha.unsqueeze(-1) * H).sum(1), alpha


def att_max_with_padding(scores, H, mask):  # subtracts a maximum that includes the padded scores
    ex = torch.exp(scores - scores.max(dim=-1, keepdim=True).values) * mask
    alpha = ex / ex.sum(dim=-1, keepdim=True)
    return (alpha.unsqueeze(-1) * H).sum(1), alpha


def att_global_max(scores, H, mask):  # one maximum for the whole batch: rows far below it underflow
    e = scores.masked_fill(~mask, INF)
    ex = torch.exp(e - e.max())
    alpha = ex / ex.sum(dim=1, keepdim=True)
    return (alpha.unsqueeze(-1) * H).sum(1), alpha


def att_naive_exp(scores, H, mask):
    ex = torch.exp(scores) * mask
    alpha = ex / ex.sum(-1, keepdim=True)
    return (alpha[:, :, None] * H).sum(1), alpha


def att_minus_100(scores, H, mask):  # -100 is not small next to scores of -200
    alpha = torch.softmax(scores.masked_fill(~mask, -100.0), dim=-1)
    return (alpha.unsqueeze(-1) * H).sum(1), alpha


def att_dim0(scores, H, mask):
    alpha = torch.softmax(scores.masked_fill(~mask, INF), dim=0)
    return (alpha.unsqueeze(-1) * H).sum(1), alpha


def att_raw_scores(scores, H, mask):
    alpha = torch.softmax(scores.masked_fill(~mask, INF), dim=-1)
    return torch.einsum("bt,btd->bd", scores.masked_fill(~mask, 0.0), H), alpha


def att_swapped(scores, H, mask):
    alpha = torch.softmax(scores.masked_fill(~mask, INF), dim=-1)
    return alpha, (alpha.unsqueeze(-1) * H).sum(1)


def att_squeeze(scores, H, mask):
    alpha = torch.softmax(scores.masked_fill(~mask, INF), dim=-1)
    return torch.bmm(alpha.unsqueeze(1), H).squeeze(), alpha


def att_in_place(scores, H, mask):  # writes -inf into the caller's scores
    scores[~mask] = INF
    alpha = scores.softmax(-1)
    return (alpha.unsqueeze(-1) * H).sum(1), alpha


def att_float32(scores, H, mask):
    B, T = scores.shape
    alpha = torch.zeros(B, T, device=scores.device)
    for b in range(B):
        alpha[b, mask[b]] = torch.softmax(scores[b, mask[b]], dim=0)
    return (alpha.unsqueeze(-1) * H.float()).sum(1), alpha


def att_right_logsumexp(scores, H, mask):
    e = scores.masked_fill(~mask, INF)
    alpha = torch.exp(e - torch.logsumexp(e, dim=-1, keepdim=True))
    return torch.einsum("bt,btd->bd", alpha, H), alpha


def att_right_loop(scores, H, mask):
    alpha = torch.zeros_like(scores)
    for b in range(scores.shape[0]):
        real = mask[b]
        e = scores[b][real]
        ex = torch.exp(e - e.max())
        alpha[b][real] = ex / ex.sum()
    return torch.bmm(alpha.unsqueeze(1), H).squeeze(1), alpha


def att_masked_max_nan_gradient(scores, H, mask):  # exp of the 0 put at padding overflows where the row's
    # maximum is far below 0: torch.where drops the inf, but its gradient is still computed (inf · 0 = nan)
    m = scores.masked_fill(~mask, INF).amax(dim=1, keepdim=True)
    ex = torch.where(mask, torch.exp(scores.masked_fill(~mask, 0.0) - m), torch.zeros_like(scores))
    alpha = ex / ex.sum(dim=1, keepdim=True)
    return (alpha.unsqueeze(2) * H).sum(1), alpha


def att_right_where_softmax(scores, H, mask):
    alpha = torch.softmax(torch.where(mask, scores, torch.tensor(INF, dtype=scores.dtype, device=scores.device)), -1)
    return torch.bmm(alpha.unsqueeze(1), H).squeeze(1), alpha


# ----------------------------------------------------------------------------- bahdanau_step

def _gru(x, h, W_ih, W_hh, b_ih, b_hh):
    x_r, x_z, x_n = (x @ W_ih.T + b_ih).chunk(3, dim=-1)
    h_r, h_z, h_n = (h @ W_hh.T + b_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
    return (1 - z) * torch.tanh(x_n + r * h_n) + z * h


def _step(y_prev, s_prev, H, mask, E, W1, W2, v, W_ih, W_hh, b_ih, b_hh, W_o, b_o, *, mask_it=True, gru_first="emb",
          out_parts="cs", gru=_gru, softmax=None, probs=False):
    e = torch.tanh(H @ W1.T + (s_prev @ W2.T).unsqueeze(1)) @ v
    if mask_it:
        e = e.masked_fill(~mask, INF)
    alpha = softmax(e, mask) if softmax else torch.softmax(e, dim=-1)
    c = (alpha.unsqueeze(-1) * H).sum(1)
    x = torch.cat([E[y_prev], c] if gru_first == "emb" else [c, E[y_prev]], dim=-1)
    s = gru(x, s_prev, W_ih, W_hh, b_ih, b_hh)
    out = {"cs": [c, s], "sc": [s, c], "c_sprev": [c, s_prev]}[out_parts]
    logits = torch.cat(out, dim=-1) @ W_o.T + b_o
    return (torch.softmax(logits, -1) if probs else logits), s, alpha


def step_no_mask(*a):
    return _step(*a, mask_it=False)


def step_c_first(*a):
    return _step(*a, gru_first="c")


def step_s_first(*a):
    return _step(*a, out_parts="sc")


def step_old_state_out(*a):
    return _step(*a, out_parts="c_sprev")


def _gru_z_swapped(x, h, W_ih, W_hh, b_ih, b_hh):
    x_r, x_z, x_n = (x @ W_ih.T + b_ih).chunk(3, dim=-1)
    h_r, h_z, h_n = (h @ W_hh.T + b_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
    return z * torch.tanh(x_n + r * h_n) + (1 - z) * h


def step_z_swapped(*a):
    return _step(*a, gru=_gru_z_swapped)


def _gru_bias_outside_r(x, h, W_ih, W_hh, b_ih, b_hh):  # r multiplies W_hn h but not b_hn
    d = h.shape[-1]
    gi, gh = x @ W_ih.T + b_ih, h @ W_hh.T
    r = torch.sigmoid(gi[:, :d] + gh[:, :d] + b_hh[:d])
    z = torch.sigmoid(gi[:, d:2 * d] + gh[:, d:2 * d] + b_hh[d:2 * d])
    n = torch.tanh(gi[:, 2 * d:] + r * gh[:, 2 * d:] + b_hh[2 * d:])
    return (1 - z) * n + z * h


def step_bias_outside_r(*a):
    return _step(*a, gru=_gru_bias_outside_r)


def step_probs(*a):
    return _step(*a, probs=True)


def _naive_softmax(e, mask):
    ex = torch.exp(e)  # e = -inf at padding gives 0; large scores overflow
    return ex / ex.sum(-1, keepdim=True)


def step_naive_softmax(*a):
    return _step(*a, softmax=_naive_softmax)


def step_by_lengths(y_prev, s_prev, H, mask, E, *rest):
    lengths = mask.sum(1)
    by_length = torch.arange(mask.shape[1], device=mask.device)[None, :] < lengths[:, None]
    return _step(y_prev, s_prev, H, by_length, E, *rest)


def step_state_detached(*a):  # right values; the new state cut off "as in truncated backpropagation"
    logits, s, alpha = _step(*a)
    return logits, s.detach(), alpha


def step_right_onehot(y_prev, s_prev, H, mask, E, W1, W2, v, W_ih, W_hh, b_ih, b_hh, W_o, b_o):
    e = torch.einsum("bta,a->bt", torch.tanh(torch.einsum("ah,bth->bta", W1, H) + (W2 @ s_prev.T).T[:, None]), v)
    e = torch.where(mask, e, torch.full_like(e, INF))
    alpha = torch.exp(e - torch.logsumexp(e, -1, keepdim=True))
    c = torch.bmm(alpha.unsqueeze(1), H).squeeze(1)
    emb = torch.nn.functional.one_hot(y_prev, E.shape[0]).to(E.dtype) @ E
    s = _gru(torch.cat((emb, c), 1), s_prev, W_ih, W_hh, b_ih, b_hh)
    d_h = c.shape[1]
    return c @ W_o[:, :d_h].T + s @ W_o[:, d_h:].T + b_o, s, alpha


def step_right_split_weights(y_prev, s_prev, H, mask, E, W1, W2, v, W_ih, W_hh, b_ih, b_hh, W_o, b_o):
    e = torch.tanh(H @ W1.T + (s_prev @ W2.T).unsqueeze(1)) @ v
    e[~mask] = INF
    alpha = e.softmax(dim=1)
    c = torch.einsum("bt,bth->bh", alpha, H)
    m = E.shape[1]
    x_emb, x_c = E.index_select(0, y_prev), c
    d = s_prev.shape[1]
    gi = x_emb @ W_ih[:, :m].T + x_c @ W_ih[:, m:].T + b_ih
    gh = s_prev @ W_hh.T + b_hh
    r = torch.sigmoid(gi[:, :d] + gh[:, :d])
    z = torch.sigmoid(gi[:, d:2 * d] + gh[:, d:2 * d])
    n = torch.tanh(gi[:, 2 * d:] + r * gh[:, 2 * d:])
    s = n + z * (s_prev - n)
    return torch.addmm(b_o, torch.cat([c, s], -1), W_o.T), s, alpha


def step_right_loop(y_prev, s_prev, H, mask, E, W1, W2, v, W_ih, W_hh, b_ih, b_hh, W_o, b_o):
    outs = []
    for b in range(H.shape[0]):
        Hb = H[b][mask[b]]
        e = torch.tanh(Hb @ W1.T + W2 @ s_prev[b]) @ v
        a = torch.softmax(e, 0)
        alpha = torch.zeros(H.shape[1], dtype=H.dtype, device=H.device)
        alpha[mask[b]] = a
        c = a @ Hb
        s = _gru(torch.cat([E[y_prev[b]], c])[None], s_prev[b][None], W_ih, W_hh, b_ih, b_hh)[0]
        outs.append((W_o @ torch.cat([c, s]) + b_o, s, alpha))
    return tuple(torch.stack(p) for p in zip(*outs, strict=True))


WRONG = {
    "dot_scores": [
        Student(dot_python_floats, None, note="right values; no gradient reaches s or H"),
        Student(dot_no_mask, has=_has(DOT, "gave padded positions an ordinary score"), note="no mask"),
        Student(dot_minus_1e9, has=_has(DOT, "filled padded positions with a large negative"), note="-1e9"),
        Student(dot_times_mask, has=_has(DOT, "set padded scores to 0"), note="times the mask"),
        Student(dot_by_lengths, has=_has(DOT, "took the first mask.sum()"),
                note="padding assumed at the end (lengths from the mask)"),
        Student(dot_squeeze, has=_has(DOT, "called .squeeze()"),
                note=".squeeze() drops the batch dimension of a batch of one"),
        Student(dot_scaled, has=_has(DOT, "divided by sqrt(d)"), note="scaled dot product"),
        Student(dot_loop_float32, note="loop into a float32 tensor: loses float64"),
        Student(dot_zeroes_H, note="zeroes the caller's padded states in place"),
        Student(dot_list, note="returns a Python list"),
    ],
    "multiplicative_scores": [
        Student(mult_transposed, has=_has(MULTIPLICATIVE, "used Wᵀ instead of W"), note="s @ W.T"),
        Student(mult_no_W, has=_has(MULTIPLICATIVE, "left out W"), note="no W"),
        Student(mult_scaled, has=_has(MULTIPLICATIVE, "divided by sqrt(d)"), note="scaled"),
        Student(mult_minus_1e9, has=_has(MULTIPLICATIVE, "filled padded positions with a large negative"),
                note="-1e9"),
        Student(mult_by_lengths, has=_has(MULTIPLICATIVE, "took the first mask.sum()"),
                note="padding assumed at the end"),
        Student(mult_squeeze, has=_has(MULTIPLICATIVE, "called .squeeze()"), note=".squeeze() on a batch of one"),
        Student(mult_fills_H, note="masked_fill_ on the caller's H"),
        Student(mult_float32, note=".float(): loses float64"),
    ],
    "additive_scores": [
        Student(add_no_tanh, has=_has(ADDITIVE, "left out the tanh"), note="no tanh"),
        Student(add_swapped, has=_has(ADDITIVE, "swapped W_1 and W_2"), note="W1/W2 swapped"),
        Student(add_sum, has=_has(ADDITIVE, "summed the entries"), note="sum instead of v"),
        Student(add_tanh_outside, has=_has(ADDITIVE, "applied tanh after v"), note="tanh outside"),
        Student(add_sigmoid, has=_has(ADDITIVE, "used a sigmoid"), note="sigmoid instead of tanh"),
        Student(add_mask_hidden, has=_has(ADDITIVE, "set padded scores to 0"), note="hidden layer times the mask"),
        Student(add_no_unsqueeze, has=_has(ADDITIVE, "added W_2 s"),
                note="W_2 s not unsqueezed: broadcasts only when B is 1"),
        Student(add_minus_1e4, note="-1e4 at padding"),
        Student(add_by_lengths, has=_has(ADDITIVE, "took the first mask.sum()"), note="padding assumed at the end"),
    ],
    "attend": [
        Student(att_masked_max_nan_gradient, None, note="right values; a nan gradient where the real scores are "
                "hundreds below 0"),
        Student(att_no_mask, has=_has(ATTEND, "gave padded positions weight"), note="no mask"),
        Student(att_zero_after, has=_has(ATTEND, "zeroed the padded weights after the softmax"),
                note="softmax then times the mask"),
        Student(att_renormalise, has=_has(ATTEND, "excluded the padding only after exponentiating"),
                note="mask after the softmax, renormalised: 0/0 under dominant padding"),
        Student(att_max_with_padding, has=_has(ATTEND, "excluded the padding only after exponentiating"),
                note="exp(e - max) with the max over padded positions too"),
        Student(att_global_max, has=_has(ATTEND, "subtracted one maximum for the whole batch"),
                note="one maximum for the whole batch"),
        Student(att_naive_exp, has=_has(ATTEND, "computed exp(e) directly"), note="exp without the maximum"),
        Student(att_minus_100, note="-100 at padding"),
        Student(att_dim0, has=_has(ATTEND, "took the softmax over the batch"), note="dim=0"),
        Student(att_raw_scores, has=_has(ATTEND, "weighted the h_j by the raw scores"), note="raw scores"),
        Student(att_swapped, has=_has(ATTEND, "returned (alpha, context)"), note="(alpha, context)"),
        Student(att_squeeze, has=_has(ATTEND, "called .squeeze()"), note=".squeeze() on a batch of one"),
        Student(att_in_place, note="writes -inf into the caller's scores"),
        Student(att_float32, note="float32 alpha for float64 inputs"),
    ],
    "bahdanau_step": [
        Student(step_no_mask, has=_has(BAHDANAU_STEP, "attended to padded source positions"), note="no mask"),
        Student(step_c_first, has=_has(BAHDANAU_STEP, "fed [c_t; emb(y_{t-1})]"), note="[c; emb]"),
        Student(step_s_first, has=_has(BAHDANAU_STEP, "computed the logits from [s_t; c_t]"), note="[s; c]"),
        Student(step_old_state_out, has=_has(BAHDANAU_STEP, "computed the logits from the previous state"),
                note="logits from s_{t-1}"),
        Student(step_z_swapped, has=_has(BAHDANAU_STEP, "swapped the GRU update gate"), note="z swapped"),
        Student(step_bias_outside_r, has=_has(BAHDANAU_STEP, "put the GRU's b_hn outside"),
                note="b_hn outside the reset gate"),
        Student(step_probs, has=_has(BAHDANAU_STEP, "applied a softmax to the output"),
                note="returns probabilities, not logits"),
        Student(step_naive_softmax, has=_has(BAHDANAU_STEP, "computed the attention weights as exp(e)"),
                note="exp(e) / sum without the maximum"),
        Student(step_by_lengths, has=_has(BAHDANAU_STEP, "took the first mask.sum()"),
                note="padding assumed at the end"),
        Student(step_state_detached, note="s_t returned detached: the next step cannot train this one"),
    ],
}

RIGHT = {
    "dot_scores": [dot_right_where, dot_right_bmm, dot_right_matmul],
    "multiplicative_scores": [mult_right_einsum3, mult_right_HWt, mult_right_loop],
    "additive_scores": [add_right_loop, add_right_einsum, add_right_linear],
    "attend": [att_right_logsumexp, att_right_loop, att_right_where_softmax],
    "bahdanau_step": [step_right_onehot, step_right_split_weights, step_right_loop],
}


# ============================================================================= the thinking questions
# (chapter 4's derive and count questions, lmbook.tasks.questions.ch04)

from lmbook.tasks.questions.ch04 import ADDITIVE_MULTIPLICATIONS, PEAK_WEIGHT, SCORE_PARAMETERS  # noqa: E402


def pw_uniform(delta, S):
    return 1 / S


def pw_linear(delta, S):
    return delta / (delta + (S - 1))


def pw_s_others(delta, S):
    return math.exp(delta) / (math.exp(delta) + S)


def pw_two_keys(delta, S):
    return 1 / (1 + math.exp(-delta))


def pw_over_s(delta, S):
    return math.exp(delta) / S


def pw_sign_flipped(delta, S):
    return 1 / (1 + (S - 1) * math.exp(delta))


def pw_right_softmax(delta, S):
    scores = torch.zeros(S, dtype=torch.float64)
    scores[0] = delta
    return float(torch.softmax(scores, dim=0)[0])


def pw_right_rearranged(delta, S):
    return 1 / (1 + (S - 1) * math.exp(-delta))


def pw_right_loop(delta, S):
    total = math.exp(delta)
    for _ in range(S - 1):
        total += math.exp(0.0)
    return math.exp(delta) / total


def sp_no_v(kind, d_s, d_h, d_a):
    if kind == "additive":
        return d_a * d_h + d_a * d_s
    return d_s * d_h if kind == "multiplicative" else 0


def sp_square_w(kind, d_s, d_h, d_a):
    if kind == "multiplicative":
        return d_s * d_s
    return d_a * (d_h + d_s + 1) if kind == "additive" else 0


def sp_w2_like_w1(kind, d_s, d_h, d_a):
    if kind == "additive":
        return 2 * d_a * d_h + d_a
    return d_s * d_h if kind == "multiplicative" else 0


def sp_biases(kind, d_s, d_h, d_a):
    if kind == "additive":
        return (d_h + 1) * d_a + (d_s + 1) * d_a + d_a
    return d_s * d_h if kind == "multiplicative" else 0


def sp_vector_entries(kind, d_s, d_h, d_a):
    return {"dot": d_s, "scaled_dot": d_s, "multiplicative": d_s * d_h, "additive": d_a * (d_s + d_h + 1)}[kind]


def sp_scale_counted(kind, d_s, d_h, d_a):
    return {"dot": 0, "scaled_dot": 1, "multiplicative": d_s * d_h, "additive": d_a * (d_s + d_h + 1)}[kind]


def sp_multiplicative_bias(kind, d_s, d_h, d_a):
    return {"dot": 0, "scaled_dot": 0, "multiplicative": d_s * d_h + d_s, "additive": d_a * (d_s + d_h + 1)}[kind]


def sp_right_if(kind, d_s, d_h, d_a):
    if kind in ("dot", "scaled_dot"):
        return 0
    if kind == "multiplicative":
        return d_s * d_h
    return d_a * (d_h + d_s + 1)


def sp_right_shapes(kind, d_s, d_h, d_a):
    shapes = {"dot": [], "scaled_dot": [], "multiplicative": [(d_s, d_h)],
              "additive": [(d_a, d_h), (d_a, d_s), (d_a,)]}[kind]
    return sum(math.prod(s) for s in shapes)


def sp_right_match(kind, d_s, d_h, d_a):
    match kind:
        case "multiplicative":
            return d_s * d_h
        case "additive":
            return d_a * d_h + d_a * d_s + d_a
        case _:
            return 0


def am_every_step(S, T, d_h, d_s, d_a):
    return T * (S * d_a * d_h + d_a * d_s + S * d_a)


def am_no_v(S, T, d_h, d_s, d_a):
    return S * d_a * d_h + T * d_a * d_s


def am_w2_per_pair(S, T, d_h, d_s, d_a):
    return S * d_a * d_h + T * S * (d_a * d_s + d_a)


def am_dot(S, T, d_h, d_s, d_a):
    return T * S * d_h


def am_no_w1(S, T, d_h, d_s, d_a):
    return T * (d_a * d_s + S * d_a)


def am_v_per_step(S, T, d_h, d_s, d_a):  # v once per step instead of once per pair
    return S * d_a * d_h + T * d_a * d_s + T * d_a


def am_right_loop(S, T, d_h, d_s, d_a):
    total = S * d_h * d_a  # W_1 h_j, once per sentence
    for _ in range(T):
        total += d_s * d_a  # W_2 s_{t-1}
        total += S * d_a  # v^T tanh(...), one per source word
    return total


def am_right_factored(S, T, d_h, d_s, d_a):
    return d_a * (S * d_h + T * d_s + T * S)


def am_right_terms(S, T, d_h, d_s, d_a):
    terms = {"W1": S * d_a * d_h, "W2": T * d_a * d_s, "v": T * S * d_a}
    return sum(terms.values())


WRONG.update({
    "peak_weight": [
        Student(pw_uniform, _has(PEAK_WEIGHT, "made the weights uniform")),
        Student(pw_linear, _has(PEAK_WEIGHT, "weighed the keys by their scores")),
        Student(pw_s_others, _has(PEAK_WEIGHT, "counted S other keys")),
        Student(pw_two_keys, _has(PEAK_WEIGHT, "left out all but one of the other keys")),
        Student(pw_over_s, None),
        Student(pw_sign_flipped, None),
    ],
    "score_parameters": [
        Student(sp_no_v, _has(SCORE_PARAMETERS, "left out v")),
        Student(sp_square_w, _has(SCORE_PARAMETERS, "made W square")),
        Student(sp_w2_like_w1, _has(SCORE_PARAMETERS, "gave W_2 the shape of W_1")),
        Student(sp_biases, _has(SCORE_PARAMETERS, "counted biases for W_1 and W_2")),
        Student(sp_vector_entries, _has(SCORE_PARAMETERS, "counted the vectors' entries")),
        Student(sp_scale_counted, _has(SCORE_PARAMETERS, "counted the scale")),
        Student(sp_multiplicative_bias, None),
    ],
    "additive_multiplications": [
        Student(am_every_step, _has(ADDITIVE_MULTIPLICATIONS, "computed W_1 h_j again at every step")),
        Student(am_no_v, _has(ADDITIVE_MULTIPLICATIONS, "left out v^T tanh")),
        Student(am_w2_per_pair, _has(ADDITIVE_MULTIPLICATIONS, "computed W_2 s_{t-1} for every source word")),
        Student(am_dot, _has(ADDITIVE_MULTIPLICATIONS, "counted a dot-product score")),
        Student(am_no_w1, _has(ADDITIVE_MULTIPLICATIONS, "left out W_1 h_j")),
        Student(am_v_per_step, None),
    ],
})

RIGHT.update({
    "peak_weight": [pw_right_softmax, pw_right_rearranged, pw_right_loop],
    "score_parameters": [sp_right_if, sp_right_shapes, sp_right_match],
    "additive_multiplications": [am_right_loop, am_right_factored, am_right_terms],
})
