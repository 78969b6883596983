"""Encoder–decoder translation models: a GRU encoder, and a decoder with or without attention.

The model is a conditional language model,

    P(y | x) = prod_t P(y_t | y_<t, x),

read in three parts (chapter 3, and chapter 4 for attention):

    encoder       h_j = GRU(E_x x_j, h_{j-1})                  H = (h_1, ..., h_S), one state per source word
    context       c = h_S (or [h_S(fwd); h_1(bwd)])            the single vector chapter 3's decoder gets
    decoder       s_0 = tanh(W_init c + b_init)
                  s_t = GRU(e(y_{t-1}), s_{t-1})               (no attention: the ``Decoder``)
                  logits_t = W_y s_t + b_y

The attention decoder (Bahdanau et al., 2015) looks at every h_j at every step instead:

    e_tj  = score(s_{t-1}, h_j)             padding positions j get -inf
    α_t   = softmax(e_t)
    c_t   = Σ_j α_tj h_j
    s_t   = GRUCell([e(y_{t-1}); c_t], s_{t-1})
    logits_t = W_y [c_t; s_t] + b_y

``W_y`` is the output layer that scores every target word (``W_o`` is kept for attention's output
projection, chapter 6).

Training (data to batches, the loop) is in :mod:`lmbook.seq2seq_train`; exact match and BLEU by source
length in :mod:`lmbook.metrics`. Batches are padded with id 0; ``lengths`` gives the real length of each
sentence (its <eos> included). Target batches start with <bos>: the decoder
reads ``y[:, :-1]`` and is trained to predict ``y[:, 1:]`` (teacher forcing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .attention import AdditiveScore, MultiplicativeScore, attend, dot_scores, scaled_dot_scores
from .decoding import beam_search, greedy_decode

PAD, BOS, EOS = 0, 1, 2  # the ids lmbook.translation.vocabularies() gives these tokens
SCORES = ("dot", "scaled_dot", "multiplicative", "additive")


# ----------------------------------------------------------------------------- encoder


@dataclass
class Encoded:
    """What the encoder hands the decoder: every state H (B, S, d), the padding mask (B, S), the context c (B, d)."""

    H: torch.Tensor
    mask: torch.Tensor
    c: torch.Tensor


class Encoder(nn.Module):
    """Embedding + GRU over the source. Bidirectional: each direction has d_hid // 2 units, concatenated.

    So H has d_hid features either way, and c = [forward state after the last word; backward state
    after the first word] summarises the sentence read in both directions.
    """

    def __init__(self, vocab_size: int, d_emb: int, d_hid: int, bidirectional: bool = False):
        super().__init__()
        if bidirectional and d_hid % 2:
            raise ValueError("a bidirectional encoder needs an even d_hid")
        self.E = nn.Embedding(vocab_size, d_emb, padding_idx=PAD)
        self.rnn = nn.GRU(d_emb, d_hid // 2 if bidirectional else d_hid, batch_first=True,
                          bidirectional=bidirectional)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> Encoded:
        # packing runs each sentence only over its real words, so padding never reaches a state
        packed = pack_padded_sequence(self.E(x), lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h_last = self.rnn(packed)
        H, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])  # (B, S, d_hid), zeros at pads
        c = torch.cat(list(h_last), dim=-1)  # (B, d_hid): one direction, or [forward; backward]
        mask = torch.arange(x.shape[1], device=x.device)[None, :] < lengths.to(x.device)[:, None]
        return Encoded(H, mask, c)


# ----------------------------------------------------------------------------- decoders


class Decoder(nn.Module):
    """The chapter-3 decoder: everything it knows about the source is its initial state s_0 = tanh(W_init c + b).

    With ``feed_context=True`` the context vector is also fed at every step: s_t = GRU([e(y_{t-1}); c], s_{t-1}).
    """

    def __init__(self, vocab_size: int, d_emb: int, d_hid: int, feed_context: bool = False):
        super().__init__()
        self.feed_context = feed_context
        self.E = nn.Embedding(vocab_size, d_emb, padding_idx=PAD)
        self.W_init = nn.Linear(d_hid, d_hid)
        self.rnn = nn.GRU(d_emb + (d_hid if feed_context else 0), d_hid, batch_first=True)
        self.W_y = nn.Linear(d_hid, vocab_size)

    def initial_state(self, enc: Encoded) -> torch.Tensor:
        return torch.tanh(self.W_init(enc.c))  # s_0 = tanh(W_init c + b_init)

    def _inputs(self, y_prev: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        e = self.E(y_prev)  # (B, T, d_emb)
        return torch.cat([e, c[:, None, :].expand(-1, e.shape[1], -1)], dim=-1) if self.feed_context else e

    def step(self, y_prev: torch.Tensor, s_prev: torch.Tensor, c: torch.Tensor):
        """One step: (B,) previous tokens, (B, d) state → logits (B, V), s_t (B, d), no attention weights."""
        out, _ = self.rnn(self._inputs(y_prev[:, None], c), s_prev[None])
        s = out[:, 0]  # s_t = GRU(e(y_{t-1}), s_{t-1})
        return self.W_y(s), s, None  # logits_t = W_y s_t + b_y

    def forward(self, y_in: torch.Tensor, enc: Encoded) -> torch.Tensor:
        """Teacher forcing: all steps at once (the GRU runs the recurrence), logits (B, T, V)."""
        s, _ = self.rnn(self._inputs(y_in, enc.c), self.initial_state(enc)[None])
        return self.W_y(s)


class AttentionDecoder(nn.Module):
    """Bahdanau's decoder: at every step, attend over H with the previous state as the query."""

    def __init__(self, vocab_size: int, d_emb: int, d_hid: int, score: str = "additive", d_att: int | None = None):
        super().__init__()
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        self.score_name = score
        self.E = nn.Embedding(vocab_size, d_emb, padding_idx=PAD)
        self.W_init = nn.Linear(d_hid, d_hid)
        if score == "multiplicative":
            self.score_fn = MultiplicativeScore(d_hid, d_hid)  # s^T W h
        elif score == "additive":
            self.score_fn = AdditiveScore(d_hid, d_hid, d_att or d_hid)  # v^T tanh(W1 h + W2 s)
        else:
            self.score_fn = dot_scores if score == "dot" else scaled_dot_scores  # s^T h  (/ sqrt(d))
        self.cell = nn.GRUCell(d_emb + d_hid, d_hid)
        self.W_y = nn.Linear(2 * d_hid, vocab_size)

    def initial_state(self, enc: Encoded) -> torch.Tensor:
        return torch.tanh(self.W_init(enc.c))  # s_0 = tanh(W_init c + b_init)

    def keys(self, H: torch.Tensor) -> torch.Tensor | None:
        """The part of the score that depends on h_j alone (W_1 h_j for additive), computed once per sentence."""
        return self.score_fn.W1(H) if self.score_name == "additive" else None

    def scores(self, s_prev: torch.Tensor, H: torch.Tensor, keys: torch.Tensor | None = None) -> torch.Tensor:
        """e_tj = score(s_{t-1}, h_j), (B, S): the same numbers as lmbook.attention's score functions."""
        if self.score_name == "additive":  # v^T tanh(W1 h_j + W2 s), with W1 h_j reused across steps
            W1h = self.keys(H) if keys is None else keys
            return self.score_fn.v(torch.tanh(W1h + self.score_fn.W2(s_prev)[:, None, :])).squeeze(-1)
        if self.score_name == "multiplicative":  # s^T W h_j = (s^T W) h_j: one small product per step
            return dot_scores(s_prev @ self.score_fn.W, H)
        return self.score_fn(s_prev, H)

    def _update(self, y_prev, s_prev, H, mask, keys=None):
        e_t = self.scores(s_prev, H, keys)  # e_tj = score(s_{t-1}, h_j)                   (B, S)
        c_t, alpha = attend(e_t, H, mask)  # α_t = softmax(e_t), 0 on padding; c_t = Σ_j α_tj h_j
        s = self.cell(torch.cat([self.E(y_prev), c_t], dim=-1), s_prev)  # s_t = GRUCell([e(y_{t-1}); c_t], s_{t-1})
        return c_t, s, alpha

    def step(self, y_prev: torch.Tensor, s_prev: torch.Tensor, H: torch.Tensor, mask: torch.Tensor,
             keys: torch.Tensor | None = None):
        """One decoder step → logits_t (B, V), s_t (B, d), α_t (B, S)."""
        c_t, s, alpha = self._update(y_prev, s_prev, H, mask, keys)
        logits = self.W_y(torch.cat([c_t, s], dim=-1))  # logits_t = W_y [c_t; s_t] + b_y
        return logits, s, alpha

    def forward(self, y_in: torch.Tensor, enc: Encoded, return_alpha: bool = False):
        """Teacher forcing: step through the target (each step needs the last state), logits (B, T, V).

        The same computation as calling ``step`` T times; the output layer runs once on all steps.
        """
        s, keys = self.initial_state(enc), self.keys(enc.H)
        cs, ss, alphas = [], [], []
        for t in range(y_in.shape[1]):
            c_t, s, alpha = self._update(y_in[:, t], s, enc.H, enc.mask, keys)
            cs.append(c_t)
            ss.append(s)
            alphas.append(alpha)
        logits = self.W_y(torch.cat([torch.stack(cs, 1), torch.stack(ss, 1)], dim=-1))  # W_y [c_t; s_t]
        return (logits, torch.stack(alphas, dim=1)) if return_alpha else logits


