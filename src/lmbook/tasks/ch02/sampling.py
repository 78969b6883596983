"""Task 6 of exercise 2: filtering a distribution (temperature, top-k, top-p) and sampling from it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ... import decoding as lmbook_decoding
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import OVERFLOW_HINT, describe_tensor_mismatch, describe_value, index_of
from .. import earlier


def _nucleus_margin_ok(logits: torch.Tensor, temperature: float, top_k, top_p) -> bool:
    """True unless a row's cumulative probability lands within 1e-3 of top_p (float32 could then disagree)."""
    if top_p is None or top_p >= 1:
        return True
    for row in logits.double() / temperature:
        keep = row.sort(descending=True).values
        if top_k:
            keep = keep[keep >= keep[min(top_k, len(keep)) - 1]]  # ties at the k-th place are kept
        cum = torch.softmax(keep, 0).cumsum(0)
        if (cum - top_p).abs().min() < 1e-3:
            return False
    return True


def _logits_case(B, V, temperature=1.0, top_k=None, top_p=None, scale=2.0, n=None, ints=False, spread=0.0,
                 dtype=torch.float32):
    """Random logits; ``ints``: small integers (many ties); ``spread``: rows shifted by up to ±spread."""
    def make(g, device):
        while True:  # draw again if a top-p boundary is a rounding error away from top_p
            logits = torch.randn(B, V, generator=g) * scale
            if ints:
                logits = logits.round()
            logits = logits + torch.linspace(-spread, spread, B).unsqueeze(1)
            logits = logits.to(dtype)
            if _nucleus_margin_ok(logits, temperature, top_k, top_p):
                break
        args = (logits.to(device),) + ((n,) if n is not None else ())
        return (args, {"temperature": temperature, "top_k": top_k, "top_p": top_p})
    return make


def _fixed_logits(rows, n=None, **kwargs):
    """Given logits (ties on purpose), on the device."""
    def make(g, device):
        args = (torch.tensor(rows, dtype=torch.float32, device=device),) + ((n,) if n is not None else ())
        return (args, kwargs)
    return make


def _filter_ref(logits, temperature=1.0, top_k=None, top_p=None):
    """Row by row, in plain Python: sort, keep the k best, then the shortest prefix reaching top_p, renormalised
    over the top-k tokens. Ties are never split: a token tied with the last kept one is kept too."""
    probs = torch.zeros_like(logits, dtype=torch.float64)
    for b, row in enumerate(logits.double() / temperature):
        order = sorted(range(len(row)), key=lambda i: -float(row[i]))
        keep = order
        if top_k is not None:
            kth = float(row[order[min(top_k, len(order)) - 1]])
            keep = [i for i in order if float(row[i]) >= kth]
        if top_p is not None and top_p < 1:
            p = torch.softmax(row[keep], 0)  # the nucleus is taken from the distribution over the top-k tokens
            total, n = 0.0, 0
            while total < top_p and n < len(keep):
                total += float(p[n])
                n += 1
            keep = [i for i, pi in zip(keep, p, strict=True) if pi >= p[n - 1]]
        probs[b, keep] = torch.softmax(row[keep], 0)
    return probs


def _filter_compare(out, ref) -> str | None:
    if isinstance(out, torch.Tensor) and out.shape == ref.shape:
        o = out.detach().cpu().double()
        extra = ((o > 1e-6) & (ref == 0)).nonzero()
        if len(extra):
            b, v = (int(i) for i in extra[0])
            return (f"token {v} of row {b} has probability {float(o[b, v]):.4g}, but top-k/top-p removes it "
                    f"(it should be 0); {len(extra)} such token(s) in all")
        missing = ((o <= 1e-9) & (ref > 1e-6)).nonzero()
        if len(missing):
            b, v = (int(i) for i in missing[0])
            return (f"token {v} of row {b} was removed, but it belongs to the kept set "
                    f"(probability {float(ref[b, v]):.4g})")
    return describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-6, dim=None, nan_hint=OVERFLOW_HINT)


