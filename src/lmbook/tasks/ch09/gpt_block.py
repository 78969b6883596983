"""Task 3 of exercise 9: a GPT-2 block."""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from ... import gpt as _course_gpt
from ... import transformer as _course_transformer
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_tensor_mismatch
from ...grading.reproduce import sized
from ..blocks import block_params, mha
from ..common import TORCH_ATTENTION, TORCH_ATTENTION_ATTRS, call_with_weights, in_dtype
from ..common import randn as _randn
from .shared import ATTRS, MODULES

_G = _course_gpt
_T = _course_transformer




def _block_case(B: int, n: int, d: int, n_head: int, d_ff: int, scale: float = 1.0, dtype=torch.float32,
                weights: float = 1.0):
    def make(g, device):
        x = _randn((B, n, d), g, device, scale)
        params = block_params(g, device, d, d_ff, scale=weights)
        return ((in_dtype(x, dtype), {k: in_dtype(v, dtype) for k, v in params.items()}, n_head), {})
    return make


def _block_ref(x, params, n_head):
    """torch's encoder layer as a GPT-2 block: pre-LN, tanh GELU, a causal mask; evaluation mode."""
    d, d_ff, n = x.shape[-1], params["linear1.weight"].shape[0], x.shape[1]
    layer = nn.TransformerEncoderLayer(d, n_head, d_ff, dropout=0.0, activation=partial(F.gelu, approximate="tanh"),
                                       batch_first=True, norm_first=True, layer_norm_eps=1e-5)
    mask = nn.Transformer.generate_square_subsequent_mask(n, device=x.device, dtype=x.dtype)
    return call_with_weights(layer.eval(), {k: v.to(x.dtype) for k, v in params.items()}, x, src_mask=mask,
                             is_causal=True)




def _block_with(gelu="tanh", mask="causal", order="pre", residual="x", scale="d_head", norms=(1, 2), eps=1e-5):
    def fn(x, params, n_head):
        p, n, d = params, x.shape[1], x.shape[-1]
        blocked = {"causal": torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1),
                   "strict": torch.ones(n, n, dtype=torch.bool, device=x.device).triu(0),
                   "none": None}[mask]

        def ln(h, i):
            return F.layer_norm(h, (d,), p[f"norm{i}.weight"], p[f"norm{i}.bias"], eps)

        def attn(h):
            return mha(h, h, p, "self_attn.", n_head, blocked, math.sqrt(d) if scale == "d" else None)

        def mlp(h):
            a = h @ p["linear1.weight"].T + p["linear1.bias"]
            a = torch.relu(a) if gelu == "relu" else F.gelu(a, approximate="tanh" if gelu == "tanh" else "none")
            return a @ p["linear2.weight"].T + p["linear2.bias"]

        n1, n2 = norms
        if order == "post":
            x = ln(x + attn(x), n1)
            return ln(x + mlp(x), n2)
        h = ln(x, n1)
        x = (h if residual == "ln" else x) + attn(h)
        h = ln(x, n2)
        return (h if residual == "ln" else x) + mlp(h)
    return fn


