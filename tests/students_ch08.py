"""Exercise 8 (the Transformer) as students write it: wrong answers with the mistake they have, and right ones written
differently from the reference (see test_students.py). The blocks call ``attention``, the notebook's given (locked)
multi-head attention, copied here as the notebook has it."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from check_contract import Student

from lmbook.tasks.ch08 import DECODER_BLOCK, ENCODER_BLOCK, FEED_FORWARD, LAYER_NORM

INF = float("-inf")


def _has(check, start: str) -> str:
    """The misconception of ``check``'s Mutant that begins with ``start`` (word for word)."""
    (text,) = {m.misconception for m in check.mutants if m.misconception.startswith(start)}
    return text


def attention(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
              key_padding_mask=None, causal=False):
    """The notebook's given multi-head attention (exercise 6's), outputs only."""
    B, n_q, d = query.shape
    n_k, d_head = key.shape[1], d // n_head
    W_q, W_k, W_v = in_proj_weight.chunk(3)
    b_q, b_k, b_v = in_proj_bias.chunk(3)
    q = (query @ W_q.T + b_q).view(B, n_q, n_head, d_head).transpose(1, 2)
    k = (key @ W_k.T + b_k).view(B, n_k, n_head, d_head).transpose(1, 2)
    v = (value @ W_v.T + b_v).view(B, n_k, n_head, d_head).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
    blocked = torch.zeros(n_q, n_k, dtype=torch.bool, device=query.device)
    if causal:
        blocked = blocked | torch.ones(n_q, n_k, dtype=torch.bool, device=query.device).triu(1)
    if key_padding_mask is not None:
        blocked = blocked | key_padding_mask[:, None, None, :]
    A = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)
    y = (A @ v).transpose(1, 2).reshape(B, n_q, d)
    return y @ out_proj_weight.T + out_proj_bias


# ----------------------------------------------------------------------------- layer_norm

def ln_batch_statistics(x, weight, bias, eps=1e-5):  # BatchNorm's axis
    mean = x.mean(0, keepdim=True)
    var = x.var(0, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def ln_whole_sequence(x, weight, bias, eps=1e-5):  # one mean and variance per sequence
    mean = x.mean(dim=(-2, -1), keepdim=True)
    var = ((x - mean) ** 2).mean(dim=(-2, -1), keepdim=True)
    return weight * (x - mean) / (var + eps).sqrt() + bias


def ln_torch_var(x, weight, bias, eps=1e-5):  # .var() divides by d - 1
    centred = x - x.mean(-1, keepdim=True)
    return weight * centred / torch.sqrt(x.var(-1, keepdim=True) + eps) + bias


def ln_annotated_transformer(x, weight, bias, eps=1e-5):  # the Annotated Transformer's LayerNorm
    mean = x.mean(-1, keepdim=True)
    std = x.std(-1, keepdim=True)
    return weight * (x - mean) / (std + eps) + bias


def ln_eps_on_sigma(x, weight, bias, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    sigma = torch.sqrt(torch.mean((x - mu) ** 2, dim=-1, keepdim=True))
    return weight * ((x - mu) / (sigma + eps)) + bias


def ln_variance_floor(x, weight, bias, eps=1e-5):  # ε read as "keep the variance above ε"
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return weight * (x - mu) / torch.sqrt(torch.clamp(var, min=eps)) + bias


def ln_std_floor(x, weight, bias, eps=1e-5):  # never divide by less than ε
    mu = x.mean(-1, keepdim=True)
    sigma = ((x - mu) ** 2).mean(-1, keepdim=True).sqrt()
    return weight * (x - mu) / torch.maximum(sigma, torch.full_like(sigma, eps)) + bias


def ln_shortcut_variance(x, weight, bias, eps=1e-5):  # E[x²] − E[x]²: one pass, cancels in float32
    mean = x.mean(-1, keepdim=True)
    mean_sq = (x ** 2).mean(-1, keepdim=True)
    return weight * (x - mean) / torch.sqrt(mean_sq - mean ** 2 + eps) + bias


def ln_in_place(x, weight, bias, eps=1e-5):  # centres the caller's tensor
    x -= x.mean(-1, keepdim=True)
    return weight * x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps) + bias


def ln_float32(x, weight, bias, eps=1e-5):  # float64 inputs come back in float32
    x = x.float()
    mu = x.mean(-1, keepdim=True)
    return weight.float() * (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + eps) + bias.float()


def ln_right_var_mean(x, weight, bias, eps=1e-5):
    var, mean = torch.var_mean(x, dim=-1, correction=0, keepdim=True)
    return torch.addcmul(bias, weight, (x - mean) * torch.rsqrt(var + eps))


def ln_right_sums(x, weight, bias, eps=1e-5):  # sums divided by d, written out
    d = x.shape[-1]
    mu = x.sum(-1, keepdim=True) / d
    dev = x - mu
    var = (dev * dev).sum(-1, keepdim=True) / d
    return dev / (var + eps) ** 0.5 * weight + bias


def ln_right_flat(x, weight, bias, eps=1e-5):  # every vector a row of a matrix
    rows = x.reshape(-1, x.shape[-1])
    mu = rows.mean(1, keepdim=True)
    sigma2 = rows.sub(mu).pow(2).mean(1, keepdim=True)
    return (weight * (rows - mu) / (sigma2 + eps).sqrt() + bias).reshape(x.shape)


# ----------------------------------------------------------------------------- feed_forward

def ffn_gelu(x, w1, b1, w2, b2):
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)


def ffn_no_activation(x, w1, b1, w2, b2):
    return F.linear(F.linear(x, w1, b1), w2, b2)


def ffn_relu_on_output(x, w1, b1, w2, b2):
    h = F.relu(F.linear(x, w1, b1))
    return F.relu(F.linear(h, w2, b2))


def ffn_bias_after_relu(x, w1, b1, w2, b2):
    h = torch.clamp(x @ w1.t(), min=0) + b1
    return h @ w2.t() + b2


def ffn_matmul_untransposed(x, w1, b1, w2, b2):  # x @ W as in the maths of some books: W is stored (out, in)
    h = torch.relu(torch.matmul(x, w1) + b1)
    return torch.matmul(h, w2) + b2


def ffn_weights_swapped(x, w1, b1, w2, b2):  # linear2 first: shapes fail unless square
    return F.linear(F.relu(F.linear(x, w2.T, b1)), w1.T, b2)


