"""Task 3 of exercise 10: the best answer span."""

from __future__ import annotations

import torch

from ... import bert as _course_bert
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_value
from ...grading.reproduce import sized
from ..common import fit_lengths, in_dtype
from .shared import ATTRS, MODULES

_BERT = _course_bert


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

    def shown(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One best span per row, as the answer is returned (the first of any ties)."""
        spans = [next((s, e) for s, e in self.allowed(m) if self.s[b][s] + self.e[b][e] == self.best[b])
                 for b, m in enumerate(self.mask)]
        return torch.tensor([s for s, _ in spans]), torch.tensor([e for _, e in spans])

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
        if mistake == "fill_1e4":  # the masked spans scored -1e4, a number that very negative logits go below
            scores = s[:, :, None] + e[:, None, :]
            off = torch.arange(n, device=s.device)[None, :] - torch.arange(n, device=s.device)[:, None]
            ok = (off >= 0) & (off < (max_len if max_len is not None else n))
            ok = ok[None] & m[:, :, None] & m[:, None, :]
            best = scores.masked_fill(~ok, -1e4).flatten(1).argmax(-1)
            return best // n, best % n
        scores = s[:, :, None] + e[:, None, :]
        off = torch.arange(n, device=s.device)[None, :] - torch.arange(n, device=s.device)[:, None]
        ok = torch.ones(n, n, dtype=torch.bool, device=s.device) if mistake == "no_order" else off >= 0
        limit = None if mistake == "no_max_len" else max_len
        if limit is not None and mistake == "no_order":  # a span's length |e − s| + 1, whichever way it runs
            ok = ok & (off.abs() < limit)
        elif limit is not None:
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
    if isinstance(out, list) and len(out) == 2:
        return "returned a list [start, end], expected a tuple (start, end): return start, end"
    if not isinstance(out, tuple) or len(out) != 2:
        return f"returned {describe_value(out)}, expected a tuple (start, end) of two tensors of shape ({B},)"
    got = []
    for name, t in zip(("start", "end"), out, strict=True):
        if not isinstance(t, torch.Tensor):
            return f"{name}: returned {describe_value(t)}, expected a tensor of shape ({B},)"
        if t.dtype != torch.int64:
            return f"{name}: returned dtype {t.dtype}, expected torch.int64 positions (torch.long, as argmax gives)"
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
        args = (in_dtype(s_log, dtype).to(device), in_dtype(e_log, dtype).to(device), mask.to(device))
        return (args + ((max_len,) if max_len is not None else ()), {})
    return make


def _fit(p: dict) -> dict:
    p = fit_lengths(p)
    if p.get("lengths") is not None:  # [CLS], a question token, [SEP], a passage token, [SEP]: 5 at least
        p["lengths"] = [max(5, length) for length in p["lengths"]]
    return p


SHRINK = dict(floors={"B": 1, "n": 5}, fit=_fit)


BEST_SPAN = Check(
    task="best_span",
    what="the span maximising start_logits[s] + end_logits[e] over s ≤ e, both in the passage, e − s < max_len",
    reference=_best_span_ref,
    compare=_best_span_compare,
    cases=[sized("batch 6, n = 24, no max_len", _span_case, B=6, n=24, **SHRINK),
           sized("batch 6, n = 24, max_len = 3", _span_case, B=6, n=24, max_len=3, **SHRINK),
           sized("batch 4, n = 30, padded, max_len = 5", _span_case, B=4, n=30, max_len=5, lengths=[30, 22, 18, 26],
                 **SHRINK),
           sized("very negative logits (about −20,000): a masked span needs −inf, which no score goes below",
                 _span_case, B=4, n=16, max_len=4, offset=-20000.0, **SHRINK),
           sized("negative logits (about −5) in the passage: a masked span must not score 0", _span_case, B=4, n=16,
                 max_len=4, scale=0.5, offset=-5.0, **SHRINK)],
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
                  Case("a long input: n = 256, max_len = 30", _span_case(3, 256, max_len=30)),
                  Case("very negative logits (about −50,000), no max_len", _span_case(6, 24, offset=-50000.0))],
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
        Mutant(_best_span_with("fill_1e4"), "gave the masked spans a large negative score (−1e4) instead of −inf: "
                                            "when the allowed spans score below it (very negative logits), a masked "
                                            "span wins; use float('-inf')"),
        Mutant(_best_span_with("multiply"), "masked by multiplying the logits by the mask: a masked position then "
                                            "scores 0, which beats the negative scores of the passage; give masked "
                                            "spans −inf (masked_fill)"),
    ],
    forbidden=(_BERT.best_span,),
    forbidden_attrs=(*ATTRS, "best_span"),
    forbidden_modules=MODULES,
)
