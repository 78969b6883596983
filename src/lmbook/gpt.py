"""GPT-2 (Radford et al., 2019): a stack of pre-LN decoder blocks trained to predict the next token (chapter 9).

For token ids w_0 … w_{n−1} (B, n), with row vectors (x W, as in the book; an ``nn.Linear`` stores Wᵀ):

    x = wte[ids] + wpe[pos]                   (B, n, d_model), pos = 0 … n − 1: learned positions, at most block_size
    for each of the n_layer blocks:
        x = x + attn(ln_1(x))                 causal self-attention, n_head heads of size d_head = d_model / n_head
        x = x + mlp(ln_2(x))                  mlp(x) = gelu_tanh(x W_1 + b_1) W_2 + b_2: d_model → d_ff → d_model
    h = ln_f(x)                               the final hidden states (what a fine-tuned head reads)
    logits = h wteᵀ                           the output layer *is* the embedding matrix (tie_weights)

    attn(x):  q = x W_q + b_q, k = x W_k + b_k, v = x W_v + b_v,  split into heads      (B, n_head, n, d_head) each
              y = softmax(q kᵀ / sqrt(d_head), causal) v,  merged,  y W_o + b_o

**GPT-1 and GPT-2.** GPT-1 (Radford et al., 2018) was post-LN, as the original Transformer: OpenAI's code
(finetune-transformer-lm, ``block``) normalises after each residual add, x = LN(x + attn(x)), x = LN(x + mlp(x)),
and has no final norm. GPT-2 moved each LayerNorm to its sub-block's input (pre-LN, above) and added the final
``ln_f`` (GPT-2 paper, section 2.3; openai/gpt-2's ``model.py``). This file is GPT-2's block. GPT-2 also scaled
the initial weights of the residual layers by 1/sqrt(N), N the number of residual layers (section 2.3): here, as
in Hugging Face's GPT-2 and nanoGPT, the two projections that write into the residual stream (``attn.out_proj``
= W_o and ``mlp.W_2``) start at N(0, (0.02 / sqrt(2 · n_layer))²), two adds per block, so that the stream's
variance does not grow with depth; every other weight starts at N(0, 0.02²).

GPT-2's GELU is the tanh approximation, gelu_tanh(x) = x/2 (1 + tanh(sqrt(2/π) (x + 0.044715 x³))) (GPT-1 used it
too); its weights were trained with it, so the exact (erf) GELU gives other logits. Dropout (rate ``dropout``)
falls on x after the embeddings and on each sub-layer's output before it is added to x; GPT-2 also drops
attention weights, which this file does not.

**KV cache.** At step t of generation only the newest token is new, and causal attention means no earlier
position's k and v change. :class:`KVCache` keeps every layer's k and v (B, n_head, t, d_head); feeding it to
``forward`` runs only the new tokens: their positions start at the cache's length, their queries attend to the
cached keys plus their own (causal among the new ones), and their k, v are appended. Generating n tokens from a
prompt of P then runs P + n − 1 positions through the model, against P + (P + 1) + … + (P + n − 1) without it.

**Fine-tuning (GPT-1).** A task's input becomes one token sequence, [start] a [delim] b [extract]; a linear layer
on h at the last real token ([extract], which under causal attention has read everything) gives class logits.

**Hugging Face's weights** (:func:`load_hf_gpt2`): HF's ``Conv1D`` stores a linear map as (in, out), the transpose
of ``nn.Linear``'s (out, in), so every matrix in the blocks is copied transposed; ``c_attn`` packs [q; k; v] along
its output dimension, as ``in_proj`` does here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .decoding import sample_next
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .self_attention import causal_mask, scaled_dot_product_attention
from .transformer import FeedForward, LayerNorm


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int  # the most positions the model reads: rows of wpe
    n_layer: int
    n_head: int
    d_model: int
    d_ff: int | None = None  # default 4 · d_model
    ln_eps: float = 1e-5
    bias: bool = True  # biases in the linear layers and LayerNorms
    dropout: float = 0.0
    tie_weights: bool = True  # the output layer is wte

    def __post_init__(self) -> None:
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model

    @classmethod
    def gpt2(cls) -> GPTConfig:
        """GPT-2 small: 124M parameters."""
        return cls(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, d_model=768)


class KVCache:
    """The keys and values of every position read so far: ``k[l]``, ``v[l]`` (B, n_head, t, d_head) for layer l.

    Start with an empty one and pass it to every :meth:`GPT.forward` call; each call appends its tokens' k and v.
    """

    def __init__(self) -> None:
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []

    @property
    def length(self) -> int:
        """t, the number of positions cached (the position the next token gets)."""
        return self.k[0].shape[2] if self.k else 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new positions' k, v (B, n_head, t_new, d_head) to layer ``layer``'s; return all of them."""
        if layer == len(self.k):  # the first call fills the layers in order
            self.k.append(k)
            self.v.append(v)
        else:
            self.k[layer] = torch.cat([self.k[layer], k], dim=2)
            self.v[layer] = torch.cat([self.v[layer], v], dim=2)
        return self.k[layer], self.v[layer]


