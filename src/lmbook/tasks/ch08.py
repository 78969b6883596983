"""Checks for exercise 8 (chapter 8: the Transformer).

The references are torch's own: ``F.layer_norm``, ``F.linear``, and ``nn.TransformerEncoderLayer`` /
``nn.TransformerDecoderLayer`` loaded with the case's weights, never the course's answers in
``lmbook.transformer``. Usage in a notebook: ``from lmbook.tasks.ch08 import check``.

Conventions, as in the chapter and exercise 6: batch first, x (B, n, d); weights stored as ``nn.Linear`` stores
them, (d_out, d_in); a block's weights are a dict with the names of its torch layer's ``state_dict()``
(``self_attn.in_proj_weight`` the packed (3d, d) [W_q; W_k; W_v], ``linear1.weight`` (d_ff, d), ``norm1.weight``
(d,), ...). Padding masks follow torch's convention, **True = padding**; padding comes at the end and every
sequence has at least one real token. The FFN's activation is ReLU, dropout is off (evaluation mode).

The encoder block's output is graded at real positions only: what a block computes at a padded position is never
used (``nn.TransformerEncoder``'s fast path returns zeros there), so any value is accepted. The decoder's target
has no padding here: all of its positions are graded.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .. import transformer as _course_transformer
from ..grading.checks import Case, Check, Mutant, Registry
from ..grading.compare import describe_tensor_mismatch, to_reference
from .ch05 import COURSE, COURSE_ATTRS, TORCH_ATTENTION, TORCH_ATTENTION_ATTRS
from .common import load_weights
from .common import randn as _randn
from .questions.ch08 import QUESTIONS

NEG_INF = float("-inf")
NAN = float("nan")
_T = _course_transformer
MODULES = (*COURSE, "lmbook.transformer")
ATTRS = (*COURSE_ATTRS, "transformer")
# torch's normalisation layers: each is LayerNorm when its input is reshaped (instance_norm over a (1, rows, d)
# view, group_norm with one group, batch_norm over a transposed view in training mode)
TORCH_NORMS = (F.layer_norm, nn.LayerNorm, torch.layer_norm, torch.native_layer_norm, F.group_norm, nn.GroupNorm,
               torch.group_norm, torch.native_group_norm, F.instance_norm, nn.InstanceNorm1d, nn.InstanceNorm2d,
               nn.InstanceNorm3d, torch.instance_norm, F.batch_norm, nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d,
               torch.batch_norm, torch.native_batch_norm)
TORCH_NORM_ATTRS = ("layer_norm", "LayerNorm", "native_layer_norm", "group_norm", "GroupNorm", "native_group_norm",
                    "instance_norm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "batch_norm",
                    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "native_batch_norm")


# ----------------------------------------------------------------------------- Task 1: layer_norm

def _ln_case(shape: tuple[int, ...], eps: float = 1e-5, scale: float = 1.0, offset: float = 0.0,
             dtype=torch.float32):
    def make(g, device):
        d = shape[-1]
        x = _randn(shape, g, device, scale, offset)
        weight = _randn((d,), g, device, 0.5, 1.0)  # a gain around 1, and a bias: neither is the identity
        bias = _randn((d,), g, device, 0.5)
        return ((x.to(dtype), weight.to(dtype), bias.to(dtype), eps), {})
    return make


def _ln_ref(x, weight, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def _ln_with(mistake: str):
    def fn(x, weight, bias, eps):
        dims = {"over_batch": 0, "over_sequence": (-2, -1)}.get(mistake, -1)
        mu = x.mean(dims, keepdim=True)
        if mistake == "naive_variance":  # E[x²] − E[x]²: cancels catastrophically when |mean| ≫ spread
            var = (x * x).mean(dims, keepdim=True) - mu * mu
        else:
            var = ((x - mu) ** 2).mean(dims, keepdim=True)
        if mistake in ("unbiased", "annotated"):
            n = x.shape[-1]
            var = var * n / (n - 1)
        if mistake in ("eps_on_std", "annotated"):
            normed = (x - mu) / (var.sqrt() + eps)
        elif mistake == "no_eps":
            normed = (x - mu) / var.sqrt()
        elif mistake == "variance":
            normed = (x - mu) / (var + eps)
        else:
            normed = (x - mu) / torch.sqrt(var + eps)
        if mistake == "no_affine":
            return normed
        if mistake == "swapped_affine":
            return bias * normed + weight
        return weight * normed + bias
    return fn


def _ln_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("x (2, 5, 8), eps=1e-5", _ln_case((2, 5, 8))),
                Case("x (3, 4, 6), eps=0.1", _ln_case((3, 4, 6), eps=0.1))]
    return [Case("a batch of one, length one: x (1, 1, 8)", _ln_case((1, 1, 8))),
            Case("length one, x (3, 1, 16)", _ln_case((3, 1, 16))),
            Case("a 2-d input (n, d) = (7, 12)", _ln_case((7, 12))),
            Case("a 4-d input (2, 3, 4, 8), eps=0.01", _ln_case((2, 3, 4, 8), eps=0.01)),
            Case("d = 1 (the output is the bias)", _ln_case((3, 4, 1))),
            Case("a small spread (std 0.01), eps=1e-5", _ln_case((2, 3, 16), scale=0.01)),
            Case("large values (std 1e4)", _ln_case((2, 3, 16), scale=1e4)),
            Case("a large mean (500) and a small spread (std 2), float32", _ln_case((2, 4, 64), scale=2.0,
                                                                                     offset=500.0)),
            Case("float64 inputs, x (2, 5, 32), eps=1e-3", _ln_case((2, 5, 32), eps=1e-3, dtype=torch.float64)),
            Case("batch 4, n=9, d=64", _ln_case((4, 9, 64)))]


LAYER_NORM = Check(
    task="layer_norm",
    what="LN(x) = g ⊙ (x − μ) / sqrt(σ² + ε) + b over the last dimension, σ² the biased variance",
    reference=_ln_ref,
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=2e-4, dim=None),
    cases=_ln_cases(hidden=False),
    hidden_cases=_ln_cases(hidden=True),
    mutants=[
        Mutant(_ln_with("over_batch"), "normalised over the batch (dim 0), as BatchNorm does: LayerNorm normalises "
                                       "each vector over its own d features, the last dimension"),
        Mutant(_ln_with("over_sequence"), "normalised over the last two dimensions (the positions and the features "
                                          "together): each position's vector is normalised on its own, over its "
                                          "d features"),
        Mutant(_ln_with("unbiased"), "used the unbiased variance (divided by d − 1, torch's default for .var() and "
                                     ".std()): LayerNorm's σ² divides by d (unbiased=False)"),
        Mutant(_ln_with("annotated"), "wrote the Annotated Transformer's (x − μ) / (std + ε) with torch's unbiased "
                                      "std: LayerNorm divides by sqrt(σ² + ε), with σ² the biased variance "
                                      "(divided by d)"),
        Mutant(_ln_with("eps_on_std"), "added ε to the standard deviation, (x − μ) / (σ + ε): ε goes inside the "
                                       "square root, (x − μ) / sqrt(σ² + ε)"),
        Mutant(_ln_with("no_eps"), "left out ε: divide by sqrt(σ² + ε)"),
        Mutant(_ln_with("variance"), "divided by the variance: divide by the standard deviation, sqrt(σ² + ε)"),
        Mutant(_ln_with("no_affine"), "left out the gain and the bias: LN(x) = g ⊙ x̂ + b, with x̂ the normalised "
                                      "vector"),
        Mutant(_ln_with("swapped_affine"), "swapped the gain and the bias: the gain `weight` multiplies the "
                                           "normalised vector, the `bias` is added"),
        Mutant(_ln_with("naive_variance"), "computed the variance as E[x²] − E[x]²: when the mean is large next to "
                                           "the spread, the two terms nearly cancel and float32 loses the variance; "
                                           "average the squared deviations, mean((x − μ)²)"),
    ],
    forbidden=(*TORCH_NORMS, _T.LayerNorm),
    forbidden_attrs=(*ATTRS, *TORCH_NORM_ATTRS),
    forbidden_modules=MODULES,
    keep_dtype=True,
)


# ----------------------------------------------------------------------------- Task 2: feed_forward

def _ffn_case(shape: tuple[int, ...], d_ff: int, scale: float = 1.0, dtype=torch.float32):
    def make(g, device):
        d = shape[-1]
        x = _randn(shape, g, device, scale)
        w1 = _randn((d_ff, d), g, device, 1 / math.sqrt(d))
        b1 = _randn((d_ff,), g, device, 0.5)
        w2 = _randn((d, d_ff), g, device, 1 / math.sqrt(d_ff))
        b2 = _randn((d,), g, device, 0.5)
        return (tuple(t.to(dtype) for t in (x, w1, b1, w2, b2)), {})
    return make


def _ffn_ref(x, w1, b1, w2, b2):
    return F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)


def _ffn_with(mistake: str):
    def fn(x, w1, b1, w2, b2):
        if mistake == "no_transpose":
            return torch.relu(x @ w1 + b1) @ w2 + b2
        if mistake == "relu_first":
            return (torch.relu(x) @ w1.T + b1) @ w2.T + b2
        if mistake == "no_bias":
            return torch.relu(x @ w1.T) @ w2.T
        pre = x @ w1.T + b1
        h = {"gelu": F.gelu(pre), "linear": pre, "bias_after": torch.relu(x @ w1.T) + b1}.get(mistake, torch.relu(pre))
        out = h @ w2.T + b2
        return torch.relu(out) if mistake == "relu_after" else out
    return fn


def _ffn_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("x (2, 5, 8), d_ff=16", _ffn_case((2, 5, 8), 16)),
                Case("x (3, 6), d_ff = d = 6 (square weights)", _ffn_case((3, 6), 6))]
    return [Case("a batch of one, length one, d=4, d_ff=8", _ffn_case((1, 1, 4), 8)),
            Case("a 4-d input (2, 3, 4, 6), d_ff=24", _ffn_case((2, 3, 4, 6), 24)),
            Case("d_ff < d (a bottleneck): d=8, d_ff=3", _ffn_case((2, 4, 8), 3)),
            Case("square weights, d = d_ff = 7", _ffn_case((2, 5, 7), 7)),
            Case("d = d_ff = 1", _ffn_case((3, 4, 1), 1)),
            Case("large inputs (std 100)", _ffn_case((2, 4, 8), 32, scale=100.0)),
            Case("float64 inputs, d=12, d_ff=48", _ffn_case((2, 5, 12), 48, dtype=torch.float64)),
            Case("batch 4, n=9, d=16, d_ff=64", _ffn_case((4, 9, 16), 64))]


FEED_FORWARD = Check(
    task="feed_forward",
    what="FFN(x) = max(0, x W_1ᵀ + b_1) W_2ᵀ + b_2 at every position",
    reference=_ffn_ref,
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-4, dim=None),
    cases=_ffn_cases(hidden=False),
    hidden_cases=_ffn_cases(hidden=True),
    mutants=[
        Mutant(_ffn_with("gelu"), "used GELU: this network's activation is ReLU, max(0, ·)"),
        Mutant(_ffn_with("linear"), "left out the ReLU between the two layers: without it the two layers are one "
                                    "linear map"),
        Mutant(_ffn_with("relu_after"), "applied the ReLU to the output too: only the hidden layer goes through it, "
                                        "FFN(x) = max(0, x W_1ᵀ + b_1) W_2ᵀ + b_2"),
        Mutant(_ffn_with("relu_first"), "applied the ReLU to the input: it goes between the two layers, on "
                                        "x W_1ᵀ + b_1"),
        Mutant(_ffn_with("bias_after"), "added b_1 after the ReLU: the bias is inside it, max(0, x W_1ᵀ + b_1)"),
        Mutant(_ffn_with("no_bias"), "left out the biases: FFN(x) = max(0, x W_1ᵀ + b_1) W_2ᵀ + b_2"),
        Mutant(_ffn_with("no_transpose"), "multiplied by W instead of Wᵀ: the weights are stored as nn.Linear "
                                          "stores them, (d_out, d_in), so the hidden layer is x @ W_1.T + b_1"),
    ],
    forbidden=(_T.FeedForward,),
    forbidden_attrs=(*ATTRS, "FeedForward"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)


# ----------------------------------------------------------------------------- blocks: inputs, and attention

def _padding(B: int, n: int, g: torch.Generator, lengths=None) -> torch.Tensor:
    """(B, n) bool, True at padding (torch's convention), which comes at the end; the longest fills the batch."""
    lens = torch.tensor(lengths) if lengths is not None else torch.randint(1, n + 1, (B,), generator=g)
    if lengths is None:
        lens[int(torch.randint(0, B, (1,), generator=g))] = n
    return torch.arange(n).unsqueeze(0) >= lens.unsqueeze(1)


def _block_params(g, device, d: int, d_ff: int, attentions: tuple[str, ...], n_norms: int) -> dict:
    """A block's weights, named and ordered as its torch layer's state_dict()."""
    p = {}
    for a in attentions:
        p[f"{a}.in_proj_weight"] = _randn((3 * d, d), g, device, 1 / math.sqrt(d))
        p[f"{a}.in_proj_bias"] = _randn((3 * d,), g, device, 0.5)
        p[f"{a}.out_proj.weight"] = _randn((d, d), g, device, 1 / math.sqrt(d))
        p[f"{a}.out_proj.bias"] = _randn((d,), g, device, 0.5)
    p["linear1.weight"] = _randn((d_ff, d), g, device, 1 / math.sqrt(d))
    p["linear1.bias"] = _randn((d_ff,), g, device, 0.5)
    p["linear2.weight"] = _randn((d, d_ff), g, device, 1 / math.sqrt(d_ff))
    p["linear2.bias"] = _randn((d,), g, device, 0.5)
    for i in range(1, n_norms + 1):  # gains around 1 and biases: every norm is told apart from the others
        p[f"norm{i}.weight"] = _randn((d,), g, device, 0.3, 1.0)
        p[f"norm{i}.bias"] = _randn((d,), g, device, 0.3)
    return p


def _padded_made_up(x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    # made-up large vectors at padding: a query that attends there gets a very different answer
    return torch.where(pad.to(x.device).unsqueeze(-1), 3.0 * x.abs() + 2.0, x)


def _attend(query, kv, p: dict, name: str, n_head: int, pad, causal: bool, scale: str = "d_head"):
    """The mutants' multi-head attention (exercise 6's), keys and values from ``kv``."""
    B, n_q, d = query.shape
    n_k, d_head = kv.shape[1], d // n_head
    w_q, w_k, w_v = p[f"{name}.in_proj_weight"].chunk(3)
    b_q, b_k, b_v = p[f"{name}.in_proj_bias"].chunk(3)
    q = (query @ w_q.T + b_q).view(B, n_q, n_head, d_head).transpose(1, 2)
    k = (kv @ w_k.T + b_k).view(B, n_k, n_head, d_head).transpose(1, 2)
    v = (kv @ w_v.T + b_v).view(B, n_k, n_head, d_head).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d if scale == "d" else d_head)
    blocked = torch.zeros(n_q, n_k, dtype=torch.bool, device=query.device)
    if causal:
        blocked = blocked | torch.ones(n_q, n_k, dtype=torch.bool, device=query.device).triu(1)
    if pad is not None:
        blocked = blocked | pad[:, None, None, :]
    weights = torch.softmax(scores.masked_fill(blocked, NEG_INF), dim=-1)
    y = (weights @ v).transpose(1, 2).reshape(B, n_q, d)
    return y @ p[f"{name}.out_proj.weight"].T + p[f"{name}.out_proj.bias"]


def _norm(p: dict, i: int):
    def ln(x):
        return F.layer_norm(x, (x.shape[-1],), p[f"norm{i}.weight"], p[f"norm{i}.bias"], 1e-5)
    return ln


def _ffn(p: dict, activation: str = "relu", relu_after: bool = False):
    def ffn(x):
        h = x @ p["linear1.weight"].T + p["linear1.bias"]
        out = (F.gelu(h) if activation == "gelu" else torch.relu(h)) @ p["linear2.weight"].T + p["linear2.bias"]
        return torch.relu(out) if relu_after else out
    return ffn


def _pre(norm_first: bool, order: str) -> bool:
    """Whether a block written with ``order`` runs pre-LN."""
    return {"right": norm_first, "always_post": False, "always_pre": True, "swapped": not norm_first}[order]


def _sublayer(x, f, norm, pre: bool, wiring: str):
    """One residual sub-layer: post-LN x = LN(x + f(x)), pre-LN x = x + f(LN(x)), or a mistake."""
    if pre:
        h = norm(x)
        if wiring == "no_residual":
            return f(h)
        return (h if wiring == "residual_from_norm" else x) + f(h)
    if wiring == "no_residual":
        return norm(f(x))
    if wiring == "norm_sublayer":
        return x + norm(f(x))
    return norm(x + f(x))


def _order_mutants(build) -> list[Mutant]:
    """The wiring mistakes an encoder and a decoder block share (``build``: the block's mutant builder)."""
    return [
        Mutant(build(order="always_post"), "wrote the post-LN block for norm_first=True as well: with "
                                           "norm_first=True the block is pre-LN, x = x + f(LN(x)), and the residual "
                                           "stream x itself is never normalised"),
        Mutant(build(order="always_pre"), "wrote the pre-LN block for norm_first=False as well: with "
                                          "norm_first=False it is the paper's post-LN block, x = LN(x + f(x)), the "
                                          "norm after the residual sum"),
        Mutant(build(order="swapped"), "read norm_first backwards: norm_first=True is pre-LN, x = x + f(LN(x)); "
                                       "norm_first=False is post-LN, x = LN(x + f(x))"),
        Mutant(build(wiring="residual_from_norm"), "added the normalised input as the residual, LN(x) + f(LN(x)): "
                                                   "in a pre-LN block the residual carries x itself, "
                                                   "x + f(LN(x))"),
        Mutant(build(wiring="norm_sublayer"), "normalised the sub-layer's output before adding it, x + LN(f(x)): a "
                                              "post-LN block normalises the sum, LN(x + f(x))"),
        Mutant(build(wiring="no_residual"), "left out the residual connections: each sub-layer's output is added "
                                            "to its input, LN(x + f(x)) in post-LN, x + f(LN(x)) in pre-LN"),
        Mutant(build(activation="gelu"), "used GELU in the feed-forward network: this block's is ReLU, "
                                         "max(0, x W_1ᵀ + b_1) W_2ᵀ + b_2"),
        Mutant(build(relu_after=True), "applied the ReLU to the feed-forward network's output too: only its hidden "
                                       "layer goes through it, max(0, x W_1ᵀ + b_1) W_2ᵀ + b_2"),
        Mutant(build(scale="d"), "scaled the attention scores by 1/sqrt(d): each head's scores are divided by "
                                 "sqrt(d_head), d_head = d / n_head"),
    ]


# ----------------------------------------------------------------------------- Task 3: encoder_block

def _enc_case(B: int, S: int, d: int, n_head: int, d_ff: int, norm_first: bool, lengths=None, scale: float = 1.0,
              dtype=torch.float32):
    def make(g, device):
        pad = _padding(B, S, g, lengths)
        x = _padded_made_up(_randn((B, S, d), g, device, scale), pad)
        params = _block_params(g, device, d, d_ff, ("self_attn",), 2)
        return ((x.to(dtype), pad.to(device), {k: v.to(dtype) for k, v in params.items()}, n_head, norm_first), {})
    return make


def _enc_ref(x, key_padding_mask, params, n_head, norm_first):
    """torch's encoder layer holding these weights, in evaluation mode; NaN at padded positions (not graded)."""
    layer = nn.TransformerEncoderLayer(x.shape[-1], n_head, params["linear1.weight"].shape[0], dropout=0.0,
                                       activation="relu", batch_first=True, norm_first=norm_first)
    layer = load_weights(layer, {k: v.to(x.dtype) for k, v in params.items()}).eval()
    out = layer(x, src_key_padding_mask=key_padding_mask.bool())
    return out.masked_fill(key_padding_mask.bool().unsqueeze(-1), NAN)


def _enc_with(order="right", wiring="right", padding="right", activation="relu", relu_after=False, scale="d_head",
              norms=(1, 2)):
    def fn(x, key_padding_mask, params, n_head, norm_first):
        pre = _pre(norm_first, order)
        pad = {"right": key_padding_mask, "inverted": ~key_padding_mask, "none": None}[padding]
        n1, n2 = (_norm(params, i) for i in norms)
        x = _sublayer(x, lambda h: _attend(h, h, params, "self_attn", n_head, pad, False, scale), n1, pre, wiring)
        x = _sublayer(x, _ffn(params, activation, relu_after), n2, pre, wiring)
        return x.masked_fill(key_padding_mask.unsqueeze(-1), NAN)  # padded positions are not graded
    return fn


def _real_positions(out, ref) -> str | None:
    """Compare at real positions only: the reference holds NaN at padded ones, where anything is accepted."""
    if isinstance(out, torch.Tensor) and tuple(out.shape) == tuple(ref.shape) and out.is_floating_point():
        ref = to_reference(ref)
        padded = ref.isnan().all(dim=-1, keepdim=True)
        out = to_reference(out).masked_fill(padded, 0.0)
        ref = ref.masked_fill(padded, 0.0)
    return describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-4, dim=None)


