"""The block today's open models use: a Llama-style decoder (chapter 11; Touvron et al., 2023).

Four changes to GPT-2's block (chapter 9), each adopted because it trained as well or better for less:

    RMSNorm(x)   = g ⊙ x / sqrt(mean(x²) + ε)                 no mean subtracted, no bias (Zhang & Sennrich, 2019)
    SwiGLU(x)    = (silu(x W_gateᵀ) ⊙ x W_upᵀ) W_downᵀ        a gated FFN, silu(z) = z σ(z) (Shazeer, 2020)
    RoPE         queries and keys rotated by their position (chapter 7), nothing added to x (Su et al., 2021)
    GQA          n_head query heads share n_kv_head key/value heads, in groups of n_head / n_kv_head
                 (Ainslie et al., 2023; n_kv_head = 1 is multi-query attention, Shazeer, 2019)

and no biases anywhere. For token ids (B, n):

    x = E[ids]                                          (B, n, d_model): no position table
    for each of the n_layer blocks:
        x = x + attn(RMSNorm_1(x))                      q: n_head heads, k and v: n_kv_head heads, of d_head
        x = x + SwiGLU(RMSNorm_2(x))
    logits = RMSNorm_f(x) W_outᵀ                        W_out is E itself only if tie_weights

attn(x):  q = x W_qᵀ,  k = x W_kᵀ,  v = x W_vᵀ,  split into heads          (B, n_head | n_kv_head, n, d_head)
          q, k = rope(q), rope(k)                        pairs (i, i + d_head/2), as Hugging Face's Llama
          k, v: each kv head repeated for the n_head / n_kv_head query heads of its group
          y = softmax(q kᵀ / sqrt(d_head), causal) v,  merged,  y W_oᵀ

**Why grouped-query attention.** Generation keeps every layer's keys and values (the KV cache of chapter 9).
Per token that is 2 · n_layer · n_kv_head · d_head numbers: GPT-2 caches all n_head heads; with 8 KV heads for
64 query heads, as Llama 2 70B has, the cache is 8 times smaller, and so is the memory traffic of each step,
which is what decoding waits for. The cache here stores the n_kv_head heads *before* they are repeated: the
repetition is a view at attention time, never stored.

:func:`load_hf_llama` copies the weights of Hugging Face's ``LlamaForCausalLM`` (built from a ``LlamaConfig``,
no download) into :class:`Llama`; the tests check both give the same logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .gpt import KVCache
from .multihead import merge_heads
from .positions import rope
from .self_attention import causal_mask, scaled_dot_product_attention


@dataclass
class LlamaConfig:
    vocab_size: int
    block_size: int  # the context the model is trained on (nothing limits RoPE to it; generate checks it)
    n_layer: int
    n_head: int  # query heads
    d_model: int
    n_kv_head: int | None = None  # key/value heads (default n_head: multi-head attention; 1: multi-query)
    d_ff: int | None = None  # SwiGLU's hidden size (default: about 8/3 d_model, rounded up to a multiple of 8)
    rms_eps: float = 1e-6
    rope_base: float = 10000.0
    tie_weights: bool = False

    def __post_init__(self) -> None:
        if self.n_kv_head is None:
            self.n_kv_head = self.n_head
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head={self.n_head} query heads cannot be shared evenly by "
                             f"n_kv_head={self.n_kv_head} key/value heads")
        if (self.d_model // self.n_head) % 2:
            raise ValueError(f"RoPE turns pairs of dimensions: the head size {self.d_model // self.n_head} "
                             "must be even")
        if self.d_ff is None:  # three matrices of 8/3 d² cost what GPT's two of 4 d² do
            self.d_ff = 8 * math.ceil(8 * self.d_model / 3 / 8)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head


class RMSNorm(nn.Module):
    """y = g ⊙ x / sqrt(mean(x²) + ε) over the last dimension: LayerNorm without the
    mean and without a bias."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))  # g

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # ε inside the root, as in the paper and in Llama's code
        rms = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * (x / rms)


class SwiGLU(nn.Module):
    """y = (silu(x W_gateᵀ) ⊙ x W_upᵀ) W_downᵀ: the gate's branch goes through silu,
    the up branch does not."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.W_gate = nn.Linear(d_model, d_ff, bias=False)
        self.W_up = nn.Linear(d_model, d_ff, bias=False)
        self.W_down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.W_down(F.silu(self.W_gate(x)) * self.W_up(x))


def repeat_kv(x: torch.Tensor, group: int) -> torch.Tensor:
    """(B, n_kv_head, t, d_head) → (B, n_kv_head · group, t, d_head): query head h reads kv head h // group.

    Heads are repeated *in place* (kv 0, kv 0, kv 1, kv 1, ...), not tiled (kv 0, kv 1, kv 0, kv 1): the query
    heads of one group are neighbours, as Llama's weights are laid out."""
    return x if group == 1 else x.repeat_interleave(group, dim=1)


