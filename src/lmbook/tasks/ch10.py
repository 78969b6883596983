"""Checks for exercise 10 (chapter 10: BERT, encoder-only pretraining).

The references are written here, independently of the course's answers in ``lmbook.bert``: the masked-LM
corruption as a *law* (what every output position may hold, and with which probability) that a student's draws are
tested against, the embeddings from ``F.embedding`` and ``F.layer_norm``, the span search by brute force over every
(start, end) pair, and the parameter count by listing every weight tensor of the model with its shape (the tests
prove them equal to ``lmbook.bert``, to Hugging Face's ``BertEmbeddings`` given the same weights, to its masking
collator, and to ``transformers.BertModel`` / ``BertForPreTraining`` built on the meta device). Usage in a
notebook: ``from lmbook.tasks.ch10 import check``.

Conventions, as in the chapter:

- **Masked LM.** ``ids`` (B, n) int64. The special tokens are ``special_ids`` together with ``mask_id`` and
  ``pad_id``; every other position is *eligible*. Each eligible position is chosen with probability p, on its own;
  a chosen one becomes [MASK] 80% of the time, a token drawn uniformly from the non-special vocabulary (every id of
  [0, vocab_size) that is not special; it may be the original) 10%, and stays as it is 10%. Labels hold the
  original id at chosen positions and −100 everywhere else. The draws use torch's global generator (the grader
  seeds it before each call). A random function is graded by its draws: exact rules (what may never happen) and
  counts within binomial bounds (two-sided, at level 1e-9 each), on batches of thousands of tokens.
- **Inputs and embeddings.** [CLS] a [SEP] b [SEP], segments 0 for [CLS] a [SEP] and 1 for b [SEP];
  x = LN(E_tok[ids] + E_pos[0 … n − 1] + E_seg[segments]) with ε = 1e-12, weights named as Hugging Face's
  ``BertEmbeddings``' ``state_dict()``.
- **Spans.** Logits (B, n); the loss is (CE(start) + CE(end)) / 2, each averaged over the batch; the best span
  maximises start_logits[s] + end_logits[e] over s ≤ e, both in the passage, e − s < max_len when given (a span of
  at most max_len tokens); any best span is accepted when several tie.
- **Parameters.** A config as a dict (vocab_size, n_layer, n_head, d_model, d_ff, max_position,
  type_vocab_size); the body is ``BertModel`` with its pooler; with ``heads`` it is ``BertForPreTraining``, whose
  decoder weight is the token embedding itself (tied, counted once) and whose decoder bias is its own.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import bert as _course_bert
from ..grading.checks import Case, Check, Mutant, Registry
from ..grading.compare import describe_scalar_mismatch, describe_tensor_mismatch, describe_value
from .common import randn as _randn
from .questions.ch10 import QUESTIONS

_BERT = _course_bert
MODULES = ("lmbook.bert", "lmbook.transformer", "lmbook.gpt", "lmbook.finetune", "transformers", "tokenizers")
ATTRS = ("bert", "transformer", "gpt", "finetune", "transformers", "tokenizers")
ALPHA = 1e-9  # the level of each statistical test: a right answer fails one with this probability


# ----------------------------------------------------------------------------- vocabularies and batches


@dataclass(frozen=True)
class Layout:
    """A vocabulary's special ids (id 0 is always special: [PAD] or [UNK])."""

    name: str
    V: int
    pad: int
    cls: int
    sep: int
    mask: int
    unk: int

    def specials(self, which: str) -> list[int]:
        return {"cls_sep": [self.cls, self.sep], "cls_sep_unk": [self.cls, self.sep, self.unk],
                "all": [self.pad, self.unk, self.cls, self.sep, self.mask]}[which]


SMALL = Layout("small", 40, pad=0, cls=1, sep=2, mask=3, unk=4)
BERT_VOCAB = Layout("bert", 30522, pad=0, cls=101, sep=102, mask=103, unk=100)
SCATTERED = Layout("scattered", 64, pad=0, cls=17, sep=33, mask=50, unk=5)
TINY = Layout("tiny", 16, pad=0, cls=7, sep=11, mask=14, unk=3)  # 5 of 16 ids special


def _row(g: torch.Generator, length: int, layout: Layout, pair: bool, text: torch.Tensor) -> list[int]:
    """[CLS] a [SEP] b [SEP] (or [CLS] a [SEP]) of ``length`` tokens, the words drawn from ``text``."""
    def words(k: int) -> list[int]:
        return text[torch.randint(0, len(text), (k,), generator=g)].tolist()

    if length == 1:
        return [layout.cls]
    if length == 2:
        return [layout.cls, layout.sep]
    if not pair or length < 5:
        return [layout.cls, *words(length - 2), layout.sep]
    k = 1 + int(torch.randint(0, length - 4, (1,), generator=g))
    return [layout.cls, *words(k), layout.sep, *words(length - 3 - k), layout.sep]