def _filter_with(temp_after=False, multiply=False, strict_p=False, k_extra=0, renorm=True, p_before_k=False,
                 exact_k=False):
    """The reference with one mistake; ties are kept together as in the reference unless ``exact_k``."""
    def fn(logits, temperature=1.0, top_k=None, top_p=None):
        z = logits.double() * temperature if multiply else logits.double() / (1.0 if temp_after else temperature)
        probs = torch.zeros_like(z)
        for b, row in enumerate(z):
            order = row.argsort(descending=True, stable=True).tolist()
            keep = order
            if top_k is not None:
                k = max(1, min(top_k + k_extra, len(order)))
                keep = order[:k] if exact_k else [i for i in order if row[i] >= row[order[k - 1]]]
            if top_p is not None and top_p < 1:
                # p_before_k: the nucleus is read off the distribution before top-k removed anything
                p = torch.softmax(row, 0)[keep] if p_before_k else torch.softmax(row[keep], 0)
                n = int((p.cumsum(0) < top_p).sum()) + (0 if strict_p else 1)
                n = max(1, min(n, len(keep)))
                keep = [i for i, pi in zip(keep, p, strict=True) if pi >= p[n - 1]]
            r = row / temperature if temp_after else row
            probs[b, keep] = torch.softmax(r[keep], 0) if renorm else torch.softmax(r, 0)[keep]
        return probs
    return fn


def _exp_filter(global_max=False):
    """The right kept set, but the softmax by hand: exp(z) overflows (or, shifted by the batch's maximum,
    underflows) when a row's logits are in the hundreds."""
    def fn(logits, temperature=1.0, top_k=None, top_p=None):
        z = logits / temperature
        e = torch.exp(z - z.max() if global_max else z) * (_filter_ref(logits, temperature, top_k, top_p) > 0)
        return e / e.sum(-1, keepdim=True)
    return fn


def _sample_ref(logits, n, temperature=1.0, top_k=None, top_p=None):
    return _filter_ref(logits, temperature, top_k, top_p), n


def _sample_compare(out, ref) -> str | None:
    """The draws follow ``probs``: never a removed token, and every token's count within 5.5 standard errors."""
    probs, n = ref
    B, V = probs.shape
    if not isinstance(out, torch.Tensor):
        return f"returned {describe_value(out)}, expected a (B, n) tensor of token ids"
    if tuple(out.shape) != (B, n):
        return f"returned shape {tuple(out.shape)}, expected ({B}, {n}): n draws per row"
    ids = out.detach().cpu()
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:  # the statement asks for integer ids
        return f"returned a {ids.dtype} tensor; return integer token ids (torch.long, as torch.multinomial gives)"
    ids = ids.long()
    if ids.min() < 0 or ids.max() >= V:
        return f"returned token ids outside 0..{V - 1}"
    counts = torch.stack([torch.bincount(row, minlength=V) for row in ids]).double()
    removed = (counts > 0) & (probs == 0)
    if removed.any():
        b, v = (int(i) for i in removed.nonzero()[0])
        return (f"drew token {v} in row {b} {int(counts[b, v])} time(s), but top-k/top-p removes it "
                "(its probability is 0)")
    sd = (n * probs * (1 - probs)).sqrt()
    z = torch.where(sd > 0, (counts - n * probs) / sd.clamp(min=1e-12), (counts - n * probs).abs() * 1e9)
    b, v = index_of(int(z.abs().argmax()), z.shape)
    if z[b, v].abs() > 5.5:
        return (f"row {b}: token {v} was drawn {int(counts[b, v])} times in {n}; its probability "
                f"{float(probs[b, v]):.3f} gives about {n * float(probs[b, v]):.0f} ± {float(sd[b, v]):.0f}: "
                "the draws do not follow softmax(filtered logits / temperature)")
    return None


