"""A small causal self-attention language model and its training (chapters 5-6; chapters 9-10 build on it).

    x_t = E[w_t] + P[t]                        word embedding plus a position embedding (chapter 7)
    for each block:
        x = x + Attention(LN(x), causal) W_o    every position reads the positions up to itself
        x = x + FFN(LN(x))                      a two-layer network applied to each position on its own
    logits = LN(x) U                             one next-word prediction per position

The residual connections (x + ...) and the LayerNorms (LN) are chapter 8's subject; here they only keep
training stable. With ``n_head=1`` (chapter 5) the attention is :class:`lmbook.self_attention.SelfAttention`,
one head without bias, followed by the block's own projection ``proj`` (W_o, with a bias). With ``n_head=h > 1``
(chapter 6) it is :class:`lmbook.multihead.MultiHeadAttention`, h heads of size d_model/h, whose ``out_proj``
is W_o; its query, key and value maps have no bias either, so both kinds of block have the same parameters in
number: 4 d_model² + d_model for the attention. nanoGPT's ``model.py`` is the model for this file; this one is
smaller.

``LMConfig.positions`` picks how the model knows where a word is (chapter 7; :mod:`lmbook.positions`):
"learned" (the table P above, the default), "sinusoidal" (fixed P), "none", or, with nothing added to x,
a bias on every attention score by offset, "relative" (learned, shared by the layers) or "alibi" (fixed),
or "rope" (queries and keys rotated by their positions). Only "learned" limits the length of a sequence:
to its table's ``max_len`` rows (default ``block_size``, the length the model is trained on).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .multihead import MultiHeadAttention
from .positions import RelativePositionBias, alibi_bias, sinusoidal
from .self_attention import SelfAttention, causal_mask


@dataclass
class LMConfig:
    vocab_size: int
    block_size: int = 32  # the context the model is trained on (and the learned position table's size)
    d_model: int = 64
    n_layer: int = 2
    d_ff: int = 256  # the feed-forward network's hidden size (4 x d_model)
    n_head: int = 1  # attention heads of size d_model / n_head (1: chapter 5's single-head block)
    positions: str = "learned"  # one of POSITIONS (chapter 7)
    max_len: int | None = None  # rows of the learned position table (default block_size)

    def __post_init__(self) -> None:
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {self.positions!r}")
        if self.positions == "rope" and self.n_head == 1:
            raise ValueError("positions='rope' needs n_head > 1 (MultiHeadAttention rotates queries and keys)")


POSITIONS = ("learned", "sinusoidal", "none", "relative", "alibi", "rope")


class Block(nn.Module):
    """Causal self-attention, then a position-wise FFN, each added to its input."""

    def __init__(self, cfg: LMConfig):
        super().__init__()
        d = cfg.d_model
        self.n_head = cfg.n_head
        self.ln_1 = nn.LayerNorm(d)
        if cfg.n_head == 1:  # chapter 5: one head, then W_o (with a bias)
            self.attn = SelfAttention(d, d)
            self.proj = nn.Linear(d, d)
        else:  # chapter 6: h heads; W_o is the layer's out_proj
            self.attn = MultiHeadAttention(d, cfg.n_head, rope=cfg.positions == "rope")
            self.attn.in_proj.register_parameter("bias", None)  # no bias on Q, K, V
            self.proj = nn.Identity()
        self.ln_2 = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, cfg.d_ff), nn.GELU(),
                                 nn.Linear(cfg.d_ff, d))

    def forward(self, x: torch.Tensor,
                mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The new x, and the weights: (B, n, n), or (B, h, n, n) with h heads."""
        if self.n_head == 1:
            y, weights = self.attn(self.ln_1(x), mask)
        else:
            y, weights = self.attn(self.ln_1(x), mask=mask)
        x = x + self.proj(y)  # attention reads the other positions
        x = x + self.ffn(self.ln_2(x))  # the FFN works on each position alone
        return x, weights


class CausalLM(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)  # word embeddings E
        # position embeddings P (chapter 7), learned
        self.wpe = nn.Embedding(cfg.max_len or cfg.block_size, cfg.d_model) if cfg.positions == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        # one learned bias per head and offset, shared by the layers (as T5 does)
        self.rel = RelativePositionBias(cfg.n_head, cfg.block_size) if cfg.positions == "relative" else None

    def forward(self, ids: torch.Tensor, return_weights: bool = False):
        """ids (B, n) → logits (B, n, V); row t predicts word t + 1 from words ≤ t.
        With ``return_weights``, also every block's attention weights, a list of (B, n, n) with one head
        and of (B, h, n, n) with h heads."""
        n, cfg = ids.shape[1], self.cfg
        x = self.wte(ids)
        if cfg.positions == "learned":
            if n > self.wpe.num_embeddings:
                raise ValueError(f"sequence of {n} tokens, longer than the {self.wpe.num_embeddings} learned positions "
                                 "(LMConfig.max_len, by default block_size)")
            x = x + self.wpe(torch.arange(n, device=ids.device))
        elif cfg.positions == "sinusoidal":
            x = x + sinusoidal(n, cfg.d_model).to(x.device)
        mask = causal_mask(n, device=ids.device)
        if cfg.positions in ("relative", "alibi"):  # a float mask: the bias, -inf on the future
            bias = self.rel(n) if self.rel is not None else alibi_bias(cfg.n_head, n).to(x.device, x.dtype)
            mask = bias.masked_fill(~mask, float("-inf"))
        weights = []
        for block in self.blocks:
            x, w = block(x, mask)
            weights.append(w)
        logits = self.head(self.ln_f(x))
        return (logits, weights) if return_weights else logits


