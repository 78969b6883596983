"""The Transformer (Vaswani et al., 2017): blocks of attention and a feed-forward network, each wrapped in a
residual connection and LayerNorm, and the encoder–decoder translator built from them (chapter 8).

    LN(x)  = g ⊙ (x − μ) / sqrt(σ² + ε) + b        μ = mean_i x_i,  σ² = mean_i (x_i − μ)²  over the d features
    FFN(x) = act(x W_1 + b_1) W_2 + b_2             d_model → d_ff → d_model, the same network at every position

Each sub-layer f (attention or the FFN) is wrapped in one of two ways:

    post-LN (the paper; BERT, RoBERTa, ALBERT, ELECTRA, BART, DeBERTa):   x = LN(x + f(x))
    pre-LN (GPT-2 and most large decoder-only models since):              x = x + f(LN(x))

Pre-LN never normalises the residual stream x itself, so a model built from it needs one last LN after its
last block; it also trains stably without the learning-rate warm-up post-LN needs (Xiong et al., 2020). A
post-LN block's output is already normalised.

    encoder block:   x = sub(x, SelfAttn)          every source position sees every real source position
                     x = sub(x, FFN)
    decoder block:   x = sub(x, SelfAttn_causal)   target position t sees positions ≤ t
                     x = sub(x, CrossAttn(·, H))   Q = x W_q from the decoder; K = H W_k, V = H W_v from the memory
                     x = sub(x, FFN)

The translator (same interface as :class:`lmbook.seq2seq.Seq2Seq`, so :func:`lmbook.seq2seq_train.fit`,
:func:`lmbook.seq2seq.translate` and :mod:`lmbook.decoding` work with it unchanged):

    H      = Encoder(sqrt(d) E_src[x] + PE)            N encoder blocks, then LN if ``final_norm``: the memory
    s      = Decoder(sqrt(d) E_tgt[y_<t] + PE, H)      N decoder blocks, then LN if ``final_norm``
    logits = s W_y + b_y                             the vocabulary layer (W_o is only attention's output map)

PE is :func:`lmbook.positions.sinusoidal`. Dropout (rate ``dropout``) falls on the embeddings, on each
sub-layer's output before it is added to x, and on the FFN's hidden layer, as in ``torch.nn.Transformer``,
which also drops attention weights (here none are). Decoding encodes the source once but reruns the decoder
on the whole prefix at every step (no key/value cache), so T generated tokens cost O(T²) decoder positions.

**LayerNorm.** :class:`LayerNorm` is ``nn.LayerNorm``: biased variance (divide by d), ε = 1e-5 inside the
square root. The Annotated Transformer (Rush, 2018) writes g (x − μ) / (std + ε) + b with ε = 1e-6 and
torch's default *unbiased* std (divide by d − 1): its output is sqrt((d − 1) / d) times nn.LayerNorm's, 0.1%
smaller for d = 512 (the gain learns around it, so it trains as well) but 13% for d = 4, and ε on the std
instead of the variance matters where σ is small. Its weights are not interchangeable with
``nn.LayerNorm``'s. Its ``SublayerConnection`` is also pre-LN, x + dropout(f(LN(x))), with a final LN after
each stack ("for code simplicity the norm is first as opposed to last"), although the paper it annotates
is post-LN.

**Traps in torch's layers** (``load_torch`` copies their weights into these blocks; the tests compare them):

* Masks: ``key_padding_mask``, ``src/memory_key_padding_mask`` and boolean ``attn_mask``/``tgt_mask`` mean
  True = *masked*; lmbook's mean True = may attend. Pass ``~mask``. ``tgt_is_causal=True`` is only a hint:
  the causal ``tgt_mask`` must still be given (``nn.Transformer.generate_square_subsequent_mask``).
* Fast path: in eval mode with autograd off (or no parameter requiring grad), an even number of heads and a
  few more conditions, ``nn.TransformerEncoderLayer`` runs a fused kernel
  (``torch._transformer_encoder_layer_fwd``): the same numbers to rounding. ``nn.TransformerEncoder`` (post-LN
  only) also packs a padded batch into a nested tensor and returns **zeros at padded positions**, where its
  slow path and these blocks return what the padded queries computed. Compare real positions only, or turn
  it off with ``torch.backends.mha.set_fastpath_enabled(False)``.
* Final norms: ``nn.Transformer`` always puts a LayerNorm after its encoder and its decoder, post-LN included,
  where the paper has none: its post-LN model normalises twice at the end. Here that is ``final_norm=True``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .multihead import MultiHeadAttention
from .positions import sinusoidal
from .seq2seq import BOS, EOS, PAD, Translator

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,  # x Φ(x), Φ the normal CDF, computed exactly (with erf)
    "gelu_tanh": partial(F.gelu, approximate="tanh"),  # GPT-2's approximation of Φ (chapter 9): its weights expect it
}


class LayerNorm(nn.Module):
    """LN(x) = g ⊙ (x − μ) / sqrt(σ² + ε) + b over the last dimension, σ² the biased variance: ``nn.LayerNorm``."""

    def __init__(self, d: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))  # the gain g: starts as the identity map
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None  # bias=False: no b (nanoGPT's option)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)  # divide by d, not d − 1
        y = self.weight * (x - mu) / torch.sqrt(var + self.eps)
        return y if self.bias is None else y + self.bias


class FeedForward(nn.Module):
    """FFN(x) = act(x W_1 + b_1) W_2 + b_2 at each position on its own (d_model → d_ff → d_model)."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {list(ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        self.W_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.W_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.W_2(self.drop(ACTIVATIONS[self.activation](self.W_1(x))))