def _enc_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("post-LN (norm_first=False), batch 2, S=5, lengths (5, 3), d=8, n_head=2, d_ff=16",
                     _enc_case(2, 5, 8, 2, 16, False, lengths=[5, 3])),
                Case("pre-LN (norm_first=True), batch 3, S=4, lengths (4, 2, 3), d=8, n_head=4, d_ff=12",
                     _enc_case(3, 4, 8, 4, 12, True, lengths=[4, 2, 3]))]
    return [Case("a batch of one without padding, post-LN", _enc_case(1, 6, 8, 2, 16, False, lengths=[6])),
            Case("length 1 (one token per sequence), pre-LN", _enc_case(3, 1, 6, 2, 12, True, lengths=[1, 1, 1])),
            Case("all but one token padded, post-LN", _enc_case(2, 6, 8, 2, 16, False, lengths=[1, 6])),
            Case("all but one token padded, pre-LN", _enc_case(2, 5, 8, 4, 16, True, lengths=[5, 1])),
            Case("float64 inputs, post-LN", _enc_case(2, 7, 12, 3, 24, False, dtype=torch.float64)),
            Case("float64 inputs, pre-LN", _enc_case(3, 5, 8, 2, 32, True, dtype=torch.float64)),
            Case("large inputs (std 30), post-LN", _enc_case(2, 5, 8, 2, 16, False, scale=30.0)),
            Case("large inputs (std 30), pre-LN", _enc_case(2, 5, 8, 2, 16, True, scale=30.0)),
            Case("n_head = 1 (one head of size d), post-LN", _enc_case(2, 5, 6, 1, 12, False)),
            Case("n_head = d (heads of size 1), pre-LN", _enc_case(2, 5, 4, 4, 8, True)),
            Case("batch 5, random lengths up to 9, d=16, n_head=4, d_ff=64, pre-LN",
                 _enc_case(5, 9, 16, 4, 64, True))]