@dataclass
class TrainLog:
    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)  # training loss of each step
    val_steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0


def block_size_of(model: nn.Module) -> int:
    """How many positions a model reads: its ``cfg`` (:class:`CausalLM`) or ``config`` (``lmbook.gpt.GPT``)."""
    cfg = getattr(model, "cfg", None) or model.config
    return cfg.block_size


def random_blocks(ids: torch.Tensor, batch_size: int, block_size: int, g: torch.Generator):
    """A batch of random windows of the token stream: inputs (B, n) and their next words (B, n)."""
    start = torch.randint(0, len(ids) - block_size - 1, (batch_size,), generator=g)
    idx = start[:, None] + torch.arange(block_size)
    return ids[idx], ids[idx + 1]


@torch.no_grad()
def stream_log_probs(model: CausalLM, ids: torch.Tensor, context: int | None = None) -> torch.Tensor:
    """ln P(w_t | the words before it) for t = 1 .. len(ids) - 1, shape (len(ids) - 1, V).

    The text is read in windows of ``block_size`` that overlap by ``context`` words: every prediction after
    the first window sees at least ``context`` words of history (default: half a block)."""
    model.eval()
    device = next(model.parameters()).device
    n = block_size_of(model)
    context = n // 2 if context is None else context
    out = []
    for start in range(0, len(ids) - 1, n - context):
        window = ids[start : start + n + 1].to(device)
        if len(window) < 2:
            break
        logp = torch.log_softmax(model(window[None, :-1])[0], dim=-1)
        skip = 0 if start == 0 else context  # these predictions were made by the previous window
        out.append(logp[skip:])
        if start + n + 1 >= len(ids):
            break
    return torch.cat(out)[: len(ids) - 1]


@torch.no_grad()
def window_log_probs(model: CausalLM, windows: torch.Tensor, batch_size: int = 100) -> torch.Tensor:
    """ln P(w_{t+1} | w_0 .. w_t) for each window (N, n + 1) of words and each t < n: shape (N, n).

    Each window is read whole, at once, so position t's prediction is made at position t: what chapter 7
    needs to measure a model at and beyond the length it was trained on."""
    model.eval()
    device = next(model.parameters()).device
    out = []
    for rows in windows.split(batch_size):
        rows = rows.to(device)
        logp = torch.log_softmax(model(rows[:, :-1]), dim=-1)
        out.append(logp.gather(2, rows[:, 1:, None])[..., 0].cpu())
    return torch.cat(out)


def stream_loss(model: CausalLM, ids: torch.Tensor) -> float:
    """Mean cross-entropy (nats) of the next-word predictions over a whole token stream."""
    logp = stream_log_probs(model, ids)
    return -logp.gather(1, ids[1:, None].to(logp.device)).mean().item()


def train_lm(model: CausalLM, train: torch.Tensor, val: torch.Tensor | None = None, *, steps: int = 600,
             batch_size: int = 32, lr: float = 3e-3, seed: int = 0, eval_every: int = 0,
             warmup: int = 50, weight_decay: float = 0.01, decoupled: bool = True) -> TrainLog:
    """AdamW on random windows of ``train``, learning rate warmed up then decayed to 0 along a cosine.

    ``train`` is a token stream (1-D), read in random windows of ``block_size``, or a set of sequences
    (N, block_size + 1), of which each batch takes random rows whole (chapter 7's order tasks).
    ``decoupled=False`` trains with Adam and an L2 penalty of the same ``weight_decay`` instead (its gradient
    λθ added to the loss's, then rescaled by Adam like the rest: chapter 5 compares the two)."""
    device = next(model.parameters()).device
    if decoupled:  # θ ← θ − lr·λ·θ, apart from Adam's step (Loshchilov & Hutter)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    else:  # g ← g + λθ, then Adam: the decay is divided by sqrt(v̂) like the gradient
        opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + torch.cos(torch.tensor(s / steps * torch.pi)).item()))
    g = torch.Generator().manual_seed(seed)
    log, t0 = TrainLog(), time.perf_counter()
    for step in range(1, steps + 1):
        model.train()
        if train.dim() == 1:
            x, y = random_blocks(train, batch_size, block_size_of(model), g)
        else:
            rows = train[torch.randint(0, len(train), (batch_size,), generator=g)]
            x, y = rows[:, :-1], rows[:, 1:]
        logits = model(x.to(device))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.to(device).reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        log.steps.append(step)
        log.loss.append(loss.item())
        if val is not None and eval_every and (step % eval_every == 0 or step == steps):
            log.val_steps.append(step)
            log.val_loss.append(stream_loss(model, val))
    log.seconds = time.perf_counter() - t0
    return log