def _sample_mutant(dist):
    def fn(logits, n, temperature=1.0, top_k=None, top_p=None):
        return dist(logits, temperature, top_k, top_p), n
    return fn


def _argmax_dist(logits, temperature, top_k, top_p):
    return F.one_hot(logits.argmax(-1), logits.shape[-1]).double()


def _uniform_dist(logits, temperature, top_k, top_p):
    kept = (_filter_ref(logits, temperature, top_k, top_p) > 0).double()
    return kept / kept.sum(-1, keepdim=True)


FILTER_PROBS = Check(
    task="filter_probs",
    what="softmax(z / T), then top-k, then top-p, renormalised",
    reference=_filter_ref,
    compare=_filter_compare,
    cases=[Case("temperature 0.5", _logits_case(3, 8, temperature=0.5)),
           Case("top_k=3", _logits_case(3, 8, top_k=3)),
           Case("top_p=0.8", _logits_case(3, 8, top_p=0.8)),
           Case("temperature 2, top_k=5, top_p=0.7", _logits_case(2, 10, temperature=2.0, top_k=5, top_p=0.7)),
           Case("top_k=2 with a tie at the 2nd place: both tied tokens are kept",
                _fixed_logits([[2.0, 1.0, 1.0, 0.0]], top_k=2))],
    hidden_cases=[Case("top_k=1 (greedy)", _logits_case(4, 9, top_k=1)),
                  Case("a vocabulary of one token, top_p=0.5", _logits_case(3, 1, temperature=0.7, top_p=0.5)),
                  Case("ties at the k-th place and at the top-p boundary",
                       _fixed_logits([[2.0, 1.0, 1.0, 0.0], [0.0, 3.0, 3.0, 3.0], [1.0, 1.0, 1.0, 1.0],
                                      [5.0, 0.0, 5.0, 0.0]], top_k=2, top_p=0.3)),
                  # a seeded search: many small rows of small integers give ties and every kind of boundary
                  Case("300 rows of small integer logits (many ties), top_k=3, top_p=0.6",
                       _logits_case(300, 6, top_k=3, top_p=0.6, scale=1.5, ints=True)),
                  Case("300 random rows, top_k=2, top_p=0.5 (the nucleus is taken over the top-k tokens)",
                       _logits_case(300, 7, top_k=2, top_p=0.5)),
                  Case("rows on very different scales (logits from -100 to +100)",
                       _logits_case(4, 6, top_p=0.9, spread=100.0)),
                  Case("float64 logits, temperature 0.8, top_k=4", _logits_case(3, 8, temperature=0.8, top_k=4,
                                                                                dtype=torch.float64)),
                  Case("top_p=0.01 (only the most likely token)", _logits_case(3, 7, top_p=0.01)),
                  Case("top_k larger than the vocabulary", _logits_case(2, 5, top_k=20)),
                  Case("top_p=1.0 keeps everything", _logits_case(2, 6, temperature=0.7, top_p=1.0)),
                  Case("temperature 0.1 (very sharp)", _logits_case(3, 6, temperature=0.1, scale=0.5)),
                  Case("temperature 3, top_p=0.9: the nucleus is taken after the temperature",
                       _logits_case(3, 12, temperature=3.0, top_p=0.9)),
                  Case("a batch of one, V=500, top_k=50, top_p=0.95",
                       _logits_case(1, 500, top_k=50, top_p=0.95, scale=3.0))],
    mutants=[
        Mutant(_filter_with(temp_after=True), "applied the temperature after top-p: divide the logits by T first, "
                                              "then pick the nucleus from those probabilities"),
        Mutant(_filter_with(multiply=True), "multiplied the logits by T; divide by it (T < 1 sharpens)"),
        Mutant(_filter_with(strict_p=True), "dropped the token that makes the total reach top_p: keep the smallest "
                                            "set whose probability is at least top_p"),
        Mutant(_filter_with(k_extra=1), "kept top_k + 1 tokens"),
        Mutant(_filter_with(k_extra=-1), "kept top_k - 1 tokens"),
        Mutant(_filter_with(renorm=False), "did not renormalise: after removing tokens, divide the kept "
                                           "probabilities by their sum (softmax over the kept logits)"),
        Mutant(_filter_with(p_before_k=True), "took the nucleus from the probabilities before top-k: renormalise "
                                              "over the top-k tokens first, then add up those probabilities"),
        Mutant(_filter_with(renorm=False, p_before_k=True),
               "never renormalised after top-k: the nucleus and the result used the full softmax's probabilities; "
               "rescale the kept ones to sum to 1 after each step"),
        Mutant(_exp_filter(), "computed the softmax as exp(z) / sum(exp(z)): exp overflows for logits in the "
                              "hundreds; subtract each row's maximum first (or use torch.softmax)"),
        Mutant(_exp_filter(global_max=True), "subtracted one maximum for the whole batch before exp: rows far below "
                                             "it underflow to 0 / 0; subtract each row's own maximum"),
        Mutant(_filter_with(exact_k=True), "kept exactly top_k tokens when several tie at the k-th place: every "
                                           "token tied with the k-th largest logit is kept"),
    ],
    keep_dtype=True,
    forbidden=(lmbook_decoding.filter_logits, lmbook_decoding.sample_next),
    forbidden_attrs=("filter_logits", "sample_next"),
)

