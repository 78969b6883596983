"""Checks for exercise 6 (chapter 6: multi-head attention).

The references are plain ``view``/``transpose`` for splitting and merging the heads, and torch's own
``F.multi_head_attention_forward`` (what ``nn.MultiheadAttention`` runs) given the student's weights, never
the course's answers in ``lmbook.multihead`` or ``lmbook.self_attention``. Usage in a notebook:
``from lmbook.tasks.ch06 import check``.

Shapes, as in the chapter, batch first: query (B, n_q, d), key and value (B, n_k, d); the weights packed as
in ``nn.MultiheadAttention``: ``in_proj_weight`` (3d, d) = [W_q; W_k; W_v], ``in_proj_bias`` (3d,),
``out_proj_weight`` (d, d), ``out_proj_bias`` (d,). ``key_padding_mask`` (B, n_k) follows torch's
convention, **True = padding** (the opposite of exercise 5's ``key_mask``); padding comes at the end and
every sequence has at least one real token. ``causal`` is only True in self-attention (n_q = n_k).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..grading.checks import Case, Check, Mutant, Registry
from ..grading.compare import compare_parts, describe_tensor_mismatch
from .ch05 import COURSE, COURSE_ATTRS, TORCH_ATTENTION, TORCH_ATTENTION_ATTRS
from .common import randn as _randn
from .questions.ch06 import QUESTIONS

NEG_INF = float("-inf")
FORBIDDEN = dict(forbidden=TORCH_ATTENTION, forbidden_attrs=(*COURSE_ATTRS, *TORCH_ATTENTION_ATTRS),
                 forbidden_modules=COURSE)


def _tensor(out, ref) -> str | None:
    # the values are the input's own, moved: nothing is computed, so they must match to rounding
    return describe_tensor_mismatch(out, ref, rtol=1e-6, atol=1e-7, dim=None)


# ----------------------------------------------------------------------------- Task 1: split_heads

def _split_case(B: int, n: int, d: int, n_head: int, dtype=torch.float32):
    def make(g, device):
        return ((_randn((B, n, d), g, device).to(dtype), n_head), {})
    return make


def _split_ref(x, n_head):
    B, n, d = x.shape
    return x.view(B, n, n_head, d // n_head).transpose(1, 2)


def _split_with(mistake: str):
    def fn(x, n_head):
        B, n, d = x.shape
        d_head = d // n_head
        if mistake == "no_transpose":
            return x.view(B, n_head, n, d_head)
        if mistake == "interleaved":
            return x.view(B, n, d_head, n_head).permute(0, 3, 1, 2)
        if mistake == "forgot_transpose":
            return x.view(B, n, n_head, d_head)
        if mistake == "head_size":  # n_head used as the size of a head
            return x.view(B, n, d_head, n_head).transpose(1, 2)
        raise ValueError(mistake)
    return fn


def _split_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("batch 2, n=5, d=6, n_head=2", _split_case(2, 5, 6, 2)),
                Case("batch 3, n=4, d=12, n_head=3", _split_case(3, 4, 12, 3))]
    return [Case("a batch of one, n=7, d=8, n_head=4", _split_case(1, 7, 8, 4)),
            Case("length 1, d=6, n_head=3", _split_case(3, 1, 6, 3)),
            Case("n_head = 1 (one head of size d)", _split_case(2, 5, 8, 1)),
            Case("n_head = d (heads of size 1)", _split_case(2, 3, 6, 6)),
            Case("float64 inputs, d=16, n_head=4", _split_case(2, 6, 16, 4, dtype=torch.float64)),
            Case("batch 4, n=9, d=24, n_head=6", _split_case(4, 9, 24, 6))]


SPLIT_HEADS = Check(
    task="split_heads",
    what="(B, n, d) → (B, n_head, n, d/n_head), head i holding features i·d/h … (i+1)·d/h − 1",
    reference=_split_ref,
    compare=_tensor,
    cases=_split_cases(hidden=False),
    hidden_cases=_split_cases(hidden=True),
    mutants=[
        Mutant(_split_with("no_transpose"), "reshaped (B, n, d) straight to (B, n_head, n, d_head): that cuts the "
                                            "flattened positions-and-features into pieces, not each vector into "
                                            "heads; view as (B, n, n_head, d_head), then swap dims 1 and 2"),
        Mutant(_split_with("interleaved"), "split the features interleaved (head i got features i, i + n_head, "
                                           "…): head i holds the block of d_head consecutive features starting "
                                           "at i·d_head, so view as (B, n, n_head, d_head)"),
        Mutant(_split_with("forgot_transpose"), "returned (B, n, n_head, d_head): swap dims 1 and 2 so that the "
                                                "heads come before the positions, (B, n_head, n, d_head)"),
        Mutant(_split_with("head_size"), "used n_head as the size of a head: there are n_head heads, each of "
                                         "size d_head = d / n_head"),
    ],
    keep_dtype=True,
    **FORBIDDEN,
)


# ----------------------------------------------------------------------------- Task 2: merge_heads

def _merge_case(B: int, h: int, n: int, d_head: int, dtype=torch.float32):
    def make(g, device):
        return ((_randn((B, h, n, d_head), g, device).to(dtype),), {})
    return make


def _merge_ref(x):
    B, h, n, d_head = x.shape
    return x.transpose(1, 2).reshape(B, n, h * d_head)


def _merge_with(mistake: str):
    def fn(x):
        B, h, n, d_head = x.shape
        if mistake == "no_transpose":
            return x.reshape(B, n, h * d_head)
        if mistake == "interleaved":
            return x.permute(0, 2, 3, 1).reshape(B, n, h * d_head)
        if mistake == "not_merged":
            return x.transpose(1, 2)
        if mistake == "mean":
            return x.mean(dim=1)
        raise ValueError(mistake)
    return fn


def _merge_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("batch 2, n_head=2, n=5, d_head=3", _merge_case(2, 2, 5, 3)),
                Case("batch 3, n_head=3, n=4, d_head=4", _merge_case(3, 3, 4, 4))]
    return [Case("a batch of one, n_head=4, n=7, d_head=2", _merge_case(1, 4, 7, 2)),
            Case("length 1, n_head=3, d_head=2", _merge_case(3, 3, 1, 2)),
            Case("n_head = 1", _merge_case(2, 1, 5, 8)),
            Case("heads of size 1 (d_head = 1)", _merge_case(2, 6, 3, 1)),
            Case("float64 inputs, n_head=4, d_head=4", _merge_case(2, 4, 6, 4, dtype=torch.float64)),
            Case("batch 4, n_head=6, n=9, d_head=4", _merge_case(4, 6, 9, 4))]


MERGE_HEADS = Check(
    task="merge_heads",
    what="(B, n_head, n, d_head) → (B, n, n_head·d_head), the inverse of split_heads",
    reference=_merge_ref,
    compare=_tensor,
    cases=_merge_cases(hidden=False),
    hidden_cases=_merge_cases(hidden=True),
    mutants=[
        Mutant(_merge_with("no_transpose"), "reshaped (B, n_head, n, d_head) to (B, n, d) without transposing "
                                            "back: swap dims 1 and 2 first, so each position's heads sit side by "
                                            "side, then reshape"),
        Mutant(_merge_with("interleaved"), "interleaved the heads' features (feature j of every head, then "
                                           "feature j + 1): head i's d_head features are one block, at "
                                           "i·d_head … (i+1)·d_head − 1"),
        Mutant(_merge_with("not_merged"), "returned (B, n, n_head, d_head): after the transpose, reshape to "
                                          "(B, n, n_head·d_head)"),
        Mutant(_merge_with("mean"), "averaged the heads: merging concatenates them, each head keeps its own "
                                    "d_head features of the output"),
    ],
    keep_dtype=True,
    **FORBIDDEN,
)


# ----------------------------------------------------------------------------- Task 3: multi-head attention

def _padding(B: int, n: int, g: torch.Generator, lengths=None) -> torch.Tensor:
    """(B, n) bool, True at padding (torch's convention), which comes at the end; the longest fills the batch."""
    lens = torch.tensor(lengths) if lengths is not None else torch.randint(1, n + 1, (B,), generator=g)
    if lengths is None:
        lens[int(torch.randint(0, B, (1,), generator=g))] = n
    return torch.arange(n).unsqueeze(0) >= lens.unsqueeze(1)


def _mha_case(B: int, n_q: int, n_k: int, d: int, n_head: int, causal: bool, lengths=None, kind: str = "self",
              scale: float = 1.0, dtype=torch.float32):
    """``kind``: "self" (query, key, value the same sequence), "cross" (key = value, another sequence) or
    "kqv" (three different tensors)."""
    def make(g, device):
        pad = _padding(B, n_k, g, lengths)
        keys = _randn((B, n_k, d), g, device, scale)
        # made-up large vectors at padding: a query that attends there gets a very different answer
        keys = torch.where(pad.to(device).unsqueeze(-1), 3.0 * keys.abs() + 2.0, keys)
        query = keys if kind == "self" else _randn((B, n_q, d), g, device, scale)
        values = keys if kind != "kqv" else torch.where(pad.to(device).unsqueeze(-1), 10.0,
                                                        _randn((B, n_k, d), g, device, scale))
        w_in = _randn((3 * d, d), g, device, 1 / math.sqrt(d))
        b_in = _randn((3 * d,), g, device, 0.5)
        w_out = _randn((d, d), g, device, 1 / math.sqrt(d))
        b_out = _randn((d,), g, device, 0.5)
        tensors = [t.to(dtype) for t in (query, keys, values, w_in, b_in, w_out, b_out)]
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


def _mha_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("self-attention, causal, batch 2, n=5, lengths (5, 3), d=6, n_head=2",
                     _mha_case(2, 5, 5, 6, 2, True, lengths=[5, 3])),
                Case("cross-attention, not causal, batch 2, n_q=3, n_k=5, lengths (4, 5), d=8, n_head=4",
                     _mha_case(2, 3, 5, 8, 4, False, lengths=[4, 5], kind="cross"))]
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
            Case("batch 5, random lengths up to 9, d=16, n_head=4, causal", _mha_case(5, 9, 9, 16, 4, True))]


MULTIHEAD_ATTENTION = Check(
    task="multihead_attention",
    what="torch.nn.MultiheadAttention(d, n_head, batch_first=True) with these weights: the output and the "
         "per-head weights",
    reference=_mha_ref,
    compare=compare_parts("output", "weights", rtol=1e-4, atol=1e-5, order=(1, 0)),
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

CHECKS = [SPLIT_HEADS, MERGE_HEADS, MULTIHEAD_ATTENTION]
check = Registry(CHECKS + QUESTIONS)
