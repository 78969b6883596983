"""Task 3 of exercise 3: beam search."""

from __future__ import annotations

import itertools
import math

import torch

from ... import decoding as lmbook_decoding
from ...grading.checks import Case, Check, Mutant
from .toy_decoder import COURSE, MARGIN, _beam_trace, _greedy_trace, beam_compare, beam_ref, decoder_case


def _beam_with(norm="len", final="norm", after_eos="set_aside", pool="all", add="logp", score="norm",
               greedy=False, early=False):
    """Beam search with one known mistake (the default settings give the right answer)."""
    def fn(log_probs, bos, eos, beam_size, max_len, alpha):
        lp = log_probs.double().cpu().tolist()
        k = 1 if greedy else beam_size

        def length(toks):
            return len(toks) + (1 if norm == "bos" else 0)

        def normalised(toks, s):
            return s if norm == "none" else s / length(toks) ** alpha

        def gain(v):
            return math.exp(v) if add == "prob" else v

        live, finished = [((), 0.0)], []
        for t in range(max_len):
            if after_eos == "keep":  # finished hypotheses stay in the beam, unextended
                cands = [(s, toks) for toks, s in live if toks and toks[-1] == eos]
                live = [(toks, s) for toks, s in live if not (toks and toks[-1] == eos)]
            else:
                cands = []
            cands += [(s + gain(x), toks + (v,)) for toks, s in live
                      for v, x in enumerate(lp[t][toks[-1] if toks else bos])]
            cands.sort(key=lambda c: -c[0])
            if after_eos == "refill":  # the best k hypotheses that are still live, finished ones set aside
                live = []
                for s, toks in cands:
                    if len(live) == k:
                        break
                    (finished if toks[-1] == eos else live).append((toks, s))
            elif after_eos == "all":  # every candidate ending in <eos> set aside, also those outside the beam
                finished += [(toks, s) for s, toks in cands if toks[-1] == eos]
                live = [(toks, s) for s, toks in cands[:k] if toks[-1] != eos]
            elif after_eos in ("extend", "keep"):
                live = [(toks, s) for s, toks in cands[:k]]
                if after_eos == "keep" and all(toks[-1] == eos for toks, _ in live):
                    break
            else:
                live = []
                for s, toks in cands[:k]:
                    (finished if toks[-1] == eos else live).append((toks, s))
            if not live or (early and cands[0][1][-1] == eos):  # early: stop once a step's best is finished
                break
        hyps = (finished or live) if pool == "finished" else finished + live
        key = (lambda h: h[1]) if final == "raw" else (lambda h: normalised(*h))
        toks, s = max(hyps, key=key)
        return list(toks), (s if score == "raw" else normalised(toks, s))
    return fn


def _beam_case(V, max_len, bos, eos, beam, alpha, when=None, **kw):
    def holds(lp):
        return when is None or when(lp, bos, eos, beam, max_len, alpha)
    return decoder_case(V, max_len, bos, eos, beam=beam, alpha=alpha, when=holds, **kw)


def _beats_greedy(lp, bos, eos, beam, max_len, alpha):
    return beam_ref(lp, bos, eos, beam, max_len, alpha)[0] != beam_ref(lp, bos, eos, 1, max_len, alpha)[0]


def _alpha_matters(lp, bos, eos, beam, max_len, alpha):
    return beam_ref(lp, bos, eos, beam, max_len, alpha)[0] != beam_ref(lp, bos, eos, beam, max_len, 0.0)[0]


def _cut_off_wins(lp, bos, eos, beam, max_len, alpha):
    """Some hypothesis finished with <eos>, yet the best one was cut off at max_len."""
    tokens = beam_ref(lp, bos, eos, beam, max_len, alpha)[0]
    finished = eos in _beam_with(pool="finished")(lp, bos, eos, beam, max_len, alpha)[0]
    return tokens[-1] != eos and finished


def _brute_force(lp, bos, eos, max_len, alpha):
    """The best output of all (<eos> only at its end; ending in <eos> or max_len long): exhaustive, small V only."""
    table, best = lp.tolist(), (-math.inf, [])
    for n in range(1, max_len + 1):
        for y in itertools.product(range(lp.shape[-1]), repeat=n):
            if eos in y[:-1] or (y[-1] != eos and n < max_len):
                continue
            s = sum(table[t][([bos, *y])[t]][y[t]] for t in range(n)) / n ** alpha
            best = max(best, (s, list(y)))
    return best[1]