def _batch(g: torch.Generator, B: int, n: int, layout: Layout, lengths=None, pair: bool = True,
           unk_rate: float = 0.0, mask_rate: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, n) and their segments: rows of random lengths (the longest fills the batch), words
    drawn uniformly from the ids that are not [PAD], [CLS], [SEP] or [MASK] ([UNK] included), then a fraction
    ``unk_rate`` of them made [UNK] and ``mask_rate`` made [MASK] (a text that holds them already)."""
    taken = {layout.pad, layout.cls, layout.sep, layout.mask}
    text = torch.tensor([i for i in range(layout.V) if i not in taken])
    if lengths is None:
        lens = torch.randint(max(1, n // 3), n + 1, (B,), generator=g)
        lens[int(torch.randint(0, B, (1,), generator=g))] = n
        lengths = lens.tolist()
    ids = torch.full((B, n), layout.pad, dtype=torch.long)
    segments = torch.zeros(B, n, dtype=torch.long)
    for b, length in enumerate(lengths):
        row = torch.tensor(_row(g, length, layout, pair, text))
        ids[b, :length] = row
        seps = (row == layout.sep).nonzero().flatten().tolist()
        if len(seps) == 2:
            segments[b, seps[0] + 1:length] = 1
    words = (ids != layout.pad) & (ids != layout.cls) & (ids != layout.sep)
    u = torch.rand(B, n, generator=g)
    ids = torch.where(words & (u < unk_rate), torch.full_like(ids, layout.unk), ids)
    ids = torch.where(words & (u >= unk_rate) & (u < unk_rate + mask_rate), torch.full_like(ids, layout.mask), ids)
    return ids, segments


# ----------------------------------------------------------------------------- Task 1: mask_tokens


def _binom_pvalue(k: int, n: int, q: float) -> float:
    """Two-sided exact binomial test: 2 min(P(X ≤ k), P(X ≥ k)) for X ~ Bin(n, q)."""
    if n == 0:
        return 1.0
    if q <= 0.0:
        return 1.0 if k == 0 else 0.0
    if q >= 1.0:
        return 1.0 if k == n else 0.0
    ks = torch.arange(n + 1, dtype=torch.float64)
    log_pmf = (math.lgamma(n + 1) - torch.lgamma(ks + 1) - torch.lgamma(n - ks + 1) + ks * math.log(q)
               + (n - ks) * math.log1p(-q))
    pmf = log_pmf.exp()
    return min(1.0, 2.0 * min(float(pmf[:k + 1].sum()), float(pmf[k:].sum())))


def _off_group(hits: torch.Tensor, q: torch.Tensor, where: torch.Tensor) -> tuple[int, int, float] | None:
    """Among the positions ``where``, grouped by their probability ``q`` of a hit: the first group whose number of
    hits is outside binomial bounds, as (hits, positions, q), or None."""
    hits, q = hits[where], q[where]
    for qv in torch.unique(q).tolist():
        sel = q == qv
        k, n = int(hits[sel].sum()), int(sel.sum())
        if _binom_pvalue(k, n, qv) < ALPHA:
            return k, n, qv
    return None


def _about(n: int, q: float) -> str:
    return f"about {n * q:,.0f} ± {math.sqrt(n * q * (1 - q)):.1f}"


@dataclass
class MaskLaw:
    """The distribution of ``mask_tokens``' output on given ids: the reference's, or a known mistake's.

    ``choose``: which positions may be chosen ("eligible": not special; "all"; "no_pad": all but padding);
    ``per``: one coin per "token", or per "row" (whole rows chosen or not, however many); ``fates``: P([MASK]),
    P(random), P(unchanged) of a corrupted position; ``pool``: where random tokens come from ("non_special" or "all"
    of the vocabulary); ``corrupt``: which positions go through the 80/10/10 ("chosen", or "all" positions whatever
    was chosen); ``labels``: "chosen" (the original at chosen positions, −100 elsewhere), "all" (the original
    everywhere), "inverted" (−100 at chosen, the original elsewhere), "zero" (0 instead of −100), "corrupted" (the
    corrupted input at chosen positions).
    """

    ids: torch.Tensor
    mask_id: int
    vocab_size: int
    special: frozenset
    pad_id: int
    p: float
    choose: str = "eligible"
    per: str = "token"
    fates: tuple[float, float, float] = (0.8, 0.1, 0.1)
    pool: str = "non_special"
    corrupt: str = "chosen"
    labels: str = "chosen"

    @classmethod
    def of(cls, ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, **mistake) -> MaskLaw:
        special = frozenset(int(i) for i in special_ids) | {int(mask_id), int(pad_id)}
        return cls(ids.detach().cpu().long().clone(), int(mask_id), int(vocab_size), special, int(pad_id), float(p),
                   **mistake)

    # what the law says of the positions and of the vocabulary
    def is_special(self) -> torch.Tensor:
        return torch.isin(self.ids, torch.tensor(sorted(self.special)))

    def choosable(self) -> torch.Tensor:
        return {"eligible": lambda: ~self.is_special(), "all": lambda: torch.ones_like(self.ids, dtype=torch.bool),
                "no_pad": lambda: self.ids != self.pad_id}[self.choose]()

    def pool_mask(self) -> torch.Tensor:
        if self.pool == "all":
            return torch.ones(self.vocab_size, dtype=torch.bool)
        return ~torch.isin(torch.arange(self.vocab_size), torch.tensor(sorted(self.special)))

    def name(self, token: int) -> str:
        """A token as the student knows it: '101 ([CLS] or another special token)'."""
        if token == self.pad_id:
            return f"{token} (padding)"
        if token == self.mask_id:
            return f"{token} ([MASK])"
        if token in self.special:
            return f"{token} (a special token)"
        return str(token)

    # a draw (a mistake's output)
    def draw(self) -> tuple[torch.Tensor, torch.Tensor]:
        ids, shape = self.ids, self.ids.shape
        E = self.choosable()
        coins = torch.rand(shape) if self.per == "token" else torch.rand(*shape[:-1], 1).expand(shape)
        chosen = E & (coins < self.p)
        u = torch.rand(shape)
        fm, fr, _ = self.fates
        domain = chosen if self.corrupt == "chosen" else torch.ones_like(chosen)
        pool = torch.arange(self.vocab_size)[self.pool_mask()]
        random_tokens = pool[torch.randint(0, len(pool), shape)]
        inputs = torch.where(domain & (u < fm), torch.full_like(ids, self.mask_id),
                             torch.where(domain & (u >= fm) & (u < fm + fr), random_tokens, ids))
        none = torch.full_like(ids, -100)
        labels = {"chosen": lambda: torch.where(chosen, ids, none), "all": lambda: ids.clone(),
                  "inverted": lambda: torch.where(chosen, none, ids),
                  "zero": lambda: torch.where(chosen, ids, torch.zeros_like(ids)),
                  "corrupted": lambda: torch.where(chosen, inputs, none)}[self.labels]()
        return inputs, labels

    # is a given output a likely draw of this law?
    def problem(self, out) -> str | None:
        if not isinstance(out, tuple | list) or len(out) != 2:
            return f"returned {describe_value(out)}, expected a tuple (inputs, labels)"
        orig, V = self.ids, self.vocab_size
        for name, t in zip(("inputs", "labels"), out, strict=True):
            if not isinstance(t, torch.Tensor):
                return f"{name}: returned {describe_value(t)}, expected a tensor of token ids"
            if tuple(t.shape) != tuple(orig.shape):
                return f"{name}: returned shape {tuple(t.shape)}, expected {tuple(orig.shape)} (the shape of ids)"
            if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
                return f"{name}: returned dtype {t.dtype}, expected integer token ids (torch.long, as ids)"
        X, L = (t.detach().cpu().long() for t in out)
        if ((X < 0) | (X >= V)).any():
            (b, i) = ((X < 0) | (X >= V)).nonzero()[0].tolist()
            return f"inputs[{b}, {i}] is {int(X[b, i])}, not a token id (0 … {V - 1})"
        return self._labels_problem(X, L) or self._choice_problem(X, L) or self._corruption_problem(X, L)

    def chosen_from(self, X: torch.Tensor, L: torch.Tensor) -> torch.Tensor | None:
        return {"chosen": L != -100, "corrupted": L != -100, "zero": L != 0, "inverted": L == -100,
                "all": None}[self.labels]

    def _labels_problem(self, X, L) -> str | None:
        orig = self.ids
        if self.labels == "all":
            bad = L != orig
            if bad.any():
                b, i = bad.nonzero()[0].tolist()
                return f"labels[{b}, {i}] is {int(L[b, i])}, expected the original token {int(orig[b, i])}"
            return None
        C = self.chosen_from(X, L)
        off = {"chosen": -100, "corrupted": -100, "zero": 0}.get(self.labels)
        if off is not None:
            want = X if self.labels == "corrupted" else orig
            bad = (L != off) & (L != want)
        else:  # inverted
            bad = (L != -100) & (L != orig)
        if bad.any():
            b, i = bad.nonzero()[0].tolist()
            msg = (f"labels[{b}, {i}] is {int(L[b, i])}: a label is the original token ({int(orig[b, i])} there) where "
                   "the token was chosen, and −100 everywhere else")
            if (L[bad] == 0).all():
                msg += ("; your labels are 0 where they should be −100 (F.cross_entropy skips −100, its "
                        "ignore_index; 0 is a real token, here padding)")
            elif (L[bad] == X[bad]).all():
                msg += ("; they hold the corrupted inputs ([MASK], random tokens): take the labels from the original "
                        "ids, and corrupt a copy (ids.clone()), never ids itself")
            return msg
        if C.all() and C.numel() > 1 and self.labels == "chosen":
            return ("every position has a label (none is −100): the loss must read the chosen positions only, so "
                    "set the labels of all the others to −100")
        return None

    def _choice_problem(self, X, L) -> str | None:
        C = self.chosen_from(X, L)
        if C is None:
            return None
        E = self.choosable()
        wrong = C & ~E
        if wrong.any():
            b, i = wrong.nonzero()[0].tolist()
            return (f"position [{b}, {i}] holds {self.name(int(self.ids[b, i]))} and has a label, as if it had been "
                    f"chosen ({int(wrong.sum())} such position(s)): padding, [MASK] and the tokens of special_ids "
                    "([CLS], [SEP], …) are never chosen; they keep label −100 and stay as they are")
        if self.per == "row":
            rows_E, rows_C = E.flatten(1).sum(1), C.flatten(1).sum(1)
            partial = (rows_C != 0) & (rows_C != rows_E)
            # a whole row or none of it (one coin per sequence, or one for the batch: any number of rows)
            return f"row {int(partial.nonzero()[0])} is partly chosen" if partial.any() else None
        special = self.is_special()
        for group in (E & ~special, E & special & (self.ids != self.pad_id), E & (self.ids == self.pad_id)):
            k, n = int(C[group].sum()), int(group.sum())  # each kind of token chosen at the rate p
            if _binom_pvalue(k, n, self.p) < ALPHA:
                return (f"chose {k:,} of the {n:,} eligible tokens ({k / n:.1%}), expected each with probability "
                        f"p = {self.p:g}: {_about(n, self.p)}")
        rows_E, rows_C = E.flatten(1).sum(1), C.flatten(1).sum(1)
        for b in range(len(rows_E)):
            nb, kb = int(rows_E[b]), int(rows_C[b])
            if _binom_pvalue(kb, nb, self.p) < ALPHA:
                return (f"row {b}: chose {kb} of its {nb} eligible tokens, expected each with probability p = "
                        f"{self.p:g} ({_about(nb, self.p)}): draw one random number per token, not one per "
                        "sequence or per batch")
        return None

    def _corruption_problem(self, X, L) -> str | None:
        orig, V = self.ids, self.vocab_size
        fm, fr, fk = self.fates
        C = self.chosen_from(X, L)
        # r: the probability that a position goes through the 80/10/10 (given what its label says)
        if self.corrupt == "all":
            r = torch.ones(orig.shape, dtype=torch.float64)
        elif C is not None:
            r = C.double()
        else:
            r = self.choosable().double() * self.p
        still = (r == 0) & (X != orig)
        if still.any():
            b, i = still.nonzero()[0].tolist()
            return (f"position [{b}, {i}] was not chosen (its label is {int(L[b, i])}) but its input changed from "
                    f"{self.name(int(orig[b, i]))} to {self.name(int(X[b, i]))} ({int(still.sum())} such position(s)): "
                    "only the chosen positions are corrupted; the others stay as they are")
        P = self.pool_mask()
        n_pool = int(P.sum())
        is_mask, is_orig = X == self.mask_id, X == orig
        other = ~is_mask & ~is_orig
        outside = other & ~P[X]
        if outside.any():
            b, i = outside.nonzero()[0].tolist()
            return (f"position [{b}, {i}] was replaced by {self.name(int(X[b, i]))} ({int(outside.sum())} such "
                    "replacement(s)): a random replacement is drawn from the non-special tokens, never padding, "
                    "[MASK] or a token of special_ids")
        # the probabilities of [MASK] and of another token at each position
        rand = fr / n_pool if n_pool else 0.0
        mask_in_pool = float(P[self.mask_id]) if 0 <= self.mask_id < V else 0.0
        orig_in_pool = P[orig].double()
        orig_is_mask = orig == self.mask_id
        q_mask = torch.where(orig_is_mask, (1 - r) + r * (fm + fk + rand * mask_in_pool),
                             r * (fm + rand * mask_in_pool))
        q_other = torch.where(orig_is_mask, r * (fr - rand * mask_in_pool),
                              r * (fr - rand * mask_in_pool - rand * orig_in_pool))
        live = r > 0
        chosen_words = "chosen tokens" if C is not None and self.corrupt == "chosen" else "positions"
        off = _off_group(is_mask, q_mask, live)
        if off:
            k, n, q = off
            return (f"of the {n:,} {chosen_words}, {k:,} became [MASK] ({k / n:.1%}), expected {q:.1%}: "
                    f"{_about(n, q)} (of the chosen tokens, 80% become [MASK], 10% a random token, 10% stay as "
                    "they are)")
        off = _off_group(other, q_other, live)
        if off:
            k, n, q = off
            return (f"of the {n:,} {chosen_words}, {k:,} became a random other token ({k / n:.1%}), expected "
                    f"{q:.1%}: {_about(n, q)} (of the chosen tokens, 80% become [MASK], 10% a token drawn uniformly "
                    "from the non-special vocabulary, 10% stay as they are)")
        # random tokens drawn from the whole pool: as many special ones (where the pool holds any) and as many in
        # its lower half as uniform draws give
        S = torch.isin(torch.arange(V), torch.tensor(sorted(self.special)))
        PS = P & S
        mask_ps = float(PS[self.mask_id]) if 0 <= self.mask_id < V else 0.0
        denom = n_pool - orig_in_pool - mask_in_pool
        q_spec = (int(PS.sum()) - PS[orig].double() - mask_ps) / denom.clamp(min=1)
        off = _off_group(S[X], torch.where(denom > 0, q_spec, torch.zeros_like(q_spec)), other)
        if off:
            k, n, q = off
            return (f"of the {n:,} random replacements, {k:,} are special tokens, expected {q:.0%} of them "
                    f"({_about(n, q)})")
        # random tokens spread over the whole pool: as many in its lower half as uniform draws put there
        ordered = torch.arange(V)[P]
        lower = torch.zeros(V, dtype=torch.bool)
        lower[ordered[:n_pool // 2]] = True
        numer = n_pool // 2 - lower[orig].double() - float(lower[self.mask_id] if 0 <= self.mask_id < V else 0)
        q_low = torch.where(denom > 0, numer / denom.clamp(min=1), torch.zeros_like(denom))
        off = _off_group(lower[X], q_low, other)
        if off:
            k, n, q = off
            return (f"of the {n:,} random replacements, {k:,} are among the lower half of the non-special ids, "
                    f"expected {q:.0%} of them ({_about(n, q)}): draw each one uniformly from all the non-special "
                    "tokens, anew for every position")
        return None


# Laws of the mistakes' draws, by the draw's content: a mistake's output (a draw) is judged against its law.
_DRAWN: OrderedDict[bytes, MaskLaw] = OrderedDict()


def _fingerprint(out) -> bytes | None:
    if not (isinstance(out, tuple | list) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
        return None
    h = hashlib.sha256()
    for t in out:
        t = t.detach().cpu()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.contiguous().numpy().tobytes())
    return h.digest()


def _mask_ref(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None) -> MaskLaw:
    return MaskLaw.of(ids, mask_id, vocab_size, special_ids, pad_id, p)


def _mask_with(in_place: bool = False, **mistake):
    """A mistake: draws from its law (torch's global generator), and remembers the law of what it drew."""
    def fn(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
        law = MaskLaw.of(ids, mask_id, vocab_size, special_ids, pad_id, p, **mistake)
        inputs, labels = law.draw()
        inputs, labels = inputs.to(ids.device), labels.to(ids.device)
        if in_place:  # written into ids itself: the caller's tensor is the corrupted one
            ids.copy_(inputs)
            inputs = ids
        _DRAWN[_fingerprint((inputs, labels))] = law
        while len(_DRAWN) > 32:  # only the latest is looked up (right after the draw)
            _DRAWN.popitem(last=False)
        return inputs, labels
    return fn


def _mask_compare(out, ref) -> str | None:
    law = ref if isinstance(ref, MaskLaw) else _DRAWN.get(_fingerprint(ref) or b"")
    if law is not None:
        return law.problem(out)
    # a draw whose law is unknown: only the same draw agrees with it
    return None if _fingerprint(out) == _fingerprint(ref) else "returned another draw"


def _mask_case(B: int, n: int, layout: Layout, p: float = 0.15, specials: str = "cls_sep", lengths=None,
               pair: bool = True, unk_rate: float = 0.0, mask_rate: float = 0.0):
    def make(g, device):
        ids, _ = _batch(g, B, n, layout, lengths, pair, unk_rate, mask_rate)
        return ((ids.to(device), layout.mask, layout.V, layout.specials(specials), layout.pad, p), {})
    return make


def _mask_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("128 pairs [CLS] a [SEP] b [SEP] of up to 64 tokens, padded; a 40-token vocabulary (0-4 "
                     "special); p = 0.15", _mask_case(128, 64, SMALL)),
                Case("BERT's vocabulary (30,522 ids; [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103), 96 "
                     "pairs of up to 96 tokens, special_ids = all five, some [UNK] in the text",
                     _mask_case(96, 96, BERT_VOCAB, specials="all", unk_rate=0.03)),
                Case("p = 0.4; a tiny vocabulary of 16 ids, 5 of them special and scattered ([PAD] 0, [UNK] 3, "
                     "[CLS] 7, [SEP] 11, [MASK] 14)", _mask_case(96, 48, TINY, p=0.4, specials="cls_sep_unk"))]
    return [Case("fresh: 160 pairs of up to 64 tokens, a 40-token vocabulary", _mask_case(160, 64, SMALL)),
            Case("fresh: BERT's vocabulary, 128 pairs of up to 128 tokens, special_ids = [CLS], [SEP]",
                 _mask_case(128, 128, BERT_VOCAB, unk_rate=0.02)),
            Case("special ids scattered through 64 ids ([PAD] 0, [UNK] 5, [CLS] 17, [SEP] 33, [MASK] 50), "
                 "special_ids = [CLS], [SEP] only (padding and [MASK] passed apart), p = 0.3",
                 _mask_case(128, 48, SCATTERED, p=0.3)),
            Case("fresh: the tiny vocabulary of 16 ids, 5 special, p = 0.5", _mask_case(128, 32, TINY, p=0.5,
                                                                                       specials="all")),
            Case("the text already holds [MASK] and [UNK] tokens ([UNK] in special_ids): neither is chosen",
                 _mask_case(128, 40, SMALL, specials="cls_sep_unk", unk_rate=0.1, mask_rate=0.1)),
            Case("a batch of one: a single sequence of 512 tokens", _mask_case(1, 512, BERT_VOCAB, lengths=[512])),
            Case("length one: every sequence is a lone [CLS], nothing to choose",
                 _mask_case(4, 1, SMALL, lengths=[1, 1, 1, 1])),
            Case("all but one sequence padded down to [CLS] [SEP]",
                 _mask_case(6, 200, SMALL, lengths=[2, 200, 2, 2, 2, 2])),
            Case("p = 1: every eligible token is chosen", _mask_case(64, 32, SMALL, p=1.0)),
            Case("p = 0: nothing is chosen", _mask_case(16, 16, SMALL, p=0.0)),
            Case("single sentences [CLS] a [SEP], no b; BERT's vocabulary",
                 _mask_case(128, 40, BERT_VOCAB, specials="all", pair=False))]


MASK_TOKENS = Check(
    task="mask_tokens",
    what="each eligible token chosen with probability p; of the chosen, 80% [MASK], 10% a random non-special "
         "token, 10% unchanged; labels the original ids at the chosen positions, −100 elsewhere",
    reference=_mask_ref,
    compare=_mask_compare,
    cases=_mask_cases(hidden=False),
    hidden_cases=_mask_cases(hidden=True),
    mutants=[
        Mutant(_mask_with(choose="all"), "chose among all positions, [CLS], [SEP] and padding included: only the "
                                         "eligible tokens (not padding, [MASK] or special_ids) may be chosen"),
        Mutant(_mask_with(choose="no_pad"), "left out the padding but chose [CLS] and [SEP] (and the other special "
                                            "tokens) too: a token of special_ids, or [MASK], is never chosen"),
        Mutant(_mask_with(corrupt="all"), "applied the 80/10/10 to every position instead of to the chosen ones "
                                          "only (the [MASK] / random decisions were not combined with `& chosen`): "
                                          "a position that was not chosen stays as it is"),
        Mutant(_mask_with(labels="all"), "kept the original token as the label at every position (labels = "
                                         "ids.clone() with nothing set to −100), so the loss would read every "
                                         "position: set the labels off the chosen positions to −100"),
        Mutant(_mask_with(fates=(1.0, 0.0, 0.0)), "replaced every chosen token by [MASK]: of the chosen, only 80% "
                                                  "become [MASK]; 10% become a random token and 10% stay as they "
                                                  "are, so the model cannot trust a token just because it is not "
                                                  "[MASK]"),
        Mutant(_mask_with(fates=(0.8, 0.02, 0.18)), "drew the random 10% with a fresh `torch.rand(...) < 0.1` among "
                                                    "the chosen tokens left after [MASK]: that makes 0.2 × 0.1 = 2% "
                                                    "of the chosen random; of the 20% left, half (0.5) become "
                                                    "random"),
        Mutant(_mask_with(pool="all"), "drew the random replacements from the whole vocabulary "
                                       "(torch.randint(vocab_size, ...)), special tokens included: draw them from "
                                       "the non-special tokens only"),
        Mutant(_mask_with(in_place=True, labels="corrupted"),
               "took the labels from the corrupted tokens (typically: ids itself corrupted, with no .clone(), then "
               "the labels read from it), so they hold [MASK] and random tokens instead of the originals: corrupt "
               "a copy, inputs = ids.clone(), and take the labels from the untouched ids"),
        Mutant(_mask_with(per="row"), "drew one random number per sequence (torch.rand(B, 1) < p) or one for the "
                                      "whole batch, so a sequence is chosen entirely or not at all: draw one per "
                                      "token, torch.rand(ids.shape) < p"),
        Mutant(_mask_with(labels="inverted"), "inverted the labels: −100 at the chosen positions and the original "
                                              "token everywhere else; the loss reads the chosen positions, so they "
                                              "hold the original and the others −100"),
        Mutant(_mask_with(labels="zero"), "set the labels of the positions that were not chosen to 0 (ids * chosen, "
                                          "or torch.where(chosen, ids, 0)): use −100, which F.cross_entropy skips "
                                          "(ignore_index); 0 is a real token"),
    ],
    forbidden=(_BERT.mask_tokens,),
    forbidden_attrs=(*ATTRS, "mask_tokens", "torch_mask_tokens", "DataCollatorForLanguageModeling"),
    forbidden_modules=MODULES,
)


# ----------------------------------------------------------------------------- Task 2: build_inputs


def _build_ref(a, b, cls, sep):
    ids, segments = [cls], [0]
    for tok in a:
        ids.append(tok)
        segments.append(0)
    ids.append(sep)
    segments.append(0)
    if b is not None:
        for tok in b:
            ids.append(tok)
            segments.append(1)
        ids.append(sep)
        segments.append(1)
    return ids, segments


def _build_with(mistake: str):
    def fn(a, b, cls, sep):
        a = list(a)
        seg_a, seg_b = (1, 2) if mistake == "from_one" else (0, 1)
        head = [] if mistake == "no_cls" else [cls]
        if b is None and mistake != "none_as_empty":
            ids = [*head, *a, sep]
            return ids, [seg_a] * len(ids)
        b = list(b or [])
        mid = [] if mistake == "no_middle_sep" else [sep]
        tail = [] if mistake == "no_last_sep" else [sep]
        segs_a, segs_b = [seg_a] * len(head + a + mid), [seg_b] * len(b + tail)
        if mistake == "last_sep_zero":
            segs_b = [seg_b] * len(b) + [seg_a] * len(tail)
        elif mistake == "first_sep_one":
            segs_a = [seg_a] * len(head + a) + [seg_b] * len(mid)
        elif mistake == "all_zero":
            segs_a, segs_b = [0] * len(segs_a), [0] * len(segs_b)
        return [*head, *a, *mid, *b, *tail], segs_a + segs_b
    return fn


def _int_list(v, what: str) -> list[int] | str:
    if isinstance(v, torch.Tensor):
        if v.dim() != 1 or v.is_floating_point():
            return f"{what}: returned a tensor of shape {tuple(v.shape)} and dtype {v.dtype}, expected a list of ints"
        v = v.tolist()
    if not isinstance(v, list | tuple):
        return f"{what}: returned {describe_value(v)}, expected a list of ints"
    if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in v):
        return f"{what}: returned {str(list(v))[:200]}, every entry must be an int"
    return [int(x) for x in v]


