"""BERT (Devlin et al., 2019): a stack of post-LN encoder blocks pretrained to fill in masked tokens (chapter 10).

For token ids w_0 … w_{n−1} (B, n), segments s_i ∈ {0, 1} and a padding mask m (B, n), 1 at real tokens (row
vectors, x W as in the book; an ``nn.Linear`` stores Wᵀ):

    x = LN(E_tok[ids] + E_pos[pos] + E_seg[segments])     (B, n, d), pos = 0 … n − 1, at most max_position
    for each of the n_layer blocks (chapter 8's EncoderBlock, post-LN, no causal mask):
        x = LN(x + attn(x, m))                             n_head heads of size d / n_head; padded keys get weight 0
        x = LN(x + ffn(x))                                 ffn(x) = gelu(x W_1 + b_1) W_2 + b_2: d → d_ff → d
    h = x                                                  the hidden states (post-LN: already normalised)
    pooled = tanh(h_[CLS] W_p + b_p)                       (B, d): the first position, [CLS], read by one layer

The GELU here is the exact one, gelu(x) = x Φ(x) with Φ the normal CDF (computed with erf), as in Hugging
Face's BERT (``hidden_act="gelu"``), which this file is checked against. Google's original BERT code
(google-research/bert, ``modeling.gelu``) used the tanh approximation, as GPT does; the two differ by less than
5e-4 at any x, enough to change every logit a little. The LayerNorms add ε = 1e-12 (not torch's
1e-5) inside the square root, as both do. Either choice changes the function, so :func:`load_hf_bert` refuses a
config that says otherwise.

**Pretraining heads** (:class:`BertPretraining`):

    mlm_logits = LN(gelu(h W_t + b_t)) E_tokᵀ + b_out     (B, n, V): the decoder is the token embedding (tied),
                                                            plus an output bias of its own
    nsp_logits = pooled W_nsp + b_nsp                     (B, 2): does segment B follow segment A?  0 = yes

**Masked LM** (:func:`mask_tokens`): each real, non-special token is chosen with probability p = 0.15; a chosen
token becomes [MASK] 80% of the time, a random token 10%, and stays itself 10%; the loss reads the chosen
positions only (label −100 elsewhere, ``F.cross_entropy``'s ignore_index).

**Fine-tuning.** Inputs are [CLS] a [SEP] (b [SEP]) (:func:`build_inputs`); a classifier reads ``pooled``; span
extraction (SQuAD) puts two linear maps on h, start and end logits per position, trained with
:func:`span_loss` and decoded with :func:`best_span`.

**Dropout** (rate ``dropout``, 0 by default) falls on the embeddings after their LayerNorm and on each
sub-layer's output before the residual add, as in BERT. Two differences, which vanish at rate 0 (and so in
every comparison with Hugging Face): chapter 8's FeedForward also drops its hidden layer, which BERT does not,
and BERT also drops attention weights, which these blocks do not.

**Hugging Face's weights** (:func:`load_hf_bert`): BERT's linear layers are ``nn.Linear``, (out, in), copied as
they are (no transpose, unlike GPT-2's Conv1D); the separate query, key and value maps are stacked into the
packed ``in_proj`` = [W_q; W_k; W_v] of chapter 6's :class:`lmbook.multihead.MultiHeadAttention`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .transformer import EncoderBlock, LayerNorm


@dataclass
class BertConfig:
    vocab_size: int
    n_layer: int
    n_head: int
    d_model: int
    d_ff: int | None = None  # default 4 · d_model
    max_position: int = 512  # rows of E_pos: the longest input
    type_vocab_size: int = 2  # rows of E_seg: segments A and B
    ln_eps: float = 1e-12
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model

    @classmethod
    def base(cls, vocab_size: int = 30522) -> BertConfig:
        """BERT-base (uncased WordPiece vocabulary): 110M parameters."""
        return cls(vocab_size=vocab_size, n_layer=12, n_head=12, d_model=768)

    @classmethod
    def large(cls, vocab_size: int = 30522) -> BertConfig:
        """BERT-large: 335M parameters (the paper's "340M")."""
        return cls(vocab_size=vocab_size, n_layer=24, n_head=16, d_model=1024)


def _init_weights(module: nn.Module) -> None:
    """BERT's: N(0, 0.02) weights, zero biases (LayerNorms start at g = 1, b = 0)."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, 0.0, 0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


class BERT(nn.Module):
    """The encoder: ``forward`` gives the hidden states h (B, n, d) and the pooled [CLS] vector (B, d)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        d = config.d_model
        self.token_emb = nn.Embedding(config.vocab_size, d)
        self.position_emb = nn.Embedding(config.max_position, d)
        self.segment_emb = nn.Embedding(config.type_vocab_size, d)
        self.ln_emb = LayerNorm(d, config.ln_eps)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(EncoderBlock(d, config.n_head, config.d_ff, config.dropout, activation="gelu",
                                                 norm_first=False) for _ in range(config.n_layer))
        for block in self.blocks:  # EncoderBlock builds its LayerNorms with torch's ε = 1e-5; ε is a plain attribute
            block.ln_1.eps = block.ln_2.eps = config.ln_eps
        self.pooler = nn.Linear(d, d)  # W_p, b_p
        self.apply(_init_weights)

    def forward(self, ids: torch.Tensor, segments: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (B, n); ``segments`` (B, n) 0 for A, 1 for B (default all 0);
        ``attention_mask`` (B, n) 1 (or True) at real tokens, 0 at padding, as
        Hugging Face takes it. Returns h (B, n, d) and pooled (B, d)."""
        n = ids.shape[1]
        if n > self.config.max_position:
            raise ValueError(
                f"{n} tokens, more than max_position={self.config.max_position}"
            )
        if segments is None:
            segments = torch.zeros_like(ids)
        # lmbook's masks: True = may attend
        key_mask = None if attention_mask is None else attention_mask.bool()
        pos = torch.arange(n, device=ids.device)
        e = self.token_emb(ids) + self.position_emb(pos) + self.segment_emb(segments)
        x = self.drop(self.ln_emb(e))
        for block in self.blocks:  # post-LN encoder blocks, no causal mask
            x, _ = block(x, key_mask)
        pooled = torch.tanh(self.pooler(x[:, 0]))  # the [CLS] position
        return x, pooled


class BertPretraining(nn.Module):
    """A :class:`BERT` and its two pretraining heads: masked-LM logits (B, n, V) and next-sentence logits (B, 2)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        d = config.d_model
        self.bert = BERT(config)
        self.mlm_dense = nn.Linear(d, d)  # W_t, b_t: the head's transform
        self.mlm_ln = LayerNorm(d, config.ln_eps)
        self.mlm_decoder = nn.Linear(d, config.vocab_size)  # weight: E_tok itself (tied); bias: b_out, its own
        self.nsp = nn.Linear(d, 2)
        for module in (self.mlm_dense, self.mlm_decoder, self.nsp):
            _init_weights(module)
        self.mlm_decoder.weight = self.bert.token_emb.weight  # tied after the init, so E_tok is not drawn twice

    def mlm_logits(self, h: torch.Tensor) -> torch.Tensor:
        """h (..., d) → logits over the vocabulary (..., V): at every position
        of h (B, n, d), or only at the chosen positions, gathered as (k, d)."""
        return self.mlm_decoder(self.mlm_ln(F.gelu(self.mlm_dense(h))))

    def forward(self, ids: torch.Tensor, segments: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`BERT.forward`; returns mlm_logits (B, n, V) and nsp_logits (B, 2)."""
        h, pooled = self.bert(ids, segments, attention_mask)
        return self.mlm_logits(h), self.nsp(pooled)


def pretraining_loss(mlm_logits: torch.Tensor, nsp_logits: torch.Tensor, labels: torch.Tensor,
                     is_random_next: torch.Tensor) -> torch.Tensor:
    """Masked-LM cross-entropy averaged over the chosen positions (labels ≠ −100) plus the NSP cross-entropy
    averaged over the batch; ``is_random_next`` (B,) is 0 where B follows A, 1 where B is a random sentence."""
    mlm = F.cross_entropy(mlm_logits.reshape(-1, mlm_logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
    return mlm + F.cross_entropy(nsp_logits, is_random_next)


def count_parameters(config: BertConfig, heads: bool = False) -> int:
    """The number of parameters of ``BERT(config)`` (BERT-base: 109,482,240; BERT-large: 335,141,888), or with
    ``heads`` of ``BertPretraining(config)``, the tied decoder counted once, from the sizes alone."""
    d, d_ff, V = config.d_model, config.d_ff, config.vocab_size
    ln = 2 * d  # g and b
    embeddings = V * d + config.max_position * d + config.type_vocab_size * d + ln  # E_tok, E_pos, E_seg, their LN
    attn = d * 3 * d + 3 * d + d * d + d  # in_proj [W_q; W_k; W_v] and its bias, out_proj W_o and its bias
    ffn = d * d_ff + d_ff + d_ff * d + d  # W_1 and b_1, W_2 and b_2
    per_layer = attn + ffn + 2 * ln  # ln_1, ln_2
    pooler = d * d + d
    total = embeddings + config.n_layer * per_layer + pooler
    if heads:
        mlm = d * d + d + ln + V  # W_t and b_t, its LN, b_out (the decoder's weight is E_tok, counted above)
        nsp = d * 2 + 2
        total += mlm + nsp
    return total


@torch.no_grad()
def load_hf_bert(model: BERT | BertPretraining, hf_model: nn.Module) -> BERT | BertPretraining:
    """Copy the weights of a Hugging Face ``BertForPreTraining`` (into a :class:`BertPretraining`) or ``BertModel``
    (into a :class:`BERT`) of the same sizes into ``model``; returns it. Refuses a config that computes another
    function with the same weights."""
    hc, c = hf_model.config, model.config
    pretraining = isinstance(model, BertPretraining)
    if pretraining and not hasattr(hf_model, "cls"):
        raise ValueError("a BertPretraining needs the heads of a Hugging Face BertForPreTraining")
    body = hf_model.bert if hasattr(hf_model, "bert") else hf_model
    exact_gelus = ("gelu", "gelu_python")  # HF's names for x Φ(x) with erf
    theirs = dict(vocab_size=hc.vocab_size, max_position=hc.max_position_embeddings,
                  type_vocab_size=hc.type_vocab_size, n_layer=hc.num_hidden_layers, n_head=hc.num_attention_heads,
                  d_model=hc.hidden_size, d_ff=hc.intermediate_size, ln_eps=hc.layer_norm_eps,
                  exact_gelu=hc.hidden_act in exact_gelus,
                  position_embedding_type=getattr(hc, "position_embedding_type", "absolute"),  # gone in HF 5
                  is_decoder=hc.is_decoder, cross_attention=hc.add_cross_attention, pooler=body.pooler is not None,
                  tied_decoder=pretraining and hf_model.cls.predictions.decoder.weight is body.embeddings
                  .word_embeddings.weight)
    ours = dict(vocab_size=c.vocab_size, max_position=c.max_position, type_vocab_size=c.type_vocab_size,
                n_layer=c.n_layer, n_head=c.n_head, d_model=c.d_model, d_ff=c.d_ff, ln_eps=c.ln_eps, exact_gelu=True,
                position_embedding_type="absolute", is_decoder=False, cross_attention=False, pooler=True,
                tied_decoder=pretraining)
    if theirs != ours:  # same weights, another function, would be silent
        differ = {k: (theirs[k], ours[k]) for k in ours if theirs[k] != ours[k]}
        raise ValueError(f"the Hugging Face model has {theirs}, this BERT {ours}; (theirs, ours) differ at {differ}")

    def copy(dst: nn.Module, src: nn.Module) -> None:  # nn.Linear or LayerNorm: (out, in) on both sides
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)

    bert = model.bert if pretraining else model
    e = body.embeddings
    bert.token_emb.weight.copy_(e.word_embeddings.weight)
    bert.position_emb.weight.copy_(e.position_embeddings.weight)
    bert.segment_emb.weight.copy_(e.token_type_embeddings.weight)
    copy(bert.ln_emb, e.LayerNorm)
    for block, hf in zip(bert.blocks, body.encoder.layer, strict=True):
        qkv = hf.attention.self.query, hf.attention.self.key, hf.attention.self.value
        block.self_attn.in_proj.weight.copy_(torch.cat([m.weight for m in qkv]))  # [W_q; W_k; W_v]
        block.self_attn.in_proj.bias.copy_(torch.cat([m.bias for m in qkv]))
        copy(block.self_attn.out_proj, hf.attention.output.dense)
        copy(block.ln_1, hf.attention.output.LayerNorm)
        copy(block.ffn.W_1, hf.intermediate.dense)
        copy(block.ffn.W_2, hf.output.dense)
        copy(block.ln_2, hf.output.LayerNorm)
    copy(bert.pooler, body.pooler.dense)
    if pretraining:
        p = hf_model.cls.predictions
        copy(model.mlm_dense, p.transform.dense)
        copy(model.mlm_ln, p.transform.LayerNorm)
        model.mlm_decoder.bias.copy_(p.decoder.bias)  # the weight is E_tok, copied above
        copy(model.nsp, hf_model.cls.seq_relationship)
    return model


# ----------------------------------------------------------------------------- inputs and masked LM


def build_inputs(a_ids: Sequence[int], b_ids: Sequence[int] | None = None, *, cls: int,
                 sep: int) -> tuple[list[int], list[int]]:
    """[CLS] a [SEP] (b [SEP]) and its segments: 0 for [CLS] a [SEP], 1 for b [SEP]."""
    ids = [cls, *a_ids, sep]
    segments = [0] * len(ids)
    if b_ids is not None:
        ids += [*b_ids, sep]
        segments += [1] * (len(b_ids) + 1)
    return ids, segments


def mask_tokens(ids: torch.Tensor, *, mask_id: int, vocab_size: int, special_ids: Iterable[int], pad_id: int,
                p: float = 0.15, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption of ids (any shape): returns the model's inputs and the labels; ``ids`` is not modified.

    Eligible positions hold neither padding, [MASK] nor a token of ``special_ids`` ([CLS], [SEP], …). Each is
    chosen on its own with probability p (Bernoulli, as Hugging Face's collator does; the original script took
    exactly round(p · n) per sequence), so a sequence's count varies. Of the chosen: 80% → [MASK], 10% → a token
    drawn uniformly from the non-special vocabulary (every id in [0, vocab_size) other than padding, [MASK] and
    ``special_ids``; it may draw the original token back), 10% unchanged. Labels hold the original id at chosen
    positions and −100 everywhere else.
    """
    special = torch.tensor(sorted({*special_ids, mask_id, pad_id}), device=ids.device)
    eligible = ~torch.isin(ids, special)
    # The draws are made where the generator lives (a plain torch.Generator() is on the CPU), then follow ids:
    # one seeded CPU generator picks the same positions whatever device ids are on.
    where = ids.device if generator is None else generator.device
    chosen = eligible & (torch.rand(ids.shape, generator=generator, device=where).to(ids.device) < p)
    u = torch.rand(ids.shape, generator=generator, device=where).to(ids.device)  # which of the three fates
    to_mask, to_random = chosen & (u < 0.8), chosen & (u >= 0.8) & (u < 0.9)
    vocab = torch.arange(vocab_size, device=ids.device)
    vocab = vocab[~torch.isin(vocab, special)]  # the non-special tokens a random replacement comes from
    random_tokens = vocab[torch.randint(len(vocab), ids.shape, generator=generator, device=where).to(ids.device)]
    inputs = torch.where(to_mask, torch.full_like(ids, mask_id), torch.where(to_random, random_tokens, ids))
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    return inputs, labels


# ----------------------------------------------------------------------------- span extraction (SQuAD)


def span_loss(start_logits: torch.Tensor, end_logits: torch.Tensor, start: torch.Tensor,
              end: torch.Tensor) -> torch.Tensor:
    """(CE(start_logits, start) + CE(end_logits, end)) / 2: logits (B, n); start, end (B,), the answer's first and
    last positions."""
    return (F.cross_entropy(start_logits, start) + F.cross_entropy(end_logits, end)) / 2


def best_span(start_logits: torch.Tensor, end_logits: torch.Tensor, passage_mask: torch.Tensor,
              max_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The span (s, e) maximising start_logits[s] + end_logits[e] over s ≤ e, both in the passage (``passage_mask``
    True), and e − s < ``max_len`` if given. Logits and mask (..., n); returns start and end (...). Ties go to
    the smallest s, then the smallest e. Scores every pair at once: O(n²) memory per sequence."""
    n = start_logits.shape[-1]
    scores = start_logits[..., :, None] + end_logits[..., None, :]  # (..., n, n): row s, column e
    offset = torch.arange(n, device=scores.device)[None, :] - torch.arange(n, device=scores.device)[:, None]  # e − s
    allowed = (offset >= 0) if max_len is None else (offset >= 0) & (offset < max_len)
    mask = passage_mask.bool()
    allowed = allowed & mask[..., :, None] & mask[..., None, :]
    if not allowed.flatten(-2).any(-1).all():
        raise ValueError("a sequence has no span allowed: an empty passage, or max_len < 1")
    best = scores.masked_fill(~allowed, -math.inf).flatten(-2).argmax(-1)  # the first maximum, row-major
    return best // n, best % n


# ----------------------------------------------------------------------------- masked-LM pretraining


def train_mlm(model: BertPretraining, windows: torch.Tensor, *, mask_id: int, pad_id: int,
              special_ids: Iterable[int] = (), steps: int = 1000, batch_size: int = 64, lr: float = 3e-3,
              warmup: int = 50, seed: int = 0,
              on_step: Callable[[int, BertPretraining], None] | None = None) -> tuple[list[float], float]:
    """Masked-LM pretraining on rows of ``windows`` (N, n): each step corrupts a random batch with
    :func:`mask_tokens` and minimises the cross-entropy at the chosen positions only. AdamW, the rate warmed up
    then decayed to 0 along a cosine. ``on_step(k, model)``, if given, is called after step k (1, 2, ...), e.g.
    to keep snapshots of the weights. Returns every step's loss and the training seconds."""
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    g = torch.Generator().manual_seed(seed)
    special = list(special_ids)
    losses, t0 = [], time.perf_counter()
    model.train()
    for step in range(1, steps + 1):
        x = windows[torch.randint(len(windows), (batch_size,), generator=g)]
        inputs, labels = mask_tokens(x, mask_id=mask_id, vocab_size=model.config.vocab_size, special_ids=special,
                                     pad_id=pad_id, generator=g)
        h, _ = model.bert(inputs.to(device), attention_mask=(x != pad_id).to(device))
        # The loss is taken at the chosen positions only, so the head runs only there, on 15% of the rows:
        # BERT's own code gathers them first too (run_pretraining.py, gather_indexes).
        labels = labels.to(device)
        chosen = labels != -100
        loss = F.cross_entropy(model.mlm_logits(h[chosen]), labels[chosen])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step, model)
    model.eval()
    return losses, time.perf_counter() - t0