def _pruned_wins(lp, bos, eos, beam, max_len, alpha):
    """The best output of all ends in <eos>, but the beam pruned it: search (and a brute force) differ."""
    best = _brute_force(lp, bos, eos, max_len, alpha)
    return best[-1] == eos and beam_ref(lp, bos, eos, beam, max_len, alpha)[0] != best


def _narrow_beam_misses(lp, bos, eos, beam, max_len, alpha):
    """The exhaustive beam's answer is one a beam of 2 prunes (and not the raw-sum best)."""
    best = beam_ref(lp, bos, eos, beam, max_len, alpha)[0]
    return best != beam_ref(lp, bos, eos, 2, max_len, alpha)[0] and _alpha_matters(lp, bos, eos, beam, max_len,
                                                                                      alpha)


def _outside_the_beam_case(V=12, max_len=3, bos=0, eos=1, beam=2, alpha=1.0):
    """A table where a candidate ending in <eos> just misses the first step's beam (two tokens beat it), and
    every later step is nearly flat, so nothing that grows from the beam scores as well as it: a search that
    kept it, though it never made the beam, would return it."""
    def make(g, device):
        for _ in range(500):
            logits = torch.randn(max_len, V, V, generator=g) * 0.3
            live = torch.randperm(V - 2, generator=g)[:2] + 2  # neither <bos> nor <eos>
            logits[0, bos, live] += 3.0
            logits[0, bos, eos] += 2.7
            log_probs = torch.log_softmax(logits, -1)
            args = (log_probs, bos, eos, beam, max_len, alpha)
            if (_beam_trace(*args)[2] >= MARGIN and _greedy_trace(log_probs, bos, eos, max_len)[1] >= MARGIN
                    and beam_compare(_mutant("set aside every candidate").fn(*args), beam_ref(*args)) is not None):
                return (log_probs.to(device), bos, eos, beam, max_len, alpha), {}
        raise RuntimeError("no toy decoder with the required property was found")  # a bug in the case
    return make


def _mutant(start: str) -> Mutant:
    return next(m for m in BEAM_MUTANTS if m.misconception.startswith(start))


def _differ(*starts: str):
    """The mutants whose misconceptions start so give different answers (so one case tells them apart)."""
    def when(lp, bos, eos, beam, max_len, alpha):
        outs = [_mutant(start).fn(lp, bos, eos, beam, max_len, alpha) for start in starts]
        return all(beam_compare(a, b) is not None for a, b in itertools.combinations(outs, 2))
    return when


def _all(*conditions):
    return lambda *args: all(cond(*args) for cond in conditions)


def _names(misconception_start: str):
    """The mutant whose misconception starts so gets this case wrong, and in its own way: no mutant listed before
    it gives the same answer, so the feedback names it."""
    def when(lp, bos, eos, beam, max_len, alpha):
        args = (lp, bos, eos, beam, max_len, alpha)
        index = next(i for i, m in enumerate(BEAM_MUTANTS) if m.misconception.startswith(misconception_start))
        out = BEAM_MUTANTS[index].fn(*args)
        return all(beam_compare(out, other) is not None
                   for other in [beam_ref(*args)] + [m.fn(*args) for m in BEAM_MUTANTS[:index]])
    return when


BEAM_MUTANTS = [
    Mutant(_beam_with(norm="none"), "no length normalisation: rank the hypotheses by sum log p / len(y)**alpha"),
    Mutant(_beam_with(norm="bos"), "counted <bos> in the length: len(y) counts the generated tokens only "
                                   "(<eos> included)"),
    Mutant(_beam_with(final="raw"), "picked the final answer by the raw sum of log-probabilities: compare the "
                                    "normalised scores"),
    Mutant(_beam_with(score="raw"), "returned the raw sum of log-probabilities as the score; return it divided "
                                    "by len(y)**alpha"),
    Mutant(_beam_with(after_eos="extend"), "kept extending hypotheses after <eos>: a hypothesis that produces "
                                           "<eos> is finished; set it aside"),
    Mutant(_beam_with(after_eos="keep"), "kept finished hypotheses in the beam, taking up slots at later steps: "
                                         "set them aside once they produce <eos>"),
    Mutant(_beam_with(after_eos="refill"), "refilled the beam with live hypotheses: a candidate that ends in "
                                           "<eos> uses up one of its step's beam_size slots, then is set aside"),
    Mutant(_beam_with(pool="finished"), "left out the hypotheses cut off at max_len: those still live at the "
                                        "end compete with the finished ones"),
    Mutant(_beam_with(add="prob"), "added probabilities instead of log-probabilities: a sequence's score is "
                                   "the sum of its log-probabilities"),
    Mutant(_beam_with(greedy=True), "ignored beam_size: keeping one hypothesis is greedy decoding"),
    Mutant(_beam_with(early=True), "stopped as soon as a step's best candidate ended in <eos>: go on while any "
                                   "hypothesis is live; a longer one may still have a better normalised score"),
    Mutant(_beam_with(after_eos="all"), "set aside every candidate that ends in <eos>, also those outside the "
                                        "step's beam_size best: only a candidate that makes the beam is kept, "
                                        "finished or not"),
]