def _build_compare(out, ref) -> str | None:
    if not isinstance(out, tuple | list) or len(out) != 2:
        return f"returned {describe_value(out)}, expected a tuple (ids, segments)"
    ids, segs = _int_list(out[0], "ids"), _int_list(out[1], "segments")
    for got in (ids, segs):
        if isinstance(got, str):
            return got
    want_ids, want_segs = list(ref[0]), list(ref[1])
    if ids != want_ids:
        return f"ids: returned {ids}, expected {want_ids} ([CLS] a [SEP], then b [SEP] when b is given)"
    if segs != want_segs:
        if len(segs) != len(want_segs):
            return f"segments: returned {len(segs)} of them for {len(ids)} ids, expected one per id: {want_segs}"
        i = next(k for k, (x, y) in enumerate(zip(segs, want_segs, strict=True)) if x != y)
        return (f"segments: returned {segs}, expected {want_segs}; position {i} (token {ids[i]}) is {segs[i]}, "
                f"expected {want_segs[i]} (0 for [CLS] a [SEP], 1 for b [SEP])")
    return None


def _build_case(len_a: int, len_b: int | None, cls: int = 101, sep: int = 102, V: int = 30522):
    def make(g, device):
        draw = [i for i in range(V) if i not in (cls, sep)]
        pick = torch.randint(0, len(draw), (len_a + (len_b or 0),), generator=g).tolist()
        toks = [draw[i] for i in pick]
        return ((toks[:len_a], None if len_b is None else toks[len_a:], cls, sep), {})
    return make


