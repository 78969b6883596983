"""Task 3 of exercise 6: multi-head attention."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import ATTENTION_NAN_HINT, compare_parts
from ...grading.reproduce import sized
from .. import earlier
from ..blocks import attention_params
from ..common import NEG_INF, fit_lengths, in_dtype, made_up_at_padding, padding_mask
from ..common import randn as _randn
from .shared import FORBIDDEN


def _mha_case(B: int, n_q: int, n_k: int, d: int, n_head: int, causal: bool, lengths=None, kind: str = "self",
              scale: float = 1.0, dtype=torch.float32):
    """``kind``: "self" (query, key, value the same sequence), "cross" (key = value, another sequence) or
    "kqv" (three different tensors)."""
    def make(g, device):
        pad = padding_mask(B, n_k, g, lengths)
        keys = _randn((B, n_k, d), g, device, scale)
        keys = made_up_at_padding(keys, pad)
        query = keys if kind == "self" else _randn((B, n_q, d), g, device, scale)
        values = keys if kind != "kqv" else torch.where(pad.to(device).unsqueeze(-1), 10.0,
                                                        _randn((B, n_k, d), g, device, scale))
        weights = attention_params(g, device, d).values()  # in_proj weight and bias, out_proj weight and bias
        tensors = [in_dtype(t, dtype) for t in (query, keys, values, *weights)]
        return ((*tensors, n_head, pad.to(device), causal), {})
    return make


def _mha_ref(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
             key_padding_mask, causal):
    """torch's nn.MultiheadAttention computation, batch first, with the per-head weights."""
    n_q, n_k, d = query.shape[1], key.shape[1], query.shape[-1]
    # torch's bool attn_mask is True where attention is NOT allowed: the future
    future = torch.ones(n_q, n_k, dtype=torch.bool, device=query.device).triu(1) if causal else None
    out, weights = F.multi_head_attention_forward(
        query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), d, n_head, in_proj_weight,
        in_proj_bias, None, None, False, 0.0, out_proj_weight, out_proj_bias, training=False,
        key_padding_mask=key_padding_mask.bool(), need_weights=True, attn_mask=future,
        average_attn_weights=False)
    return out.transpose(0, 1), weights