class GroupedQueryAttention(nn.Module):
    """Causal attention with n_head query heads sharing n_kv_head key/value heads, RoPE, a KV cache, no biases.

    ``layer`` is this block's index: where its k and v go in the cache."""

    def __init__(self, config: LlamaConfig, layer: int):
        super().__init__()
        self.n_head, self.n_kv_head, self.d_head = config.n_head, config.n_kv_head, config.d_head
        self.rope_base, self.layer = config.rope_base, layer
        self.W_q = nn.Linear(config.d_model, config.n_head * self.d_head, bias=False)
        self.W_k = nn.Linear(config.d_model, config.n_kv_head * self.d_head, bias=False)
        self.W_v = nn.Linear(config.d_model, config.n_kv_head * self.d_head, bias=False)
        self.W_o = nn.Linear(config.n_head * self.d_head, config.d_model, bias=False)

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None,
        return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """x (B, n_new, d) → (B, n_new, d); with a cache, the new positions start at its
        length and their queries also read every cached position. ``return_weights``
        adds the weights (B, n_head, n_new, t)."""
        B, n, _ = x.shape
        # this layer's cached positions (layer 0's were already extended by this call)
        cached = cache is not None and len(cache.k) > self.layer
        past = cache.k[self.layer].shape[2] if cached else 0
        # q: (B, n_head, n, d_head); k and v: (B, n_kv_head, n, d_head)
        q = self.W_q(x).view(B, n, self.n_head, self.d_head).transpose(1, 2)
        k = self.W_k(x).view(B, n, self.n_kv_head, self.d_head).transpose(1, 2)
        v = self.W_v(x).view(B, n, self.n_kv_head, self.d_head).transpose(1, 2)
        positions = torch.arange(past, past + n, device=x.device)
        q = rope(q, positions, self.rope_base, interleaved=False)
        k = rope(k, positions, self.rope_base, interleaved=False)  # cached rotated
        if cache is not None:  # the cache holds n_kv_head heads: the saving of GQA
            k, v = cache.update(self.layer, k, v)
        group = self.n_head // self.n_kv_head
        mask = causal_mask(n, k.shape[2], device=x.device)  # queries: the last n keys
        k_rep, v_rep = repeat_kv(k, group), repeat_kv(v, group)
        y, weights = scaled_dot_product_attention(q, k_rep, v_rep, mask)
        out = self.W_o(merge_heads(y))
        return (out, weights) if return_weights else out


class Block(nn.Module):
    """x = x + attn(RMSNorm_1(x)); x = x + SwiGLU(RMSNorm_2(x))."""

    def __init__(self, config: LlamaConfig, layer: int):
        super().__init__()
        self.norm_1 = RMSNorm(config.d_model, config.rms_eps)
        self.attn = GroupedQueryAttention(config, layer)
        self.norm_2 = RMSNorm(config.d_model, config.rms_eps)
        self.mlp = SwiGLU(config.d_model, config.d_ff)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        x = x + self.attn(self.norm_1(x), cache)
        return x + self.mlp(self.norm_2(x))


