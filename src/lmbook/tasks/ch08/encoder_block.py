"""Task 3 of exercise 8: the encoder block."""

from __future__ import annotations

import torch
from torch import nn

from ... import transformer as _course_transformer
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_tensor_mismatch, to_reference
from .. import earlier
from ..blocks import block_params
from ..common import (
    NAN,
    TORCH_ATTENTION,
    TORCH_ATTENTION_ATTRS,
    in_dtype,
    load_weights,
    made_up_at_padding,
    padding_mask,
)
from ..common import randn as _randn
from .blocks import EPS_MISTAKE, attend, ffn_of, is_pre_ln, norm_of, order_mutants, sized_block, sublayer
from .shared import ATTRS, MODULES

_T = _course_transformer


def _enc_case(B: int, S: int, d: int, n_head: int, d_ff: int, norm_first: bool, lengths=None, scale: float = 1.0,
              dtype=torch.float32, weights: float = 1.0):
    def make(g, device):
        pad = padding_mask(B, S, g, lengths)
        x = made_up_at_padding(_randn((B, S, d), g, device, scale), pad)
        params = block_params(g, device, d, d_ff, ("self_attn",), 2, weights)
        return ((in_dtype(x, dtype), pad.to(device), {k: in_dtype(v, dtype) for k, v in params.items()}, n_head,
                 norm_first), {})
    return make


def _enc_ref(x, key_padding_mask, params, n_head, norm_first):
    """torch's encoder layer holding these weights, in evaluation mode; NaN at padded positions (not graded)."""
    layer = nn.TransformerEncoderLayer(x.shape[-1], n_head, params["linear1.weight"].shape[0], dropout=0.0,
                                       activation="relu", batch_first=True, norm_first=norm_first)
    layer = load_weights(layer, {k: v.to(x.dtype) for k, v in params.items()}).eval()
    out = layer(x, src_key_padding_mask=key_padding_mask.bool())
    return out.masked_fill(key_padding_mask.bool().unsqueeze(-1), NAN)


def _enc_with(order="right", wiring="right", padding="right", activation="relu", relu_after=False, scale="d_head",
              norms=(1, 2), eps=1e-5):
    def fn(x, key_padding_mask, params, n_head, norm_first):
        pre = is_pre_ln(norm_first, order)
        pad = {"right": key_padding_mask, "inverted": ~key_padding_mask, "none": None}[padding]
        n1, n2 = (norm_of(params, i, eps) for i in norms)
        x = sublayer(x, lambda h: attend(h, h, params, "self_attn", n_head, pad, False, scale), n1, pre, wiring)
        x = sublayer(x, ffn_of(params, activation, relu_after), n2, pre, wiring)
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
        return [sized_block("post-LN (norm_first=False), batch 2, S=5, lengths (5, 3), d=8, n_head=2, d_ff=16",
                            _enc_sized, B=2, S=5, n_head=2, d_head=4, d_ff=16, norm_first=False, lengths=[5, 3]),
                sized_block("pre-LN (norm_first=True), batch 3, S=4, lengths (4, 2, 3), d=8, n_head=4, d_ff=12",
                            _enc_sized, B=3, S=4, n_head=4, d_head=2, d_ff=12, norm_first=True, lengths=[4, 2, 3]),
                sized_block("small activations (inputs of std 0.01, weights 100 times smaller), pre-LN, batch 2, S=3, "
                            "d=4, n_head=2, d_ff=8", _enc_sized, B=2, S=3, n_head=2, d_head=2, d_ff=8,
                            norm_first=True, lengths=[3, 2], scale=0.01, weights=0.01),
                sized_block("float64 inputs, post-LN, batch 2, S=3, d=4, n_head=2, d_ff=6", _enc_sized, B=2, S=3,
                            n_head=2, d_head=2, d_ff=6, norm_first=False, lengths=[3, 1], dtype=torch.float64)]
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
                 _enc_case(5, 9, 16, 4, 64, True)),
            Case("small activations (std 0.01, small weights), post-LN", _enc_case(2, 6, 8, 2, 16, False, scale=0.01,
                                                                                  weights=0.01)),
            Case("small activations (std 0.01, small weights), pre-LN, float64",
                 _enc_case(2, 5, 8, 4, 16, True, scale=0.01, weights=0.01, dtype=torch.float64)),
            Case("a batch of one with one head and one token", _enc_case(1, 1, 4, 1, 8, True, lengths=[1]))]


def _enc_sized(B: int, S: int, n_head: int, d_head: int, d_ff: int, norm_first: bool, lengths=None, scale=1.0,
               weights=1.0, dtype=torch.float32):
    return _enc_case(B, S, n_head * d_head, n_head, d_ff, norm_first, lengths, scale, dtype, weights)


ENCODER_BLOCK = Check(
    task="encoder_block",
    what="nn.TransformerEncoderLayer(d, n_head, d_ff, dropout=0, ReLU, batch_first=True, norm_first) with these "
         "weights, at the real positions",
    reference=_enc_ref,
    builds_on=(("layer_norm", earlier.layer_norm), ("feed_forward", earlier.feed_forward)),
    compare=_real_positions,
    cases=_enc_cases(hidden=False),
    hidden_cases=_enc_cases(hidden=True),
    mutants=[
        *order_mutants(_enc_with),
        Mutant(_enc_with(padding="inverted"), "inverted the padding mask: key_padding_mask is True at padding "
                                              "(torch's convention), and those keys get -inf"),
        Mutant(_enc_with(padding="none"), "let the positions attend to padding: pass key_padding_mask to the "
                                          "self-attention, so that padded keys get -inf"),
        Mutant(_enc_with(norms=(1, 1)), "used norm1 for both sub-layers: the self-attention's has norm1, the "
                                        "feed-forward network's norm2, each with its own gain and bias"),
        Mutant(_enc_with(norms=(2, 1)), "swapped the norms: norm1 goes with the self-attention, norm2 with the "
                                        "feed-forward network"),
        Mutant(_enc_with(eps=1e-6), EPS_MISTAKE),
        Mutant(_enc_with(eps=1e-12), EPS_MISTAKE),
    ],
    # lmbook.transformer.LayerNorm is refused by its module: listed here, its name would refuse nn.LayerNorm too,
    # which a block may use (only Task 1 asks for LayerNorm itself)
    forbidden=(*TORCH_ATTENTION, _T.EncoderBlock, _T.DecoderBlock, _T.Transformer, _T.FeedForward),
    forbidden_attrs=(*ATTRS, *TORCH_ATTENTION_ATTRS, "EncoderBlock", "DecoderBlock"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)
