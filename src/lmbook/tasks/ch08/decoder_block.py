"""Task 4 of exercise 8: the decoder block."""

from __future__ import annotations

import torch
from torch import nn

from ... import transformer as _course_transformer
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_tensor_mismatch
from .. import earlier
from ..blocks import block_params
from ..common import (
    TORCH_ATTENTION,
    TORCH_ATTENTION_ATTRS,
    call_with_weights,
    in_dtype,
    made_up_at_padding,
    padding_mask,
)
from ..common import randn as _randn
from .blocks import EPS_MISTAKE, attend, ffn_of, is_pre_ln, norm_of, order_mutants, sized_block, sublayer
from .shared import ATTRS, MODULES

_T = _course_transformer


def _dec_case(B: int, T: int, S: int, d: int, n_head: int, d_ff: int, norm_first: bool, lengths=None,
              scale: float = 1.0, dtype=torch.float32, weights: float = 1.0):
    def make(g, device):
        pad = padding_mask(B, S, g, lengths)
        y = _randn((B, T, d), g, device, scale)
        memory = made_up_at_padding(_randn((B, S, d), g, device, scale), pad)
        params = block_params(g, device, d, d_ff, ("self_attn", "multihead_attn"), 3, weights)
        return ((in_dtype(y, dtype), in_dtype(memory, dtype), pad.to(device),
                 {k: in_dtype(v, dtype) for k, v in params.items()}, n_head,
                 norm_first), {})
    return make


def _dec_ref(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    """torch's decoder layer holding these weights, in evaluation mode, with the causal mask on the target."""
    layer = nn.TransformerDecoderLayer(y.shape[-1], n_head, params["linear1.weight"].shape[0], dropout=0.0,
                                       activation="relu", batch_first=True, norm_first=norm_first)
    T = y.shape[1]
    future = torch.ones(T, T, dtype=torch.bool, device=y.device).triu(1)  # True = may not attend
    return call_with_weights(layer.eval(), {k: v.to(y.dtype) for k, v in params.items()}, y, memory,
                             tgt_mask=future, memory_key_padding_mask=memory_key_padding_mask.bool(),
                             tgt_is_causal=True)


def _dec_with(order="right", wiring="right", padding="right", activation="relu", relu_after=False, scale="d_head",
              norms=(1, 2, 3), self_causal=True, cross_causal=False, cross="right", cross_weights="multihead_attn",
              norm_memory=False, eps=1e-5):
    def fn(y, memory, memory_key_padding_mask, params, n_head, norm_first):
        pre = is_pre_ln(norm_first, order)
        pad = {"right": memory_key_padding_mask, "inverted": ~memory_key_padding_mask, "none": None}[padding]
        n1, n2, n3 = (norm_of(params, i, eps) for i in norms)

        def self_attention(h):
            return attend(h, h, params, "self_attn", n_head, None, self_causal, scale)

        def cross_attention(h):
            mem = n2(memory) if norm_memory and pre else memory
            if cross == "kv_from_decoder":  # self-attention again, unmasked, with the cross-attention's weights
                return attend(h, h, params, cross_weights, n_head, None, cross_causal, scale)
            if cross == "queries_from_memory":  # the roles swapped: raises when S != T (the mask has S entries)
                return attend(mem, h, params, cross_weights, n_head, pad, cross_causal, scale)
            return attend(h, mem, params, cross_weights, n_head, pad, cross_causal, scale)

        x = sublayer(y, self_attention, n1, pre, wiring)
        x = sublayer(x, cross_attention, n2, pre, wiring)
        return sublayer(x, ffn_of(params, activation, relu_after), n3, pre, wiring)
    return fn


def _dec_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [sized_block("post-LN (norm_first=False), batch 2, target T=4, source S=6 with lengths (6, 4), d=8, "
                            "n_head=2, d_ff=16", _dec_sized, B=2, T=4, S=6, n_head=2, d_head=4, d_ff=16,
                            norm_first=False, lengths=[6, 4]),
                sized_block("pre-LN (norm_first=True), batch 2, T=5, S=5 with lengths (5, 3), d=8, n_head=4, d_ff=12",
                            _dec_sized, B=2, T=5, S=5, n_head=4, d_head=2, d_ff=12, norm_first=True, lengths=[5, 3]),
                sized_block("small activations (inputs of std 0.01, weights 100 times smaller), pre-LN, batch 2, T=3, "
                            "S=3, d=4, n_head=2, d_ff=8", _dec_sized, B=2, T=3, S=3, n_head=2, d_head=2, d_ff=8,
                            norm_first=True, lengths=[3, 2], scale=0.01, weights=0.01),
                sized_block("float64 inputs, post-LN, batch 2, T=2, S=3, d=4, n_head=2, d_ff=6", _dec_sized, B=2, T=2,
                            S=3, n_head=2, d_head=2, d_ff=6, norm_first=False, lengths=[3, 1], dtype=torch.float64)]
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
                 _dec_case(4, 7, 9, 16, 4, 64, True)),
            Case("small activations (std 0.01, small weights), post-LN, T=4, S=5",
                 _dec_case(2, 4, 5, 8, 2, 16, False, scale=0.01, weights=0.01)),
            Case("small activations (std 0.01, small weights), pre-LN, float64, T=3, S=4",
                 _dec_case(2, 3, 4, 8, 4, 16, True, scale=0.01, weights=0.01, dtype=torch.float64)),
            Case("a batch of one with one head, one target token and one source token",
                 _dec_case(1, 1, 1, 4, 1, 8, True, lengths=[1]))]


def _dec_sized(B: int, T: int, S: int, n_head: int, d_head: int, d_ff: int, norm_first: bool, lengths=None, scale=1.0,
               weights=1.0, dtype=torch.float32):
    return _dec_case(B, T, S, n_head * d_head, n_head, d_ff, norm_first, lengths, scale, dtype, weights)


DECODER_BLOCK = Check(
    task="decoder_block",
    what="nn.TransformerDecoderLayer(d, n_head, d_ff, dropout=0, ReLU, batch_first=True, norm_first) with these "
         "weights, causal on the target",
    reference=_dec_ref,
    grad_of=(0, 1, 3),  # y, memory and every parameter: a Transformer is trained through it
    builds_on=(("layer_norm", earlier.layer_norm), ("feed_forward", earlier.feed_forward)),
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-4, dim=None),
    cases=_dec_cases(hidden=False),
    hidden_cases=_dec_cases(hidden=True),
    mutants=[
        *order_mutants(_dec_with),
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
        Mutant(_dec_with(eps=1e-6), EPS_MISTAKE),
        Mutant(_dec_with(eps=1e-12), EPS_MISTAKE),
    ],
    forbidden=(*TORCH_ATTENTION, _T.EncoderBlock, _T.DecoderBlock, _T.Transformer, _T.FeedForward),
    forbidden_attrs=(*ATTRS, *TORCH_ATTENTION_ATTRS, "EncoderBlock", "DecoderBlock"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)