def ffn_float32(x, w1, b1, w2, b2):
    return F.linear(F.relu(F.linear(x.float(), w1.float(), b1.float())), w2.float(), b2.float())


def ffn_right_einsum(x, w1, b1, w2, b2):
    h = torch.einsum("...d,fd->...f", x, w1) + b1
    return torch.einsum("...f,df->...d", h.clamp(min=0), w2) + b2


def ffn_right_rows(x, w1, b1, w2, b2):  # all positions as rows of one matrix, addmm
    rows = x.reshape(-1, x.shape[-1])
    h = torch.addmm(b1, rows, w1.t()).relu()
    return torch.addmm(b2, h, w2.t()).reshape(*x.shape[:-1], w2.shape[0])


def ffn_right_where(x, w1, b1, w2, b2):
    pre = F.linear(x, w1, b1)
    return F.linear(torch.where(pre > 0, pre, torch.zeros_like(pre)), w2, b2)


# ----------------------------------------------------------------------------- encoder_block

def _ln(h, p, i):
    mu = h.mean(-1, keepdim=True)
    return p[f"norm{i}.weight"] * (h - mu) / torch.sqrt(((h - mu) ** 2).mean(-1, keepdim=True) + 1e-5) \
        + p[f"norm{i}.bias"]


def _sa(h, p, n_head, mask, name="self_attn", causal=False, context=None):
    c = h if context is None else context
    return attention(h, c, c, p[f"{name}.in_proj_weight"], p[f"{name}.in_proj_bias"], p[f"{name}.out_proj.weight"],
                     p[f"{name}.out_proj.bias"], n_head, mask, causal)


def _ff(h, p):
    return torch.relu(h @ p["linear1.weight"].T + p["linear1.bias"]) @ p["linear2.weight"].T + p["linear2.bias"]


def enc_always_post(x, key_padding_mask, params, n_head, norm_first):  # norm_first never looked at
    x = _ln(x + _sa(x, params, n_head, key_padding_mask), params, 1)
    return _ln(x + _ff(x, params), params, 2)


def enc_norm_first_backwards(x, key_padding_mask, params, n_head, norm_first):
    if not norm_first:  # "norm first" read as "the norm is applied first to the sum"... the other way round
        x = x + _sa(_ln(x, params, 1), params, n_head, key_padding_mask)
        return x + _ff(_ln(x, params, 2), params)
    x = _ln(x + _sa(x, params, n_head, key_padding_mask), params, 1)
    return _ln(x + _ff(x, params), params, 2)


def enc_normalised_residual(x, key_padding_mask, params, n_head, norm_first):
    if norm_first:  # x reassigned to LN(x): the residual is then the normalised x
        x = _ln(x, params, 1)
        x = x + _sa(x, params, n_head, key_padding_mask)
        x = _ln(x, params, 2)
        return x + _ff(x, params)
    x = _ln(x + _sa(x, params, n_head, key_padding_mask), params, 1)
    return _ln(x + _ff(x, params), params, 2)


def enc_no_residual(x, key_padding_mask, params, n_head, norm_first):
    if norm_first:
        x = _sa(_ln(x, params, 1), params, n_head, key_padding_mask)
        return _ff(_ln(x, params, 2), params)
    x = _ln(_sa(x, params, n_head, key_padding_mask), params, 1)
    return _ln(_ff(x, params), params, 2)


def enc_mask_inverted(x, key_padding_mask, params, n_head, norm_first):  # exercise 5's convention
    mask = ~key_padding_mask
    if norm_first:
        x = x + _sa(_ln(x, params, 1), params, n_head, mask)
        return x + _ff(_ln(x, params, 2), params)
    x = _ln(x + _sa(x, params, n_head, mask), params, 1)
    return _ln(x + _ff(x, params), params, 2)


def enc_mask_forgotten(x, key_padding_mask, params, n_head, norm_first):
    if norm_first:
        x = x + _sa(_ln(x, params, 1), params, n_head, None)
        return x + _ff(_ln(x, params, 2), params)
    x = _ln(x + _sa(x, params, n_head, None), params, 1)
    return _ln(x + _ff(x, params), params, 2)


def enc_norms_swapped(x, key_padding_mask, params, n_head, norm_first):
    first, second = 2, 1  # "norm2 is the one before attention in pre-LN"
    if norm_first:
        x = x + _sa(_ln(x, params, first), params, n_head, key_padding_mask)
        return x + _ff(_ln(x, params, second), params)
    x = _ln(x + _sa(x, params, n_head, key_padding_mask), params, first)
    return _ln(x + _ff(x, params), params, second)


def enc_ffn_reads_attention(x, key_padding_mask, params, n_head, norm_first):  # FFN on the attention's output
    if norm_first:
        a = _sa(_ln(x, params, 1), params, n_head, key_padding_mask)
        return x + a + _ff(_ln(a, params, 2), params)
    a = _ln(x + _sa(x, params, n_head, key_padding_mask), params, 1)
    return _ln(a + _ff(a, params), params, 2)


def enc_right_loop(x, key_padding_mask, params, n_head, norm_first):  # the two sub-layers as data
    sublayers = [(lambda h: _sa(h, params, n_head, key_padding_mask), 1), (lambda h: _ff(h, params), 2)]
    for f, i in sublayers:
        x = x + f(_ln(x, params, i)) if norm_first else _ln(x + f(x), params, i)
    return x


def enc_right_zero_padding(x, key_padding_mask, params, n_head, norm_first):  # own attention; zeros at padding
    def norm(h, i):
        return F.layer_norm(h, h.shape[-1:], params[f"norm{i}.weight"], params[f"norm{i}.bias"])

    def self_attn(h):
        B, S, d = h.shape
        d_head = d // n_head
        q, k, v = F.linear(h, params["self_attn.in_proj_weight"], params["self_attn.in_proj_bias"]).chunk(3, -1)
        q, k, v = (t.reshape(B, S, n_head, d_head).transpose(1, 2) for t in (q, k, v))
        bias = torch.zeros(B, 1, 1, S, dtype=h.dtype, device=h.device).masked_fill(
            key_padding_mask[:, None, None, :], INF)
        a = torch.softmax(q @ k.transpose(2, 3) * d_head ** -0.5 + bias, dim=-1)
        return F.linear((a @ v).transpose(1, 2).reshape(B, S, d), params["self_attn.out_proj.weight"],
                        params["self_attn.out_proj.bias"])

    if norm_first:
        x = x + self_attn(norm(x, 1))
        x = x + _ff(norm(x, 2), params)
    else:
        x = norm(x + self_attn(x), 1)
        x = norm(x + _ff(x, params), 2)
    return x.masked_fill(key_padding_mask.unsqueeze(-1), 0.0)  # padded positions: never used