def _mha_with(scale="d_head", split="right", merge="right", padding="right", swap_kv=False, out_proj=True,
              average=False, bias=True, transpose_w=True, causal_mask=True):
    def heads(x, h):
        B, n, d = x.shape
        if split == "no_transpose":
            return x.reshape(B, h, n, d // h)
        if split == "interleaved":
            return x.reshape(B, n, d // h, h).permute(0, 3, 1, 2)
        return x.reshape(B, n, h, d // h).transpose(1, 2)

    def merged(y):
        B, h, n, d_head = y.shape
        if merge == "no_transpose" or split == "no_transpose":  # the straight reshape, undone as it was done
            return y.reshape(B, n, h * d_head)
        if split == "interleaved":
            return y.permute(0, 2, 3, 1).reshape(B, n, h * d_head)
        return y.transpose(1, 2).reshape(B, n, h * d_head)

    def fn(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
           key_padding_mask, causal):
        d = query.shape[-1]
        w_q, w_k, w_v = in_proj_weight.chunk(3)
        b_q, b_k, b_v = in_proj_bias.chunk(3)
        if swap_kv:
            w_k, w_v, b_k, b_v = w_v, w_k, b_v, b_k
        proj = [(x @ (w.T if transpose_w else w) + (b if bias else 0))
                for x, w, b in ((query, w_q, b_q), (key, w_k, b_k), (value, w_v, b_v))]
        q, k, v = (heads(t, n_head) for t in proj)
        scores = q @ k.transpose(-2, -1)
        if scale == "d_head":
            scores = scores / math.sqrt(d // n_head)
        elif scale == "d":
            scores = scores / math.sqrt(d)
        blocked = key_padding_mask.bool()
        if padding == "inverted":
            blocked = ~blocked
        blocked = blocked[:, None, None, :] if padding != "none" else torch.zeros_like(blocked[:, None, None, :])
        if causal and causal_mask:
            n_q, n_k = q.shape[2], k.shape[2]
            blocked = blocked | torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).triu(1)
        weights = torch.softmax(scores.masked_fill(blocked, NEG_INF), dim=-1)
        y = merged(weights @ v)
        if out_proj:
            y = y @ (out_proj_weight.T if transpose_w else out_proj_weight) + (out_proj_bias if bias else 0)
        return y, (weights.mean(dim=1) if average else weights)
    return fn


def _mha_sized(B: int, n_q: int, n_k: int, n_head: int, d_head: int, causal: bool, lengths=None, kind="self",
               dtype=torch.float32):
    return _mha_case(B, n_q, n_k, n_head * d_head, n_head, causal, lengths, kind, dtype=dtype)


SMALLEST = {"B": 1, "n_q": 1, "n_k": 1, "n_head": 1, "d_head": 1}


def _fit(p: dict) -> dict | None:
    if p.get("kind", "self") == "self":  # self-attention: the queries are the keys
        p["n_q"] = p["n_k"] = min(p["n_q"], p["n_k"])
    return fit_lengths(p, size="n_k")


def _mha_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [sized("self-attention, causal, batch 2, n=5, lengths (5, 3), d=6, n_head=2", _mha_sized, B=2, n_q=5,
                      n_k=5, n_head=2, d_head=3, causal=True, lengths=[5, 3], floors=SMALLEST, fit=_fit),
                sized("cross-attention, not causal, batch 2, n_q=3, n_k=5, lengths (4, 5), d=8, n_head=4", _mha_sized,
                      B=2, n_q=3, n_k=5, n_head=4, d_head=2, causal=False, lengths=[4, 5], kind="cross",
                      floors=SMALLEST, fit=_fit),
                sized("float64 inputs, self-attention, causal, batch 2, n=4, lengths (4, 2), d=4, n_head=2", _mha_sized,
                      B=2, n_q=4, n_k=4, n_head=2, d_head=2, causal=True, lengths=[4, 2], dtype=torch.float64,
                      floors=SMALLEST, fit=_fit)]
    return [Case("a batch of one without padding, self-attention, causal",
                 _mha_case(1, 6, 6, 8, 2, True, lengths=[6])),
            Case("length 1 (one token per sequence), causal", _mha_case(3, 1, 1, 6, 3, True, lengths=[1, 1, 1])),
            Case("all but one key padded, not causal", _mha_case(2, 6, 6, 8, 4, False, lengths=[1, 6])),
            Case("all but one key padded, causal", _mha_case(2, 5, 5, 6, 3, True, lengths=[5, 1])),
            Case("large scores (exp overflows in float32 unless the maximum is subtracted), causal",
                 _mha_case(2, 5, 5, 8, 2, True, lengths=[5, 4], scale=6.0)),
            Case("float64 inputs, self-attention, causal", _mha_case(2, 7, 7, 12, 3, True, dtype=torch.float64)),
            Case("float64 inputs, cross-attention, n_q=4, n_k=6",
                 _mha_case(3, 4, 6, 8, 2, False, kind="cross", dtype=torch.float64)),
            Case("n_head = 1 (one head of size d), causal", _mha_case(2, 5, 5, 6, 1, True)),
            Case("n_head = d (heads of size 1), causal", _mha_case(2, 5, 5, 4, 4, True)),
            Case("key and value different tensors, n_q=3, n_k=7, not causal",
                 _mha_case(2, 3, 7, 8, 2, False, kind="kqv")),
            Case("batch 5, random lengths up to 9, d=16, n_head=4, causal", _mha_case(5, 9, 9, 16, 4, True)),
            Case("a batch of one with one head and one query (cross-attention, n_q=1, n_k=4)",
                 _mha_case(1, 1, 4, 4, 1, False, kind="cross"))]


MULTIHEAD_ATTENTION = Check(
    task="multihead_attention",
    what="torch.nn.MultiheadAttention(d, n_head, batch_first=True) with these weights: the output and the "
         "per-head weights",
    reference=_mha_ref,
    grad_of=(0, 1, 2, 3, 4, 5, 6),  # the inputs and the four weights: a Transformer is trained through it
    builds_on=(("split_heads", earlier.split_heads), ("merge_heads", earlier.merge_heads)),
    compare=compare_parts("output", "weights", rtol=1e-4, atol=1e-5, order=(1, 0), tuple_only=True,
                          nan_hint=ATTENTION_NAN_HINT),
    cases=_mha_cases(hidden=False),
    hidden_cases=_mha_cases(hidden=True),
    mutants=[
        Mutant(_mha_with(scale=None), "left out the 1/sqrt(d_head): each head's scores are q kᵀ / sqrt(d_head)"),
        Mutant(_mha_with(scale="d"), "divided the scores by sqrt(d): each head works in d_head = d / n_head "
                                     "dimensions, so divide by sqrt(d_head)"),
        Mutant(_mha_with(split="interleaved"), "split the features into heads interleaved (head i got features "
                                               "i, i + n_head, …): head i holds the block of d_head consecutive "
                                               "features starting at i·d_head"),
        Mutant(_mha_with(split="no_transpose"), "reshaped (B, n, d) straight to (B, n_head, n, d_head) without "
                                                "the transpose: view as (B, n, n_head, d_head), then swap dims 1 "
                                                "and 2 (and the reverse when merging)"),
        Mutant(_mha_with(merge="no_transpose"), "merged the heads without transposing back: (B, n_head, n, "
                                                "d_head) must become (B, n, n_head, d_head) before the reshape "
                                                "to (B, n, d)"),
        Mutant(_mha_with(padding="inverted"), "inverted the padding mask: key_padding_mask is True at padding "
                                              "(torch's convention), so -inf goes where it is True"),
        Mutant(_mha_with(padding="none"), "attended to padding: keys where key_padding_mask is True must get "
                                          "-inf before the softmax"),
        Mutant(_mha_with(causal_mask=False), "left out the causal mask: when causal is True, query i may attend "
                                             "only to keys j ≤ i"),
        Mutant(_mha_with(swap_kv=True), "swapped K and V: in_proj_weight stacks [W_q; W_k; W_v], so its rows "
                                        "d … 2d − 1 give the keys and rows 2d … 3d − 1 the values"),
        Mutant(_mha_with(out_proj=False), "left out the output projection: the merged heads go through "
                                          "out_proj_weight and out_proj_bias"),
        Mutant(_mha_with(bias=False), "left out the biases: every projection adds its bias (in_proj_bias, "
                                      "out_proj_bias)"),
        Mutant(_mha_with(transpose_w=False), "multiplied by W instead of Wᵀ: the weights are stored as nn.Linear "
                                             "stores them, (d_out, d_in), so q = query @ W_q.T + b_q"),
        Mutant(_mha_with(average=True), "averaged the weights over the heads (torch's default "
                                        "average_attn_weights=True): return every head's weights, (B, n_head, "
                                        "n_q, n_k)"),
    ],
    keep_dtype=True,
    **FORBIDDEN,
)