# ----------------------------------------------------------------------------- the whole model, and translating


def masked_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, pad: int = PAD) -> torch.Tensor:
    """Mean of -log P(y_t | y_<t, x) over the real (non-pad) target tokens of a padded batch.

    logits (B, T, V), targets (B, T). Padding is left out of both the sum and the count.
    """
    logp = torch.log_softmax(logits, dim=-1)
    nll = -logp.gather(-1, targets[..., None]).squeeze(-1)  # (B, T)
    real = targets != pad
    return (nll * real).sum() / real.sum()


class Translator(nn.Module):
    """What every translation model derives from its ``forward(x, lengths, y_in) -> logits``: the device it
    is on, the teacher-forced loss and the log-probability of whole targets (this chapter's :class:`Seq2Seq`,
    chapter 8's :class:`lmbook.transformer.Transformer`)."""

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def loss(self, x: torch.Tensor, lengths: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Teacher forcing on targets y = [<bos>, y_1, ..., <eos>, <pad>...]: read y[:, :-1], predict y[:, 1:]."""
        return masked_cross_entropy(self(x, lengths, y[:, :-1]), y[:, 1:])

    @torch.no_grad()
    def sequence_logprob(self, x: torch.Tensor, lengths: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """log P(y | x) = Σ_t log P(y_t | y_<t, x) of each target in the batch (B,); y as in ``loss``."""
        self.eval()
        logp = torch.log_softmax(self(x, lengths, y[:, :-1]), dim=-1)
        target = y[:, 1:]
        return (logp.gather(-1, target[..., None]).squeeze(-1) * (target != PAD)).sum(-1)


class Seq2Seq(Translator):
    """Encoder + decoder. ``attention=None`` gives chapter 3's model, a score name chapter 4's."""

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_emb: int = 64, d_hid: int = 128,
                 attention: str | None = None, bidirectional: bool = False, feed_context: bool = False,
                 d_att: int | None = None):
        super().__init__()
        self.encoder = Encoder(src_vocab_size, d_emb, d_hid, bidirectional)
        self.attention = attention
        self.decoder = (Decoder(tgt_vocab_size, d_emb, d_hid, feed_context) if attention is None
                        else AttentionDecoder(tgt_vocab_size, d_emb, d_hid, attention, d_att))

    def encode(self, x: torch.Tensor, lengths: torch.Tensor) -> Encoded:
        return self.encoder(x, lengths)

    def step(self, y_prev: torch.Tensor, s_prev: torch.Tensor, enc: Encoded):
        """One decoder step for either decoder: logits (B, V), s_t, α_t (None without attention)."""
        if self.attention is None:
            return self.decoder.step(y_prev, s_prev, enc.c)
        return self.decoder.step(y_prev, s_prev, enc.H, enc.mask)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, y_in: torch.Tensor) -> torch.Tensor:
        return self.decoder(y_in, self.encode(x, lengths))

    @torch.no_grad()
    def greedy(self, x: torch.Tensor, lengths: torch.Tensor, max_len: int = 60, return_alpha: bool = False):
        """Greedy decoding of a whole batch at once: lists of generated ids (eos included if produced)."""
        self.eval()
        enc = self.encode(x, lengths)
        s = self.decoder.initial_state(enc)
        y = torch.full((len(x),), BOS, dtype=torch.long, device=x.device)
        outputs, alphas = [], []
        done = torch.zeros(len(x), dtype=torch.bool, device=x.device)
        for _ in range(max_len):
            logits, s, alpha = self.step(y, s, enc)
            y = logits.argmax(-1)  # y_t = argmax_v P(v | y_<t, x)
            outputs.append(y)
            alphas.append(alpha)
            done |= y == EOS
            if done.all():
                break
        out = torch.stack(outputs, dim=1).tolist()
        hyps = [row[: row.index(EOS) + 1] if EOS in row else row for row in out]
        if return_alpha:
            return hyps, (torch.stack(alphas, dim=1) if alphas[0] is not None else None)
        return hyps

    def step_fn(self, src_ids: Sequence[int]) -> Callable[[list[int]], torch.Tensor]:
        """A ``step_fn`` for lmbook.decoding on one source sentence (ids, <eos> included).

        ``step_fn(prefix)`` returns log P(next | prefix, x), shape (V,), for a prefix starting with <bos>.
        Decoder states are cached by prefix, so extending a prefix costs one decoder step, in whatever
        order the search asks.
        """
        self.eval()
        with torch.no_grad():
            enc = self.encode(torch.tensor([list(src_ids)], device=self.device), torch.tensor([len(src_ids)]))
            state = {(): self.decoder.initial_state(enc)}  # state[p]: the decoder state after reading prefix p
        logps: dict[tuple[int, ...], torch.Tensor] = {}

        @torch.no_grad()
        def fn(prefix: list[int]) -> torch.Tensor:
            key = tuple(prefix)
            if key not in logps:
                if key[:-1] not in state:
                    fn(list(key[:-1]))
                y_prev = torch.tensor([key[-1]], device=self.device)
                logits, state[key], _ = self.step(y_prev, state[key[:-1]], enc)
                logps[key] = torch.log_softmax(logits[0], dim=-1).cpu()
            return logps[key]

        return fn


def translate(model: Seq2Seq, sources: Sequence[list[str]], src_vocab, tgt_vocab, beam_size: int = 1,
              length_penalty: float = 1.0, max_len: int | None = None, batch_size: int = 500) -> list[list[str]]:
    """Translate tokenised sentences: greedy (beam_size=1, batched) or beam search (one sentence at a time)."""
    from .translation import to_batch

    outputs: list[list[int]] = []
    if beam_size == 1:  # batches of similar lengths, so a batch of short sentences stops early
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        by_order: dict[int, list[int]] = {}
        for i in range(0, len(order), batch_size):
            chunk = order[i:i + batch_size]
            x, x_len = to_batch([sources[j] for j in chunk], src_vocab)
            limit = max_len or 2 * int(x_len.max()) + 10
            by_order.update(zip(chunk, model.greedy(x.to(model.device), x_len, max_len=limit), strict=True))
        outputs = [by_order[i] for i in range(len(sources))]
    else:
        for src in sources:
            ids = src_vocab.encode(src) + [EOS]
            hyps = beam_search(model.step_fn(ids), BOS, EOS, beam_size, max_len or 2 * len(ids) + 10, length_penalty)
            outputs.append(hyps[0][0])
    return [tgt_vocab.decode([t for t in ids if t != EOS]).split() for ids in outputs]


def greedy_translate_one(model: Seq2Seq, src_ids: Sequence[int], max_len: int = 60) -> list[int]:
    """Greedy decoding of one sentence through lmbook.decoding (the reference for the batched ``greedy``)."""
    return greedy_decode(model.step_fn(src_ids), BOS, EOS, max_len)