BUILD_INPUTS = Check(
    task="build_inputs",
    what="[CLS] a [SEP] b [SEP] (or [CLS] a [SEP] when b is None), segments 0 for [CLS] a [SEP] and 1 for b [SEP]",
    reference=_build_ref,
    compare=_build_compare,
    cases=[Case("a of 4 ids, b of 3 (BERT's [CLS] 101, [SEP] 102)", _build_case(4, 3)),
           Case("a single sentence of 5 ids, b = None", _build_case(5, None))],
    hidden_cases=[Case("fresh: a of 6, b of 9", _build_case(6, 9)),
                  Case("a and b of one id each", _build_case(1, 1)),
                  Case("a single id, b = None", _build_case(1, None)),
                  Case("a small vocabulary: [CLS] 1, [SEP] 2", _build_case(3, 4, cls=1, sep=2, V=20)),
                  Case("a long a (50 ids), a short b (2)", _build_case(50, 2))],
    mutants=[
        Mutant(_build_with("last_sep_zero"), "put the [SEP] that ends b in segment 0: it belongs to segment B, like "
                                             "b, so b [SEP] is all 1s"),
        Mutant(_build_with("first_sep_one"), "put the [SEP] after a in segment 1: it closes segment A, so [CLS] a "
                                             "[SEP] is all 0s and segment 1 starts after it"),
        Mutant(_build_with("no_last_sep"), "left out the [SEP] after b: a pair is [CLS] a [SEP] b [SEP], each "
                                           "segment closed by a [SEP]"),
        Mutant(_build_with("no_middle_sep"), "left out the [SEP] between a and b: a pair is [CLS] a [SEP] b [SEP]"),
        Mutant(_build_with("no_cls"), "left out [CLS]: every input starts with [CLS], whose final state the "
                                      "classifier reads"),
        Mutant(_build_with("all_zero"), "gave every token segment 0: the tokens of b [SEP] are in segment 1"),
        Mutant(_build_with("from_one"), "numbered the segments 1 and 2: they are 0 (A) and 1 (B), the rows of "
                                        "E_seg"),
        Mutant(_build_with("none_as_empty"), "added a second [SEP] when b is None (treating it as an empty b): a "
                                             "single sentence is [CLS] a [SEP]"),
    ],
    forbidden=(_BERT.build_inputs,),
    forbidden_attrs=(*ATTRS, "build_inputs", "build_inputs_with_special_tokens",
                     "create_token_type_ids_from_sequences"),
    forbidden_modules=MODULES,
)