class Llama(nn.Module):
    """A Llama-style decoder. ``forward(ids, cache)`` gives the logits, as :class:`lmbook.gpt.GPT` does, so
    ``lmbook.gpt.generate`` and ``lmbook.causal_lm.train_lm`` work with it unchanged."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.h = nn.ModuleList(Block(config, layer) for layer in range(config.n_layer))
        self.norm_f = RMSNorm(config.d_model, config.rms_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)
        for block in self.h:  # the two projections into the residual stream, scaled down as GPT-2 does
            for proj in (block.attn.W_o, block.mlp.W_down):
                nn.init.normal_(proj.weight, 0.0, 0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, 0.0, 0.02)

    def hidden_states(self, ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """ids (B, n) → RMSNorm_f(x) (B, n, d_model). With a cache, ``ids`` are the tokens after the cached ones."""
        x = self.wte(ids)
        for block in self.h:
            x = block(x, cache)
        return self.norm_f(x)

    def forward(self, ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """ids (B, n) → logits (B, n, vocab_size)."""
        return self.lm_head(self.hidden_states(ids, cache))


def count_parameters(config: LlamaConfig) -> int:
    """The number of parameters of ``Llama(config)``, from the sizes alone."""
    d, d_head, V = config.d_model, config.d_head, config.vocab_size
    q_and_o = 2 * d * config.n_head * d_head  # W_q and W_o
    attn = q_and_o + 2 * d * config.n_kv_head * d_head  # W_k and W_v: n_kv_head heads each
    per_layer = 2 * d + attn + 3 * d * config.d_ff  # two RMSNorm gains, SwiGLU's three matrices
    head = 0 if config.tie_weights else V * d
    return V * d + config.n_layer * per_layer + d + head  # embeddings, blocks, final norm, output layer


def d_ff_for(n_params: int, config: LlamaConfig) -> int:
    """The SwiGLU hidden size that brings ``Llama(config)`` closest to ``n_params`` parameters (other sizes kept):
    to compare the two blocks at equal parameters."""
    without = count_parameters(LlamaConfig(**{**config.__dict__, "d_ff": 0}))
    return max(1, round((n_params - without) / (3 * config.d_model * config.n_layer)))


# ----------------------------------------------------------------------------- the KV cache's size


def kv_cache_bytes(n_layer: int, n_kv_head: int, d_head: int, n_tokens: int, batch: int = 1,
                   bytes_per_value: int = 2) -> int:
    """Bytes a KV cache holds: a key and a value (2) per layer, kv head, position and sequence, d_head numbers each.

    GPT-2 style attention caches every head (n_kv_head = n_head); grouped-query attention n_kv_head < n_head."""
    return 2 * n_layer * n_kv_head * d_head * n_tokens * batch * bytes_per_value


def cache_nbytes(cache: KVCache) -> int:
    """The bytes a :class:`~lmbook.gpt.KVCache` really holds: every layer's k and v tensors."""
    return sum(t.numel() * t.element_size() for t in (*cache.k, *cache.v))


# ----------------------------------------------------------------------------- Hugging Face's weights


@torch.no_grad()
def load_hf_llama(model: Llama, hf_model: nn.Module) -> Llama:
    """Copy the weights of a Hugging Face ``LlamaForCausalLM`` of the same sizes into ``model``; returns it.

    Refuses a model that computes another function with the same weights (biases, another activation, RoPE
    scaling, another head size): copying would be silent and the logits wrong."""
    hc, c = hf_model.config, model.config
    rope_params = getattr(hc, "rope_parameters", None) or {"rope_theta": hc.rope_theta, "rope_type": "default"}
    theirs = dict(vocab_size=hc.vocab_size, n_layer=hc.num_hidden_layers, n_head=hc.num_attention_heads,
                  n_kv_head=hc.num_key_value_heads, d_model=hc.hidden_size, d_ff=hc.intermediate_size,
                  d_head=getattr(hc, "head_dim", None) or hc.hidden_size // hc.num_attention_heads,
                  rms_eps=hc.rms_norm_eps, rope_base=rope_params["rope_theta"], rope_type=rope_params["rope_type"],
                  act=hc.hidden_act, bias=hc.attention_bias or hc.mlp_bias, tie=hc.tie_word_embeddings)
    ours = dict(vocab_size=c.vocab_size, n_layer=c.n_layer, n_head=c.n_head, n_kv_head=c.n_kv_head,
                d_model=c.d_model, d_ff=c.d_ff, d_head=c.d_head, rms_eps=c.rms_eps, rope_base=c.rope_base,
                rope_type="default", act="silu", bias=False, tie=c.tie_weights)
    if theirs != ours:
        raise ValueError(f"the Hugging Face model has {theirs}, this Llama {ours}")
    m = hf_model.model
    model.wte.weight.copy_(m.embed_tokens.weight)
    for block, hf in zip(model.h, m.layers, strict=True):
        block.norm_1.weight.copy_(hf.input_layernorm.weight)
        block.norm_2.weight.copy_(hf.post_attention_layernorm.weight)
        for ours_, theirs_ in ((block.attn.W_q, hf.self_attn.q_proj), (block.attn.W_k, hf.self_attn.k_proj),
                               (block.attn.W_v, hf.self_attn.v_proj), (block.attn.W_o, hf.self_attn.o_proj),
                               (block.mlp.W_gate, hf.mlp.gate_proj), (block.mlp.W_up, hf.mlp.up_proj),
                               (block.mlp.W_down, hf.mlp.down_proj)):
            ours_.weight.copy_(theirs_.weight)  # both nn.Linear (out, in): no transpose, unlike GPT-2's Conv1D
    model.norm_f.weight.copy_(m.norm.weight)
    if not c.tie_weights:
        model.lm_head.weight.copy_(hf_model.lm_head.weight)
    return model