# ----------------------------------------------------------------------------- blocks, and torch's weights


@torch.no_grad()
def _copy(ours: nn.Module, theirs: nn.Module) -> None:
    """Copy the weight and bias of a Linear or a LayerNorm."""
    ours.weight.copy_(theirs.weight)
    ours.bias.copy_(theirs.bias)


def _check_torch_layer(block: EncoderBlock | DecoderBlock, layer: nn.Module) -> None:
    """Refuse a torch layer that computes something else: same weights, another function, would be silent."""
    act = {F.relu: "relu", F.gelu: "gelu"}.get(layer.activation)  # what activation="relu" / "gelu" gives
    theirs = dict(norm_first=layer.norm_first, activation=act, eps=layer.norm1.eps)
    ours = dict(norm_first=block.norm_first, activation=block.ffn.activation, eps=block.ln_1.eps)
    if theirs != ours:
        raise ValueError(f"the torch layer has {theirs}, this block {ours}")


class EncoderBlock(nn.Module):
    """Self-attention over the source (padding masked, no causal mask), then the FFN; post-LN or pre-LN."""

    def __init__(self, d_model: int, n_head: int, d_ff: int, dropout: float = 0.0, activation: str = "relu",
                 norm_first: bool = False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_head)
        self.ffn = FeedForward(d_model, d_ff, activation, dropout)
        self.ln_1, self.ln_2 = LayerNorm(d_model), LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, S, d); ``key_mask`` (B, S) True at real tokens. Returns x and the attention weights (B, h, S, S)."""
        if self.norm_first:  # x = x + f(LN(x))
            y, weights = self.self_attn(self.ln_1(x), key_mask=key_mask)
            x = x + self.drop(y)
            x = x + self.drop(self.ffn(self.ln_2(x)))
        else:  # x = LN(x + f(x))
            y, weights = self.self_attn(x, key_mask=key_mask)
            x = self.ln_1(x + self.drop(y))
            x = self.ln_2(x + self.drop(self.ffn(x)))
        return x, weights

    def load_torch(self, layer: nn.TransformerEncoderLayer) -> EncoderBlock:
        """Copy the weights of an ``nn.TransformerEncoderLayer`` (same sizes, norm order and activation)."""
        _check_torch_layer(self, layer)
        self.self_attn.load_torch(layer.self_attn)
        _copy(self.ffn.W_1, layer.linear1)
        _copy(self.ffn.W_2, layer.linear2)
        _copy(self.ln_1, layer.norm1)
        _copy(self.ln_2, layer.norm2)
        return self


class DecoderBlock(nn.Module):
    """Causal self-attention, cross-attention to the memory (the encoder's output), then the FFN.

    No target padding mask is needed: padding comes after the real tokens, so the causal mask already hides
    it from every real position (the padded positions' outputs are never used).
    """

    def __init__(self, d_model: int, n_head: int, d_ff: int, dropout: float = 0.0, activation: str = "relu",
                 norm_first: bool = False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_head)
        self.cross_attn = MultiHeadAttention(d_model, n_head)
        self.ffn = FeedForward(d_model, d_ff, activation, dropout)
        self.ln_1, self.ln_2, self.ln_3 = LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor,
                memory_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, d) the target so far, memory (B, S, d), ``memory_mask`` (B, S) True at real source tokens.

        Returns x and the cross-attention weights (B, h, T, S): how much each target position reads each
        source position.
        """
        if self.norm_first:  # x = x + f(LN(x)); the memory is normalised by the encoder's final LN
            x = x + self.drop(self.self_attn(self.ln_1(x), causal=True)[0])
            y, weights = self.cross_attn(self.ln_2(x), memory, key_mask=memory_mask)  # Q from x, K and V from H
            x = x + self.drop(y)
            x = x + self.drop(self.ffn(self.ln_3(x)))
        else:  # x = LN(x + f(x))
            x = self.ln_1(x + self.drop(self.self_attn(x, causal=True)[0]))
            y, weights = self.cross_attn(x, memory, key_mask=memory_mask)
            x = self.ln_2(x + self.drop(y))
            x = self.ln_3(x + self.drop(self.ffn(x)))
        return x, weights

    def load_torch(self, layer: nn.TransformerDecoderLayer) -> DecoderBlock:
        """Copy the weights of an ``nn.TransformerDecoderLayer``: self_attn, multihead_attn (cross), FFN, norms."""
        _check_torch_layer(self, layer)
        self.self_attn.load_torch(layer.self_attn)
        self.cross_attn.load_torch(layer.multihead_attn)
        _copy(self.ffn.W_1, layer.linear1)
        _copy(self.ffn.W_2, layer.linear2)
        _copy(self.ln_1, layer.norm1)
        _copy(self.ln_2, layer.norm2)
        _copy(self.ln_3, layer.norm3)
        return self


# ----------------------------------------------------------------------------- the translator


@dataclass
class Memory:
    """What the encoder hands the decoder: its states H (B, S, d) and the source mask (B, S), True at real tokens.

    Like :class:`lmbook.seq2seq.Encoded` without the context vector c: nothing squeezes the sentence into one
    vector any more; the decoder reads all of H, in every block.
    """

    H: torch.Tensor
    mask: torch.Tensor


class Transformer(Translator):
    """The encoder–decoder Transformer, with :class:`lmbook.seq2seq.Seq2Seq`'s interface.

    ``final_norm`` (default: ``norm_first``) adds a LayerNorm after the last encoder and the last decoder
    block; pre-LN needs it, and ``nn.Transformer`` always has it. ``n_positions`` bounds the sentence length.
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_model: int = 128, n_head: int = 4,
                 n_layer: int = 2, d_ff: int = 512, dropout: float = 0.1, activation: str = "relu",
                 norm_first: bool = False, final_norm: bool | None = None, n_positions: int = 512):
        super().__init__()
        self.d_model = d_model
        self.src_E = nn.Embedding(src_vocab_size, d_model, padding_idx=PAD)
        self.tgt_E = nn.Embedding(tgt_vocab_size, d_model, padding_idx=PAD)
        with torch.no_grad():  # N(0, 1/d), so sqrt(d) E[x] has unit-size features, like the positions
            for E in (self.src_E, self.tgt_E):
                E.weight.normal_(0.0, d_model**-0.5)
                E.weight[PAD] = 0.0
        self.register_buffer("pe", sinusoidal(n_positions, d_model), persistent=False)
        self.drop = nn.Dropout(dropout)
        block_args = (d_model, n_head, d_ff, dropout, activation, norm_first)
        self.encoder = nn.ModuleList(EncoderBlock(*block_args) for _ in range(n_layer))
        self.decoder = nn.ModuleList(DecoderBlock(*block_args) for _ in range(n_layer))
        final_norm = norm_first if final_norm is None else final_norm
        self.ln_enc = LayerNorm(d_model) if final_norm else nn.Identity()
        self.ln_dec = LayerNorm(d_model) if final_norm else nn.Identity()
        self.W_y = nn.Linear(d_model, tgt_vocab_size)  # the vocabulary layer


    def embed(self, ids: torch.Tensor, E: nn.Embedding) -> torch.Tensor:
        """sqrt(d) E[ids] + PE (then dropout): ids (B, n) → (B, n, d)."""
        n = ids.shape[1]
        if n > len(self.pe):
            raise ValueError(f"sequence of {n} tokens, longer than n_positions={len(self.pe)}")
        return self.drop(E(ids) * math.sqrt(self.d_model) + self.pe[:n])

    def encode(self, x: torch.Tensor, lengths: torch.Tensor) -> Memory:
        """x (B, S) padded source ids, lengths (B,) → the memory H (B, S, d) and the source mask."""
        mask = torch.arange(x.shape[1], device=x.device)[None, :] < lengths.to(x.device)[:, None]
        h = self.embed(x, self.src_E)
        for block in self.encoder:
            h, _ = block(h, mask)
        return Memory(self.ln_enc(h), mask)

    def decode(self, y_in: torch.Tensor, memory: Memory, return_alpha: bool = False):
        """y_in (B, T) target ids starting with <bos> → logits (B, T, V); row t predicts y_{t+1}.

        With ``return_alpha``, also the last block's cross-attention weights averaged over heads, (B, T, S).
        """
        s = self.embed(y_in, self.tgt_E)
        for block in self.decoder:
            s, weights = block(s, memory.H, memory.mask)
        logits = self.W_y(self.ln_dec(s))
        return (logits, weights.mean(1)) if return_alpha else logits

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, y_in: torch.Tensor) -> torch.Tensor:
        return self.decode(y_in, self.encode(x, lengths))

    @torch.no_grad()
    def greedy(self, x: torch.Tensor, lengths: torch.Tensor, max_len: int = 60, return_alpha: bool = False):
        """Greedy decoding of a whole batch: lists of generated ids (eos included if produced).

        The source is encoded once; the decoder reruns on the whole prefix at each step (no cache). With
        ``return_alpha``, also the last decoder block's cross-attention, averaged over heads, (B, T, S).
        """
        self.eval()
        memory = self.encode(x, lengths)
        y = torch.full((len(x), 1), BOS, dtype=torch.long, device=x.device)
        done = torch.zeros(len(x), dtype=torch.bool, device=x.device)
        for _ in range(max_len):
            logits, alpha = self.decode(y, memory, return_alpha=True)
            y_t = logits[:, -1].argmax(-1)  # y_t = argmax_v P(v | y_<t, x)
            y = torch.cat([y, y_t[:, None]], dim=1)
            done |= y_t == EOS
            if done.all():
                break
        out = y[:, 1:].tolist()
        hyps = [row[: row.index(EOS) + 1] if EOS in row else row for row in out]
        return (hyps, alpha) if return_alpha else hyps  # causal: the last pass's alpha holds every step's

    def step_fn(self, src_ids: Sequence[int]) -> Callable[[list[int]], torch.Tensor]:
        """A ``step_fn`` for lmbook.decoding on one source sentence (ids, <eos> included).

        ``step_fn(prefix)`` returns log P(next | prefix, x), shape (V,), for a prefix starting with <bos>.
        The memory is computed once; each new prefix reruns the decoder on all of it, and answers are cached
        by prefix, so a prefix asked for twice costs nothing.
        """
        self.eval()
        with torch.no_grad():
            memory = self.encode(torch.tensor([list(src_ids)], device=self.device), torch.tensor([len(src_ids)]))
        logps: dict[tuple[int, ...], torch.Tensor] = {}

        @torch.no_grad()
        def fn(prefix: list[int]) -> torch.Tensor:
            key = tuple(prefix)
            if key not in logps:
                logits = self.decode(torch.tensor([key], device=self.device), memory)
                logps[key] = torch.log_softmax(logits[0, -1], dim=-1).cpu()
            return logps[key]

        return fn

    def load_torch(self, model: nn.Transformer) -> Transformer:
        """Copy the blocks and final norms of an ``nn.Transformer`` (batch_first; same sizes and norm order).

        Needs ``final_norm=True``: ``nn.Transformer`` always ends its encoder and its decoder with a LayerNorm.
        Embeddings and W_y stay as they are (``nn.Transformer`` has none).
        """
        if not isinstance(self.ln_enc, LayerNorm):
            raise ValueError("nn.Transformer ends its encoder and decoder with a LayerNorm: build with final_norm=True")
        for block, layer in zip(self.encoder, model.encoder.layers, strict=True):
            block.load_torch(layer)
        for block, layer in zip(self.decoder, model.decoder.layers, strict=True):
            block.load_torch(layer)
        _copy(self.ln_enc, model.encoder.norm)
        _copy(self.ln_dec, model.decoder.norm)
        return self