# ----------------------------------------------------------------------------- Task 2: bert_embeddings


EMB_NAMES = ("word_embeddings.weight", "position_embeddings.weight", "token_type_embeddings.weight",
             "LayerNorm.weight", "LayerNorm.bias")


def _emb_ref(ids, segments, params):
    """LN(E_tok[ids] + E_pos[0 … n − 1] + E_seg[segments]), ε = 1e-12, in float64."""
    p = {k: v.double() for k, v in params.items()}
    pos = torch.arange(ids.shape[1], device=ids.device)
    x = (F.embedding(ids, p["word_embeddings.weight"]) + F.embedding(pos, p["position_embeddings.weight"])[None]
         + F.embedding(segments, p["token_type_embeddings.weight"]))
    d = x.shape[-1]
    return F.layer_norm(x, (d,), p["LayerNorm.weight"], p["LayerNorm.bias"], eps=1e-12)


def _emb_with(mistake: str):
    def fn(ids, segments, params):
        p = params
        n = ids.shape[1]
        pos = torch.arange(n, device=ids.device)
        if mistake == "pos_from_one":
            pos = pos + 1
        positions = p["position_embeddings.weight"][pos][None].expand(ids.shape[0], -1, -1)
        if mistake == "pos_restart":  # positions counted again from 0 where segment B starts
            first_b = torch.where(segments.bool().any(1), (segments != 0).float().argmax(1),
                                  torch.full_like(ids[:, 0], n))
            rel = torch.arange(n, device=ids.device)[None] - torch.where(segments.bool(), first_b[:, None], 0)
            positions = p["position_embeddings.weight"][rel]
        tok = p["word_embeddings.weight"][ids]
        seg = 0 if mistake == "no_segments" else p["token_type_embeddings.weight"][segments]
        g, b = p["LayerNorm.weight"], p["LayerNorm.bias"]

        def ln(x, eps=1e-12, unbiased=False, affine=True):
            mu = x.mean(-1, keepdim=True)
            var = x.var(-1, keepdim=True, unbiased=unbiased)
            y = (x - mu) / torch.sqrt(var + eps)
            return y * g + b if affine else y

        if mistake == "ln_first":
            return ln(tok) + positions + seg
        x = tok + positions + seg
        return {"eps": lambda: ln(x, eps=1e-5), "no_ln": lambda: x, "unbiased": lambda: ln(x, unbiased=True),
                "no_affine": lambda: ln(x, affine=False)}.get(mistake, lambda: ln(x))()
    return fn


def _emb_case(B: int, n: int, d: int, V: int = 30, P: int = 16, T: int = 2, lengths=None, std: float = 0.02,
              dtype=torch.float32, pair: bool = True):
    """BERT-like inputs ([CLS] 1, [SEP] 2, [PAD] 0) and embeddings of BERT's initial scale (std 0.02), at which
    LayerNorm's ε = 1e-12 and torch's default 1e-5 differ visibly; a LayerNorm gain around 1 and a bias."""
    def make(g, device):
        layout = Layout("emb", V, pad=0, cls=1, sep=2, mask=3, unk=4)
        ids, segments = _batch(g, B, n, layout, lengths, pair)
        if T > 2:  # a third segment type, as some tasks add
            segments = torch.where((segments == 1) & (torch.rand(B, n, generator=g) < 0.3), 2, segments)
        params = {"word_embeddings.weight": _randn((V, d), g, device, std),
                  "position_embeddings.weight": _randn((P, d), g, device, std),
                  "token_type_embeddings.weight": _randn((T, d), g, device, std),
                  "LayerNorm.weight": _randn((d,), g, device, 0.1, 1.0),
                  "LayerNorm.bias": _randn((d,), g, device, 0.1)}
        return ((ids.to(device), segments.to(device), {k: v.to(dtype) for k, v in params.items()}), {})
    return make


BERT_EMBEDDINGS = Check(
    task="bert_embeddings",
    what="LN(E_tok[ids] + E_pos[0 … n − 1] + E_seg[segments]), ε = 1e-12",
    reference=_emb_ref,
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-4, dim=None),
    cases=[Case("batch 3 of pairs, n = 10, d = 16 (padded; positions up to 16)", _emb_case(3, 10, 16)),
           Case("batch 2 of pairs, n = 16 = max_position, d = 32", _emb_case(2, 16, 32))],
    hidden_cases=[Case("a batch of one, length one ([CLS] alone)", _emb_case(1, 1, 8, lengths=[1])),
                  Case("fresh: batch 4, n = 12, d = 24", _emb_case(4, 12, 24)),
                  Case("every position used: n = max_position = 20", _emb_case(3, 20, 16, P=20)),
                  Case("all but one sequence padded down to [CLS] [SEP]", _emb_case(4, 14, 16, lengths=[2, 2, 14, 2])),
                  Case("three segment types (type_vocab_size = 3), segment 2 present", _emb_case(3, 12, 16, T=3)),
                  Case("single sentences (every segment 0)", _emb_case(3, 9, 16, pair=False)),
                  Case("float64 weights", _emb_case(3, 10, 16, dtype=torch.float64)),
                  Case("embeddings of scale 1 (not 0.02)", _emb_case(2, 10, 16, std=1.0)),
                  Case("a wider model: d = 64, a vocabulary of 500, max_position 77",
                       _emb_case(4, 30, 64, V=500, P=77))],
    mutants=[
        Mutant(_emb_with("no_segments"), "left out the segment embeddings: add E_seg[segments] (token_type_embeddings) "
                                         "too, so the model can tell sentence A from sentence B"),
        Mutant(_emb_with("pos_from_one"), "numbered the positions from 1: the first token ([CLS]) takes row 0 of "
                                          "E_pos, torch.arange(n)"),
        Mutant(_emb_with("pos_restart"), "started the positions again from 0 at segment B: positions run 0 … n − 1 "
                                         "over the whole input, [CLS] a [SEP] b [SEP]"),
        Mutant(_emb_with("eps"), "used LayerNorm's default ε = 1e-5: BERT's is 1e-12 (layer_norm_eps), which matters "
                                 "when the summed embeddings are small, as they are at BERT's initial scale"),
        Mutant(_emb_with("no_ln"), "left out the LayerNorm: the sum of the three embeddings is normalised, "
                                   "LN(E_tok + E_pos + E_seg), with its gain and bias"),
        Mutant(_emb_with("no_affine"), "normalised without LayerNorm's gain and bias: multiply by LayerNorm.weight "
                                       "and add LayerNorm.bias"),
        Mutant(_emb_with("unbiased"), "used the unbiased variance (x.var(-1) divides by d − 1): LayerNorm divides by "
                                      "d, x.var(-1, unbiased=False)"),
        Mutant(_emb_with("ln_first"), "normalised the token embeddings alone and added the positions and segments "
                                      "after: the LayerNorm comes after the sum of all three"),
    ],
    forbidden=(_BERT.BERT, _BERT.BertPretraining),
    forbidden_attrs=(*ATTRS, "BertEmbeddings", "BERT"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)