def _block_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [sized("batch 2, n=5, d=8, n_head=2, d_ff=32", _block_sized, B=2, n=5, n_head=2, d_head=4, d_ff=32,
                      floors=SHRINK),
                sized("batch 1, n=6, d=12, n_head=3, d_ff=48", _block_sized, B=1, n=6, n_head=3, d_head=4, d_ff=48,
                      floors=SHRINK),
                sized("small activations (inputs of std 0.01, weights 100 times smaller), batch 2, n=3, d=4, "
                      "n_head=2, d_ff=8", _block_sized, B=2, n=3, n_head=2, d_head=2, d_ff=8, scale=0.01,
                      weights=0.01, floors=SHRINK),
                sized("float64 inputs, batch 2, n=3, d=4, n_head=2, d_ff=8", _block_sized, B=2, n=3, n_head=2,
                      d_head=2, d_ff=8, dtype=torch.float64, floors=SHRINK)]
    return [Case("a batch of one, length one, d=8, n_head=2", _block_case(1, 1, 8, 2, 32)),
            Case("length 2, batch 3", _block_case(3, 2, 8, 4, 16)),
            Case("n_head = 1 (one head of size d)", _block_case(2, 5, 6, 1, 24)),
            Case("n_head = d (heads of size 1)", _block_case(2, 4, 4, 4, 16)),
            Case("d_ff < d", _block_case(2, 5, 8, 2, 4)),
            Case("large inputs (std 30)", _block_case(2, 5, 8, 2, 32, scale=30.0)),
            Case("float64 inputs, d=12, n_head=3", _block_case(2, 7, 12, 3, 48, dtype=torch.float64)),
            Case("batch 4, n=16, d=16, n_head=4, d_ff=64", _block_case(4, 16, 16, 4, 64)),
            Case("small activations (std 0.01, small weights), d=8, n_head=2",
                 _block_case(2, 5, 8, 2, 32, scale=0.01, weights=0.01)),
            Case("small activations, float64, d=8, n_head=4",
                 _block_case(2, 4, 8, 4, 16, scale=0.01, weights=0.01, dtype=torch.float64)),
            Case("a batch of one with one head", _block_case(1, 3, 4, 1, 8))]


def _block_sized(B: int, n: int, n_head: int, d_head: int, d_ff: int, scale: float = 1.0, weights: float = 1.0,
                 dtype=torch.float32):
    return _block_case(B, n, n_head * d_head, n_head, d_ff, scale, dtype, weights)


SHRINK = {"B": 1, "n": 1, "n_head": 1, "d_head": 1, "d_ff": 1}


GPT_BLOCK = Check(
    task="gpt_block",
    what="x = x + attn(LN_1(x)); x = x + mlp(LN_2(x)), causal, tanh GELU: nn.TransformerEncoderLayer("
         "norm_first=True) with a causal mask",
    reference=_block_ref,
    grad_of=(0, 1),  # x and every parameter: GPT is trained through it
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-4, dim=None),
    cases=_block_cases(hidden=False),
    hidden_cases=_block_cases(hidden=True),
    mutants=[
        Mutant(_block_with(gelu="erf"), "used the exact (erf) GELU: GPT-2's is the tanh approximation, "
                                        "F.gelu(x, approximate='tanh')"),
        Mutant(_block_with(gelu="relu"), "used ReLU in the MLP: GPT-2's activation is the tanh GELU, "
                                         "F.gelu(x, approximate='tanh')"),
        Mutant(_block_with(mask="none"), "left out the causal mask: position t may attend only to positions ≤ t, "
                                         "or the model sees the tokens it must predict"),
        Mutant(_block_with(mask="strict"), "masked the diagonal too (triu(0), or tril(-1)): position t attends "
                                           "to itself as well, keys 0 … t; with the diagonal masked, position 0 "
                                           "sees nothing and its softmax is NaN"),
        Mutant(_block_with(order="post"), "wrote a post-LN block, LN(x + f(x)): GPT-2's block is pre-LN, "
                                          "x + f(LN(x)), and the residual stream x itself is never normalised"),
        Mutant(_block_with(residual="ln"), "added the normalised input as the residual, LN(x) + f(LN(x)): the "
                                           "residual carries x itself, x + f(LN(x))"),
        Mutant(_block_with(scale="d"), "scaled the attention scores by 1/sqrt(d_model): each head's scores are "
                                       "divided by sqrt(d_head), d_head = d / n_head"),
        Mutant(_block_with(norms=(2, 1)), "swapped the norms: norm1 goes before the attention, norm2 before the "
                                          "MLP"),
        *[Mutant(_block_with(eps=e), "used another ε in the LayerNorms (1e-6, or BERT's 1e-12): GPT-2's is 1e-5, "
                                     "which matters when the activations are small") for e in (1e-6, 1e-12)],
    ],
    # torch's F.layer_norm and F.gelu are allowed: the task is the block, not its parts
    forbidden=(*TORCH_ATTENTION, _G.Block, _G.CausalSelfAttention, _G.GPT, _T.EncoderBlock, _T.FeedForward),
    forbidden_attrs=(*ATTRS, *TORCH_ATTENTION_ATTRS, "Block", "CausalSelfAttention", "EncoderBlock", "FeedForward"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)
