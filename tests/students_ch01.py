"""Exercise 1 (the feedforward neural LM) as students write it: wrong answers with the mistake they have, and
right ones written differently from the reference (see test_students.py)."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from check_contract import Student

from lmbook.tasks.ch01 import CROSS_ENTROPY, FFNN_FORWARD, LOG_SOFTMAX, PERPLEXITY, SGNS_LOSS


def _has(check, start: str) -> str:
    """The misconception of ``check``'s Mutant that begins with ``start`` (word for word)."""
    (text,) = [m.misconception for m in check.mutants if m.misconception.startswith(start)]
    return text


# ----------------------------------------------------------------------------- log_softmax

def ls_literal(x, dim=-1):  # the formula as written, no shift
    return torch.log(torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True))


def ls_global_max(x, dim=-1):  # one maximum for the whole tensor: rows far below it underflow
    m = x.max()
    return x - m - torch.log(torch.exp(x - m).sum(dim=dim, keepdim=True))


def ls_last_dim(x, dim=-1):  # stable, but always over the last dimension
    m = x.max(dim=-1, keepdim=True).values
    return x - m - torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))


def ls_no_keepdim(x, dim=-1):  # max without keepdim: broadcasts along the wrong axis, or raises
    m = x.max(dim=dim).values
    return x - m - torch.log(torch.exp(x - m).sum(dim=dim))


def ls_in_place(x, dim=-1):  # shifts the caller's tensor
    x -= x.amax(dim=dim, keepdim=True)
    return x - x.exp().sum(dim=dim, keepdim=True).log()


def ls_float32(x, dim=-1):  # "to be safe", converts to float32: float64 inputs come back in float32
    x = x.float()
    m = x.amax(dim=dim, keepdim=True)
    return x - m - (x - m).exp().sum(dim=dim, keepdim=True).log()


def ls_log_of_stable_softmax(x, dim=-1):  # a stable softmax, then its log: tiny probabilities become log(0)
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return torch.log(e / e.sum(dim=dim, keepdim=True))


def ls_sum_everything(x, dim=-1):  # normalises by the sum over the whole tensor
    m = x.max()
    return x - m - torch.log(torch.exp(x - m).sum())