class CausalSelfAttention(MultiHeadAttention):
    """:class:`MultiHeadAttention`'s weights (packed ``in_proj`` = [W_q; W_k; W_v], ``out_proj`` = W_o), used causally
    and with a :class:`KVCache`. ``layer`` is this block's index: where its k and v go in the cache."""

    def __init__(self, d_model: int, n_head: int, bias: bool, layer: int):
        super().__init__(d_model, n_head, bias=bias)
        self.layer = layer

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """x (B, n_new, d) → (B, n_new, d); with a cache, the new queries also read every cached position."""
        q, k, v = (split_heads(t, self.n_head) for t in self.in_proj(x).chunk(3, dim=-1))
        if cache is not None:
            k, v = cache.update(self.layer, k, v)
        mask = causal_mask(q.shape[2], k.shape[2], device=x.device)  # the queries are the last n_new of the keys
        y, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(merge_heads(y))


class Block(nn.Module):
    """GPT-2's pre-LN block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))."""

    def __init__(self, config: GPTConfig, layer: int):
        super().__init__()
        self.ln_1 = LayerNorm(config.d_model, config.ln_eps, bias=config.bias)
        self.attn = CausalSelfAttention(config.d_model, config.n_head, config.bias, layer)
        self.ln_2 = LayerNorm(config.d_model, config.ln_eps, bias=config.bias)
        self.mlp = FeedForward(config.d_model, config.d_ff, "gelu_tanh", bias=config.bias)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln_1(x), cache))
        return x + self.drop(self.mlp(self.ln_2(x)))