def enc_right_keywords(x, key_padding_mask, params, n_head, norm_first):
    w = {k.replace(".", "_"): v for k, v in params.items()}

    def attn(h):
        return attention(query=h, key=h, value=h, in_proj_weight=w["self_attn_in_proj_weight"],
                         in_proj_bias=w["self_attn_in_proj_bias"], out_proj_weight=w["self_attn_out_proj_weight"],
                         out_proj_bias=w["self_attn_out_proj_bias"], n_head=n_head,
                         key_padding_mask=key_padding_mask, causal=False)

    def ffn(h):
        return F.linear(F.relu(F.linear(h, w["linear1_weight"], w["linear1_bias"])), w["linear2_weight"],
                        w["linear2_bias"])

    def ln(h, g, b):
        var, mean = torch.var_mean(h, dim=-1, keepdim=True, unbiased=False)
        return (h - mean) / torch.sqrt(var + 1e-5) * g + b

    if norm_first:
        h = x + attn(ln(x, w["norm1_weight"], w["norm1_bias"]))
        return h + ffn(ln(h, w["norm2_weight"], w["norm2_bias"]))
    h = ln(x + attn(x), w["norm1_weight"], w["norm1_bias"])
    return ln(h + ffn(h), w["norm2_weight"], w["norm2_bias"])


# ----------------------------------------------------------------------------- decoder_block

def _decoder(y, memory, pad, p, n_head, pre, *, self_causal=True, cross=None, norms=(1, 2, 3)):
    """A decoder block written plainly, with ``cross(h, memory, pad)`` for the cross-attention if given."""
    def cross_attn(h):
        if cross is not None:
            return cross(h, memory, pad)
        return _sa(h, p, n_head, pad, name="multihead_attn", context=memory)
    n1, n2, n3 = norms
    if pre:
        x = y + _sa(_ln(y, p, n1), p, n_head, None, causal=self_causal)
        x = x + cross_attn(_ln(x, p, n2))
        return x + _ff(_ln(x, p, n3), p)
    x = _ln(y + _sa(y, p, n_head, None, causal=self_causal), p, n1)
    x = _ln(x + cross_attn(x), p, n2)
    return _ln(x + _ff(x, p), p, n3)