def ls_python_float_lse(x, dim=-1):  # right values; the log-sum-exp is a Python float, outside the graph
    moved = x.movedim(dim, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    out = []
    for row in rows:
        m = max(float(v) for v in row)
        lse = m + math.log(sum(math.exp(float(v) - m) for v in row))
        out.append(row - lse)  # the gradient for x is 1, not 1 - softmax(x)
    return torch.stack(out).reshape(moved.shape).movedim(-1, dim)


def ls_right_loop(x, dim=-1):
    moved = x.movedim(dim, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    out = torch.empty_like(rows)
    for i, row in enumerate(rows):
        m = row.max()
        out[i] = row - m - torch.log(torch.sum(torch.exp(row - m)))
    return out.reshape(moved.shape).movedim(-1, dim)


def ls_right_add_back(x, dim=-1):
    m = torch.max(x, dim=dim, keepdim=True)[0]
    lse = m + torch.exp(x - m).sum(dim, keepdim=True).log()
    return x - lse


def ls_right_detached_max(x, dim=-1):
    m = x.detach().amax(dim, keepdim=True)
    return (x - m).sub((x - m).exp().sum(dim, keepdim=True).log())


# ----------------------------------------------------------------------------- cross_entropy

def _logp(logits):
    m = logits.amax(-1, keepdim=True)
    return (logits - m) - (logits - m).exp().sum(-1, keepdim=True).log()


def ce_no_mask(logits, targets, ignore_index=-100):  # gathers at -100: an index error
    logp = _logp(logits).reshape(-1, logits.shape[-1])
    return -logp.gather(1, targets.reshape(-1, 1)).mean()


def ce_mask_times(logits, targets, ignore_index=-100):  # zeroes the padding, but divides by every position
    logp = _logp(logits).reshape(-1, logits.shape[-1])
    t = targets.reshape(-1)
    mask = (t != ignore_index).float()
    nll = -logp.gather(1, t.clamp(min=0).unsqueeze(1)).squeeze(1)
    return (nll * mask).mean()


def ce_minus_100(logits, targets, ignore_index=-100):  # the padding id hard-coded
    logp = _logp(logits).reshape(-1, logits.shape[-1])
    t = targets.reshape(-1)
    keep = t != -100
    return -logp[keep, t[keep]].mean()


def ce_naive_logsoftmax(logits, targets, ignore_index=-100):  # log of sum of exp, unshifted
    logp = logits - logits.exp().sum(-1, keepdim=True).log()
    logp, t = logp.reshape(-1, logits.shape[-1]), targets.reshape(-1)
    keep = t != ignore_index
    return -logp[keep].gather(1, t[keep][:, None]).mean()


def ce_item(logits, targets, ignore_index=-100):  # a Python float, not a tensor
    logp, t = _logp(logits).reshape(-1, logits.shape[-1]), targets.reshape(-1)
    keep = t != ignore_index
    return -logp[keep, t[keep]].mean().item()


def ce_per_sequence(logits, targets, ignore_index=-100):  # mean per sentence, then mean of the sentences
    if targets.dim() == 1:
        logits, targets = logits[None], targets[None]
    logp = _logp(logits)
    means = []
    for b in range(targets.shape[0]):
        keep = targets[b] != ignore_index
        means.append(-logp[b][keep].gather(1, targets[b][keep].unsqueeze(1)).mean())
    return torch.stack(means).mean()


def ce_zero_pads_in_place(logits, targets, ignore_index=-100):  # overwrites the caller's padding ids
    keep = targets != ignore_index
    targets[~keep] = 0
    logp = _logp(logits)
    return -(logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1) * keep).sum() / keep.sum()


def ce_view(logits, targets, ignore_index=-100):  # .view flattens a fresh tensor, not logits[:, :-1]
    logp, t = _logp(logits.view(-1, logits.shape[-1])), targets.view(-1)
    keep = t != ignore_index
    return -logp[keep].gather(1, t[keep].unsqueeze(1)).mean()


def ce_log_of_softmax(logits, targets, ignore_index=-100):  # a stable softmax, then its log
    logp, t = torch.softmax(logits, -1).log().reshape(-1, logits.shape[-1]), targets.reshape(-1)
    keep = t != ignore_index
    return -logp[keep].gather(1, t[keep].unsqueeze(1)).mean()


def ce_constant_normaliser(logits, targets, ignore_index=-100):  # "the log-sum-exp is only a constant"
    lse = torch.logsumexp(logits, -1, keepdim=True).detach()
    logp, t = (logits - lse).reshape(-1, logits.shape[-1]), targets.reshape(-1)
    keep = t != ignore_index
    return -logp[keep].gather(1, t[keep].unsqueeze(1)).mean()


def ce_right_loop(logits, targets, ignore_index=-100):
    flat, t = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
    total, n = 0.0, 0
    for i in range(len(t)):
        if t[i] == ignore_index:
            continue
        row = flat[i]
        m = row.max()
        total = total + (m + torch.log(torch.exp(row - m).sum()) - row[t[i]])
        n += 1
    return total / n


def ce_right_onehot(logits, targets, ignore_index=-100):
    keep = targets != ignore_index
    onehot = F.one_hot(torch.where(keep, targets, 0), logits.shape[-1]).to(logits.dtype)
    nll = -(onehot * _logp(logits)).sum(-1)
    return torch.where(keep, nll, torch.zeros_like(nll)).sum() / keep.sum()


def ce_right_lse_minus_picked(logits, targets, ignore_index=-100):
    keep = targets != ignore_index
    lg, t = logits[keep], targets[keep]
    m = lg.max(-1).values
    lse = m + (lg - m[:, None]).exp().sum(-1).log()
    return (lse - lg[torch.arange(len(t)), t]).mean()


# ----------------------------------------------------------------------------- perplexity

def _ce(logits, targets, ignore_index=-100):
    logp, t = _logp(logits).reshape(-1, logits.shape[-1]), targets.reshape(-1)
    keep = t != ignore_index
    return -logp[keep, t[keep]].mean()


def ppl_tensor(logits, targets, ignore_index=-100):  # a tensor, not a float
    return torch.exp(_ce(logits, targets, ignore_index))


def ppl_mean_of_inverse_probs(logits, targets, ignore_index=-100):  # averages exp(-log p) per word
    logp, t = _logp(logits).reshape(-1, logits.shape[-1]), targets.reshape(-1)
    keep = t != ignore_index
    return float(torch.exp(-logp[keep, t[keep]]).mean())


def ppl_base_two(logits, targets, ignore_index=-100):
    return math.pow(2, _ce(logits, targets, ignore_index).item())


def ppl_total(logits, targets, ignore_index=-100):  # exp of the summed NLL
    logp, t = _logp(logits).reshape(-1, logits.shape[-1]).double(), targets.reshape(-1)
    keep = t != ignore_index
    return math.exp(-logp[keep, t[keep]].sum().item())


def ppl_over_padding(logits, targets, ignore_index=-100):  # divides by every position
    logp, t = _logp(logits).reshape(-1, logits.shape[-1]), targets.reshape(-1)
    keep = t != ignore_index
    return math.exp(-logp[keep, t[keep]].sum().item() / t.numel())


def ppl_forgets_ignore_index(logits, targets, ignore_index=-100):  # calls cross-entropy without ignore_index
    return math.exp(_ce(logits, targets).item())


def ppl_inverse_mean_prob(logits, targets, ignore_index=-100):  # 1 / average probability
    logp, t = _logp(logits).reshape(-1, logits.shape[-1]), targets.reshape(-1)
    keep = t != ignore_index
    return 1.0 / logp[keep, t[keep]].exp().mean().item()


def ppl_right_numpy(logits, targets, ignore_index=-100):  # a NumPy float: a number all the same
    return np.exp(_ce(logits, targets, ignore_index).detach().cpu().numpy())


def ppl_right_geometric(logits, targets, ignore_index=-100):  # geometric mean of 1/p
    logp, t = _logp(logits).double().reshape(-1, logits.shape[-1]), targets.reshape(-1)
    keep = t != ignore_index
    return math.exp(-sum(logp[keep, t[keep]].tolist()) / int(keep.sum()))


def ppl_right_torch(logits, targets, ignore_index=-100):
    return torch.exp(_ce(logits, targets, ignore_index)).item()


# ----------------------------------------------------------------------------- ffnn_forward

def ff_interleaved(context, E, W, b, U, c):  # reshapes (B, d, m): embedding dims interleaved
    z = E[context].transpose(1, 2).reshape(context.shape[0], -1)
    return torch.tanh(z @ W.T + b) @ U.T + c


def ff_reversed_loop(context, E, W, b, U, c):  # newest word first
    z = torch.cat([E[context[:, i]] for i in reversed(range(context.shape[1]))], dim=1)
    return torch.tanh(z @ W.T + b) @ U.T + c


def ff_no_c(context, E, W, b, U, c):
    return torch.tanh(E[context].flatten(1) @ W.T + b) @ U.T


def ff_relu(context, E, W, b, U, c):
    return torch.relu(E[context].flatten(1) @ W.T + b) @ U.T + c


def ff_bias_outside(context, E, W, b, U, c):  # b added after the tanh
    h = torch.tanh(E[context].flatten(1) @ W.T) + b
    return h @ U.T + c


def ff_W_not_transposed(context, E, W, b, U, c):  # works only when W is square
    z = E[context].reshape(len(context), -1)
    return torch.tanh(z @ W + b) @ U.T + c


def ff_softmax(context, E, W, b, U, c):
    return torch.softmax(torch.tanh(E[context].flatten(1) @ W.T + b) @ U.T + c, dim=-1)


def ff_float32_buffer(context, E, W, b, U, c):  # a fresh float32 output: float64 weights come back float32
    out = torch.zeros(context.shape[0], U.shape[0])
    for i in range(context.shape[0]):
        z = E[context[i]].reshape(-1)
        out[i] = U @ torch.tanh(W @ z + b) + c
    return out


def ff_sum_embeddings(context, E, W, b, U, c):  # sums the window's embeddings instead of concatenating
    z = E[context].sum(1)
    return torch.tanh(z @ W[:, :E.shape[1]].T + b) @ U.T + c


def ff_right_loop(context, E, W, b, U, c):
    rows = []
    for ids in context:
        z = torch.cat([E[int(w)] for w in ids])
        rows.append(U @ torch.tanh(W @ z + b) + c)
    return torch.stack(rows)


def ff_right_blocks(context, E, W, b, U, c):  # W z as a sum over the window's blocks of W
    d = E.shape[1]
    pre = b.expand(context.shape[0], -1)
    for i in range(context.shape[1]):
        pre = pre + E[context[:, i]] @ W[:, i * d:(i + 1) * d].T
    return torch.addmm(c, torch.tanh(pre), U.T)


def ff_right_onehot(context, E, W, b, U, c):
    onehot = F.one_hot(context, E.shape[0]).to(E.dtype)  # (B, m, V)
    z = (onehot @ E).reshape(context.shape[0], -1)
    return torch.einsum("vh,bh->bv", U, torch.tanh(torch.einsum("hk,bk->bh", W, z) + b)) + c


# ----------------------------------------------------------------------------- sgns_loss

def sg_naive_log_sigmoid(v_c, u_o, u_neg):
    pos = (u_o * v_c).sum(-1)
    neg = torch.bmm(u_neg, v_c.unsqueeze(2)).squeeze(2)
    return -(torch.log(torch.sigmoid(pos)) + torch.log(torch.sigmoid(-neg)).sum(1)).mean()


def sg_manual_sigmoid(v_c, u_o, u_neg):  # log(1 / (1 + exp(-x))): exp overflows
    def logsig(x):
        return torch.log(1 / (1 + torch.exp(-x)))
    pos = (u_o * v_c).sum(-1)
    neg = (u_neg * v_c.unsqueeze(1)).sum(-1)
    return -(logsig(pos) + logsig(-neg).sum(-1)).mean()


def sg_positive_noise(v_c, u_o, u_neg):  # σ(u_n·v) for the noise words
    pos = F.logsigmoid((u_o * v_c).sum(-1))
    neg = F.logsigmoid(torch.einsum("bkd,bd->bk", u_neg, v_c)).sum(-1)
    return -(pos + neg).mean()


def sg_summed_batch(v_c, u_o, u_neg):
    pos = F.logsigmoid((u_o * v_c).sum(-1))
    neg = F.logsigmoid(-(u_neg @ v_c[:, :, None])[..., 0]).sum(-1)
    return -(pos + neg).sum()


def sg_mean_of_everything(v_c, u_o, u_neg):  # one mean over the batch and the k+1 terms
    scores = torch.cat([(u_o * v_c).sum(-1, keepdim=True), -torch.einsum("bkd,bd->bk", u_neg, v_c)], 1)
    return -F.logsigmoid(scores).mean()


def sg_one_minus_sigmoid(v_c, u_o, u_neg):  # log(1 - σ(x)): 1 - σ rounds to 0 for large x
    pos = torch.log(torch.sigmoid((u_o * v_c).sum(-1)))
    neg = torch.log(1 - torch.sigmoid(torch.einsum("bkd,bd->bk", u_neg, v_c))).sum(-1)
    return -(pos + neg).mean()


def sg_item(v_c, u_o, u_neg):  # a Python float
    pos = F.logsigmoid((u_o * v_c).sum(-1))
    neg = F.logsigmoid(-torch.einsum("bkd,bd->bk", u_neg, v_c)).sum(-1)
    return float(-(pos + neg).mean())


def sg_mean_negatives(v_c, u_o, u_neg):
    pos = F.logsigmoid((u_o * v_c).sum(-1))
    neg = F.logsigmoid(-torch.einsum("bkd,bd->bk", u_neg, v_c)).mean(-1)
    return -(pos + neg).mean()


def sg_broadcast(v_c, u_o, u_neg):  # (B, K, d) * (B, d) pairs v_c's batch with the K axis (or raises)
    pos = F.logsigmoid((u_o * v_c).sum(-1))
    neg = F.logsigmoid(-(u_neg * v_c).sum(-1)).sum(-1)
    return -(pos + neg).mean()


def sg_right_softplus(v_c, u_o, u_neg):
    pos = torch.einsum("bd,bd->b", u_o, v_c)
    neg = torch.einsum("bkd,bd->bk", u_neg, v_c)
    return (F.softplus(-pos) + F.softplus(neg).sum(1)).mean()


def sg_right_logaddexp(v_c, u_o, u_neg):
    zero = torch.zeros((), dtype=v_c.dtype, device=v_c.device)
    pos = (u_o * v_c).sum(-1)
    neg = (u_neg @ v_c.unsqueeze(-1)).squeeze(-1)
    return (torch.logaddexp(zero, -pos) + torch.logaddexp(zero, neg).sum(-1)).sum() / v_c.shape[0]


def sg_right_loop(v_c, u_o, u_neg):
    total = 0
    for b in range(v_c.shape[0]):
        loss = -F.logsigmoid(u_o[b] @ v_c[b])
        for k in range(u_neg.shape[1]):
            loss = loss - F.logsigmoid(-(u_neg[b, k] @ v_c[b]))
        total = total + loss
    return total / v_c.shape[0]


WRONG = {
    "log_softmax": [
        Student(ls_literal, has=_has(LOG_SOFTMAX, "computed log(exp(x) / sum(exp(x))) as written"),
                note="the formula literally: exp overflows to inf/inf = NaN"),
        Student(ls_global_max, has=_has(LOG_SOFTMAX, "subtracted the maximum of the whole tensor"),
                note="one global maximum"),
        Student(ls_last_dim, has=_has(LOG_SOFTMAX, "ignored the `dim` argument"), note="always the last dim"),
        Student(ls_no_keepdim, has=None, note="max without keepdim"),
        Student(ls_in_place, has=None, note="x -= max: changes the caller's tensor"),
        Student(ls_float32, has=None, note="converts to float32"),
        Student(ls_log_of_stable_softmax, has=_has(LOG_SOFTMAX, "log of softmax underflows"),
                note="log of a stable softmax"),
        Student(ls_sum_everything, has=_has(LOG_SOFTMAX, "normalised by the sum over the whole tensor"),
                note="sum over the whole tensor"),
        Student(ls_python_float_lse, has=None, note="log-sum-exp as a Python float: no gradient through it"),
    ],
    "cross_entropy": [
        Student(ce_no_mask, has=None, note="gathers at the padding id"),
        Student(ce_mask_times, has=_has(CROSS_ENTROPY, "averaged over padding positions too"),
                note="mask multiplied, mean over all"),
        Student(ce_minus_100, has=_has(CROSS_ENTROPY, "compared the targets with -100"), note="-100 hard-coded"),
        Student(ce_naive_logsoftmax, has=_has(CROSS_ENTROPY, "exp overflows"), note="unshifted log-softmax"),
        Student(ce_item, has=None, note="returns .item()"),
        Student(ce_per_sequence, has=_has(CROSS_ENTROPY, "averaged each sentence's words"),
                note="mean of per-sentence means"),
        Student(ce_zero_pads_in_place, has=None, note="overwrites the padding ids in place"),
        Student(ce_view, has=None, note="flattens with .view: refused by sliced logits"),
        Student(ce_log_of_softmax, has=_has(CROSS_ENTROPY, "took log(softmax(logits))"),
                note="log of a stable softmax: underflows, never overflows"),
        Student(ce_constant_normaliser, has=None, note="right value, the log-sum-exp detached: a wrong gradient"),
    ],
    "perplexity": [
        Student(ppl_tensor, has=None, note="returns a tensor"),
        Student(ppl_mean_of_inverse_probs, has=_has(PERPLEXITY, "averaged the per-word"),
                note="mean of exp(-log p)"),
        Student(ppl_base_two, has=_has(PERPLEXITY, "used 2 ** cross-entropy"), note="2 ** CE"),
        Student(ppl_total, has=_has(PERPLEXITY, "exponentiated the total"), note="exp of the sum"),
        Student(ppl_over_padding, has=_has(PERPLEXITY, "averaged over padding positions too"),
                note="divides by every position"),
        Student(ppl_forgets_ignore_index, has=_has(PERPLEXITY, "did not pass `ignore_index` on"),
                note="ignore_index not passed on"),
        Student(ppl_inverse_mean_prob, has=_has(PERPLEXITY, "took 1 / (the average probability"),
                note="1 / mean probability"),
    ],
    "ffnn_forward": [
        Student(ff_interleaved, has=_has(FFNN_FORWARD, "flattened the (B, m, d) embeddings after transposing"),
                note="transpose before reshape"),
        Student(ff_reversed_loop, has=_has(FFNN_FORWARD, "concatenated the window's embeddings in reverse"),
                note="newest word first"),
        Student(ff_no_c, has=_has(FFNN_FORWARD, "left out the output bias c"), note="no c"),
        Student(ff_relu, has=_has(FFNN_FORWARD, "used ReLU"), note="ReLU"),
        Student(ff_bias_outside, has=_has(FFNN_FORWARD, "added the hidden bias b after the tanh"),
                note="b after tanh"),
        Student(ff_W_not_transposed, has=None, note="z @ W"),
        Student(ff_softmax, has=_has(FFNN_FORWARD, "returned probabilities"), note="softmax at the end"),
        Student(ff_float32_buffer, has=None, note="float32 output buffer"),
        Student(ff_sum_embeddings, has=None, note="sums the embeddings"),
    ],
    "sgns_loss": [
        Student(sg_naive_log_sigmoid, has=_has(SGNS_LOSS, "computed log σ(x) in a form"), note="log(sigmoid)"),
        Student(sg_manual_sigmoid, has=_has(SGNS_LOSS, "computed log σ(x) in a form"), note="log(1/(1+exp(-x)))"),
        Student(sg_positive_noise, has=_has(SGNS_LOSS, "used σ(u_k·v_c) for the negatives"), note="σ(+u·v)"),
        Student(sg_summed_batch, has=_has(SGNS_LOSS, "summed over the batch"), note="sum over the batch"),
        Student(sg_mean_of_everything, has=_has(SGNS_LOSS, "took one mean over the batch and the k+1 terms"),
                note="one mean over batch and k+1 terms"),
        Student(sg_one_minus_sigmoid, has=_has(SGNS_LOSS, "computed log σ(x) in a form"), note="log(1 - sigmoid)"),
        Student(sg_item, has=None, note="returns a float"),
        Student(sg_mean_negatives, has=_has(SGNS_LOSS, "averaged over the k negatives"), note="mean over k"),
        Student(sg_broadcast, has=None, note="(B,K,d) * (B,d) broadcast"),
    ],
}

RIGHT = {
    "log_softmax": [ls_right_loop, ls_right_add_back, ls_right_detached_max],
    "cross_entropy": [ce_right_loop, ce_right_onehot, ce_right_lse_minus_picked],
    "perplexity": [ppl_right_numpy, ppl_right_geometric, ppl_right_torch],
    "ffnn_forward": [ff_right_loop, ff_right_blocks, ff_right_onehot],
    "sgns_loss": [sg_right_softplus, sg_right_logaddexp, sg_right_loop],
}


# ============================================================================= the thinking questions
# (chapter 1's derive and count questions, lmbook.tasks.questions.ch01)

from lmbook.tasks.questions.ch01 import (  # noqa: E402
    ADAM_FIRST_STEP,
    DROPOUT_VARIANCE,
    FFNN_PARAMETERS,
    PERPLEXITY_MIXED,
)


def fp_no_biases(V, m, d, H):
    return V * d + H * m * d + V * H


def fp_e_per_slot(V, m, d, H):  # one embedding table per position of the window
    return m * V * d + m * d * H + H + H * V + V


def fp_w_one_slot(V, m, d, H):
    emb = V * d
    hidden = d * H + H
    out = H * V + V
    return emb + hidden + out


def fp_no_embeddings(V, m, d, H):
    return (m * d) * H + H + H * V + V


def fp_no_output(V, m, d, H):
    return V * d + m * d * H + H


def fp_window_plus_one(V, m, d, H):  # w_t counted in the window
    n = m + 1
    return V * d + H * n * d + H + V * H + V


def fp_forgot_c(V, m, d, H):  # b counted, c forgotten: no named mistake says only that
    return V * d + H * m * d + H + V * H


def fp_right_shapes(V, m, d, H):
    shapes = [(V, d), (H, m * d), (H,), (V, H), (V,)]
    return sum(math.prod(s) for s in shapes)


def fp_right_layers(V, m, d, H):
    embedding = V * d
    hidden = (m * d + 1) * H  # weights and bias of each hidden unit
    output = (H + 1) * V
    return embedding + hidden + output


def fp_right_numpy(V, m, d, H):
    return int(np.prod([V, d]) + np.prod([H, m * d]) + H + np.prod([V, H]) + V)


def pm_arithmetic(p, q, f):
    return f * (1 / p) + (1 - f) * (1 / q)


def pm_inverse_mean_prob(p, q, f):
    return 1 / (f * p + (1 - f) * q)


def pm_cross_entropy(p, q, f):
    return -(f * math.log(p) + (1 - f) * math.log(q))


def pm_swapped(p, q, f):
    return math.exp(-((1 - f) * math.log(p) + f * math.log(q)))


def pm_ignores_f(p, q, f):
    return math.exp(-(math.log(p) + math.log(q)) / 2)


def pm_two_to_the_nats(p, q, f):
    ce = -(f * math.log(p) + (1 - f) * math.log(q))
    return 2**ce


def pm_tensor(p, q, f):  # right value, but a tensor where a number is asked
    return torch.exp(-(f * torch.log(torch.tensor(p)) + (1 - f) * torch.log(torch.tensor(q))))


def pm_right_powers(p, q, f):
    return 1 / (p**f * q ** (1 - f))


def pm_right_product(p, q, f):
    return math.exp(-f * math.log(p)) * math.exp(-(1 - f) * math.log(q))


def pm_right_bits(p, q, f):
    return 2 ** (-(f * math.log2(p) + (1 - f) * math.log2(q)))


def adam_no_correction(g, lr, beta1, beta2, eps):
    m = (1 - beta1) * g
    v = (1 - beta2) * g**2
    return -lr * m / (v.sqrt() + eps)


def adam_m_only(g, lr, beta1, beta2, eps):
    m_hat = (1 - beta1) * g / (1 - beta1)
    v = (1 - beta2) * g**2
    return -lr * m_hat / (torch.sqrt(v) + eps)


def adam_sgd(g, lr, beta1, beta2, eps):
    return -lr * g


def adam_plus(g, lr, beta1, beta2, eps):
    m_hat, v_hat = g, g * g
    return lr * m_hat / (v_hat.sqrt() + eps)


def adam_eps_inside(g, lr, beta1, beta2, eps):
    return -lr * g / torch.sqrt(g * g + eps)


def adam_sign(g, lr, beta1, beta2, eps):  # "at the first step Adam moves by η against the sign"
    return -lr * torch.sign(g)


def adam_no_eps_nan(g, lr, beta1, beta2, eps):  # 0 / 0 where a gradient is 0
    return -lr * g / g.abs()


def adam_t_zero(g, lr, beta1, beta2, eps):  # bias correction with t = 0
    t = 0
    m_hat = (1 - beta1) * g / (1 - beta1**t)
    v_hat = (1 - beta2) * g**2 / (1 - beta2**t)
    return -lr * m_hat / (v_hat.sqrt() + eps)


def adam_right_one_step(g, lr, beta1, beta2, eps):
    m, v = torch.zeros_like(g), torch.zeros_like(g)
    t = 1
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    m_hat, v_hat = m / (1 - beta1**t), v / (1 - beta2**t)
    return -lr * m_hat / (torch.sqrt(v_hat) + eps)


def adam_right_closed_form(g, lr, beta1, beta2, eps):
    return -lr * g / (g.abs() + eps)


def adam_right_sign_times(g, lr, beta1, beta2, eps):
    return -lr * torch.sign(g) * (g.abs() / (g.abs() + eps))


def dv_no_rescale(x, p):
    return x**2 * p * (1 - p)


def dv_keep_probability(x, p):
    return x**2 * (1 - p) / p


def dv_second_moment(x, p):
    return (1 - p) * (x / (1 - p)) ** 2


def dv_not_squared(x, p):
    return x * p / (1 - p)


def dv_zero(x, p):  # "dropout keeps the mean, so it adds nothing"
    return 0.0


def dv_scaled_squared_wrong(x, p):
    return (x / (1 - p)) ** 2 * p


def dv_right_moments(x, p):
    mean = (1 - p) * x / (1 - p)
    second = (1 - p) * (x / (1 - p)) ** 2
    return second - mean**2


def dv_right_formula(x, p):
    return x * x * p / (1 - p)


def dv_right_factor(x, p):
    return x**2 * (1 / (1 - p) - 1)


WRONG.update({
    "ffnn_parameters": [
        Student(fp_no_biases, _has(FFNN_PARAMETERS, "left out the biases")),
        Student(fp_e_per_slot, _has(FFNN_PARAMETERS, "counted one embedding matrix per slot")),
        Student(fp_w_one_slot, _has(FFNN_PARAMETERS, "gave W the columns of one embedding")),
        Student(fp_no_embeddings, _has(FFNN_PARAMETERS, "left out the embedding matrix")),
        Student(fp_no_output, _has(FFNN_PARAMETERS, "left out the output layer")),
        Student(fp_window_plus_one, _has(FFNN_PARAMETERS, "counted m + 1 words")),
        Student(fp_forgot_c, None),
    ],
    "perplexity_mixed": [
        Student(pm_arithmetic, _has(PERPLEXITY_MIXED, "averaged 1/p")),
        Student(pm_inverse_mean_prob, _has(PERPLEXITY_MIXED, "took 1 / (the average probability)")),
        Student(pm_cross_entropy, _has(PERPLEXITY_MIXED, "returned the cross-entropy")),
        Student(pm_swapped, _has(PERPLEXITY_MIXED, "gave p the weight 1 - f")),
        Student(pm_ignores_f, _has(PERPLEXITY_MIXED, "weighed p and q equally")),
        Student(pm_two_to_the_nats, _has(PERPLEXITY_MIXED, "raised 2 to a cross-entropy in nats")),
        Student(pm_tensor, None),
    ],
    "adam_first_step": [
        Student(adam_no_correction, _has(ADAM_FIRST_STEP, "left out the bias correction")),
        Student(adam_m_only, _has(ADAM_FIRST_STEP, "bias-corrected m but not v")),
        Student(adam_sgd, _has(ADAM_FIRST_STEP, "took SGD's step")),
        Student(adam_plus, _has(ADAM_FIRST_STEP, "moved along the gradient")),
        Student(adam_eps_inside, _has(ADAM_FIRST_STEP, "put ε inside the square root")),
        Student(adam_sign, _has(ADAM_FIRST_STEP, "left out ε")),
        Student(adam_no_eps_nan, _has(ADAM_FIRST_STEP, "left out ε")),
        Student(adam_t_zero, None),
    ],
    "dropout_variance": [
        Student(dv_no_rescale, _has(DROPOUT_VARIANCE, "left out the rescaling")),
        Student(dv_keep_probability, _has(DROPOUT_VARIANCE, "took p as the probability of keeping")),
        Student(dv_second_moment, _has(DROPOUT_VARIANCE, "returned E[x̃²]")),
        Student(dv_not_squared, _has(DROPOUT_VARIANCE, "the variance grows with x²")),
        Student(dv_zero, _has(DROPOUT_VARIANCE, "the mean is unchanged")),
        Student(dv_scaled_squared_wrong, None),
    ],
})

RIGHT.update({
    "ffnn_parameters": [fp_right_shapes, fp_right_layers, fp_right_numpy],
    "perplexity_mixed": [pm_right_powers, pm_right_product, pm_right_bits],
    "adam_first_step": [adam_right_one_step, adam_right_closed_form, adam_right_sign_times],
    "dropout_variance": [dv_right_moments, dv_right_formula, dv_right_factor],
})