class GPT(nn.Module):
    """GPT-2: ``forward`` gives the logits, ``hidden_states`` h = ln_f(x); both read and extend an optional cache."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = c = config
        self.wte = nn.Embedding(c.vocab_size, c.d_model)  # E, (V, d)
        self.wpe = nn.Embedding(c.block_size, c.d_model)  # P, (block_size, d)
        self.drop = nn.Dropout(c.dropout)
        self.h = nn.ModuleList(Block(c, layer) for layer in range(c.n_layer))
        self.ln_f = LayerNorm(c.d_model, c.ln_eps, bias=c.bias)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_weights:  # one tensor, in and out
            self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)  # N(0, 0.02²) weights, zero biases
        # the 2 L projections that add to the residual stream: std 0.02 / sqrt(2 L)
        for block in self.h:
            for proj in (block.attn.out_proj, block.mlp.W_2):
                nn.init.normal_(proj.weight, 0.0, 0.02 / math.sqrt(2 * c.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """GPT-2's: N(0, 0.02) weights, zero biases (LayerNorms start at g = 1, b = 0)."""
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, 0.0, 0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def hidden_states(self, ids: torch.Tensor,
                      cache: KVCache | None = None) -> torch.Tensor:
        """ids (B, n) → h = ln_f(x) (B, n, d_model).
        With a cache, ``ids`` are the tokens after the cached ones."""
        n, past = ids.shape[1], 0 if cache is None else cache.length
        if past + n > self.config.block_size:
            raise ValueError(f"{past} cached + {n} new = {past + n} positions, "
                             f"more than block_size={self.config.block_size}")
        pos = torch.arange(past, past + n, device=ids.device)
        x = self.drop(self.wte(ids) + self.wpe(pos))  # x_t = E[w_t] + P[t]
        for block in self.h:
            x = block(x, cache)
        return self.ln_f(x)

    def forward(self, ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """ids (B, n) → logits (B, n, vocab_size).
        Row i predicts the token after position past + i."""
        return self.lm_head(self.hidden_states(ids, cache))


def count_parameters(config: GPTConfig) -> int:
    """The number of parameters of ``GPT(config)``, from the sizes alone (GPT-2 small: 124,439,808)."""
    d, d_ff, b = config.d_model, config.d_ff, int(config.bias)
    embeddings = config.vocab_size * d + config.block_size * d  # wte, wpe
    ln = d + b * d  # g, and b when bias
    attn = d * 3 * d + b * 3 * d + d * d + b * d  # in_proj [W_q; W_k; W_v] and its bias, out_proj W_o and its bias
    mlp = d * d_ff + b * d_ff + d_ff * d + b * d  # W_fc and b_fc, W_proj and b_proj
    per_layer = 2 * ln + attn + mlp  # ln_1, ln_2
    head = 0 if config.tie_weights else config.vocab_size * d  # tied: wte again, counted once; no bias either way
    return embeddings + config.n_layer * per_layer + ln + head  # + ln_f


@torch.no_grad()
def load_hf_gpt2(model: GPT, hf_model: nn.Module) -> GPT:
    """Copy the weights of a Hugging Face ``GPT2LMHeadModel`` of the same sizes into ``model``; returns it."""
    hc, c = hf_model.config, model.config
    tanh_gelus = ("gelu_new", "gelu_pytorch_tanh")  # HF's two names for gelu_tanh
    theirs = dict(vocab_size=hc.vocab_size, block_size=hc.n_positions, n_layer=hc.n_layer, n_head=hc.n_head,
                  d_model=hc.n_embd, d_ff=hc.n_inner or 4 * hc.n_embd, ln_eps=hc.layer_norm_epsilon,
                  gelu_tanh=hc.activation_function in tanh_gelus, bias=True, scores_scaled=hc.scale_attn_weights,
                  scaled_by_layer=hc.scale_attn_by_inverse_layer_idx)
    ours = dict(vocab_size=c.vocab_size, block_size=c.block_size, n_layer=c.n_layer, n_head=c.n_head,
                d_model=c.d_model, d_ff=c.d_ff, ln_eps=c.ln_eps, gelu_tanh=True, bias=c.bias, scores_scaled=True,
                scaled_by_layer=False)
    if theirs != ours:  # same weights, another function, would be silent
        raise ValueError(f"the Hugging Face model has {theirs}, this GPT {ours}")

    def copy(dst: nn.Module, src: nn.Module, transpose: bool = False) -> None:
        dst.weight.copy_(src.weight.T if transpose else src.weight)
        dst.bias.copy_(src.bias)

    t = hf_model.transformer
    model.wte.weight.copy_(t.wte.weight)
    model.wpe.weight.copy_(t.wpe.weight)
    for block, hf in zip(model.h, t.h, strict=True):
        copy(block.ln_1, hf.ln_1)
        copy(block.attn.in_proj, hf.attn.c_attn, transpose=True)  # Conv1D (in, out) → Linear (out, in)
        copy(block.attn.out_proj, hf.attn.c_proj, transpose=True)
        copy(block.ln_2, hf.ln_2)
        copy(block.mlp.W_1, hf.mlp.c_fc, transpose=True)
        copy(block.mlp.W_2, hf.mlp.c_proj, transpose=True)
    copy(model.ln_f, t.ln_f)
    if not c.tie_weights:
        model.lm_head.weight.copy_(hf_model.lm_head.weight)
    return model


@torch.no_grad()
def generate(model: GPT, ids: torch.Tensor, max_new_tokens: int, *, use_cache: bool = True, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, greedy: bool = False,
             generator: torch.Generator | None = None) -> torch.Tensor:
    """Extend the prompts ids (B, P) by ``max_new_tokens`` tokens each: returns (B, P + max_new_tokens).

    Each token is the argmax (``greedy``) or a draw from :func:`lmbook.decoding.sample_next` with the given
    temperature, top-k and top-p. With ``use_cache`` the prompt is read once and then one token per step;
    without, the whole sequence is read again at every step (the reference: same tokens, more work).
    """
    model.eval()  # dropout would make the two paths differ
    P, block_size = ids.shape[1], model.config.block_size
    if P + max_new_tokens - 1 > block_size:  # the last new token is never read
        raise ValueError(f"{P} prompt + {max_new_tokens} new tokens need {P + max_new_tokens - 1} positions, "
                         f"more than block_size={block_size}")
    cache = KVCache() if use_cache else None
    unread = ids  # the tokens the cache has not seen: the prompt, then the newest token
    for _ in range(max_new_tokens):
        logits = model(unread if use_cache else ids, cache)[:, -1]
        next_id = logits.argmax(-1) if greedy else sample_next(logits, generator, temperature, top_k, top_p)
        ids = torch.cat([ids, next_id[:, None]], dim=1)
        unread = next_id[:, None]
    return ids


# ----------------------------------------------------------------------------- fine-tuning on a task (GPT-1)


def format_pair(a_ids: Sequence[int], b_ids: Sequence[int], start: int, delim: int, extract: int) -> list[int]:
    """[start] a [delim] b [extract]: two texts (entailment, similarity) as one sequence."""
    return [start, *a_ids, delim, *b_ids, extract]


def format_single(a_ids: Sequence[int], start: int, extract: int) -> list[int]:
    """[start] a [extract]: one text (classification)."""
    return [start, *a_ids, extract]


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to the longest: ids (B, n_max) and lengths (B,). Padding comes after every real token, so
    causal attention keeps it from every real position."""
    if not seqs or any(len(s) == 0 for s in seqs):
        raise ValueError("pad_batch needs at least one sequence, and no empty one")
    lengths = torch.tensor([len(s) for s in seqs])
    ids = torch.full((len(seqs), int(lengths.max())), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
    return ids, lengths


def last_token_state(h: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """h (B, n, d), lengths (B,) → (B, d): row i is h[i, lengths[i] − 1],
    the last real token's state."""
    rows = torch.arange(h.shape[0], device=h.device)
    return h[rows, lengths.to(h.device) - 1]


class GPTClassifier(nn.Module):
    """A GPT body and a linear layer on the last real token's final hidden state: class logits.

    The LM head is not used here (tied, it is wte anyway); GPT-1 also kept the LM loss on the task's text as an
    auxiliary objective, which ``self.gpt(ids)`` gives.
    """

    def __init__(self, gpt: GPT, n_classes: int):
        super().__init__()
        self.gpt = gpt
        self.head = nn.Linear(gpt.config.d_model, n_classes)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """ids (B, n) right-padded, lengths (B,) → logits (B, n_classes)."""
        return self.head(last_token_state(self.gpt.hidden_states(ids), lengths))
