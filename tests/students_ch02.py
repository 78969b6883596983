"""Exercise 2 as students write it: wrong answers (tagged with the named mistake they have, or None) and right
answers written differently from the reference. See test_students.py."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from check_contract import Student

# ----------------------------------------------------------------------------- rnn_cell


def cell_no_tanh(x, h, W_x, W_h, b):
    return x @ W_x.T + h @ W_h.T + b


def cell_relu(x, h, W_x, W_h, b):
    return torch.relu(x @ W_x.T + h @ W_h.T + b)


def cell_no_transpose(x, h, W_x, W_h, b):
    return torch.tanh(x @ W_x + h @ W_h + b)


def cell_bias_outside(x, h, W_x, W_h, b):
    return torch.tanh(x @ W_x.T + h @ W_h.T) + b


def cell_swapped(x, h, W_x, W_h, b):
    return torch.tanh(x @ W_h.T + h @ W_x.T + b)


def cell_inplace(x, h, W_x, W_h, b):
    h += x @ W_x.T + b
    return torch.tanh(h @ torch.eye(h.shape[1]) + (h - x @ W_x.T - b) @ W_h.T - h + x @ W_x.T + b)


def cell_naive_tanh(x, h, W_x, W_h, b):
    z = x @ W_x.T + h @ W_h.T + b
    return (torch.exp(z) - torch.exp(-z)) / (torch.exp(z) + torch.exp(-z))


def cell_float32(x, h, W_x, W_h, b):
    return torch.tanh(x.float() @ W_x.float().T + h.float() @ W_h.float().T + b.float())


def cell_right_linear(x, h, W_x, W_h, b):
    return torch.tanh(F.linear(x, W_x, b) + F.linear(h, W_h))


def cell_right_einsum(x, h, W_x, W_h, b):
    return torch.tanh(torch.einsum("hd,bd->bh", W_x, x) + torch.einsum("hk,bk->bh", W_h, h) + b)


def cell_right_sigmoid(x, h, W_x, W_h, b):
    return 2 * torch.sigmoid(2 * (torch.cat([x, h], 1) @ torch.cat([W_x, W_h], 1).T + b)) - 1


# ----------------------------------------------------------------------------- rnn_forward


def _step(x, h, W_x, W_h, b):
    return torch.tanh(x @ W_x.T + h @ W_h.T + b)


def fwd_through_padding(x, lengths, h0, W_x, W_h, b):
    h, outs = h0, []
    for t in range(x.shape[1]):
        h = _step(x[:, t], h, W_x, W_h, b)
        outs.append(h)
    return torch.stack(outs, 1), h


def fwd_no_zero(x, lengths, h0, W_x, W_h, b):
    h, outs = h0, []
    for t in range(x.shape[1]):
        m = (t < lengths).unsqueeze(1)
        h = torch.where(m, _step(x[:, t], h, W_x, W_h, b), h)
        outs.append(h)
    return torch.stack(outs, 1), h


def fwd_hn_last_column(x, lengths, h0, W_x, W_h, b):
    h, outs = h0, []
    for t in range(x.shape[1]):
        h = _step(x[:, t], h, W_x, W_h, b)
        outs.append(h * (t < lengths).unsqueeze(1))
    out = torch.stack(outs, 1)
    return out, out[:, -1]


def fwd_zeros_start(x, lengths, h0, W_x, W_h, b):
    h, outs = torch.zeros_like(h0), []
    for t in range(x.shape[1]):
        m = (t < lengths).unsqueeze(1)
        h = torch.where(m, _step(x[:, t], h, W_x, W_h, b), h)
        outs.append(torch.where(m, h, torch.zeros_like(h)))
    return torch.stack(outs, 1), h


def fwd_off_by_one(x, lengths, h0, W_x, W_h, b):
    h, outs = h0, []
    for t in range(x.shape[1]):
        m = (t <= lengths).unsqueeze(1)
        h = torch.where(m, _step(x[:, t], h, W_x, W_h, b), h)
        outs.append(torch.where(m, h, torch.zeros_like(h)))
    return torch.stack(outs, 1), h


def fwd_float32_buffer(x, lengths, h0, W_x, W_h, b):
    B, T, _ = x.shape
    out = torch.zeros(B, T, h0.shape[1])
    h = h0
    for t in range(T):
        m = (t < lengths).unsqueeze(1)
        h = torch.where(m, _step(x[:, t], h, W_x, W_h, b), h)
        out[:, t] = h * m
    return out, h


def fwd_squeeze(x, lengths, h0, W_x, W_h, b):
    finals, rows = [], []
    for i in range(x.shape[0]):
        h, outs = h0[i], []
        for t in range(x.shape[1]):
            if t < lengths[i]:
                h = torch.tanh(W_x @ x[i, t] + W_h @ h + b)
                outs.append(h)
            else:
                outs.append(torch.zeros_like(h))
        rows.append(torch.stack(outs))
        finals.append(h)
    return torch.stack(rows), torch.stack(finals).squeeze()


def fwd_right_per_sequence(x, lengths, h0, W_x, W_h, b):
    B, T, _ = x.shape
    out = x.new_zeros(B, T, h0.shape[1])
    finals = []
    for i in range(B):
        h = h0[i]
        for t in range(int(lengths[i])):
            h = torch.tanh(W_x @ x[i, t] + W_h @ h + b)
            out[i, t] = h
        finals.append(h)
    return out, torch.stack(finals)


def fwd_right_gather(x, lengths, h0, W_x, W_h, b):
    h, states = h0, []
    for t in range(x.shape[1]):
        h = _step(x[:, t], h, W_x, W_h, b)
        states.append(h)
    states = torch.stack(states, 1)
    # a correct h_n comes from the states before the padding: the padding comes after
    h_n = states[torch.arange(x.shape[0]), lengths - 1]
    mask = (torch.arange(x.shape[1], device=x.device)[None] < lengths[:, None]).unsqueeze(-1)
    return states * mask, h_n


def fwd_right_mask_arith(x, lengths, h0, W_x, W_h, b):
    h, outs = h0, []
    for t in range(x.shape[1]):
        m = (lengths > t).to(x.dtype).unsqueeze(1)
        h = m * _step(x[:, t], h, W_x, W_h, b) + (1 - m) * h
        outs.append(m * h)
    return torch.stack(outs, 1), h


# ----------------------------------------------------------------------------- lstm_cell


def _gates(x, h, W_ih, W_hh, b_ih, b_hh):
    return x @ W_ih.T + b_ih + h @ W_hh.T + b_hh


def lstm_ifog(x, h, c, W_ih, W_hh, b_ih, b_hh):
    i, f, o, g = _gates(x, h, W_ih, W_hh, b_ih, b_hh).chunk(4, -1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def lstm_no_tanh_c(x, h, c, W_ih, W_hh, b_ih, b_hh):
    i, f, g, o = _gates(x, h, W_ih, W_hh, b_ih, b_hh).chunk(4, -1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * c, c


def lstm_returns_c_h(x, h, c, W_ih, W_hh, b_ih, b_hh):
    i, f, g, o = _gates(x, h, W_ih, W_hh, b_ih, b_hh).chunk(4, -1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return c, torch.sigmoid(o) * torch.tanh(c)


def lstm_split_wrong_dim(x, h, c, W_ih, W_hh, b_ih, b_hh):
    H = h.shape[1]
    z = _gates(x, h, W_ih, W_hh, b_ih, b_hh).view(-1, H, 4)
    i, f, g, o = z.unbind(-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def lstm_one_bias(x, h, c, W_ih, W_hh, b_ih, b_hh):
    i, f, g, o = (x @ W_ih.T + h @ W_hh.T + b_ih).chunk(4, -1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def lstm_inplace_c(x, h, c, W_ih, W_hh, b_ih, b_hh):
    i, f, g, o = _gates(x, h, W_ih, W_hh, b_ih, b_hh).chunk(4, -1)
    c.mul_(torch.sigmoid(f)).add_(torch.sigmoid(i) * torch.tanh(g))
    return torch.sigmoid(o) * torch.tanh(c), c


def lstm_naive_sigmoid(x, h, c, W_ih, W_hh, b_ih, b_hh):
    def sig(z):
        return torch.exp(z) / (1 + torch.exp(z))
    i, f, g, o = _gates(x, h, W_ih, W_hh, b_ih, b_hh).chunk(4, -1)
    c = sig(f) * c + sig(i) * torch.tanh(g)
    return sig(o) * torch.tanh(c), c


def lstm_detached_cell_state(x, h, c, W_ih, W_hh, b_ih, b_hh):  # right values
    i, f, g, o = _gates(x, h, W_ih, W_hh, b_ih, b_hh).chunk(4, -1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h = torch.sigmoid(o) * torch.tanh(c)
    return h, c.detach()  # "so the graph does not grow over the sequence", as between batches in truncated BPTT


def lstm_right_separate(x, h, c, W_ih, W_hh, b_ih, b_hh):
    H = h.shape[1]
    pre = [x @ W_ih[k * H:(k + 1) * H].T + b_ih[k * H:(k + 1) * H] + h @ W_hh[k * H:(k + 1) * H].T
           + b_hh[k * H:(k + 1) * H] for k in range(4)]
    i, f, o = torch.sigmoid(pre[0]), torch.sigmoid(pre[1]), torch.sigmoid(pre[3])
    c_new = f * c + i * torch.tanh(pre[2])
    return o * torch.tanh(c_new), c_new


def lstm_right_cat(x, h, c, W_ih, W_hh, b_ih, b_hh):
    z = torch.cat([x, h], 1) @ torch.cat([W_ih, W_hh], 1).T + (b_ih + b_hh)
    i, f, g, o = z.split(h.shape[1], dim=1)
    c_new = torch.addcmul(torch.sigmoid(f) * c, torch.sigmoid(i), torch.tanh(g))
    return torch.sigmoid(o) * torch.tanh(c_new), c_new


def lstm_right_view(x, h, c, W_ih, W_hh, b_ih, b_hh):
    z = _gates(x, h, W_ih, W_hh, b_ih, b_hh).view(x.shape[0], 4, -1)
    ifo = torch.sigmoid(z[:, [0, 1, 3]])
    c_new = ifo[:, 1] * c + ifo[:, 0] * torch.tanh(z[:, 2])
    return ifo[:, 2] * torch.tanh(c_new), c_new


# ----------------------------------------------------------------------------- gru_cell


def gru_swap_z(x, h, W_ih, W_hh, b_ih, b_hh):
    xr, xz, xn = (x @ W_ih.T + b_ih).chunk(3, -1)
    hr, hz, hn = (h @ W_hh.T + b_hh).chunk(3, -1)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * hn)
    return z * n + (1 - z) * h


def gru_paper(x, h, W_ih, W_hh, b_ih, b_hh):
    H = h.shape[1]
    xr, xz, xn = (x @ W_ih.T + b_ih).chunk(3, -1)
    hr, hz, _ = (h @ W_hh.T + b_hh).chunk(3, -1)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    n = torch.tanh(xn + (r * h) @ W_hh[2 * H:].T + b_hh[2 * H:])
    return (1 - z) * n + z * h


def gru_all_summed(x, h, W_ih, W_hh, b_ih, b_hh):
    r_, z_, n_ = (x @ W_ih.T + b_ih + h @ W_hh.T + b_hh).chunk(3, -1)
    r, z = torch.sigmoid(r_), torch.sigmoid(z_)
    return (1 - z) * torch.tanh(r * n_) + z * h


def gru_zrn(x, h, W_ih, W_hh, b_ih, b_hh):
    xz, xr, xn = (x @ W_ih.T + b_ih).chunk(3, -1)
    hz, hr, hn = (h @ W_hh.T + b_hh).chunk(3, -1)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    return (1 - z) * torch.tanh(xn + r * hn) + z * h


def gru_no_reset(x, h, W_ih, W_hh, b_ih, b_hh):
    xr, xz, xn = (x @ W_ih.T + b_ih).chunk(3, -1)
    hr, hz, hn = (h @ W_hh.T + b_hh).chunk(3, -1)
    z = torch.sigmoid(xz + hz)
    return (1 - z) * torch.tanh(xn + hn) + z * h


def gru_bias_outside(x, h, W_ih, W_hh, b_ih, b_hh):
    H = h.shape[1]
    xr, xz, xn = (x @ W_ih.T + b_ih).chunk(3, -1)
    hr, hz, _ = (h @ W_hh.T + b_hh).chunk(3, -1)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * (h @ W_hh[2 * H:].T) + b_hh[2 * H:])
    return (1 - z) * n + z * h


@np.errstate(over="ignore")
def gru_numpy(x, h, W_ih, W_hh, b_ih, b_hh):
    a = [t.detach().cpu().numpy() for t in (x, h, W_ih, W_hh, b_ih, b_hh)]
    xi, hh = a[0] @ a[2].T + a[4], a[1] @ a[3].T + a[5]
    H = a[1].shape[1]
    r = 1 / (1 + np.exp(-(xi[:, :H] + hh[:, :H])))
    z = 1 / (1 + np.exp(-(xi[:, H:2 * H] + hh[:, H:2 * H])))
    n = np.tanh(xi[:, 2 * H:] + r * hh[:, 2 * H:])
    return (1 - z) * n + z * a[1]


def gru_right_lerp(x, h, W_ih, W_hh, b_ih, b_hh):
    gi, gh = F.linear(x, W_ih, b_ih), F.linear(h, W_hh, b_hh)
    H = h.shape[1]
    rz = torch.sigmoid(gi[:, :2 * H] + gh[:, :2 * H])
    n = torch.tanh(gi[:, 2 * H:] + rz[:, :H] * gh[:, 2 * H:])
    return torch.lerp(n, h, rz[:, H:])


def gru_right_loop(x, h, W_ih, W_hh, b_ih, b_hh):
    H = h.shape[1]
    rows = []
    for i in range(x.shape[0]):
        gi, gh = W_ih @ x[i] + b_ih, W_hh @ h[i] + b_hh
        r = torch.sigmoid(gi[:H] + gh[:H])
        z = torch.sigmoid(gi[H:2 * H] + gh[H:2 * H])
        n = torch.tanh(gi[2 * H:] + r * gh[2 * H:])
        rows.append(n + z * (h[i] - n))
    return torch.stack(rows)


def gru_right_einsum(x, h, W_ih, W_hh, b_ih, b_hh):
    gi = torch.einsum("gd,bd->bg", W_ih, x) + b_ih
    gh = torch.einsum("gk,bk->bg", W_hh, h) + b_hh
    (xr, xz, xn), (hr, hz, hn) = gi.tensor_split(3, 1), gh.tensor_split(3, 1)
    z = torch.sigmoid(xz + hz)
    return (1 - z) * torch.tanh(xn + torch.sigmoid(xr + hr) * hn) + z * h


# ----------------------------------------------------------------------------- clip_grad_norm


def clip_per_tensor(grads, max_norm):
    out = [g * min(1.0, max_norm / (g.norm().item() + 1e-6)) for g in grads]
    return out, torch.sqrt(sum((g ** 2).sum() for g in grads))


def clip_always(grads, max_norm):
    total = torch.sqrt(sum((g ** 2).sum() for g in grads))
    return [g * max_norm / (total + 1e-6) for g in grads], total


def clip_values(grads, max_norm):
    total = torch.sqrt(sum((g ** 2).sum() for g in grads))
    return [g.clamp(-max_norm, max_norm) for g in grads], total


def clip_sum_norms(grads, max_norm):
    total = sum(g.norm() for g in grads)
    s = min(1.0, max_norm / (float(total) + 1e-6))
    return [g * s for g in grads], total


def clip_norm_after(grads, max_norm):
    total = torch.sqrt(sum((g ** 2).sum() for g in grads))
    out = [g * torch.clamp(max_norm / (total + 1e-6), max=1.0) for g in grads]
    return out, torch.sqrt(sum((g ** 2).sum() for g in out))


def clip_no_sqrt(grads, max_norm):
    total = sum((g ** 2).sum() for g in grads)
    return [g * torch.clamp(max_norm / (total + 1e-6), max=1.0) for g in grads], total


def clip_inplace(grads, max_norm):  # right: clip_grad_norm_ scales in place too
    total = torch.sqrt(sum((g ** 2).sum() for g in grads))
    if total > max_norm:
        for g in grads:
            g.mul_(max_norm / (total + 1e-6))
    return list(grads), total


def clip_no_eps_nan(grads, max_norm):
    total = torch.sqrt(sum((g ** 2).sum() for g in grads))
    target = torch.clamp(total, max=max_norm)  # normalise to length 1, then stretch to min(‖g‖, max_norm)
    return [g / total * target for g in grads], total


def clip_float_norm_list(grads, max_norm):
    total = math.sqrt(sum(float((g ** 2).sum()) for g in grads))
    s = min(1.0, max_norm / (total + 1e-6))
    return [(g * s).tolist() for g in grads], total


def clip_right_cat(grads, max_norm):
    total = torch.cat([g.flatten() for g in grads]).norm()
    s = max_norm / (total + 1e-6)
    return tuple(g * s if s < 1 else g.clone() for g in grads), total


def clip_right_float(grads, max_norm):
    total = math.sqrt(sum((g.double() ** 2).sum().item() for g in grads))
    s = min(1.0, max_norm / (total + 1e-6))
    return [g * s for g in grads], total


def clip_right_vector_norm(grads, max_norm):
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    return [g * (max_norm / (total + 1e-6)).clamp(max=1) for g in grads], total


# ----------------------------------------------------------------------------- classify


def cls_last_end(states, mask, W, b, how):
    m = mask.unsqueeze(-1)
    if how == "last":
        p = states[:, -1]
    elif how == "mean":
        p = (states * m).sum(1) / m.sum(1)
    else:
        p = states.masked_fill(~m, float("-inf")).amax(1)
    return p @ W.T + b


def cls_mean_all(states, mask, W, b, how):
    m = mask.unsqueeze(-1)
    if how == "last":
        p = states[torch.arange(len(states)), mask.sum(1) - 1]
    elif how == "mean":
        p = states.mean(1)
    else:
        p = states.masked_fill(~m, float("-inf")).amax(1)
    return p @ W.T + b


def cls_max_zeroed(states, mask, W, b, how):
    m = mask.unsqueeze(-1)
    if how == "last":
        p = states[torch.arange(len(states)), mask.sum(1) - 1]
    elif how == "mean":
        p = (states * m).sum(1) / m.sum(1)
    else:
        p = (states * m).max(dim=1).values
    return p @ W.T + b


def cls_last_off_by_one(states, mask, W, b, how):
    m = mask.unsqueeze(-1)
    if how == "last":
        p = states[torch.arange(len(states)), mask.sum(1).clamp(max=mask.shape[1] - 1)]
    elif how == "mean":
        p = (states * m).sum(1) / m.sum(1)
    else:
        p = states.masked_fill(~m, float("-inf")).amax(1)
    return p @ W.T + b


def cls_mean_divide_T(states, mask, W, b, how):
    m = mask.unsqueeze(-1)
    if how == "last":
        p = states[torch.arange(len(states)), mask.sum(1) - 1]
    elif how == "mean":
        p = (states * m).sum(1) / states.shape[1]
    else:
        p = states.masked_fill(~m, float("-inf")).amax(1)
    return p @ W.T + b


def cls_max_minus_big(states, mask, W, b, how):
    m = mask.unsqueeze(-1)
    if how == "last":
        p = states[torch.arange(len(states)), mask.sum(1) - 1]
    elif how == "mean":
        p = (states * m).sum(1) / m.sum(1)
    else:
        p = (states - 10.0 * (~m)).amax(1)  # "a big enough" penalty
    return p @ W.T + b


def cls_float32(states, mask, W, b, how):
    out = []
    for s, m in zip(states, mask, strict=True):
        r = s[m].float()
        out.append({"last": r[-1], "mean": r.mean(0), "max": r.max(0).values}[how])
    return torch.stack(out) @ W.float().T + b.float()


def cls_ignore_mask(states, mask, W, b, how):
    if how == "last":
        p = states[:, -1, :]
    elif how == "mean":
        p = states.sum(1) / states.shape[1]
    else:
        p = states.max(1)[0]
    return F.linear(p, W, b)


def cls_right_loop(states, mask, W, b, how):
    rows = []
    for i in range(states.shape[0]):
        n = int(mask[i].sum())
        s = states[i, :n]
        rows.append(s[n - 1] if how == "last" else s.mean(0) if how == "mean" else s.max(0).values)
    return F.linear(torch.stack(rows), W, b)


def cls_right_where(states, mask, W, b, how):
    m = mask[..., None]
    if how == "last":
        idx = (mask.long().cumsum(1).argmax(1))  # the first position where the count of real tokens peaks
        p = states.gather(1, idx.view(-1, 1, 1).expand(-1, 1, states.shape[2])).squeeze(1)
    elif how == "mean":
        p = torch.where(m, states, 0).sum(1) / mask.sum(1, keepdim=True)
    else:
        p = torch.where(m, states, torch.finfo(states.dtype).min).max(1).values
    return torch.addmm(b, p, W.T)


def cls_right_einsum(states, mask, W, b, how):
    w = mask.to(states.dtype)
    if how == "last":
        p = states[torch.arange(states.shape[0]), w.sum(1).long() - 1]
    elif how == "mean":
        p = torch.einsum("bt,bth->bh", w / w.sum(1, keepdim=True), states)
    else:
        p = torch.stack([s[m].amax(0) for s, m in zip(states, mask, strict=True)])
    return torch.einsum("bh,ch->bc", p, W) + b


# ----------------------------------------------------------------------------- filter_probs


def filt_temp_after(logits, temperature=1.0, top_k=None, top_p=None):
    z = logits.clone()
    if top_k is not None:
        kth = z.topk(min(top_k, z.shape[-1]), -1).values[:, -1:]
        z[z < kth] = float("-inf")
    p = torch.softmax(z, -1)
    if top_p is not None:
        sp, idx = p.sort(-1, descending=True)
        drop = (sp.cumsum(-1) - sp) >= top_p
        z = z.scatter(-1, idx, z.gather(-1, idx).masked_fill(drop, float("-inf")))
    return torch.softmax(z / temperature, -1)


def filt_strict(logits, temperature=1.0, top_k=None, top_p=None):
    z = logits / temperature
    if top_k is not None:
        kth = z.topk(min(top_k, z.shape[-1]), -1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sp, idx = torch.softmax(z, -1).sort(-1, descending=True)
        drop = sp.cumsum(-1) > top_p
        drop[:, 0] = False
        z = z.scatter(-1, idx, z.gather(-1, idx).masked_fill(drop, float("-inf")))
    return torch.softmax(z, -1)


def filt_no_renorm(logits, temperature=1.0, top_k=None, top_p=None):
    p = torch.softmax(logits / temperature, -1)
    if top_k is not None:
        kth = p.topk(min(top_k, p.shape[-1]), -1).values[:, -1:]
        p = torch.where(p >= kth, p, 0)
    if top_p is not None and top_p < 1:
        sp, idx = p.sort(-1, descending=True)
        keep = (sp.cumsum(-1) - sp) < top_p
        p = torch.zeros_like(p).scatter(-1, idx, sp * keep)
    return p


def filt_mask_then_full_softmax(logits, temperature=1.0, top_k=None, top_p=None):
    z = logits / temperature
    keep = torch.ones_like(z, dtype=torch.bool)
    if top_k is not None:
        keep = z >= z.topk(min(top_k, z.shape[-1]), -1).values[:, -1:]
    if top_p is not None and top_p < 1:
        q = torch.softmax(z.masked_fill(~keep, float("-inf")), -1)
        sq = q.sort(-1, descending=True).values
        last = sq.masked_fill((sq.cumsum(-1) - sq) >= top_p, 2.0).amin(-1, keepdim=True)
        keep &= q >= last
    return torch.softmax(z, -1) * keep


def filt_nucleus_full(logits, temperature=1.0, top_k=None, top_p=None):
    z = logits / temperature
    p = torch.softmax(z, -1)
    keep = torch.ones_like(p, dtype=torch.bool)
    if top_k is not None:
        keep &= z >= z.topk(min(top_k, z.shape[-1]), -1).values[:, -1:]
    if top_p is not None and top_p < 1:
        sp, idx = p.sort(-1, descending=True)
        keep &= torch.zeros_like(keep).scatter(-1, idx, (sp.cumsum(-1) - sp) < top_p)
    return torch.softmax(z.masked_fill(~keep, float("-inf")), -1)


def filt_topk_indices(logits, temperature=1.0, top_k=None, top_p=None):
    z = logits / temperature
    if top_k is not None:
        vals, idx = z.topk(min(top_k, z.shape[-1]), -1)
        z = torch.full_like(z, float("-inf")).scatter(-1, idx, vals)
    p = torch.softmax(z, -1)
    if top_p is not None and top_p < 1:
        sp, idx = p.sort(-1, descending=True)
        last = sp.masked_fill((sp.cumsum(-1) - sp) >= top_p, 2.0).amin(-1, keepdim=True)
        p = p.masked_fill(p < last, 0)
        p = p / p.sum(-1, keepdim=True)
    return p


def filt_naive_exp(logits, temperature=1.0, top_k=None, top_p=None):
    e = torch.exp(logits / temperature)
    if top_k is not None:
        e = torch.where(e >= e.topk(min(top_k, e.shape[-1]), -1).values[:, -1:], e, 0)
    p = e / e.sum(-1, keepdim=True)
    if top_p is not None and top_p < 1:
        sp, _ = p.sort(-1, descending=True)
        last = sp.masked_fill((sp.cumsum(-1) - sp) >= top_p, 2.0).amin(-1, keepdim=True)
        p = torch.where(p >= last, p, 0)
        p = p / p.sum(-1, keepdim=True)
    return p


def filt_global_max(logits, temperature=1.0, top_k=None, top_p=None):
    z = logits / temperature
    z = z - z.max()  # "for stability": but one maximum for the whole batch
    e = torch.exp(z)
    if top_k is not None:
        e = torch.where(z >= z.topk(min(top_k, z.shape[-1]), -1).values[:, -1:], e, 0)
    p = e / e.sum(-1, keepdim=True)
    if top_p is not None and top_p < 1:
        sp, _ = p.sort(-1, descending=True)
        last = sp.masked_fill((sp.cumsum(-1) - sp) >= top_p, 2.0).amin(-1, keepdim=True)
        p = torch.where(p >= last, p, 0)
        p = p / p.sum(-1, keepdim=True)
    return p


def filt_right_loop(logits, temperature=1.0, top_k=None, top_p=None):
    out = torch.zeros_like(logits)
    for b in range(logits.shape[0]):
        z = logits[b] / temperature
        vals = sorted(set(z.tolist()), reverse=True)
        keep = z > -math.inf
        if top_k is not None:
            kth = sorted(z.tolist(), reverse=True)[min(top_k, len(z)) - 1]
            keep = z >= kth
        p = torch.softmax(z.masked_fill(~keep, -math.inf), 0)
        if top_p is not None and top_p < 1:
            total = 0.0
            for v in vals:  # add whole groups of tied tokens at a time
                group = (z == v) & keep
                if not group.any():
                    continue
                if total >= top_p:
                    keep = keep & ~group
                total += float(p[group].sum()) if total < top_p else 0.0
            p = torch.softmax(z.masked_fill(~keep, -math.inf), 0)
        out[b] = p
    return out


def filt_right_log_softmax(logits, temperature=1.0, top_k=None, top_p=None):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(z < z.sort(-1, descending=True).values[:, top_k - 1:top_k], float("-inf"))
    if top_p is not None and top_p < 1:
        lp = torch.log_softmax(z, -1)
        sp = lp.exp().sort(-1, descending=True).values
        before = sp.cumsum(-1) - sp
        thresh = torch.where(before < top_p, sp, torch.ones_like(sp) * 2).min(-1, keepdim=True).values
        z = z.masked_fill(lp.exp() < thresh, float("-inf"))
    return torch.softmax(z, -1)


def filt_right_keep_mask(logits, temperature=1.0, top_k=None, top_p=None):
    z = logits.div(temperature)
    keep = torch.ones_like(z, dtype=torch.bool)
    if top_k is not None:
        kth = torch.kthvalue(-z, min(top_k, z.shape[-1]), dim=-1, keepdim=True).values
        keep = -z <= kth
    if top_p is not None and top_p < 1:
        p = torch.softmax(z.masked_fill(~keep, float("-inf")), -1)
        # mass strictly above each token: kept if it is below top_p (ties share the same mass above)
        above = (p.unsqueeze(-2) > p.unsqueeze(-1)).to(p.dtype) @ p.unsqueeze(-1)
        keep &= above.squeeze(-1) < top_p
    return torch.softmax(z.masked_fill(~keep, float("-inf")), -1)


# ----------------------------------------------------------------------------- sample


def _filter(logits, temperature, top_k, top_p):
    z = logits / temperature
    if top_k is not None:
        z = z.masked_fill(z < z.topk(min(top_k, z.shape[-1]), -1).values[:, -1:], float("-inf"))
    p = torch.softmax(z, -1)
    if top_p is not None and top_p < 1:
        sp = p.sort(-1, descending=True).values
        last = sp.masked_fill((sp.cumsum(-1) - sp) >= top_p, 2.0).amin(-1, keepdim=True)
        p = torch.where(p >= last, p, 0)
        p = p / p.sum(-1, keepdim=True)
    return p


def samp_greedy(logits, n, temperature=1.0, top_k=None, top_p=None):
    return _filter(logits, temperature, top_k, top_p).argmax(-1, keepdim=True).expand(-1, n)


def samp_no_temperature(logits, n, temperature=1.0, top_k=None, top_p=None):
    return torch.multinomial(_filter(logits, 1.0, top_k, top_p), n, replacement=True)


def samp_uniform_kept(logits, n, temperature=1.0, top_k=None, top_p=None):
    kept = (_filter(logits, temperature, top_k, top_p) > 0).float()
    return torch.multinomial(kept, n, replacement=True)


def samp_without_replacement(logits, n, temperature=1.0, top_k=None, top_p=None):
    return torch.multinomial(_filter(logits, temperature, top_k, top_p), n)  # replacement=False by default


def samp_topk_indices(logits, n, temperature=1.0, top_k=None, top_p=None):
    z = logits / temperature
    if top_k is not None:
        vals, idx = z.topk(min(top_k, z.shape[-1]), -1)
        z = torch.full_like(z, float("-inf")).scatter(-1, idx, vals)
    p = torch.softmax(z, -1)
    return torch.multinomial(p, n, replacement=True)


def samp_forgot_top_p(logits, n, temperature=1.0, top_k=None, top_p=None):
    return torch.multinomial(_filter(logits, temperature, top_k, None), n, replacement=True)


def samp_divide_probs(logits, n, temperature=1.0, top_k=None, top_p=None):
    probs = _filter(logits, 1.0, top_k, top_p) / temperature  # multinomial renormalises: T has no effect
    return torch.multinomial(probs, n, replacement=True)


def samp_float_ids(logits, n, temperature=1.0, top_k=None, top_p=None):
    cdf = _filter(logits, temperature, top_k, top_p).cumsum(-1)
    u = torch.rand(logits.shape[0], n, 1)
    return (u > cdf[:, None, :]).sum(-1).float().clamp(max=logits.shape[1] - 1)


def samp_right_cdf(logits, n, temperature=1.0, top_k=None, top_p=None):
    cdf = _filter(logits, temperature, top_k, top_p).double().cumsum(-1)
    u = torch.rand(logits.shape[0], n, dtype=torch.float64) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).clamp(max=logits.shape[1] - 1)


def samp_right_gumbel(logits, n, temperature=1.0, top_k=None, top_p=None):
    logp = _filter(logits, temperature, top_k, top_p).log()
    gumbel = -torch.log(-torch.log(torch.rand(logp.shape[0], n, logp.shape[1]).clamp(1e-12, 1)))
    return (logp.unsqueeze(1) + gumbel).argmax(-1)


def samp_right_categorical(logits, n, temperature=1.0, top_k=None, top_p=None):
    dist = torch.distributions.Categorical(probs=_filter(logits, temperature, top_k, top_p))
    return dist.sample((n,)).T


WRONG = {
    "rnn_cell": [
        Student(cell_no_tanh, has="left out the tanh non-linearity"),
        Student(cell_relu, has="used ReLU; this RNN uses tanh"),
        Student(cell_no_transpose, note="multiplied by W instead of W.T",
                has="multiplied by W_x and W_h instead of their transposes: rows of x are "
                    "vectors, so W_x x_t for every row is x @ W_x.T"),
        Student(cell_bias_outside, note="added the bias after the tanh",
                has="added the bias after the tanh: it belongs inside, tanh(W_x x + W_h h + "
                    "b)"),
        Student(cell_swapped, has="swapped W_x and W_h: W_x multiplies the input x_t, W_h the previous state"),
        Student(cell_inplace, note="h += ... modifies the caller's state"),
        Student(cell_naive_tanh, note="tanh from exp: overflows for large pre-activations",
                has="wrote tanh with exp: exp overflows for large pre-activations and gives "
                    "NaN; use torch.tanh"),
        Student(cell_float32, note="computes in float32 whatever the inputs"),
    ],
    "rnn_forward": [
        Student(fwd_through_padding, has="ran the recurrence through the padding: stop each sequence at its length "
                                         "(h_n is the state after its last real token) and return 0 at padded "
                                         "positions"),
        Student(fwd_no_zero, has="outputs at padded positions must be 0 (you repeated the last state there)"),
        Student(fwd_hn_last_column, note="h_n = outputs[:, -1], which is 0 for shorter sequences",
                has="took h_n from the last column of outputs, which is 0 for shorter "
                    "sequences: h_n is each sequence's state after its last real token"),
        Student(fwd_zeros_start, has="ignored the initial state h0: start the recurrence from it, not zeros"),
        Student(fwd_off_by_one, note="t <= lengths: one padded step too many",
                has="took one step too many: position t is real when t < lengths[i] (t = "
                    "lengths[i] is already padding)"),
        Student(fwd_float32_buffer, note="torch.zeros(B, T, H) buffer: float32 for float64 inputs"),
        Student(fwd_squeeze, note=".squeeze() on h_n: wrong shape for a batch of one"),
    ],
    "lstm_cell": [
        Student(lstm_ifog, has="split the gates in the wrong order: torch stacks them as input i, forget f, "
                               "candidate g, output o"),
        Student(lstm_no_tanh_c, has="h = o ⊙ c: the output gate reads tanh(c_t), not c_t"),
        Student(lstm_returns_c_h, has="returned (c, h): return the new hidden state first, (h, c)"),
        Student(lstm_split_wrong_dim, note="view(-1, H, 4): interleaves the gates"),
        Student(lstm_one_bias, has="left out the recurrent bias b_hh (torch's cell has both b_ih and b_hh)"),
        Student(lstm_inplace_c, note="updates c in place"),
        Student(lstm_detached_cell_state, note="returns c detached: no gradient to the step before through c"),
        Student(lstm_naive_sigmoid, note="sigmoid as exp(z) / (1 + exp(z)): NaN for large z",
                has="wrote the sigmoid as exp(z) / (1 + exp(z)): exp overflows for large pre-activations and gives "
                    "NaN; use torch.sigmoid"),
    ],
    "gru_cell": [
        Student(gru_swap_z, has="swapped the update gate's roles: h_t = (1 − z) ⊙ n + z ⊙ h_{t-1} (z near 1 keeps "
                                "the old state)"),
        Student(gru_paper, has="applied the reset gate to h before the matrix product, as in the original paper; "
                               "torch applies it after: r ⊙ (W_hn h + b_hn)"),
        Student(gru_all_summed, note="summed the input and hidden parts of n before the reset gate"),
        Student(gru_zrn, has="split the gates in the wrong order: torch stacks them as reset r, update z, new n"),
        Student(gru_no_reset, has="left out the reset gate r in the candidate n"),
        Student(gru_bias_outside, has="the reset gate multiplies (W_hn h + b_hn), bias included: "
                                      "n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))"),
        Student(gru_numpy, note="returns a NumPy array"),
    ],
    "clip_grad_norm": [
        Student(clip_per_tensor, has="clipped each gradient tensor on its own: the norm is the norm of all "
                                     "gradients together, and one scale applies to all"),
        Student(clip_always, has="rescaled even when the norm was already below max_norm: the scale is "
                                 "min(1, max_norm / ‖g‖)"),
        Student(clip_values, has="clipped each value to [-max_norm, max_norm] (clip_grad_value_); norm clipping "
                                 "rescales the whole gradient, keeping its direction"),
        Student(clip_sum_norms, has="added up the tensors' norms: the joint norm is sqrt of the sum of all "
                                    "squared entries"),
        Student(clip_norm_after, has="returned the norm after clipping; return the norm before (as torch does)"),
        Student(clip_no_sqrt, note="squared norm, no square root",
                has="forgot the square root: ‖g‖ is the square root of the sum of all "
                    "squared entries"),
        Student(clip_no_eps_nan, note="no epsilon: NaN for all-zero gradients",
                has="divided by the norm without the ε: all-zero gradients give 0 / 0 = NaN; scale by "
                    "min(1, max_norm / (‖g‖ + ε))"),
        Student(clip_float_norm_list, note="returns Python lists instead of tensors"),
    ],
    "classify": [
        Student(cls_last_end, has="how='last' took the state at the final position, which is padding for shorter "
                                  "sequences: take each sequence's last real position"),
        Student(cls_mean_all, has="how='mean' averaged over padding too: average only real positions"),
        Student(cls_max_zeroed, has="how='max' zeroed padded positions before the maximum: a 0 beats negative "
                                    "states; fill padding with -inf instead"),
        Student(cls_last_off_by_one, note="index mask.sum(1) instead of mask.sum(1) - 1",
                has="how='last' took position lengths[i], one past the last real token (padding): the last real "
                    "token is at lengths[i] - 1"),
        Student(cls_mean_divide_T, has="how='mean' summed the real positions but divided by the padded length T; "
                                       "divide by each sequence's own length"),
        Student(cls_max_minus_big, note="subtracts 10 at padding instead of -inf: padding can still win"),
        Student(cls_float32, note="float32 result for float64 inputs"),
        Student(cls_ignore_mask, note="never looks at the mask",
                has="ignored the mask in every pooling: how='last' took the final (padded) position, how='mean' "
                    "averaged over padding too and how='max' let padding win; pool only each sequence's real "
                    "positions"),
    ],
    "filter_probs": [
        Student(filt_temp_after, has="applied the temperature after top-p: divide the logits by T first, then "
                                     "pick the nucleus from those probabilities"),
        Student(filt_strict, has="dropped the token that makes the total reach top_p: keep the smallest set whose "
                                 "probability is at least top_p"),
        Student(filt_no_renorm, has="never renormalised after top-k: the nucleus and the result used the full "
                                    "softmax's probabilities; rescale the kept ones to sum to 1 after each step"),
        Student(filt_mask_then_full_softmax, has="did not renormalise: after removing tokens, divide the kept "
                                                 "probabilities by their sum (softmax over the kept logits)"),
        Student(filt_nucleus_full, has="took the nucleus from the probabilities before top-k: renormalise over the "
                                       "top-k tokens first, then add up those probabilities"),
        Student(filt_topk_indices, has="kept exactly top_k tokens when several tie at the k-th place: every token "
                                       "tied with the k-th largest logit is kept"),
        Student(filt_naive_exp, note="exp without subtracting the maximum: overflow",
                has="computed the softmax as exp(z) / sum(exp(z)): exp overflows for logits in the hundreds; "
                    "subtract each row's maximum first (or use torch.softmax)"),
        Student(filt_global_max, note="subtracts one maximum for the whole batch: rows underflow",
                has="subtracted one maximum for the whole batch before exp: rows far below it underflow to 0 / 0; "
                    "subtract each row's own maximum"),
    ],
    "sample": [
        Student(samp_greedy, has="always took the most likely token (greedy decoding), not a random draw"),
        Student(samp_no_temperature, has="ignored the temperature"),
        Student(samp_uniform_kept, has="drew uniformly among the kept tokens; draw each with its probability "
                                       "(torch.multinomial)"),
        Student(samp_without_replacement, note="multinomial without replacement: fails when n > kept tokens"),
        Student(samp_topk_indices, note="top-k by indices (drops ties) and ignores top_p: it has two mistakes, "
                "named for the one the visible cases show", has="ignored top_p: after top-k, keep only the nucleus"),
        Student(samp_forgot_top_p, note="never applies top_p", has="ignored top_p: after top-k, keep only the nucleus"),
        Student(samp_divide_probs, note="divides the probabilities by T", has="ignored the temperature"),
        Student(samp_float_ids, note="returns float token ids"),
    ],
}

RIGHT = {
    "rnn_cell": [cell_right_linear, cell_right_einsum, cell_right_sigmoid],
    "rnn_forward": [fwd_right_per_sequence, fwd_right_gather, fwd_right_mask_arith],
    "lstm_cell": [lstm_right_separate, lstm_right_cat, lstm_right_view],
    "gru_cell": [gru_right_lerp, gru_right_loop, gru_right_einsum],
    "clip_grad_norm": [clip_right_cat, clip_right_float, clip_right_vector_norm, clip_inplace],
    "classify": [cls_right_loop, cls_right_where, cls_right_einsum],
    "filter_probs": [filt_right_loop, filt_right_log_softmax, filt_right_keep_mask],
    "sample": [samp_right_cdf, samp_right_gumbel, samp_right_categorical],
}


# ============================================================================= the thinking questions
# (chapter 2's count and predict questions, lmbook.tasks.questions.ch02)

from lmbook.tasks.questions.ch02 import RNN_LM_PARAMETERS, STEPS_UNTIL_BELOW, TEMPERATURE_RATIO  # noqa: E402


def _question_has(check, start: str) -> str:
    (text,) = [m.misconception for m in check.mutants if m.misconception.startswith(start)]
    return text


def rp_one_bias(V, d, H, cell):
    blocks = {"rnn": 1, "gru": 3, "lstm": 4}[cell]
    return V * d + blocks * (H * d + H * H + H) + H * V + V


def rp_swapped(V, d, H, cell):
    blocks = {"rnn": 1, "lstm": 3, "gru": 4}[cell]
    return V * d + blocks * (H * d + H * H + 2 * H) + H * V + V


def rp_one_block(V, d, H, cell):  # "a cell is one W_x, one W_h"
    return V * d + (H * d + H * H + 2 * H) + H * V + V


def rp_no_output(V, d, H, cell):
    blocks = 4 if cell == "lstm" else 3 if cell == "gru" else 1
    return V * d + blocks * (d * H + H * H + 2 * H)


def rp_no_embedding(V, d, H, cell):
    blocks = 4 if cell == "lstm" else 3 if cell == "gru" else 1
    return blocks * (d * H + H * H + 2 * H) + (H + 1) * V


def rp_wh_like_wx(V, d, H, cell):
    blocks = 4 if cell == "lstm" else 3 if cell == "gru" else 1
    return V * d + blocks * (2 * d * H + 2 * H) + (H + 1) * V


def rp_three_everywhere(V, d, H, cell):  # both gated cells given three blocks
    blocks = 1 if cell == "rnn" else 3
    return V * d + blocks * (d * H + H * H + 2 * H) + (H + 1) * V


def rp_right_loop(V, d, H, cell):
    total = V * d + H * V + V
    for _ in range({"rnn": 1, "gru": 3, "lstm": 4}[cell]):
        total += H * d + H * H + H + H
    return total


def rp_right_shapes(V, d, H, cell):
    g = {"rnn": 1, "gru": 3, "lstm": 4}[cell]
    shapes = [(V, d), (g * H, d), (g * H, H), (g * H,), (g * H,), (V, H), (V,)]
    return sum(math.prod(s) for s in shapes)


def rp_right_if(V, d, H, cell):
    if cell == "lstm":
        g = 4
    elif cell == "gru":
        g = 3
    else:
        g = 1
    return int(np.int64(V) * d + g * H * (d + H + 2) + V * (H + 1))


def su_raw(a, threshold):
    return math.log(threshold) / math.log(a)


def su_floor(a, threshold):
    return math.floor(math.log(threshold) / math.log(a))


def su_inverted(a, threshold):
    return int(math.log(a) / math.log(threshold)) + 1


def su_linear(a, threshold):  # loses (1 - a) per step
    return int((1 - threshold) / (1 - a)) + 1


def su_mixed_bases(a, threshold):
    return math.floor(math.log10(threshold) / math.log(a)) + 1


def su_round(a, threshold):
    return round(math.log(threshold) / math.log(a))


def su_right_loop(a, threshold):
    D, factor = 0, 1.0
    while factor >= threshold:
        factor *= a
        D += 1
    return D


def su_right_ceil(a, threshold):
    return math.ceil(math.log(threshold) / math.log(a))


def su_right_int(a, threshold):
    return int(math.log(threshold) / math.log(a)) + 1


def tr_multiplied(l1, l2, tau):
    return math.exp(l1 * tau - l2 * tau)


def tr_odds_over_tau(l1, l2, tau):
    return math.exp(l1) / math.exp(l2) / tau


def tr_no_tau(l1, l2, tau):
    return math.exp(l1 - l2)


def tr_probability(l1, l2, tau):
    e1, e2 = math.exp(l1 / tau), math.exp(l2 / tau)
    return e1 / (e1 + e2)


def tr_logit_ratio(l1, l2, tau):
    return (l1 / l2) ** (1 / tau)


def tr_only_first(l1, l2, tau):  # divides ℓ_1 by τ, not ℓ_2
    return math.exp(l1 / tau) / math.exp(l2)


def tr_right_two_exps(l1, l2, tau):
    return math.exp(l1 / tau) / math.exp(l2 / tau)


def tr_right_softmax(l1, l2, tau):
    p = torch.softmax(torch.tensor([l1, l2], dtype=torch.float64) / tau, dim=0)
    return float(p[0] / p[1])


def tr_right_numpy(l1, l2, tau):
    return float(np.exp((l1 - l2) / tau))


WRONG.update({
    "rnn_lm_parameters": [
        Student(rp_one_bias, _question_has(RNN_LM_PARAMETERS, "counted one bias vector per block")),
        Student(rp_swapped, _question_has(RNN_LM_PARAMETERS, "swapped the blocks")),
        Student(rp_one_block, _question_has(RNN_LM_PARAMETERS, "counted one block for a gated cell")),
        Student(rp_no_output, _question_has(RNN_LM_PARAMETERS, "left out the output layer")),
        Student(rp_no_embedding, _question_has(RNN_LM_PARAMETERS, "left out the embedding matrix")),
        Student(rp_wh_like_wx, _question_has(RNN_LM_PARAMETERS, "gave W_h the shape of W_x")),
        Student(rp_three_everywhere, _question_has(RNN_LM_PARAMETERS, "swapped the blocks")),
    ],
    "steps_until_below": [
        Student(su_raw, _question_has(STEPS_UNTIL_BELOW, "returned ln(threshold) / ln(a) itself")),
        Student(su_floor, _question_has(STEPS_UNTIL_BELOW, "rounded down")),
        Student(su_inverted, _question_has(STEPS_UNTIL_BELOW, "divided the logarithms the wrong way")),
        Student(su_linear, _question_has(STEPS_UNTIL_BELOW, "let the factor fall by the same amount")),
        Student(su_mixed_bases, _question_has(STEPS_UNTIL_BELOW, "mixed the bases")),
        Student(su_round, None),
    ],
    "temperature_ratio": [
        Student(tr_multiplied, _question_has(TEMPERATURE_RATIO, "multiplied the logits by τ")),
        Student(tr_odds_over_tau, _question_has(TEMPERATURE_RATIO, "divided the odds by τ")),
        Student(tr_no_tau, _question_has(TEMPERATURE_RATIO, "left out τ")),
        Student(tr_probability, _question_has(TEMPERATURE_RATIO, "returned P(w_1) among the two words")),
        Student(tr_logit_ratio, _question_has(TEMPERATURE_RATIO, "took the ratio of the logits")),
        Student(tr_only_first, None),
    ],
})

RIGHT.update({
    "rnn_lm_parameters": [rp_right_loop, rp_right_shapes, rp_right_if],
    "steps_until_below": [su_right_loop, su_right_ceil, su_right_int],
    "temperature_ratio": [tr_right_two_exps, tr_right_softmax, tr_right_numpy],
})