# ----------------------------------------------------------------------------- Task 3: span_loss


def _span_loss_ref(start_logits, end_logits, start, end):
    def ce(logits, target):  # −log softmax(logits)[target], averaged over the batch
        logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
        return -logp.gather(1, target[:, None].long()).mean()
    return (ce(start_logits, start) + ce(end_logits, end)) / 2


def _span_loss_with(mistake: str):
    def fn(start_logits, end_logits, start, end):
        def ce(logits, target, reduce="mean"):
            if mistake == "naive":
                logp = logits - torch.log(torch.exp(logits).sum(-1, keepdim=True))
            elif mistake == "no_log_softmax":
                logp = logits
            else:
                logp = torch.log_softmax(logits, -1)
            picked = -logp[torch.arange(len(target), device=logits.device), target]
            return picked.sum() if reduce == "sum" else picked.mean()

        if mistake == "swapped":
            return (ce(start_logits, end) + ce(end_logits, start)) / 2
        if mistake == "start_only":
            return ce(start_logits, start)
        if mistake == "sum_two":
            return ce(start_logits, start) + ce(end_logits, end)
        if mistake == "sum_batch":
            return (ce(start_logits, start, "sum") + ce(end_logits, end, "sum")) / 2
        return (ce(start_logits, start) + ce(end_logits, end)) / 2
    return fn


def _span_inputs(g, B: int, n: int, scale: float = 2.0, same: bool = False, at_zero: bool = False):
    s_log, e_log = torch.randn(B, n, generator=g) * scale, torch.randn(B, n, generator=g) * scale
    start = torch.randint(0, n, (B,), generator=g)
    length = torch.randint(0, 4, (B,), generator=g)
    end = start if same else (start + length).clamp(max=n - 1)
    if at_zero:  # SQuAD 2.0's "no answer": the span is [CLS], position 0
        start = end = torch.zeros(B, dtype=torch.long)
    return s_log, e_log, start, end


def _span_loss_case(B: int, n: int, scale: float = 2.0, dtype=torch.float32, same: bool = False,
                    at_zero: bool = False):
    def make(g, device):
        s_log, e_log, start, end = _span_inputs(g, B, n, scale, same, at_zero)
        return ((s_log.to(dtype).to(device), e_log.to(dtype).to(device), start.to(device), end.to(device)), {})
    return make