BEAM = Check(
    task="beam_search",
    what="keep the beam_size best prefixes by sum log p, set finished ones aside, return the best by "
         "sum log p / len**alpha",
    reference=beam_ref,
    compare=beam_compare,
    cases=[Case("V=5, max_len=4, beam 2, alpha=1: beam search finds a better output than greedy",
                _beam_case(5, 4, 0, 1, 2, 1.0, _names("ignored beam_size"))),
           Case("V=4, max_len=5, beam 3, alpha=0.7: length normalisation changes the answer",
                _beam_case(4, 5, 3, 0, 3, 0.7, _alpha_matters)),
           Case("V=5, max_len=5, beam 2, alpha=1: some hypotheses finish early",
                _beam_case(5, 5, 4, 2, 2, 1.0, _all(_names("refilled"), _differ("kept finished", "stopped as")),
                           eos_bias=1.0, first_eos_bias=1.0)),
           Case("V=12, max_len=3, beam 2, alpha=1: <eos> just misses the beam, and no continuation is likely",
                _outside_the_beam_case())],
    hidden_cases=[Case("beam 1 is greedy decoding", _beam_case(5, 5, 0, 1, 1, 1.0)),
                  Case("a hypothesis cut off at max_len beats the finished ones",
                       _beam_case(4, 4, 1, 3, 2, 1.0, _cut_off_wins)),
                  Case("no hypothesis ever reaches <eos>", _beam_case(5, 4, 0, 1, 3, 0.5, eos_bias=-12.0)),
                  Case("alpha=0: ranked by the raw sum", _beam_case(5, 5, 2, 3, 3, 0.0, _beats_greedy)),
                  Case("a beam as wide as every candidate (3^5): exact search",
                       _beam_case(3, 5, 0, 2, 243, 1.0, _alpha_matters)),
                  Case("V=4, max_len=5, beam 2, alpha=1, <eos> likely at the first step",
                       _beam_case(4, 5, 3, 0, 2, 1.0, _names("kept finished"), first_eos_bias=1.0)),
                  Case("max_len=1", _beam_case(5, 1, 0, 1, 2, 1.0)),
                  Case("V=4, max_len=6, beam 5, alpha=1.2", _beam_case(4, 6, 1, 2, 5, 1.2, _beats_greedy)),
                  Case("the best output of all ends in <eos> but the beam pruned it (a brute force differs)",
                       _beam_case(4, 4, 0, 1, 2, 1.0, _pruned_wins, eos_bias=0.5)),
                  Case("V=5, max_len=5, beam 3, alpha=1: the best candidate of a step finishes, a longer one wins",
                       _beam_case(5, 5, 1, 0, 3, 1.0, _names("stopped as soon as"), eos_bias=0.8)),
                  Case("V=3, max_len=4, beam 81 holds every candidate (exact), alpha=0.7; a beam of 2 misses it",
                       _beam_case(3, 4, 2, 0, 81, 0.7, _narrow_beam_misses)),
                  Case("V=12, max_len=3, beam 2, alpha=1: <eos> is the first step's third best, and no "
                       "continuation is likely", _outside_the_beam_case()),
                  Case("beam 6 wider than the first step's 3 candidates, a float64 table",
                       _beam_case(3, 4, 0, 1, 6, 1.0, dtype=torch.float64))],
    mutants=BEAM_MUTANTS,
    forbidden=(lmbook_decoding.greedy_decode, lmbook_decoding.beam_search),
    forbidden_attrs=("greedy_decode", "beam_search"),
    forbidden_modules=(*COURSE, "lmbook.decoding"),
)
