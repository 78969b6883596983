"""The masked-LM corruption as a law: what each output position may hold, with which probability, and the
statistical tests a draw must pass."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...grading.compare import describe_value

ALPHA = 1e-9  # the level of each statistical test: a right answer fails one with this probability


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


def _underdispersed(k: torch.Tensor, n: torch.Tensor, p: float) -> bool:
    """Whether per-row counts ``k`` of ``n`` trials hug p·n far closer than independent coins at rate p do (the
    lower tail of the chi-square statistic, at level ALPHA): a rule that picks an exact number per row."""
    keep = n > 0
    k, n = k[keep].double(), n[keep].double()
    if len(n) < 8 or not 0.0 < p < 1.0:
        return False
    stat = float(((k - p * n) ** 2 / (n * p * (1 - p))).sum())
    lower = float(torch.special.gammainc(torch.tensor(len(n) / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))
    return lower < ALPHA


def _roundings(m: int, p: float) -> set[int]:
    """The exact counts a rule that rounds p·m may choose: half to even (Python's round), half up, and BERT's
    script's max(1, round(·)) for a row with anything eligible."""
    counts = {round(p * m), math.floor(p * m + 0.5)}
    return counts | ({max(1, c) for c in counts} if m > 0 else set())


def _about(n: int, q: float) -> str:
    return f"about {n * q:,.0f} ± {math.sqrt(n * q * (1 - q)):.1f}"


@dataclass
class MaskLaw:
    """The distribution of ``mask_tokens``' output on given ids: the reference's, or a known mistake's.

    ``choose``: which positions may be chosen ("eligible": not special; "all"; "no_pad": all but padding);
    ``per``: one coin per "token" (or, as the statement allows, exactly p·m rounded per row), per "row" (whole rows
    chosen or not, however many), or "floor" (exactly ⌊p·m⌋ of a row's m eligible tokens); ``fates``: P([MASK]),
    P(random), P(unchanged) of a corrupted position; ``pool``: where random tokens come from ("non_special" or "all"
    of the vocabulary, or "batch": the tokens the batch's eligible positions hold); ``redraw``: whether a random
    token may be the original ("any") or not ("never"); ``corrupt``: which positions go through the 80/10/10
    ("chosen", or "all" positions whatever was chosen); ``labels``: "chosen" (the original at chosen positions, −100
    elsewhere), "all" (the original everywhere), "inverted" (−100 at chosen, the original elsewhere), "zero" (0
    instead of −100), "corrupted" (the corrupted input at chosen positions).
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
    redraw: str = "any"
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
        if self.pool == "batch":
            return torch.isin(torch.arange(self.vocab_size), self.ids[~self.is_special()])
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
        if self.per == "floor":  # exactly ⌊p·m⌋ per row: the smallest coins among its eligible positions
            coins = torch.rand(shape).masked_fill(~E, 2.0)
            rank = coins.argsort(-1).argsort(-1)
            chosen = E & (rank < torch.floor(self.p * E.sum(-1, keepdim=True)))
        else:
            coins = torch.rand(shape) if self.per == "token" else torch.rand(*shape[:-1], 1).expand(shape)
            chosen = E & (coins < self.p)
        u = torch.rand(shape)
        fm, fr, _ = self.fates
        domain = chosen if self.corrupt == "chosen" else torch.ones_like(chosen)
        pool = torch.arange(self.vocab_size)[self.pool_mask()]
        if len(pool) == 0:  # nothing to draw from (a batch with no eligible token: nothing is chosen either)
            random_tokens = ids.clone()
        elif self.redraw == "never":  # uniform over the pool but the original token
            own = torch.isin(ids, pool).long()
            pick = torch.randint(0, 1 << 30, shape) % (len(pool) - own).clamp(min=1)
            pick = pick + (own.bool() & (pick >= torch.searchsorted(pool, ids))).long()
            random_tokens = pool[pick.clamp(max=len(pool) - 1)]
        else:
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
        if isinstance(out, list) and len(out) == 2:
            return "returned a list [inputs, labels], expected a tuple (inputs, labels): return inputs, labels"
        if not isinstance(out, tuple) or len(out) != 2:
            return f"returned {describe_value(out)}, expected a tuple (inputs, labels)"
        orig, V = self.ids, self.vocab_size
        for name, t in zip(("inputs", "labels"), out, strict=True):
            if not isinstance(t, torch.Tensor):
                return f"{name}: returned {describe_value(t)}, expected a tensor of token ids"
            if tuple(t.shape) != tuple(orig.shape):
                return f"{name}: returned shape {tuple(t.shape)}, expected {tuple(orig.shape)} (the shape of ids)"
            if t.dtype != torch.int64:
                return f"{name}: returned dtype {t.dtype}, expected torch.int64 (torch.long), the dtype of ids"
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
        if C.all() and C.numel() > 1 and self.labels == "chosen" and not self.choosable().all():
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
        rows_E, rows_C = E.flatten(1).sum(1), C.flatten(1).sum(1)
        if self.per == "row":
            partial = (rows_C != 0) & (rows_C != rows_E)
            # a whole row or none of it (one coin per sequence, or one for the batch: any number of rows)
            return f"row {int(partial.nonzero()[0])} is partly chosen" if partial.any() else None
        if self.per == "floor":
            off = rows_C != torch.floor(self.p * rows_E)
            return f"row {int(off.nonzero()[0])} is not ⌊p·m⌋" if off.any() else None
        special = self.is_special()
        for group in (E & ~special, E & special & (self.ids != self.pad_id), E & (self.ids == self.pad_id)):
            k, n = int(C[group].sum()), int(group.sum())  # each kind of token chosen at the rate p
            if _binom_pvalue(k, n, self.p) < ALPHA:
                return (f"chose {k:,} of the {n:,} eligible tokens ({k / n:.1%}), expected each with probability "
                        f"p = {self.p:g}: {_about(n, self.p)}")
        if _underdispersed(rows_C, rows_E, self.p):  # an exact count per row: the statement allows p·m rounded
            for b in range(len(rows_E)):
                nb, kb = int(rows_E[b]), int(rows_C[b])
                if kb not in _roundings(nb, self.p):
                    rounded = " or ".join(str(c) for c in sorted(_roundings(nb, self.p)))
                    return (f"row {b}: chose exactly {kb} of its {nb} eligible tokens; your rows hold an exact count "
                            f"each (far closer to p·m than coins give), and p·m = {self.p * nb:g} rounds to "
                            f"{rounded}: round p·m (as BERT's script does, int(round(...))), do not cut it down "
                            "with int() or floor, or draw one coin per token")
            return None
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
        # the probabilities of [MASK] and of another token at each position (a random token is uniform over the
        # pool, or over the pool but the original when it is never redrawn)
        mask_in_pool = float(P[self.mask_id]) if 0 <= self.mask_id < V else 0.0
        orig_in_pool = P[orig].double()
        never = self.redraw == "never"
        rand = (fr / (n_pool - orig_in_pool).clamp(min=1) if never
                else torch.full_like(orig_in_pool, fr / max(n_pool, 1)))
        orig_is_mask = orig == self.mask_id
        q_mask = torch.where(orig_is_mask, (1 - r) + r * (fm + fk + (0.0 if never else rand * mask_in_pool)),
                             r * (fm + rand * mask_in_pool))
        q_other = torch.where(orig_is_mask, r * (fr - (0.0 if never else rand * mask_in_pool)),
                              r * (fr - rand * mask_in_pool - (0.0 if never else rand * orig_in_pool)))
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
        # random tokens from the whole pool, not the batch's own tokens: only as many of them occur in the batch as
        # uniform draws give (informative where the batch holds few of the pool's tokens)
        seen = torch.isin(torch.arange(V), orig[self.choosable()]) & P
        mask_seen = float(seen[self.mask_id]) if 0 <= self.mask_id < V else 0.0
        q_seen = (int(seen.sum()) - seen[orig].double() - mask_seen) / denom.clamp(min=1)
        off = _off_group(seen[X], torch.where(denom > 0, q_seen, torch.zeros_like(q_seen)), other)
        if off:
            k, n, q = off
            return (f"of the {n:,} random replacements, {k:,} are tokens that occur in this batch ({k / n:.0%}), "
                    f"expected {q:.1%} of them ({_about(n, q)}): draw them from the whole non-special vocabulary "
                    "(ids 0 … vocab_size − 1 that are not special), not from the batch's own tokens")
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