SAMPLE = Check(
    task="sample",
    what="n draws per row from the filtered distribution",
    reference=_sample_ref,
    builds_on=(("filter_probs", earlier.filter_probs),),
    compare=_sample_compare,
    cases=[Case("4000 draws at temperature 1.5", _logits_case(2, 6, temperature=1.5, n=4000)),
           Case("4000 draws with top_k=3, top_p=0.9", _logits_case(2, 8, top_k=3, top_p=0.9, n=4000))],
    hidden_cases=[Case("20000 draws, temperature 0.7, top_p=0.8", _logits_case(3, 10, temperature=0.7, top_p=0.8,
                                                                                n=20_000)),
                  Case("5000 draws with top_k=1", _logits_case(2, 5, top_k=1, n=5000)),
                  Case("10000 draws, V=50, top_k=10", _logits_case(2, 50, top_k=10, n=10_000)),
                  Case("6000 draws, top_k=2 with ties at the 2nd place",
                       _fixed_logits([[2.0, 1.0, 1.0, 0.0], [0.0, 3.0, 3.0, 3.0]], n=6000, top_k=2)),
                  Case("8000 draws, rows on very different scales, temperature 2",
                       _logits_case(3, 5, temperature=2.0, spread=90.0, n=8000)),
                  Case("6000 draws, a batch of one, float64 logits, top_p=0.9",
                       _logits_case(1, 7, top_p=0.9, n=6000, dtype=torch.float64))],
    mutants=[
        Mutant(_sample_mutant(_argmax_dist), "always took the most likely token (greedy decoding), not a random draw"),
        Mutant(_sample_mutant(lambda lg, t, k, p: _filter_ref(lg, 1.0, k, p)), "ignored the temperature"),
        Mutant(_sample_mutant(lambda lg, t, k, p: _filter_ref(lg)),
               "drew from softmax(logits), ignoring temperature, top_k and top_p"),
        Mutant(_sample_mutant(lambda lg, t, k, p: _filter_ref(lg, t, k)), "ignored top_p: after top-k, keep only "
                                                                           "the nucleus"),
        Mutant(_sample_mutant(_uniform_dist), "drew uniformly among the kept tokens; draw each with its "
                                              "probability (torch.multinomial)"),
    ],
    forbidden=(lmbook_decoding.filter_logits, lmbook_decoding.sample_next),
    forbidden_attrs=("filter_logits", "sample_next"),
)