def dec_norm_first_backwards(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    return _decoder(y, memory, memory_key_padding_mask, params, n_head, pre=not norm_first)


def dec_normalised_residual(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    p = params
    if not norm_first:
        return _decoder(y, memory, memory_key_padding_mask, p, n_head, False)
    x = _ln(y, p, 1)
    x = x + _sa(x, p, n_head, None, causal=True)
    x = _ln(x, p, 2)
    x = x + _sa(x, p, n_head, memory_key_padding_mask, name="multihead_attn", context=memory)
    x = _ln(x, p, 3)
    return x + _ff(x, p)


def dec_keys_from_decoder(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    def cross(h, memory, pad):  # memory never used: the mask had to go too (its size is S)
        return _sa(h, params, n_head, None, name="multihead_attn")
    return _decoder(y, memory, memory_key_padding_mask, params, n_head, norm_first, cross=cross)


def dec_queries_from_memory(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    def cross(h, memory, pad):  # attention(query, key, value): the memory put first
        w = [params[f"multihead_attn.{n}"] for n in ("in_proj_weight", "in_proj_bias", "out_proj.weight",
                                                     "out_proj.bias")]
        return attention(memory, h, h, *w, n_head, pad)
    return _decoder(y, memory, memory_key_padding_mask, params, n_head, norm_first, cross=cross)


def dec_no_causal_mask(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    return _decoder(y, memory, memory_key_padding_mask, params, n_head, norm_first, self_causal=False)


def dec_memory_mask_forgotten(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    return _decoder(y, memory, None, params, n_head, norm_first)


def dec_copy_pasted_weights(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    def cross(h, memory, pad):  # the self-attention's line copied, the name not changed
        return _sa(h, params, n_head, pad, name="self_attn", context=memory)
    return _decoder(y, memory, memory_key_padding_mask, params, n_head, norm_first, cross=cross)


def dec_cross_first(y, memory, memory_key_padding_mask, params, n_head, norm_first):  # sub-layers in another order
    p = params
    if norm_first:
        x = y + _sa(_ln(y, p, 1), p, n_head, memory_key_padding_mask, name="multihead_attn", context=memory)
        x = x + _sa(_ln(x, p, 2), p, n_head, None, causal=True)
        return x + _ff(_ln(x, p, 3), p)
    x = _ln(y + _sa(y, p, n_head, memory_key_padding_mask, name="multihead_attn", context=memory), p, 1)
    x = _ln(x + _sa(x, p, n_head, None, causal=True), p, 2)
    return _ln(x + _ff(x, p), p, 3)


def dec_right_loop(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    steps = [(lambda h: _sa(h, params, n_head, None, causal=True), 1),
             (lambda h: _sa(h, params, n_head, memory_key_padding_mask, name="multihead_attn", context=memory), 2),
             (lambda h: _ff(h, params), 3)]
    x = y
    for f, i in steps:
        x = x + f(_ln(x, params, i)) if norm_first else _ln(x + f(x), params, i)
    return x


def _own_attention(h, context, p, name, n_head, blocked):
    """Multi-head attention with einsum and a -inf bias; ``blocked`` broadcasts to (B, h, n_q, n_k)."""
    d = h.shape[-1]
    w_q, w_kv = p[f"{name}.in_proj_weight"].split([d, 2 * d])
    b_q, b_kv = p[f"{name}.in_proj_bias"].split([d, 2 * d])
    q = F.linear(h, w_q, b_q).unflatten(-1, (n_head, d // n_head))
    k, v = (t.unflatten(-1, (n_head, d // n_head)) for t in F.linear(context, w_kv, b_kv).chunk(2, dim=-1))
    scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(d // n_head)
    a = torch.softmax(scores + torch.zeros_like(scores).masked_fill(blocked, INF), dim=-1)
    out = torch.einsum("bhqk,bkhe->bqhe", a, v).flatten(2)
    return F.linear(out, p[f"{name}.out_proj.weight"], p[f"{name}.out_proj.bias"])


def dec_right_einsum(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    T = y.shape[1]
    future = torch.arange(T, device=y.device)[None, :] > torch.arange(T, device=y.device)[:, None]
    padded = memory_key_padding_mask[:, None, None, :]

    def ln(h, i):
        return F.layer_norm(h, (h.shape[-1],), params[f"norm{i}.weight"], params[f"norm{i}.bias"], eps=1e-5)

    subs = [lambda h: _own_attention(h, h, params, "self_attn", n_head, future),
            lambda h: _own_attention(h, memory, params, "multihead_attn", n_head, padded),
            lambda h: _ff(h, params)]
    x = y
    for i, f in enumerate(subs, start=1):
        x = x + f(ln(x, i)) if norm_first else ln(x + f(x), i)
    return x


def dec_right_plain(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    p = params
    if norm_first:
        h = _ln(y, p, 1)
        y = y + _sa(h, p, n_head, None, causal=True)
        h = _ln(y, p, 2)
        y = y + _sa(h, p, n_head, memory_key_padding_mask, name="multihead_attn", context=memory)
        return y + _ff(_ln(y, p, 3), p)
    y = _ln(y + _sa(y, p, n_head, None, causal=True), p, 1)
    y = _ln(y + _sa(y, p, n_head, memory_key_padding_mask, name="multihead_attn", context=memory), p, 2)
    return _ln(y + _ff(y, p), p, 3)

# ----------------------------------------------------------------------------- the kinds of issue 31

def ln_eps_hardcoded(x, weight, bias, eps=1e-5):  # the eps argument ignored: 1e-5 written in
    mu = x.mean(-1, keepdim=True)
    return weight * (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + 1e-5) + bias


def ln_eps_1e6(x, weight, bias, eps=1e-5):  # T5's and Megatron's ε, written in
    mu = x.mean(-1, keepdim=True)
    return weight * (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + 1e-6) + bias


def ln_eps_1e12(x, weight, bias, eps=1e-5):  # BERT's ε, written in
    var, mu = torch.var_mean(x, -1, unbiased=False, keepdim=True)
    return (x - mu) * torch.rsqrt(var + 1e-12) * weight + bias


def ln_float32_stats(x, weight, bias, eps=1e-5):  # statistics in float32 "for speed"
    xf = x.float()
    mu = xf.mean(-1, keepdim=True)
    var = ((xf - mu) ** 2).mean(-1, keepdim=True)
    return (weight * (x - mu.to(x.dtype)) / torch.sqrt(var.to(x.dtype) + eps) + bias)


def ln_float32_rsqrt(x, weight, bias, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return weight * (x - mu) * torch.rsqrt((var + eps).float()).to(x.dtype) + bias


def ln_squeezed(x, weight, bias, eps=1e-5):  # squeeze() then unsqueeze(-1): a batch or length of one changes shape
    mu = x.mean(-1).squeeze()
    var = ((x - mu.unsqueeze(-1)) ** 2).mean(-1).squeeze()
    return weight * (x - mu.unsqueeze(-1)) / torch.sqrt(var.unsqueeze(-1) + eps) + bias


def ln_centres_in_place(x, weight, bias, eps=1e-5):  # sub_ centres the caller's x
    mu = x.mean(-1, keepdim=True)
    x.sub_(mu)
    return weight * x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps) + bias


def ln_keepdim_missing_raises(x, weight, bias, eps=1e-5):  # (B, n) against (B, n, d): raises unless n == d
    mu = x.mean(-1)
    var = ((x - mu[..., None]) ** 2).mean(-1)
    return weight * (x - mu) / torch.sqrt(var + eps) + bias


def ln_affine_dim0(x, weight, bias, eps=1e-5):  # weight[:, None]: raises, or broadcasts wrongly
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return weight[:, None] * ((x - mu) / torch.sqrt(var + eps)) + bias


def ln_mean_abs(x, weight, bias, eps=1e-5):  # the mean absolute deviation for the spread: unnamed
    mu = x.mean(-1, keepdim=True)
    spread = (x - mu).abs().mean(-1, keepdim=True)
    return weight * (x - mu) / (spread + eps) + bias


def ffn_float32_inside(x, w1, b1, w2, b2):
    return (torch.relu(x.float() @ w1.float().T + b1.float()) @ w2.float().T + b2.float()).to(x.dtype)


def ffn_hidden_float32(x, w1, b1, w2, b2):  # the hidden layer kept in float32
    h = torch.relu(x @ w1.T + b1).float()
    return (h @ w2.float().T).to(x.dtype) + b2


def ffn_squeezed(x, w1, b1, w2, b2):
    return (torch.relu(x @ w1.T + b1) @ w2.T + b2).squeeze()


def ffn_relu_in_place(x, w1, b1, w2, b2):  # relu_ on the caller's x, and the ReLU in the wrong place
    h = x.relu_() @ w1.T + b1
    return torch.relu(h) @ w2.T + b2


def ffn_linear_tensors_raise(x, w1, b1, w2, b2):  # torch.mm needs 2-d: raises for (B, n, d)
    return torch.mm(torch.relu(torch.mm(x, w1.T) + b1), w2.T) + b2


def ffn_half_bias(x, w1, b1, w2, b2):  # b2 halved: unnamed
    return torch.relu(x @ w1.T + b1) @ w2.T + b2 / 2


def ffn_leaky(x, w1, b1, w2, b2):  # leaky ReLU: unnamed
    return torch.nn.functional.leaky_relu(x @ w1.T + b1, 0.1) @ w2.T + b2


def _ln_eps(h, p, i, eps):
    mu = h.mean(-1, keepdim=True)
    return p[f"norm{i}.weight"] * (h - mu) / torch.sqrt(((h - mu) ** 2).mean(-1, keepdim=True) + eps) \
        + p[f"norm{i}.bias"]


def _encoder(x, pad, p, n_head, pre, eps=1e-5, ln=None):
    norm = ln or (lambda h, i: _ln_eps(h, p, i, eps))
    if pre:
        x = x + _sa(norm(x, 1), p, n_head, pad)
        return x + _ff(norm(x, 2), p)
    x = norm(x + _sa(x, p, n_head, pad), 1)
    return norm(x + _ff(x, p), 2)


def enc_eps_1e6(x, key_padding_mask, params, n_head, norm_first):
    return _encoder(x, key_padding_mask, params, n_head, norm_first, eps=1e-6)


def enc_eps_bert(x, key_padding_mask, params, n_head, norm_first):
    return _encoder(x, key_padding_mask, params, n_head, norm_first, eps=1e-12)


def enc_float32_inside(x, key_padding_mask, params, n_head, norm_first):
    p = {k: v.float() for k, v in params.items()}
    return _encoder(x.float(), key_padding_mask, p, n_head, norm_first).to(x.dtype)


def enc_ln_float32(x, key_padding_mask, params, n_head, norm_first):  # the norms in float32
    def ln(h, i):
        return _ln_eps(h.float(), {k: v.float() for k, v in params.items()}, i, 1e-5).to(h.dtype)
    return _encoder(x, key_padding_mask, params, n_head, norm_first, ln=ln)


def enc_params_in_place(x, key_padding_mask, params, n_head, norm_first):  # caches a transposed weight in the dict
    params["linear1.weight"] = params["linear1.weight"].T.contiguous().T
    params["linear1.weight.T"] = params["linear1.weight"].T
    return _encoder(x, key_padding_mask, params, n_head, norm_first)


def enc_x_in_place(x, key_padding_mask, params, n_head, norm_first):  # zeroes the caller's padded positions
    x[key_padding_mask] = 0.0
    return _encoder(x, key_padding_mask, params, n_head, norm_first)


def enc_squeeze(x, key_padding_mask, params, n_head, norm_first):  # squeeze(): a batch of one loses its dimension
    out = _encoder(x, key_padding_mask, params, n_head, norm_first)
    return out.squeeze()


def enc_mask_float_raises(x, key_padding_mask, params, n_head, norm_first):  # masked_fill with a float mask raises
    return _encoder(x, key_padding_mask.float(), params, n_head, norm_first)


def enc_wrong_key(x, key_padding_mask, params, n_head, norm_first):  # a misspelt key: KeyError in the student's code
    p = dict(params)
    p["norm1.weight"] = params["norm_1.weight"] if "norm_1.weight" in params else params["norm1.gain"]
    return _encoder(x, key_padding_mask, p, n_head, norm_first)


def enc_residual_half(x, key_padding_mask, params, n_head, norm_first):  # residuals halved: unnamed
    if norm_first:
        x = x + 0.5 * _sa(_ln(x, params, 1), params, n_head, key_padding_mask)
        return x + 0.5 * _ff(_ln(x, params, 2), params)
    x = _ln(x + 0.5 * _sa(x, params, n_head, key_padding_mask), params, 1)
    return _ln(x + 0.5 * _ff(x, params), params, 2)


def dec_eps_1e6(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    def ln(h, p, i):
        return _ln_eps(h, p, i, 1e-6)
    return _decoder_ln(y, memory, memory_key_padding_mask, params, n_head, norm_first, ln)


def dec_eps_bert(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    def ln(h, p, i):
        return _ln_eps(h, p, i, 1e-12)
    return _decoder_ln(y, memory, memory_key_padding_mask, params, n_head, norm_first, ln)


def _decoder_ln(y, memory, pad, p, n_head, pre, ln):
    if pre:
        x = y + _sa(ln(y, p, 1), p, n_head, None, causal=True)
        x = x + _sa(ln(x, p, 2), p, n_head, pad, name="multihead_attn", context=memory)
        return x + _ff(ln(x, p, 3), p)
    x = ln(y + _sa(y, p, n_head, None, causal=True), p, 1)
    x = ln(x + _sa(x, p, n_head, pad, name="multihead_attn", context=memory), p, 2)
    return ln(x + _ff(x, p), p, 3)


def dec_float32_inside(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    p = {k: v.float() for k, v in params.items()}
    return _decoder(y.float(), memory.float(), memory_key_padding_mask, p, n_head, norm_first).to(y.dtype)


def dec_memory_float32(y, memory, memory_key_padding_mask, params, n_head, norm_first):  # the memory in float32
    return _decoder(y, memory.float().to(y.dtype), memory_key_padding_mask, params, n_head, norm_first)


def dec_memory_in_place(y, memory, memory_key_padding_mask, params, n_head, norm_first):  # zeroes the caller's memory
    memory.masked_fill_(memory_key_padding_mask[..., None], 0.0)
    return _decoder(y, memory, memory_key_padding_mask, params, n_head, norm_first)


def dec_params_in_place(y, memory, memory_key_padding_mask, params, n_head, norm_first):  # pops a key it used
    out = _decoder(y, memory, memory_key_padding_mask, params, n_head, norm_first)
    params.pop("linear2.bias")
    return out


def dec_squeeze(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    return _decoder(y, memory, memory_key_padding_mask, params, n_head, norm_first).squeeze(0)


def dec_causal_mask_square_raises(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    # the causal mask built from the memory's length: (S, S) against the target's (T, T) scores raises
    S = memory.shape[1]
    future = torch.ones(S, S, dtype=torch.bool).triu(1)
    p = params

    def self_attn(h):
        B, T, d = h.shape
        d_head = d // n_head
        W_q, W_k, W_v = p["self_attn.in_proj_weight"].chunk(3)
        b_q, b_k, b_v = p["self_attn.in_proj_bias"].chunk(3)
        q, k, v = ((h @ W.T + b).view(B, T, n_head, d_head).transpose(1, 2) for W, b in
                   ((W_q, b_q), (W_k, b_k), (W_v, b_v)))
        A = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(d_head)).masked_fill(future, INF), -1)
        y = (A @ v).transpose(1, 2).reshape(B, T, d)
        return y @ p["self_attn.out_proj.weight"].T + p["self_attn.out_proj.bias"]

    def cross(h):
        return _sa(h, p, n_head, memory_key_padding_mask, name="multihead_attn", context=memory)
    if norm_first:
        x = y + self_attn(_ln(y, p, 1))
        x = x + cross(_ln(x, p, 2))
        return x + _ff(_ln(x, p, 3), p)
    x = _ln(y + self_attn(y), p, 1)
    x = _ln(x + cross(x), p, 2)
    return _ln(x + _ff(x, p), p, 3)


def dec_ffn_twice(y, memory, memory_key_padding_mask, params, n_head, norm_first):  # the FFN applied twice: unnamed
    out = _decoder(y, memory, memory_key_padding_mask, params, n_head, norm_first)
    return out + _ff(out, params) - _ff(out, params) * 0.5


WRONG = {
    "layer_norm": [
        Student(ln_batch_statistics, _has(LAYER_NORM, "normalised over the batch")),
        Student(ln_whole_sequence, _has(LAYER_NORM, "normalised over the last two dimensions")),
        Student(ln_torch_var, _has(LAYER_NORM, "used the unbiased variance")),
        Student(ln_annotated_transformer, _has(LAYER_NORM, "wrote the Annotated Transformer's")),
        Student(ln_eps_on_sigma, _has(LAYER_NORM, "added ε to the standard deviation")),
        Student(ln_shortcut_variance, _has(LAYER_NORM, "computed the variance as E[x²] − E[x]²")),
        Student(ln_variance_floor, _has(LAYER_NORM, "used ε as a floor"), note="var.clamp(min=eps)"),
        Student(ln_std_floor, _has(LAYER_NORM, "used ε as a floor"), note="maximum(σ, eps)"),
        Student(ln_in_place, None),
        Student(ln_float32, None),
        Student(ln_eps_hardcoded, _has(LAYER_NORM, "used a fixed ε instead of the eps argument")),
        Student(ln_eps_1e6, _has(LAYER_NORM, "used a fixed ε instead of the eps argument")),
        Student(ln_eps_1e12, _has(LAYER_NORM, "used a fixed ε instead of the eps argument")),
        Student(ln_float32_stats, None, note="statistics in float32"),
        Student(ln_float32_rsqrt, None, note="rsqrt in float32"),
        Student(ln_squeezed, None, note="squeeze() changes shapes of 1"),
        Student(ln_centres_in_place, None, note="sub_ on the caller's x"),
        Student(ln_keepdim_missing_raises, None, note="raises: keepdim missing"),
        Student(ln_affine_dim0, None, note="weight[:, None] raises"),
        Student(ln_mean_abs, None, note="mean absolute deviation"),
    ],
    "feed_forward": [
        Student(ffn_gelu, _has(FEED_FORWARD, "used GELU")),
        Student(ffn_no_activation, _has(FEED_FORWARD, "left out the ReLU")),
        Student(ffn_relu_on_output, _has(FEED_FORWARD, "applied the ReLU to the output")),
        Student(ffn_bias_after_relu, _has(FEED_FORWARD, "added b_1 after the ReLU")),
        Student(ffn_matmul_untransposed, _has(FEED_FORWARD, "multiplied by W instead of Wᵀ")),
        Student(ffn_weights_swapped, None),
        Student(ffn_float32, None),
        Student(ffn_float32_inside, None, note="float32 inside"),
        Student(ffn_hidden_float32, None, note="the hidden layer in float32"),
        Student(ffn_squeezed, None, note="squeeze() drops sizes of 1"),
        Student(ffn_relu_in_place, None, note="relu_ on the caller's x"),
        Student(ffn_linear_tensors_raise, None, note="torch.mm raises on 3-d"),
        Student(ffn_half_bias, None, note="b2 halved"),
        Student(ffn_leaky, None, note="leaky ReLU"),
    ],
    "encoder_block": [
        Student(enc_always_post, _has(ENCODER_BLOCK, "wrote the post-LN block for norm_first=True")),
        Student(enc_norm_first_backwards, _has(ENCODER_BLOCK, "read norm_first backwards")),
        Student(enc_normalised_residual, _has(ENCODER_BLOCK, "added the normalised input as the residual")),
        Student(enc_no_residual, _has(ENCODER_BLOCK, "left out the residual connections")),
        Student(enc_mask_inverted, _has(ENCODER_BLOCK, "inverted the padding mask")),
        Student(enc_mask_forgotten, _has(ENCODER_BLOCK, "let the positions attend to padding")),
        Student(enc_norms_swapped, _has(ENCODER_BLOCK, "swapped the norms")),
        Student(enc_ffn_reads_attention, None),
        Student(enc_eps_1e6, _has(ENCODER_BLOCK, "used another ε in the LayerNorms")),
        Student(enc_eps_bert, _has(ENCODER_BLOCK, "used another ε in the LayerNorms")),
        Student(enc_float32_inside, None, note="float32 inside"),
        Student(enc_ln_float32, None, note="the norms in float32"),
        Student(enc_params_in_place, None, note="writes into the caller's params"),
        Student(enc_x_in_place, None, note="zeroes the caller's padded x"),
        Student(enc_squeeze, None, note="squeeze() drops a batch of one"),
        Student(enc_mask_float_raises, None, note="masked_fill with a float mask raises"),
        Student(enc_wrong_key, None, note="KeyError inside the student's code"),
        Student(enc_residual_half, None, note="halved residual branches"),
    ],
    "decoder_block": [
        Student(dec_norm_first_backwards, _has(DECODER_BLOCK, "read norm_first backwards")),
        Student(dec_normalised_residual, _has(DECODER_BLOCK, "added the normalised input as the residual")),
        Student(dec_keys_from_decoder, _has(DECODER_BLOCK, "took the cross-attention's keys and values")),
        Student(dec_queries_from_memory, _has(DECODER_BLOCK, "took the cross-attention's queries")),
        Student(dec_no_causal_mask, _has(DECODER_BLOCK, "left out the causal mask")),
        Student(dec_memory_mask_forgotten, _has(DECODER_BLOCK, "let the cross-attention read the source's")),
        Student(dec_copy_pasted_weights, _has(DECODER_BLOCK, "used self_attn's weights")),
        Student(dec_cross_first, None),
        Student(dec_eps_1e6, _has(DECODER_BLOCK, "used another ε in the LayerNorms")),
        Student(dec_eps_bert, _has(DECODER_BLOCK, "used another ε in the LayerNorms")),
        Student(dec_float32_inside, None, note="float32 inside"),
        Student(dec_memory_float32, None, note="the memory through float32"),
        Student(dec_memory_in_place, None, note="zeroes the caller's memory"),
        Student(dec_params_in_place, None, note="pops a key of the caller's params"),
        Student(dec_squeeze, None, note="squeeze(0) drops a batch of one"),
        Student(dec_causal_mask_square_raises, None, note="a causal mask of the wrong size raises"),
        Student(dec_ffn_twice, None, note="an extra half FFN"),
    ],
}

RIGHT = {
    "layer_norm": [ln_right_var_mean, ln_right_sums, ln_right_flat],
    "feed_forward": [ffn_right_einsum, ffn_right_rows, ffn_right_where],
    "encoder_block": [enc_right_loop, enc_right_zero_padding, enc_right_keywords],
    "decoder_block": [dec_right_loop, dec_right_einsum, dec_right_plain],
}


# ============================================================================= the thinking questions (chapter 8)
# Written as students answer them: counts with one part forgotten or doubled, the constant answers of a quick
# guess, and right answers reached another way (building the layers and counting, a table of products).

from lmbook.tasks.questions.ch08 import (  # noqa: E402
    BLOCK_FLOPS,
    BLOCK_PARAMETERS,
    DOUBLING_COST,
    SMOOTHED_LOSS_FLOOR,
)


def _block(d, d_ff, kind, attention, norm, n_att=None, n_norm=None):
    n_att = (1 if kind == "encoder" else 2) if n_att is None else n_att
    n_norm = (2 if kind == "encoder" else 3) if n_norm is None else n_norm
    return n_att * attention + 2 * d * d_ff + d_ff + d + n_norm * norm


def params_weights_only(d_model, d_ff, kind):
    n_att = 1 if kind == "encoder" else 2
    return n_att * 4 * d_model**2 + 2 * d_model * d_ff + (2 if kind == "encoder" else 3) * 2 * d_model


def params_gain_only(d_model, d_ff, kind):
    return _block(d_model, d_ff, kind, 4 * d_model**2 + 4 * d_model, d_model)


def params_no_norms(d_model, d_ff, kind):
    return _block(d_model, d_ff, kind, 4 * d_model**2 + 4 * d_model, 0)


def params_qkv_only(d_model, d_ff, kind):
    return _block(d_model, d_ff, kind, 3 * (d_model**2 + d_model), 2 * d_model)


def params_4d(d_model, d_ff, kind):
    return _block(d_model, 4 * d_model, kind, 4 * d_model**2 + 4 * d_model, 2 * d_model)


def params_decoder_like_encoder(d_model, d_ff, kind):
    return _block(d_model, d_ff, "encoder", 4 * d_model**2 + 4 * d_model, 2 * d_model)


def params_decoder_two_norms(d_model, d_ff, kind):
    return _block(d_model, d_ff, kind, 4 * d_model**2 + 4 * d_model, 2 * d_model, n_norm=2)


def params_per_head(d_model, d_ff, kind):  # "each of the 8 heads has its own W_q, W_k, W_v, W_o"
    return _block(d_model, d_ff, kind, 8 * (4 * d_model**2 + 4 * d_model), 2 * d_model)


def params_right_torch(d_model, d_ff, kind):
    from torch import nn

    layer = (nn.TransformerEncoderLayer if kind == "encoder" else nn.TransformerDecoderLayer)(
        d_model, 1, d_ff)
    return sum(p.numel() for p in layer.parameters())


def params_right_table(d_model, d_ff, kind):
    linear = {"W_q": (d_model, d_model), "W_k": (d_model, d_model), "W_v": (d_model, d_model),
              "W_o": (d_model, d_model)}
    attention = sum(i * o + o for i, o in linear.values())
    ffn = (d_model * d_ff + d_ff) + (d_ff * d_model + d_model)
    norms = {"encoder": 2, "decoder": 3}[kind]
    return {"encoder": 1, "decoder": 2}[kind] * attention + ffn + norms * 2 * d_model


def params_right_expanded(d_model, d_ff, kind):
    d = d_model
    if kind == "encoder":
        return 4 * d * d + 2 * d * d_ff + d_ff + 9 * d
    return 8 * d * d + 2 * d * d_ff + d_ff + 15 * d


def flops_multiply_adds(n, d_model, d_ff):
    return 4 * n * d_model**2 + 2 * n * n * d_model + 2 * n * d_model * d_ff


def flops_no_attention(n, d_model, d_ff):
    return 8 * n * d_model**2 + 4 * n * d_model * d_ff


def flops_scores_once(n, d_model, d_ff):
    return 8 * n * d_model**2 + 2 * n * n * d_model + 4 * n * d_model * d_ff


def flops_three_projections(n, d_model, d_ff):
    return 6 * n * d_model**2 + 4 * n * n * d_model + 4 * n * d_model * d_ff


def flops_4d(n, d_model, d_ff):
    return 24 * n * d_model**2 + 4 * n * n * d_model


def flops_one_ffn_layer(n, d_model, d_ff):
    return 8 * n * d_model**2 + 4 * n * n * d_model + 2 * n * d_model * d_ff


def flops_per_head_scores(n, d_model, d_ff):  # divided the n² products by the heads (8): d_head, not d
    return 8 * n * d_model**2 + 4 * n * n * d_model // 8 + 4 * n * d_model * d_ff


def flops_right_products(n, d_model, d_ff):
    products = [(n, d_model, d_model)] * 4 + [(n, d_model, n), (n, n, d_model), (n, d_model, d_ff),
                                              (n, d_ff, d_model)]
    return sum(2 * a * b * c for a, b, c in products)


def flops_right_heads(n, d_model, d_ff):
    h, d_head = 4, d_model / 4  # any number of heads gives the same total
    attention = h * (2 * n * n * d_head + 2 * n * n * d_head)
    return int(round(8 * n * d_model * d_model + attention + 4 * n * d_model * d_ff))


def flops_right_counter(n, d_model, d_ff):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.zeros(n, d_model)
    w = torch.zeros(d_model, d_model)
    with FlopCounterMode(display=False) as counter:
        q, k, v = x @ w, x @ w, x @ w
        a = q @ k.T
        (a @ v) @ w
        (x @ torch.zeros(d_model, d_ff)) @ torch.zeros(d_ff, d_model)
    return counter.get_total_flops()


def doubling_two(n, d_model, d_ff):
    return 2.0


def doubling_four(n, d_model, d_ff):
    return 4.0


def doubling_attention_grows(n, d_model, d_ff):
    d = d_model
    before = 8 * n * d * d + 4 * n * n * d + 4 * n * d * d_ff
    return (8 * n * d * d + 4 * (2 * n) ** 2 * d + 4 * n * d * d_ff) / before


def doubling_inverted(n, d_model, d_ff):
    d = d_model
    cost = lambda m: 8 * m * d * d + 4 * m * m * d + 4 * m * d * d_ff  # noqa: E731
    return cost(n) / cost(2 * n)


def doubling_half_way(n, d_model, d_ff):
    return 3.0  # "between 2 and 4"


def doubling_params_ratio(n, d_model, d_ff):  # the parameters do not change with n
    return 1.0


def doubling_right_closed_form(n, d_model, d_ff):
    return 2 * (2 * d_model + 2 * n + d_ff) / (2 * d_model + n + d_ff)


def doubling_right_terms(n, d_model, d_ff):
    linear, quadratic = 8 * n * d_model**2 + 4 * n * d_model * d_ff, 4 * n * n * d_model
    return (2 * linear + 4 * quadratic) / (linear + quadratic)


def doubling_right_fractions(n, d_model, d_ff):
    share = 4 * n * n * d_model / (8 * n * d_model**2 + 4 * n * n * d_model + 4 * n * d_model * d_ff)
    return 2 * (1 - share) + 4 * share


def floor_zero(V, eps):
    return 0.0


def floor_right_word(V, eps):
    return -math.log(1 - eps + eps / V)


def floor_wrong_words_only(V, eps):
    other = eps / (V - 1)
    return -(1 - eps) * math.log(1 - eps) - (V - 1) * other * math.log(other) if eps else 0.0


def floor_bits(V, eps):
    q = [1 - eps + eps / V] + [eps / V] * (V - 1)
    return -sum(p * math.log2(p) for p in q if p > 0)


def floor_eps_log_v(V, eps):
    return eps * math.log(V)


def floor_uniform_cross_entropy(V, eps):  # the loss of a uniform model
    return math.log(V)


def floor_no_zero_guard(V, eps):  # 0 · ln 0 left to Python: fails at eps = 0
    return -(1 - eps + eps / V) * math.log(1 - eps + eps / V) - (V - 1) * (eps / V) * math.log(eps / V)


def floor_right_torch(V, eps):
    q = torch.full((V,), eps / V, dtype=torch.float64)
    q[0] += 1 - eps
    return float(-(q * torch.where(q > 0, q.log(), torch.zeros_like(q))).sum())


def floor_right_xlogy(V, eps):
    q = torch.tensor([1 - eps + eps / V] + [eps / V] * (V - 1), dtype=torch.float64)
    return -torch.special.xlogy(q, q).sum().item()


def floor_right_cross_entropy(V, eps):  # the smoothed loss of the model that predicts q itself
    q = torch.full((1, V), eps / V, dtype=torch.float64)
    q[0, 0] += 1 - eps
    logits = torch.where(q > 0, q.log(), torch.full_like(q, -1e300))
    return torch.nn.functional.cross_entropy(logits, torch.tensor([0]), label_smoothing=eps).item()


WRONG |= {
    "block_parameters": [
        Student(params_weights_only, _has(BLOCK_PARAMETERS, "left out the biases")),
        Student(params_gain_only, _has(BLOCK_PARAMETERS, "counted one vector per LayerNorm")),
        Student(params_no_norms, _has(BLOCK_PARAMETERS, "left out the LayerNorms")),
        Student(params_qkv_only, _has(BLOCK_PARAMETERS, "counted three maps in attention")),
        Student(params_4d, _has(BLOCK_PARAMETERS, "took d_ff as 4 d_model")),
        Student(params_decoder_like_encoder, _has(BLOCK_PARAMETERS, "gave the decoder block one attention")),
        Student(params_decoder_two_norms, _has(BLOCK_PARAMETERS, "gave the decoder block two LayerNorms")),
        Student(params_per_head, None),
    ],
    "block_flops": [
        Student(flops_multiply_adds, _has(BLOCK_FLOPS, "counted multiply-adds")),
        Student(flops_no_attention, _has(BLOCK_FLOPS, "left out the attention itself")),
        Student(flops_scores_once, _has(BLOCK_FLOPS, "counted one of the two n² products")),
        Student(flops_three_projections, _has(BLOCK_FLOPS, "left out the output projection")),
        Student(flops_4d, _has(BLOCK_FLOPS, "took d_ff as 4 d_model")),
        Student(flops_one_ffn_layer, _has(BLOCK_FLOPS, "counted one of the FFN's two layers")),
        Student(flops_per_head_scores, None),
    ],
    "doubling_cost": [
        Student(doubling_two, _has(DOUBLING_COST, "said 2")),
        Student(doubling_four, _has(DOUBLING_COST, "said 4")),
        Student(doubling_attention_grows, _has(DOUBLING_COST, "let only attention grow")),
        Student(doubling_inverted, _has(DOUBLING_COST, "divided the cost at n")),
        Student(doubling_half_way, None),
        Student(doubling_params_ratio, None),
    ],
    "smoothed_loss_floor": [
        Student(floor_zero, _has(SMOOTHED_LOSS_FLOOR, "returned 0")),
        Student(floor_right_word, _has(SMOOTHED_LOSS_FLOOR, "returned −ln of the right word")),
        Student(floor_wrong_words_only, _has(SMOOTHED_LOSS_FLOOR, "spread ε over the V − 1 wrong words")),
        Student(floor_bits, _has(SMOOTHED_LOSS_FLOOR, "gave the answer in bits")),
        Student(floor_eps_log_v, _has(SMOOTHED_LOSS_FLOOR, "used ε ln V")),
        Student(floor_uniform_cross_entropy, None),
        Student(floor_no_zero_guard, None),
    ],
}

RIGHT |= {
    "block_parameters": [params_right_torch, params_right_table, params_right_expanded],
    "block_flops": [flops_right_products, flops_right_heads, flops_right_counter],
    "doubling_cost": [doubling_right_closed_form, doubling_right_terms, doubling_right_fractions],
    "smoothed_loss_floor": [floor_right_torch, floor_right_xlogy, floor_right_cross_entropy],
}