SPAN_LOSS = Check(
    task="span_loss",
    what="(CE(start_logits, start) + CE(end_logits, end)) / 2, each cross-entropy averaged over the batch",
    reference=_span_loss_ref,
    compare=lambda out, ref: describe_scalar_mismatch(out, ref, rtol=1e-4, atol=1e-6, accept=("tensor",)),
    cases=[Case("batch 4, n = 12", _span_loss_case(4, 12)), Case("batch 8, n = 20", _span_loss_case(8, 20))],
    hidden_cases=[Case("a batch of one", _span_loss_case(1, 9)),
                  Case("length one (the only span is (0, 0)): the loss is 0", _span_loss_case(3, 1)),
                  Case("one-token answers (start = end)", _span_loss_case(5, 10, same=True)),
                  Case("'no answer': every span is [CLS], (0, 0)", _span_loss_case(4, 10, at_zero=True)),
                  Case("float64 logits", _span_loss_case(4, 16, dtype=torch.float64)),
                  Case("large logits (std 100): exp overflows", _span_loss_case(4, 16, scale=100.0)),
                  Case("fresh: batch 32, n = 128", _span_loss_case(32, 128))],
    mutants=[
        Mutant(_span_loss_with("sum_two"), "added the two cross-entropies without halving them: the loss is their "
                                           "mean, (CE_start + CE_end) / 2"),
        Mutant(_span_loss_with("sum_batch"), "summed the cross-entropies over the batch: each is averaged over the "
                                             "batch (F.cross_entropy's default reduction='mean')"),
        Mutant(_span_loss_with("start_only"), "used the start's cross-entropy only: the end's is the other half of "
                                              "the loss"),
        Mutant(_span_loss_with("swapped"), "paired the start logits with the end positions (and the end logits "
                                           "with the start positions): CE(start_logits, start), CE(end_logits, "
                                           "end)"),
        Mutant(_span_loss_with("no_log_softmax"), "took −logits[target] without the log-softmax: the "
                                                  "cross-entropy is −log softmax(logits)[target]"),
        Mutant(_span_loss_with("naive"), "computed the softmax from exp(logits) itself (exp(z) / sum(exp(z)), or "
                                         "z − log(sum(exp(z)))): exp overflows for large logits; use "
                                         "torch.log_softmax, logsumexp or F.cross_entropy"),
    ],
    forbidden=(_BERT.span_loss,),
    forbidden_attrs=(*ATTRS, "span_loss"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)


# ----------------------------------------------------------------------------- Task 3: best_span


class Span:
    """The reference's answer: the best score per row and the scores of every allowed span, so that any best span
    is accepted (ties, and rounding in float32)."""

    def __init__(self, start_logits, end_logits, passage_mask, max_len):
        self.s = start_logits.double().cpu().tolist()
        self.e = end_logits.double().cpu().tolist()
        self.mask = passage_mask.bool().cpu().tolist()
        self.max_len = max_len
        self.best = []
        for s_row, e_row, m_row in zip(self.s, self.e, self.mask, strict=True):
            scores = [s_row[i] + e_row[j] for i, j in self.allowed(m_row)]
            self.best.append(max(scores))

    def allowed(self, m_row):
        n = len(m_row)
        for i in range(n):
            if not m_row[i]:
                continue
            for j in range(i, n if self.max_len is None else min(n, i + self.max_len)):
                if m_row[j]:
                    yield i, j

    def why_not(self, b: int, i: int, j: int) -> str | None:
        if j < i:
            return "it ends before it starts"
        if not self.mask[b][i] or not self.mask[b][j]:
            where = i if not self.mask[b][i] else j
            return f"position {where} is not in the passage (passage_mask is False there)"
        if self.max_len is not None and j - i >= self.max_len:
            return f"it is {j - i + 1} tokens long, more than max_len = {self.max_len}"
        return None


def _best_span_ref(start_logits, end_logits, passage_mask, max_len=None):
    return Span(start_logits, end_logits, passage_mask, max_len)


def _best_span_with(mistake: str):
    def fn(start_logits, end_logits, passage_mask, max_len=None):
        n = start_logits.shape[-1]
        s, e = start_logits, end_logits
        m = passage_mask.bool()
        ninf = torch.tensor(float("-inf"), dtype=s.dtype, device=s.device)
        if mistake == "independent":
            return torch.where(m, s, ninf).argmax(-1), torch.where(m, e, ninf).argmax(-1)
        if mistake == "greedy":
            i = torch.where(m, s, ninf).argmax(-1)
            pos = torch.arange(n, device=s.device)[None]
            ok = m & (pos >= i[:, None])
            if max_len is not None:
                ok = ok & (pos - i[:, None] < max_len)
            return i, torch.where(ok, e, ninf).argmax(-1)
        if mistake == "multiply":
            s, e = s * m, e * m
            m = torch.ones_like(m)
        scores = s[:, :, None] + e[:, None, :]
        off = torch.arange(n, device=s.device)[None, :] - torch.arange(n, device=s.device)[:, None]
        ok = torch.ones(n, n, dtype=torch.bool, device=s.device) if mistake == "no_order" else off >= 0
        limit = None if mistake == "no_max_len" else max_len
        if limit is not None:
            ok = ok & (off <= limit if mistake == "max_len_plus" else off < limit - int(mistake == "max_len_minus"))
        ok = ok[None]
        if mistake == "no_mask":
            pass
        elif mistake == "start_mask_only":
            ok = ok & m[:, :, None]
        else:
            ok = ok & m[:, :, None] & m[:, None, :]
        best = scores.masked_fill(~ok, float("-inf")).flatten(1).argmax(-1)
        return best // n, best % n
    return fn


def _span_positions(out, B: int) -> tuple[list[int], list[int]] | str:
    if not isinstance(out, tuple | list) or len(out) != 2:
        return f"returned {describe_value(out)}, expected a tuple (start, end) of two tensors of shape ({B},)"
    got = []
    for name, t in zip(("start", "end"), out, strict=True):
        if not isinstance(t, torch.Tensor):
            return f"{name}: returned {describe_value(t)}, expected a tensor of shape ({B},)"
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            return f"{name}: returned dtype {t.dtype}, expected integer positions (torch.long, as argmax gives)"
        if tuple(t.shape) != (B,):
            return f"{name}: returned shape {tuple(t.shape)}, expected ({B},): one position per sequence"
        got.append([int(v) for v in t.tolist()])
    return got[0], got[1]


def _best_span_compare(out, ref) -> str | None:
    if not isinstance(ref, Span):  # a mistake's spans: the same spans
        B = len(ref[0])
        got, want = _span_positions(out, B), _span_positions(ref, B)
        return None if got == want else "returned other spans"
    B, n = len(ref.best), len(ref.s[0])
    got = _span_positions(out, B)
    if isinstance(got, str):
        return got
    for b, (i, j) in enumerate(zip(*got, strict=True)):
        if not (0 <= i < n and 0 <= j < n):
            return f"row {b}: returned the span ({i}, {j}), outside positions 0 … {n - 1}"
        why = ref.why_not(b, i, j)
        score = ref.s[b][i] + ref.e[b][j]
        if why:
            return (f"row {b}: returned the span (start {i}, end {j}), which is not allowed: {why} (a span has "
                    "start ≤ end, both in the passage, and at most max_len tokens)")
        if score < ref.best[b] - 1e-5 * max(1.0, abs(ref.best[b])):
            best = next((s, e) for s, e in ref.allowed(ref.mask[b]) if ref.s[b][s] + ref.e[b][e] == ref.best[b])
            return (f"row {b}: returned the span ({i}, {j}), score start_logits[{i}] + end_logits[{j}] = "
                    f"{score:.4f}, but ({best[0]}, {best[1]}) is allowed and scores {ref.best[b]:.4f}")
    return None


def _span_case(B: int, n: int, max_len: int | None = None, q_len=None, p_len=None, lengths=None,
               scale: float = 1.0, ints: bool = False, dtype=torch.float32, lure: float = 3.0, offset: float = 0.0):
    """[CLS] question [SEP] passage [SEP] padding: the passage mask is True on the passage only. The logits are
    random, with lures: large start and end logits in the question, a large end logit before a large start one,
    and large logits at padding, so that every rule of a span matters."""
    def make(g, device):
        lens = [n] * B if lengths is None else list(lengths)
        mask = torch.zeros(B, n, dtype=torch.bool)
        s_log = torch.randn(B, n, generator=g) * scale
        e_log = torch.randn(B, n, generator=g) * scale
        if ints:
            s_log, e_log = s_log.round(), e_log.round()
        s_log, e_log = s_log + offset, e_log + offset
        for b, length in enumerate(lens):
            ql = q_len if q_len is not None else int(torch.randint(1, max(2, (length - 3) // 3 + 1), (1,),
                                                                   generator=g))
            pl = p_len if p_len is not None else length - ql - 3
            p0 = ql + 2
            mask[b, p0:p0 + pl] = True
            r = torch.randint(0, 10**6, (6,), generator=g).tolist()
            s_log[b, 1 + r[0] % ql] += lure  # a lure in the question
            e_log[b, 1 + r[1] % ql] += lure
            if pl > 2 and r[4] % 2:  # in the passage: a strong end before a strong start
                j = p0 + r[2] % (pl - 1)
                i = j + 1 + r[3] % (p0 + pl - j - 1)
                e_log[b, j] += lure
                s_log[b, i] += lure
            elif pl > 2:  # or a strong start early in the passage and a strong end at its end, far after it
                s_log[b, p0 + r[2] % max(1, pl // 3)] += lure
                e_log[b, p0 + pl - 1] += lure
            if length < n:  # padding
                s_log[b, length:] += lure
                e_log[b, length:] += lure
        args = (s_log.to(dtype).to(device), e_log.to(dtype).to(device), mask.to(device))
        return (args + ((max_len,) if max_len is not None else ()), {})
    return make


BEST_SPAN = Check(
    task="best_span",
    what="the span maximising start_logits[s] + end_logits[e] over s ≤ e, both in the passage, e − s < max_len",
    reference=_best_span_ref,
    compare=_best_span_compare,
    cases=[Case("batch 6, n = 24, no max_len", _span_case(6, 24)),
           Case("batch 6, n = 24, max_len = 3", _span_case(6, 24, max_len=3)),
           Case("batch 4, n = 30, padded, max_len = 5", _span_case(4, 30, max_len=5, lengths=[30, 22, 18, 26]))],
    hidden_cases=[Case("a batch of one, n = 40, max_len = 4", _span_case(1, 40, max_len=4)),
                  Case("fresh: batch 16, n = 48, max_len = 6", _span_case(16, 48, max_len=6)),
                  Case("max_len = 1: one-token spans only", _span_case(8, 20, max_len=1)),
                  Case("max_len = 2", _span_case(8, 20, max_len=2)),
                  Case("max_len longer than the passage", _span_case(6, 20, max_len=50)),
                  Case("a passage of one token", _span_case(6, 16, max_len=3, q_len=5, p_len=1)),
                  Case("all but one sequence padded short", _span_case(4, 40, max_len=4, lengths=[12, 40, 9, 10])),
                  Case("integer logits: ties (any best span is accepted)", _span_case(8, 20, max_len=3, ints=True,
                                                                                    scale=2.0)),
                  Case("float64 logits, no max_len", _span_case(6, 32, dtype=torch.float64)),
                  Case("negative logits everywhere in the passage (masked scores must be -inf, not 0)",
                       _span_case(6, 24, max_len=4, scale=0.5, offset=-5.0)),
                  Case("a long input: n = 256, max_len = 30", _span_case(3, 256, max_len=30))],
    mutants=[
        Mutant(_best_span_with("no_order"), "allowed spans that end before they start: only s ≤ e is a span (mask "
                                            "the scores below the diagonal, e.g. with torch.triu)"),
        Mutant(_best_span_with("no_mask"), "let the span start or end outside the passage (in the question, on "
                                           "[CLS], [SEP] or padding): both ends must be where passage_mask is True"),
        Mutant(_best_span_with("start_mask_only"), "checked the passage mask for the start only: the end must be "
                                                   "in the passage too"),
        Mutant(_best_span_with("independent"), "took the argmax of the start and of the end logits separately: "
                                               "the end can then come before the start, or too far after it; "
                                               "score the pairs, start_logits[s] + end_logits[e], and take the "
                                               "best allowed pair"),
        Mutant(_best_span_with("greedy"), "fixed the start at the best start logit, then took the best end after "
                                          "it: the best pair need not contain the best start; maximise the sum "
                                          "over all allowed pairs"),
        Mutant(_best_span_with("max_len_plus"), "allowed spans of max_len + 1 tokens (e − s ≤ max_len): a span of "
                                                "at most max_len tokens has e − s < max_len"),
        Mutant(_best_span_with("max_len_minus"), "allowed spans of max_len − 1 tokens at most (e − s + 1 < "
                                                 "max_len): spans of exactly max_len tokens are allowed too, "
                                                 "e − s < max_len"),
        Mutant(_best_span_with("no_max_len"), "ignored max_len: a span has at most max_len tokens when it is given"),
        Mutant(_best_span_with("multiply"), "masked by multiplying the logits by the mask: a masked position then "
                                            "scores 0, which beats the negative scores of the passage; give masked "
                                            "spans −inf (masked_fill)"),
    ],
    forbidden=(_BERT.best_span,),
    forbidden_attrs=(*ATTRS, "best_span"),
    forbidden_modules=MODULES,
)


# ----------------------------------------------------------------------------- Task 4: count_parameters


def _shapes(config: dict, heads: bool) -> dict[str, tuple[int, ...]]:
    """Every weight tensor of BERT and its shape, named as Hugging Face names them (the tied decoder once)."""
    V, L, d, d_ff = config["vocab_size"], config["n_layer"], config["d_model"], config["d_ff"]
    P, T = config["max_position"], config["type_vocab_size"]
    shapes = {"embeddings.word_embeddings.weight": (V, d), "embeddings.position_embeddings.weight": (P, d),
              "embeddings.token_type_embeddings.weight": (T, d), "embeddings.LayerNorm.weight": (d,),
              "embeddings.LayerNorm.bias": (d,)}
    for i in range(L):
        pre = f"encoder.layer.{i}."
        for m in ("query", "key", "value"):
            shapes[pre + f"attention.self.{m}.weight"] = (d, d)
            shapes[pre + f"attention.self.{m}.bias"] = (d,)
        shapes |= {pre + "attention.output.dense.weight": (d, d), pre + "attention.output.dense.bias": (d,),
                   pre + "attention.output.LayerNorm.weight": (d,), pre + "attention.output.LayerNorm.bias": (d,),
                   pre + "intermediate.dense.weight": (d_ff, d), pre + "intermediate.dense.bias": (d_ff,),
                   pre + "output.dense.weight": (d, d_ff), pre + "output.dense.bias": (d,),
                   pre + "output.LayerNorm.weight": (d,), pre + "output.LayerNorm.bias": (d,)}
    shapes |= {"pooler.dense.weight": (d, d), "pooler.dense.bias": (d,)}
    if heads:
        shapes |= {"cls.predictions.transform.dense.weight": (d, d), "cls.predictions.transform.dense.bias": (d,),
                   "cls.predictions.transform.LayerNorm.weight": (d,),
                   "cls.predictions.transform.LayerNorm.bias": (d,),
                   "cls.predictions.decoder.bias": (V,),  # its weight is embeddings.word_embeddings.weight
                   "cls.seq_relationship.weight": (2, d), "cls.seq_relationship.bias": (2,)}
    return shapes


def _count_ref(config, heads=False) -> int:
    return sum(math.prod(shape) for shape in _shapes(config, bool(heads)).values())


def _count_with(mistake: str):
    def fn(config, heads=False):
        c = dict(config)
        V, L, d, d_ff = c["vocab_size"], c["n_layer"], c["d_model"], c["d_ff"]
        P, T = c["max_position"], c["type_vocab_size"]
        if mistake == "d_ff_4d":
            d_ff = 4 * d
        if mistake == "heads_always":
            heads = True
        ln = d if mistake == "ln_no_bias" else 2 * d
        emb = V * d + P * d + (0 if mistake == "no_segments" else T * d) + (0 if mistake == "no_emb_ln" else ln)
        if mistake == "no_positions":
            emb -= P * d
        attn = 4 * d * d + (0 if mistake == "no_attn_bias" else 4 * d)
        ffn = 2 * d * d_ff + (0 if mistake == "no_ffn_bias" else d_ff + d)
        layer = attn + ffn + (ln if mistake == "one_ln" else 2 * ln)
        total = emb + L * layer + (0 if mistake == "no_pooler" else d * d + d)
        if heads:
            total += d * d + d + ln + (0 if mistake == "no_decoder_bias" else V) + 2 * d + 2
            if mistake == "untied":
                total += V * d
        return total
    return fn


def _count_compare(out, ref) -> str | None:
    if isinstance(out, torch.Tensor) and out.numel() == 1 and not out.is_floating_point():
        out = out.item()
    if isinstance(out, bool) or not isinstance(out, numbers.Integral):
        return f"returned {describe_value(out)}, expected an int"
    out, ref = int(out), int(ref)
    if out == ref:
        return None
    return f"returned {out:,}, expected {ref:,} ({abs(out - ref):,} too {'few' if out < ref else 'many'})"


def _config(V: int, L: int, H: int, d: int, d_ff: int | None = None, P: int = 512, T: int = 2) -> dict:
    return {"vocab_size": V, "n_layer": L, "n_head": H, "d_model": d, "d_ff": 4 * d if d_ff is None else d_ff,
            "max_position": P, "type_vocab_size": T}


BASE = _config(30522, 12, 12, 768)
LARGE = _config(30522, 24, 16, 1024)


def _count_case(config: dict, heads: bool):
    def make(g, device):
        return ((dict(config), heads), {})
    return make


def _count_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("BERT-base, the body (BertModel)", _count_case(BASE, False)),
                Case("BERT-base with the pretraining heads (BertForPreTraining)", _count_case(BASE, True)),
                Case("a small model: V = 1000, 3 layers, d = 64, d_ff = 100, max_position 77, 3 segment types",
                     _count_case(_config(1000, 3, 4, 64, 100, 77, 3), False))]
    return [Case("BERT-large, the body", _count_case(LARGE, False)),
            Case("BERT-large with the heads", _count_case(LARGE, True)),
            Case("one layer, d = 8, d_ff = 20, V = 50, max_position 10, 1 segment type, with the heads",
                 _count_case(_config(50, 1, 2, 8, 20, 10, 1), True)),
            Case("d_ff smaller than d: V = 300, 2 layers, d = 48, d_ff = 30, with the heads",
                 _count_case(_config(300, 2, 3, 48, 30, 128, 2), True)),
            Case("no layers at all (embeddings and pooler), V = 100, d = 16",
                 _count_case(_config(100, 0, 2, 16, 64, 40, 2), False)),
            Case("6 layers, d = 120, n_head = 5, d_ff = 4d, V = 8000, max_position 256, type_vocab_size 4",
                 _count_case(_config(8000, 6, 5, 120, None, 256, 4), False)),
            Case("the small model of the visible tests with the heads",
                 _count_case(_config(1000, 3, 4, 64, 100, 77, 3), True))]


COUNT_PARAMETERS = Check(
    task="count_parameters",
    what="every weight of BertModel (embeddings and their LayerNorm, n_layer blocks, the pooler); with heads, "
         "BertForPreTraining's MLM transform, decoder bias and NSP layer (the decoder weight is E_tok, counted once)",
    reference=_count_ref,
    compare=_count_compare,
    cases=_count_cases(hidden=False),
    hidden_cases=_count_cases(hidden=True),
    mutants=[
        Mutant(_count_with("no_pooler"), "left out the pooler: BERT's body ends with a d × d layer and its bias "
                                         "(tanh(W_p h_[CLS] + b_p)), which the NSP head and classifiers read"),
        Mutant(_count_with("no_segments"), "left out the segment embeddings: E_seg has type_vocab_size × d_model "
                                           "weights"),
        Mutant(_count_with("no_positions"), "left out the position embeddings: BERT learns them, max_position × "
                                            "d_model weights"),
        Mutant(_count_with("ln_no_bias"), "counted one vector per LayerNorm: each has a gain and a bias, 2 × "
                                          "d_model"),
        Mutant(_count_with("no_attn_bias"), "left out the attention's biases: the query, key, value and output maps "
                                            "each have a bias of d_model"),
        Mutant(_count_with("no_ffn_bias"), "left out the feed-forward biases: d_ff for the first layer, d_model for "
                                           "the second"),
        Mutant(_count_with("no_emb_ln"), "left out the LayerNorm on the embeddings: BERT normalises E_tok + E_pos + "
                                         "E_seg, 2 × d_model parameters"),
        Mutant(_count_with("one_ln"), "counted one LayerNorm per block: a post-LN block has two, after the "
                                      "attention and after the feed-forward"),
        Mutant(_count_with("d_ff_4d"), "took d_ff as 4 × d_model: read it from the config (d_ff), which need not "
                                       "be 4 d_model"),
        Mutant(_count_with("untied"), "counted the MLM decoder's weight (vocab_size × d_model) as well as E_tok: "
                                      "the decoder is tied to the token embedding, one tensor counted once (its "
                                      "bias, vocab_size, is its own)"),
        Mutant(_count_with("no_decoder_bias"), "left out the MLM decoder's bias: its weight is E_tok, but its "
                                               "output bias (vocab_size) is its own"),
        Mutant(_count_with("heads_always"), "counted the pretraining heads when heads is False: the body alone is "
                                            "BertModel (embeddings, blocks, pooler)"),
    ],
    forbidden=(_BERT.count_parameters, _BERT.BERT, _BERT.BertPretraining, _BERT.BertConfig),
    forbidden_attrs=(*ATTRS, "count_parameters", "BertModel", "BertForPreTraining", "num_parameters"),
    forbidden_modules=MODULES,
)

CHECKS = [MASK_TOKENS, BUILD_INPUTS, BERT_EMBEDDINGS, SPAN_LOSS, BEST_SPAN, COUNT_PARAMETERS]
check = Registry(CHECKS + QUESTIONS)