ENCODER_BLOCK = Check(
    task="encoder_block",
    what="nn.TransformerEncoderLayer(d, n_head, d_ff, dropout=0, ReLU, batch_first=True, norm_first) with these "
         "weights, at the real positions",
    reference=_enc_ref,
    compare=_real_positions,
    cases=_enc_cases(hidden=False),
    hidden_cases=_enc_cases(hidden=True),
    mutants=[
        *_order_mutants(_enc_with),
        Mutant(_enc_with(padding="inverted"), "inverted the padding mask: key_padding_mask is True at padding "
                                              "(torch's convention), and those keys get -inf"),
        Mutant(_enc_with(padding="none"), "let the positions attend to padding: pass key_padding_mask to the "
                                          "self-attention, so that padded keys get -inf"),
        Mutant(_enc_with(norms=(1, 1)), "used norm1 for both sub-layers: the self-attention's has norm1, the "
                                        "feed-forward network's norm2, each with its own gain and bias"),
        Mutant(_enc_with(norms=(2, 1)), "swapped the norms: norm1 goes with the self-attention, norm2 with the "
                                        "feed-forward network"),
    ],
    # lmbook.transformer.LayerNorm is refused by its module: listed here, its name would refuse nn.LayerNorm too,
    # which a block may use (only Task 1 asks for LayerNorm itself)
    forbidden=(*TORCH_ATTENTION, _T.EncoderBlock, _T.DecoderBlock, _T.Transformer, _T.FeedForward),
    forbidden_attrs=(*ATTRS, *TORCH_ATTENTION_ATTRS, "EncoderBlock", "DecoderBlock"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)


# ----------------------------------------------------------------------------- Task 4: decoder_block

def _dec_case(B: int, T: int, S: int, d: int, n_head: int, d_ff: int, norm_first: bool, lengths=None,
              scale: float = 1.0, dtype=torch.float32):
    def make(g, device):
        pad = _padding(B, S, g, lengths)
        y = _randn((B, T, d), g, device, scale)
        memory = _padded_made_up(_randn((B, S, d), g, device, scale), pad)
        params = _block_params(g, device, d, d_ff, ("self_attn", "multihead_attn"), 3)
        return ((y.to(dtype), memory.to(dtype), pad.to(device), {k: v.to(dtype) for k, v in params.items()}, n_head,
                 norm_first), {})
    return make


def _dec_ref(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    """torch's decoder layer holding these weights, in evaluation mode, with the causal mask on the target."""
    layer = nn.TransformerDecoderLayer(y.shape[-1], n_head, params["linear1.weight"].shape[0], dropout=0.0,
                                       activation="relu", batch_first=True, norm_first=norm_first)
    layer = load_weights(layer, {k: v.to(y.dtype) for k, v in params.items()}).eval()
    T = y.shape[1]
    future = torch.ones(T, T, dtype=torch.bool, device=y.device).triu(1)  # True = may not attend
    return layer(y, memory, tgt_mask=future, memory_key_padding_mask=memory_key_padding_mask.bool(),
                 tgt_is_causal=True)


def _dec_with(order="right", wiring="right", padding="right", activation="relu", relu_after=False, scale="d_head",
              norms=(1, 2, 3), self_causal=True, cross_causal=False, cross="right", cross_weights="multihead_attn",
              norm_memory=False):
    def fn(y, memory, memory_key_padding_mask, params, n_head, norm_first):
        pre = _pre(norm_first, order)
        pad = {"right": memory_key_padding_mask, "inverted": ~memory_key_padding_mask, "none": None}[padding]
        n1, n2, n3 = (_norm(params, i) for i in norms)

        def self_attention(h):
            return _attend(h, h, params, "self_attn", n_head, None, self_causal, scale)

        def cross_attention(h):
            mem = n2(memory) if norm_memory and pre else memory
            if cross == "kv_from_decoder":  # self-attention again, unmasked, with the cross-attention's weights
                return _attend(h, h, params, cross_weights, n_head, None, cross_causal, scale)
            if cross == "queries_from_memory":  # the roles swapped: raises when S != T (the mask has S entries)
                return _attend(mem, h, params, cross_weights, n_head, pad, cross_causal, scale)
            return _attend(h, mem, params, cross_weights, n_head, pad, cross_causal, scale)

        x = _sublayer(y, self_attention, n1, pre, wiring)
        x = _sublayer(x, cross_attention, n2, pre, wiring)
        return _sublayer(x, _ffn(params, activation, relu_after), n3, pre, wiring)
    return fn


def _dec_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("post-LN (norm_first=False), batch 2, target T=4, source S=6 with lengths (6, 4), d=8, "
                     "n_head=2, d_ff=16", _dec_case(2, 4, 6, 8, 2, 16, False, lengths=[6, 4])),
                Case("pre-LN (norm_first=True), batch 2, T=5, S=5 with lengths (5, 3), d=8, n_head=4, d_ff=12",
                     _dec_case(2, 5, 5, 8, 4, 12, True, lengths=[5, 3]))]
    return [Case("a batch of one without padding, post-LN, T=5, S=7",
                 _dec_case(1, 5, 7, 8, 2, 16, False, lengths=[7])),
            Case("a target of length 1 (the first step of decoding), pre-LN, S=4",
                 _dec_case(2, 1, 4, 6, 2, 12, True)),
            Case("T = S = 1, post-LN", _dec_case(3, 1, 1, 6, 2, 12, False, lengths=[1, 1, 1])),
            Case("all but one source token padded, pre-LN, T=4, S=6",
                 _dec_case(2, 4, 6, 8, 2, 16, True, lengths=[1, 6])),
            Case("all but one source token padded, post-LN, T=S=5",
                 _dec_case(2, 5, 5, 8, 4, 16, False, lengths=[5, 1])),
            Case("float64 inputs, pre-LN, T=6, S=7", _dec_case(2, 6, 7, 12, 3, 24, True, dtype=torch.float64)),
            Case("float64 inputs, post-LN, T=S=4", _dec_case(3, 4, 4, 8, 2, 32, False, dtype=torch.float64)),
            Case("large inputs (std 30), post-LN, T=5, S=3", _dec_case(2, 5, 3, 8, 2, 16, False, scale=30.0)),
            Case("large inputs (std 30), pre-LN, T=4, S=6", _dec_case(2, 4, 6, 8, 2, 16, True, scale=30.0)),
            Case("n_head = 1 (one head of size d), pre-LN, T=S=5", _dec_case(2, 5, 5, 6, 1, 12, True)),
            Case("n_head = d (heads of size 1), post-LN, T=3, S=5", _dec_case(2, 3, 5, 4, 4, 8, False)),
            Case("batch 4, random source lengths up to 9, T=7, d=16, n_head=4, d_ff=64, pre-LN",
                 _dec_case(4, 7, 9, 16, 4, 64, True))]


DECODER_BLOCK = Check(
    task="decoder_block",
    what="nn.TransformerDecoderLayer(d, n_head, d_ff, dropout=0, ReLU, batch_first=True, norm_first) with these "
         "weights, causal on the target",
    reference=_dec_ref,
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-4, dim=None),
    cases=_dec_cases(hidden=False),
    hidden_cases=_dec_cases(hidden=True),
    mutants=[
        *_order_mutants(_dec_with),
        Mutant(_dec_with(self_causal=False), "left out the causal mask in the self-attention: target position t "
                                             "may attend only to positions ≤ t (causal=True)"),
        Mutant(_dec_with(cross_causal=True), "made the cross-attention causal: every target position may read "
                                             "every real source position; only the self-attention is causal"),
        Mutant(_dec_with(cross="kv_from_decoder"), "took the cross-attention's keys and values from the decoder's "
                                                   "own states: the queries come from the decoder, the keys and "
                                                   "values from the memory (the encoder's output)"),
        Mutant(_dec_with(cross="queries_from_memory"), "took the cross-attention's queries from the memory and its "
                                                       "keys and values from the decoder: the queries come from the "
                                                       "decoder (one output per target position), the keys and "
                                                       "values from the memory"),
        Mutant(_dec_with(padding="none"), "let the cross-attention read the source's padding: pass "
                                          "memory_key_padding_mask, so that padded source positions get -inf"),
        Mutant(_dec_with(padding="inverted"), "inverted the memory's padding mask: memory_key_padding_mask is True "
                                              "at padding (torch's convention), and those keys get -inf"),
        Mutant(_dec_with(cross_weights="self_attn"), "used self_attn's weights for the cross-attention too: it has "
                                                     "its own, multihead_attn.*"),
        Mutant(_dec_with(norm_memory=True), "normalised the memory with norm2 in the pre-LN block: only the "
                                            "decoder's own states go through the block's norms; the memory is used "
                                            "as it is"),
        Mutant(_dec_with(norms=(1, 3, 2)), "swapped norm2 and norm3: norm1 goes with the self-attention, norm2 "
                                           "with the cross-attention, norm3 with the feed-forward network"),
        Mutant(_dec_with(norms=(1, 1, 1)), "used norm1 for every sub-layer: each of the three has its own norm, "
                                           "norm1, norm2, norm3"),
    ],
    forbidden=(*TORCH_ATTENTION, _T.EncoderBlock, _T.DecoderBlock, _T.Transformer, _T.FeedForward),
    forbidden_attrs=(*ATTRS, *TORCH_ATTENTION_ATTRS, "EncoderBlock", "DecoderBlock"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)

CHECKS = [LAYER_NORM, FEED_FORWARD, ENCODER_BLOCK, DECODER_BLOCK]
check = Registry(CHECKS + QUESTIONS)
