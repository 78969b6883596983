"""Checks for exercise 3 (chapter 3: encoder–decoder models).

References are torch's own loss (``F.cross_entropy`` with ``ignore_index``),
plain-Python loops over a toy decoder given as a table of log-probabilities
(greedy decoding and beam search, written independently of ``lmbook.decoding``;
the tests check the beam search against brute-force enumeration), and
``sacrebleu`` for corpus BLEU, never the course's answers in ``lmbook.decoding``,
``lmbook.metrics`` or ``lmbook.seq2seq``. Usage in a notebook:
``from lmbook.tasks.ch03 import check``.

The toy decoder: ``log_probs[t, i, j] = log P(y_{t+1} = j | y_t = i)`` at step
``t`` (``y_0`` is ``bos``), each row log-softmaxed. Its tables are random, drawn
again until every decision the reference makes (an argmax, the edge of the beam,
the final choice) wins by at least ``MARGIN``, so float32 and float64 agree.
"""

from __future__ import annotations

import itertools
import math
import numbers
import random

import torch
import torch.nn.functional as F

from .. import decoding as lmbook_decoding
from .. import functional as lmbook_functional
from .. import metrics as lmbook_metrics
from ..grading.checks import Case, Check, Mutant, Registry
from ..grading.compare import describe_scalar_mismatch, describe_value

COURSE = ("lmbook.seq2seq",)  # the chapter's translator: its decoding is the course's answer
MARGIN = 1e-3  # the smallest gap between two scores a decision of the reference may hinge on


# ----------------------------------------------------------------------------- Task 1: teacher-forcing loss

def _tf_case(B, T, V, pad_id, bos, eos, lengths=None, scale=2.0, spread=0.0, pad_shift=0.0, dtype=torch.float32):
    """A padded target batch <bos> w_1 ... w_n <eos> <pad>..., and the decoder's (B, T, V) logits.

    ``spread``: each position's logits are shifted by a random offset in [-spread, spread] (log-softmax does not
    change, a softmax stabilised with one maximum for the whole batch underflows); ``pad_shift``: added to the
    logits where the target is padding (they dominate any computation that lets them in)."""
    def make(g, device):
        words = torch.tensor([v for v in range(V) if v not in (pad_id, bos, eos)])
        n = torch.tensor(lengths) if lengths is not None else torch.randint(0, T, (B,), generator=g)
        if lengths is None:
            n[int(torch.randint(0, B, (1,), generator=g))] = T - 1  # the longest sentence fills the batch
        y = torch.full((B, T + 1), pad_id, dtype=torch.long)
        y[:, 0] = bos
        for b in range(B):
            k = int(n[b])
            y[b, 1:k + 1] = words[torch.randint(0, len(words), (k,), generator=g)]
            y[b, k + 1] = eos
        logits = torch.randn(B, T, V, generator=g) * scale
        garbage = torch.randn(B, T, V, generator=g) * 8.0  # where the target is padding: it must not count
        if spread:
            logits = logits + (torch.rand(B, T, 1, generator=g) * 2 - 1) * spread
        logits = torch.where((y[:, 1:] == pad_id).unsqueeze(-1), garbage + pad_shift, logits)
        return ((logits.to(device, dtype), y.to(device), pad_id), {})
    return make


def _tf_loss_ref(logits, y, pad_id):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), y[:, 1:].reshape(-1), ignore_index=pad_id)


def _tf_with(shift=True, mask="target", reduce="token", log_softmax=True, pad=None):
    def fn(logits, y, pad_id):
        pad_id = pad_id if pad is None else pad
        targets = y[:, 1:] if shift else y[:, :-1]
        if log_softmax == "naive":
            logp = torch.log(torch.softmax(logits, -1))
        elif log_softmax == "exp":  # a softmax by hand, without subtracting the maximum
            logp = torch.log(logits.exp() / logits.exp().sum(-1, keepdim=True))
        else:
            logp = torch.log_softmax(logits, -1) if log_softmax else logits
        nll = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
        real = {"target": targets != pad_id, "input": y[:, :-1] != pad_id,
                "none": torch.ones_like(targets, dtype=torch.bool)}[mask]
        nll = torch.where(real, nll, 0.0)  # dropped, not multiplied by 0: inf * 0 at padding would be NaN
        real = real.to(nll.dtype)
        total = nll.sum()
        if reduce == "token":
            return total / real.sum()
        if reduce == "sentence":
            return (nll.sum(1) / real.sum(1)).mean()
        if reduce == "sum":
            return total
        return total / y.shape[0]  # "batch"
    return fn


def _loss_compare(out, ref) -> str | None:
    """A scalar loss; NaN matches NaN only when ``ref`` is NaN, i.e. a known mistake's output (never the reference's),
    so a student whose code gives NaN where that mistake does is recognised."""
    if isinstance(ref, torch.Tensor | float) and math.isnan(float(ref)) and isinstance(out, torch.Tensor | float) \
            and (not isinstance(out, torch.Tensor) or out.numel() == 1) and math.isnan(float(out)):
        return None
    return describe_scalar_mismatch(out, float(ref), rtol=1e-4, atol=1e-6)


TEACHER_FORCING_LOSS = Check(
    task="teacher_forcing_loss",
    what="mean of -log P(y_{t+1} | y_<=t) over the real (non-pad) target tokens of the batch",
    reference=_tf_loss_ref,
    compare=lambda out, ref: _loss_compare(out, ref),
    cases=[Case("batch 3, T=6, V=7, pad_id=0, target lengths (2, 6, 4)",
                _tf_case(3, 6, 7, pad_id=0, bos=1, eos=2, lengths=[1, 5, 3])),
           Case("batch 4, T=8, V=10, pad_id=9, bos=0, eos=1, random lengths", _tf_case(4, 8, 10, 9, 0, 1))],
    hidden_cases=[Case("a batch of one, no padding", _tf_case(1, 5, 6, 0, 1, 2, lengths=[4])),
                  Case("sentences with no words (<bos> <eos>)", _tf_case(3, 4, 5, 0, 1, 2, lengths=[0, 3, 0])),
                  Case("pad_id=3 in the middle of the vocabulary", _tf_case(5, 7, 8, 3, 6, 7)),
                  Case("batch 16, T=20, V=50, random lengths", _tf_case(16, 20, 50, 0, 1, 2)),
                  Case("large logits (scale 40): use log-softmax, not log(softmax)",
                       _tf_case(4, 6, 30, 0, 1, 2, scale=40.0)),
                  # a softmax stabilised with the batch's maximum underflows in the rows far below it
                  Case("positions whose logits lie up to 90 apart, padded logits 200 above the real ones",
                       _tf_case(6, 7, 12, 0, 1, 2, spread=90.0, pad_shift=200.0)),
                  Case("T=1: every target is <eos> alone", _tf_case(3, 1, 5, 0, 1, 2, lengths=[0, 0, 0])),
                  Case("float64 logits, pad_id=V-1", _tf_case(5, 6, 9, 8, 0, 1, dtype=torch.float64))],
    mutants=[
        Mutant(_tf_with(shift=False), "did not shift the targets: the logits at position t predict the next "
                                      "token, y[:, t+1] (the decoder read y[:, t]); compare them with y[:, 1:]"),
        Mutant(_tf_with(pad=0), "assumed the padding id is 0: use pad_id"),
        Mutant(_tf_with(mask="none"), "averaged over padding too: leave out the positions whose target is pad_id "
                                      "(from the sum and from the count)"),
        Mutant(_tf_with(mask="input"), "masked with the decoder's inputs y[:, :-1] instead of the targets "
                                       "y[:, 1:]: the step that reads <eos> has a padding target and must not count"),
        Mutant(_tf_with(reduce="sentence"), "averaged each sentence's loss, then the sentences: take the mean over "
                                            "all real target tokens of the batch (long sentences weigh more)"),
        Mutant(_tf_with(reduce="sum"), "returned the sum of the token losses; return their mean"),
        Mutant(_tf_with(reduce="batch"), "divided the summed loss by the batch size; divide by the number of real "
                                         "(non-pad) target tokens"),
        Mutant(_tf_with(log_softmax=False), "used the raw logits as log-probabilities: apply log-softmax first"),
        Mutant(_tf_with(log_softmax="naive"), "computed log(softmax(logits)): for large logits the softmax "
                                              "underflows to 0 and its log to -inf; use log_softmax"),
        Mutant(_tf_with(log_softmax="exp"), "computed the softmax as exp(logits) / sum exp(logits) without "
                                            "subtracting each row's maximum: exp overflows to inf for logits above "
                                            "about 88 (in float32); use log_softmax"),
    ],
    forbidden=(lmbook_functional.cross_entropy,),
    forbidden_attrs=("cross_entropy", "nll_loss", "CrossEntropyLoss", "NLLLoss", "masked_cross_entropy"),
    forbidden_modules=COURSE,
)


# ----------------------------------------------------------------------------- the toy decoder

def _table(g, L, V, eos, eos_bias=0.0, first_eos_bias=None) -> torch.Tensor:
    """(L, V, V) random log-probabilities; ``eos_bias`` shifts <eos>'s logits (at step 0 by ``first_eos_bias``)."""
    logits = torch.randn(L, V, V, generator=g) * 2.0
    logits[:, :, eos] += eos_bias
    if first_eos_bias is not None:
        logits[0, :, eos] += first_eos_bias - eos_bias
    return torch.log_softmax(logits, -1)


def _greedy_trace(log_probs, bos, eos, max_len):
    """Greedy decoding in plain Python; also the smallest gap between the best and second-best token."""
    lp = log_probs.tolist()
    y, prev, gap = [], bos, math.inf
    for t in range(max_len):
        row = lp[t][prev]
        order = sorted(range(len(row)), key=lambda v: -row[v])
        gap = min(gap, row[order[0]] - row[order[1]]) if len(row) > 1 else gap
        prev = order[0]
        y.append(prev)
        if prev == eos:
            break
    return y, gap


def _greedy_ref(log_probs, bos, eos, max_len):
    return _greedy_trace(log_probs, bos, eos, max_len)[0]


def _beam_trace(log_probs, bos, eos, beam_size, max_len, alpha):
    """Beam search in plain Python: (tokens, normalised score, smallest decisive gap)."""
    lp = log_probs.tolist()
    live: list[tuple[tuple[int, ...], float]] = [((), 0.0)]
    finished: list[tuple[tuple[int, ...], float]] = []
    gap = math.inf
    for t in range(max_len):
        cands = [(s + lpv, toks + (v,)) for toks, s in live for v, lpv in enumerate(lp[t][toks[-1] if toks else bos])]
        cands.sort(key=lambda c: -c[0])
        if len(cands) > beam_size:
            gap = min(gap, cands[beam_size - 1][0] - cands[beam_size][0])
        live = []
        for s, toks in cands[:beam_size]:
            (finished if toks[-1] == eos else live).append((toks, s))
        if not live:
            break
    ranked = sorted(((s / len(toks) ** alpha, toks) for toks, s in finished + live), reverse=True)
    if len(ranked) > 1:
        gap = min(gap, ranked[0][0] - ranked[1][0])
    return list(ranked[0][1]), ranked[0][0], gap


def _beam_ref(log_probs, bos, eos, beam_size, max_len, alpha):
    tokens, score, _ = _beam_trace(log_probs, bos, eos, beam_size, max_len, alpha)
    return tokens, score


def _as_tokens(x) -> list[int] | str:
    """A token list from a list/tuple of integers (or integral floats, 0-d tensors) or a 1-D tensor."""
    if isinstance(x, torch.Tensor):
        if x.dim() != 1:
            return f"returned a tensor of shape {tuple(x.shape)}, expected a list of token ids"
        x = x.detach().cpu().tolist()
    if not isinstance(x, tuple | list):
        return f"returned {describe_value(x)}, expected a list of token ids"
    tokens = []
    for v in x:
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or v != int(v):
            return f"returned {list(x)!r}: every token id must be an integer"
        tokens.append(int(v))
    return tokens


def _tokens_compare(out, ref) -> str | None:
    tokens = _as_tokens(out)
    if isinstance(tokens, str):
        return tokens
    if tokens != list(ref):
        return f"returned the tokens {tokens}, expected {list(ref)}"
    return None


def _beam_compare(out, ref) -> str | None:
    ref_tokens, ref_score = ref
    if not isinstance(out, tuple | list) or len(out) != 2:
        return f"returned {describe_value(out)}, expected a tuple (tokens, score)"
    problem = _tokens_compare(out[0], ref_tokens)
    if problem:
        return f"tokens: {problem}"
    problem = describe_scalar_mismatch(out[1], ref_score, rtol=1e-4, atol=1e-5)
    return f"score: {problem}" if problem else None


def _decoder_case(V, max_len, bos, eos, *, steps=None, eos_bias=0.0, first_eos_bias=None, beam=None, alpha=1.0,
                  when=None, dtype=torch.float32):
    """A random toy decoder, drawn again until ``when(log_probs)`` holds and no decision is a near-tie: a seeded
    search over up to 5000 random tables for one that shows the property (``dtype``: the table's, as given)."""
    def make(g, device):
        for _ in range(5000):
            log_probs = _table(g, steps or max_len, V, eos, eos_bias, first_eos_bias)
            if _greedy_trace(log_probs, bos, eos, max_len)[1] < MARGIN:
                continue
            if beam is not None and _beam_trace(log_probs, bos, eos, beam, max_len, alpha)[2] < MARGIN:
                continue
            if when is None or when(log_probs):
                break
        else:
            raise RuntimeError("no toy decoder with the required property was found")  # a bug in the case
        log_probs = log_probs.to(device, dtype)
        args = (log_probs, bos, eos, max_len) if beam is None else (log_probs, bos, eos, beam, max_len, alpha)
        return (args, {})
    return make


# ----------------------------------------------------------------------------- Task 2: greedy decoding

def _greedy_with(stop=True, keep_eos=True, with_bos=False, prev="last", step="t", n_off=0):
    def fn(log_probs, bos, eos, max_len):
        y, last = [], bos
        for t in range(max_len + n_off):
            row = log_probs[t if step == "t" else 0, last if prev == "last" else bos]
            last = int(row.argmax())
            y.append(last)
            if stop and last == eos:
                break
        if not keep_eos and y and y[-1] == eos:
            y = y[:-1]
        return [bos, *y] if with_bos else y
    return fn


def _greedy_case(V, max_len, bos, eos, ends, **kw):
    if ends == "eos":  # greedy stops at <eos>, after at least two tokens
        def when(lp):
            y = _greedy_ref(lp, bos, eos, max_len)
            return y[-1] == eos and 2 <= len(y) < max_len
    elif ends == "eos_first":
        def when(lp):
            return _greedy_ref(lp, bos, eos, max_len) == [eos]
    else:  # runs into max_len without <eos>
        def when(lp):
            return eos not in _greedy_ref(lp, bos, eos, max_len)
    return _decoder_case(V, max_len, bos, eos, when=when, **kw)


GREEDY = Check(
    task="greedy_decode",
    what="y_{t+1} = argmax_j log_probs[t, y_t, j] until <eos> (kept) or max_len tokens",
    reference=_greedy_ref,
    compare=_tokens_compare,
    cases=[Case("V=5, max_len=6: stops at <eos>", _greedy_case(5, 6, 0, 1, "eos", eos_bias=0.5)),
           Case("V=4, max_len=4, bos=3, eos=0: reaches max_len without <eos>",
                _greedy_case(4, 4, 3, 0, "max_len", eos_bias=-1.0))],
    hidden_cases=[Case("max_len=1", _greedy_case(6, 1, 0, 5, "max_len")),
                  Case("<eos> comes first: the output is just [eos]", _greedy_case(5, 5, 2, 4, "eos_first",
                                                                                   eos_bias=1.5)),
                  Case("V=8, max_len=8, stops at <eos>", _greedy_case(8, 8, 7, 3, "eos", eos_bias=0.8)),
                  Case("the table has more steps than max_len: stop at max_len",
                       _greedy_case(6, 5, 0, 1, "max_len", steps=9, eos_bias=-2.0)),
                  Case("V=3, max_len=10, stops at <eos>", _greedy_case(3, 10, 1, 2, "eos")),
                  Case("V=2, max_len=12: the longest output, no <eos>", _greedy_case(2, 12, 0, 1, "max_len",
                                                                                 eos_bias=-3.0)),
                  Case("a float64 table, bos=eos-1, stops at <eos>", _greedy_case(6, 7, 3, 4, "eos", eos_bias=0.5,
                                                                                  dtype=torch.float64))],
    mutants=[
        Mutant(_greedy_with(stop=False), "kept going after <eos>: stop as soon as <eos> is produced (and keep it)"),
        Mutant(_greedy_with(keep_eos=False), "left <eos> out: when <eos> is produced, it is the last token of the "
                                             "output"),
        Mutant(_greedy_with(with_bos=True), "put <bos> in the output: return only the generated tokens"),
        Mutant(_greedy_with(prev="bos"), "looked up the <bos> row at every step: step t conditions on the token "
                                         "just generated, log_probs[t, y_t]"),
        Mutant(_greedy_with(step="0"), "used the table of step 0 at every step: step t uses log_probs[t]"),
        Mutant(_greedy_with(n_off=-1), "stopped after max_len - 1 tokens: up to max_len tokens are generated"),
    ],
    forbidden=(lmbook_decoding.greedy_decode, lmbook_decoding.beam_search),
    forbidden_attrs=("greedy_decode", "beam_search"),
    forbidden_modules=(*COURSE, "lmbook.decoding"),
)


# ----------------------------------------------------------------------------- Task 3: beam search

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
    return _decoder_case(V, max_len, bos, eos, beam=beam, alpha=alpha, when=holds, **kw)


def _beats_greedy(lp, bos, eos, beam, max_len, alpha):
    return _beam_ref(lp, bos, eos, beam, max_len, alpha)[0] != _beam_ref(lp, bos, eos, 1, max_len, alpha)[0]


def _alpha_matters(lp, bos, eos, beam, max_len, alpha):
    return _beam_ref(lp, bos, eos, beam, max_len, alpha)[0] != _beam_ref(lp, bos, eos, beam, max_len, 0.0)[0]


def _cut_off_wins(lp, bos, eos, beam, max_len, alpha):
    """Some hypothesis finished with <eos>, yet the best one was cut off at max_len."""
    tokens = _beam_ref(lp, bos, eos, beam, max_len, alpha)[0]
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
    return best[-1] == eos and _beam_ref(lp, bos, eos, beam, max_len, alpha)[0] != best


def _narrow_beam_misses(lp, bos, eos, beam, max_len, alpha):
    """The exhaustive beam's answer is one a beam of 2 prunes (and not the raw-sum best)."""
    best = _beam_ref(lp, bos, eos, beam, max_len, alpha)[0]
    return best != _beam_ref(lp, bos, eos, 2, max_len, alpha)[0] and _alpha_matters(lp, bos, eos, beam, max_len,
                                                                                      alpha)


def _mutant(start: str) -> Mutant:
    return next(m for m in BEAM_MUTANTS if m.misconception.startswith(start))


def _differ(*starts: str):
    """The mutants whose misconceptions start so give different answers (so one case tells them apart)."""
    def when(lp, bos, eos, beam, max_len, alpha):
        outs = [_mutant(start).fn(lp, bos, eos, beam, max_len, alpha) for start in starts]
        return all(_beam_compare(a, b) is not None for a, b in itertools.combinations(outs, 2))
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
        return all(_beam_compare(out, other) is not None
                   for other in [_beam_ref(*args)] + [m.fn(*args) for m in BEAM_MUTANTS[:index]])
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
]


BEAM = Check(
    task="beam_search",
    what="keep the beam_size best prefixes by sum log p, set finished ones aside, return the best by "
         "sum log p / len**alpha",
    reference=_beam_ref,
    compare=_beam_compare,
    cases=[Case("V=5, max_len=4, beam 2, alpha=1: beam search finds a better output than greedy",
                _beam_case(5, 4, 0, 1, 2, 1.0, _names("ignored beam_size"))),
           Case("V=4, max_len=5, beam 3, alpha=0.7: length normalisation changes the answer",
                _beam_case(4, 5, 3, 0, 3, 0.7, _alpha_matters)),
           Case("V=5, max_len=5, beam 2, alpha=1: some hypotheses finish early",
                _beam_case(5, 5, 4, 2, 2, 1.0, _all(_names("refilled"), _differ("kept finished", "stopped as")),
                           eos_bias=1.0, first_eos_bias=1.0))],
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
                  Case("beam 6 wider than the first step's 3 candidates, a float64 table",
                       _beam_case(3, 4, 0, 1, 6, 1.0, dtype=torch.float64))],
    mutants=BEAM_MUTANTS,
    forbidden=(lmbook_decoding.greedy_decode, lmbook_decoding.beam_search),
    forbidden_attrs=("greedy_decode", "beam_search"),
    forbidden_modules=(*COURSE, "lmbook.decoding"),
)


# ----------------------------------------------------------------------------- Task 4: corpus BLEU

WORDS = ("the", "a", "cat", "dog", "bird", "sat", "ran", "saw", "on", "near", "mat", "big", "small", "red", "and",
         "with")


def _perturb(rng: random.Random, sent: list[str], noise: float = 1.0) -> list[str]:
    """A noisy copy: tokens dropped, replaced, swapped with a neighbour, or inserted."""
    out, i = list(sent), 0
    while i < len(out):
        u = rng.random() / noise
        if u < 0.08 and len(out) > 3:
            del out[i]
            continue
        if u < 0.16:
            out[i] = rng.choice(WORDS)
        elif u < 0.22 and i + 1 < len(out):
            out[i], out[i + 1] = out[i + 1], out[i]
        elif u < 0.28:
            out.insert(i, rng.choice(WORDS))
            i += 1
        i += 1
    return out


def _noisy(rng: random.Random, ref: list[str], n: int) -> list[str]:
    """A noisy copy of ``ref`` of exactly ``n`` tokens (cut, or filled up with random words)."""
    return (_perturb(rng, ref) + [rng.choice(WORDS) for _ in range(n)])[:n]


def _corpus_case(size, n_refs=(1, 1), lengths=(4, 16), kind="noisy"):
    """``size`` sentences; candidates and extra references are noisy copies of a random first reference."""
    def make(g, device):
        rng = random.Random(int(torch.randint(0, 2**31, (1,), generator=g)))
        cands, refs = [], []
        for i in range(size):
            ref = [rng.choice(WORDS) for _ in range(rng.randint(*lengths))]
            k = rng.randint(*n_refs)
            if kind == "ties":  # references one token shorter and one longer than the candidate (and a longest)
                cand = _perturb(rng, ref)
                c = len(cand)
                rs = [_noisy(rng, ref, c - 1), _noisy(rng, ref, c + 1)] + ([_noisy(rng, ref, c + 3)] if k > 1 else [])
                rng.shuffle(rs)
            elif kind == "mixed":  # in turn: cut to half its only reference; between references c-2 and c+1
                if i % 2:
                    rs, cand = [ref], ref[: len(ref) // 2]
                else:
                    cand = _perturb(rng, ref)
                    c = len(cand)
                    rs = [_noisy(rng, ref, c + 1), _noisy(rng, ref, c - 2)]
            elif kind == "straddle":  # references on both sides of the candidate: closest, shortest, longest differ
                cand = _perturb(rng, ref)
                c = len(cand)
                # in turn: closest c+1, shortest c-2, longest c+5; and one reference c+4 (shortest in total > c)
                rs = [_noisy(rng, ref, c + 1), _noisy(rng, ref, c - 2), _noisy(rng, ref, c + 5)] if i % 2 else \
                    [_noisy(rng, ref, c + 4)]
            else:
                rs = [ref] + [_perturb(rng, ref) for _ in range(k - 1)]
                cand = _perturb(rng, ref)
                if kind == "short":  # the candidate keeps only the first half to three quarters
                    cand = cand[: max(2, int(len(cand) * rng.uniform(0.5, 0.75)))]
                elif kind == "repeats":  # a word of the reference said over and over
                    w = rng.choice(ref)
                    cand = cand[:2] + [w] * rng.randint(2, 4) + cand[2:]
                elif kind == "shuffled":  # the reference's words in an order that shares no 4-gram with it
                    ref_4grams = set(_ngram_counts(ref, 4))
                    while True:
                        cand = rng.sample(ref, len(ref))
                        if not ref_4grams & set(_ngram_counts(cand, 4)):
                            break
                elif kind == "perfect":
                    cand = list(ref)
            cands.append(tuple(cand))
            refs.append(tuple(tuple(r) for r in rs))
        return ((tuple(cands), tuple(refs)), {})
    return make


def _example_case(g, device):
    cand = tuple("the cat the cat on the mat".split())
    refs = (tuple("the cat is on the mat".split()), tuple("there is a cat on the mat".split()))
    return (((cand,), (refs,)), {})


def _bleu_ref(candidates, references):
    from sacrebleu.metrics import BLEU  # the standard implementation (0-100 scale)

    k = max(len(refs) for refs in references)
    # sacrebleu wants reference streams: streams[j][i] is the j-th reference of sentence i (None if it has fewer)
    streams = [[" ".join(refs[j]) if j < len(refs) else None for refs in references] for j in range(k)]
    bleu = BLEU(tokenize="none", smooth_method="none", effective_order=False)
    return bleu.corpus_score([" ".join(c) for c in candidates], streams).score


def _ngram_counts(tokens, n):
    counts: dict[tuple, int] = {}
    for i in range(len(tokens) - n + 1):
        gram = tuple(tokens[i:i + n])
        counts[gram] = counts.get(gram, 0) + 1
    return counts


def _bleu_with(clip="max", mean="geometric", ref_len="closest", bp="normal", level="corpus", scale=100.0,
               skip_zero=False):
    """Corpus BLEU with one known mistake (the default settings give the right answer)."""
    def sentence_stats(cand, refs):
        stats = []
        for n in range(1, 5):
            cand_counts = _ngram_counts(cand, n)
            ref_counts = [_ngram_counts(r, n) for r in refs]
            matches = 0
            for gram, c in cand_counts.items():
                in_refs = [rc.get(gram, 0) for rc in ref_counts]
                cap = {"max": max(in_refs), "sum": sum(in_refs), "none": c if max(in_refs) else 0}[clip]
                matches += min(c, cap)
            stats.append((matches, sum(cand_counts.values())))
        lens = [len(r) for r in refs]
        r = {"closest": min(lens, key=lambda x: (abs(x - len(cand)), x)),
             "longer_tie": min(lens, key=lambda x: (abs(x - len(cand)), -x)),
             "longest": max(lens), "shortest": min(lens)}[ref_len]
        return stats, len(cand), r

    def score(stats, c, r):
        p = [m / t if t else 0.0 for m, t in stats]
        if mean == "arithmetic":
            avg = sum(p) / 4
        elif skip_zero:  # the geometric mean of the non-zero precisions only
            logs = [math.log(x) for x in p if x > 0]
            avg = math.exp(sum(logs) / len(logs)) if logs else 0.0
        elif min(p) == 0:
            return 0.0
        else:
            avg = math.exp(sum(map(math.log, p)) / 4)
        if bp == "none":
            penalty = 1.0
        elif bp == "always" or c <= r:
            penalty = math.exp(1 - r / c)
        else:
            penalty = 1.0
        return scale * penalty * avg

    def fn(candidates, references):
        per = [sentence_stats(list(c), [list(r) for r in refs]) for c, refs in zip(candidates, references,
                                                                                  strict=True)]
        if level == "sentence":
            return sum(score(*s) for s in per) / len(per)
        stats = [(sum(s[0][n][0] for s in per), sum(s[0][n][1] for s in per)) for n in range(4)]
        return score(stats, sum(s[1] for s in per), sum(s[2] for s in per))
    return fn


BLEU_CHECK = Check(
    task="corpus_bleu",
    what="100 · BP · exp(mean of log p_1..p_4), clipped precisions pooled over the corpus; agrees with sacrebleu",
    reference=_bleu_ref,
    # the statement asks for a Python number (NumPy's floats are numbers too), not a tensor
    compare=lambda out, ref: describe_scalar_mismatch(out, ref, rtol=1e-6, atol=1e-6, accept=("number",)),
    cases=[Case("the course's example: 'the cat the cat on the mat', two references", _example_case),
           Case("20 sentences, one reference each", _corpus_case(20)),
           Case("30 sentences, references both shorter and longer than the candidates",
                _corpus_case(30, lengths=(6, 16), kind="straddle"))],
    hidden_cases=[Case("candidates shorter than their references (brevity penalty)",
                       _corpus_case(25, n_refs=(1, 2), kind="short")),
                  Case("candidates repeating a word (clipping)", _corpus_case(25, n_refs=(1, 2), kind="repeats")),
                  Case("two references equally close in length to each candidate (ties go to the shorter)",
                       _corpus_case(25, n_refs=(1, 2), kind="ties")),
                  Case("30 sentences, one to three references each", _corpus_case(30, n_refs=(1, 3))),
                  # the shortest reference gives a brevity penalty here that is neither 1 nor the right one
                  Case("candidates cut short, and candidates between a shorter and a longer reference",
                       _corpus_case(30, lengths=(6, 16), kind="mixed")),
                  Case("a corpus of one sentence, two references", _corpus_case(1, n_refs=(2, 2), lengths=(8, 12))),
                  Case("shuffled words, no 4-gram in common: BLEU is 0",
                       _corpus_case(5, lengths=(5, 7), kind="shuffled")),
                  Case("perfect translations: BLEU is 100", _corpus_case(10, n_refs=(1, 3), kind="perfect")),
                  Case("100 sentences, one to four references each, up to 30 tokens",
                       _corpus_case(100, n_refs=(1, 4), lengths=(3, 30)))],
    mutants=[
        Mutant(_bleu_with(clip="none"), "did not clip the n-gram counts: a candidate n-gram counts at most as many "
                                        "times as it occurs in a single reference"),
        Mutant(_bleu_with(clip="sum"), "clipped to the total count over all references: clip to the largest count "
                                       "in any one reference"),
        Mutant(_bleu_with(mean="arithmetic"), "averaged the precisions arithmetically: BLEU takes their geometric "
                                              "mean, exp((1/4) Σ log p_n)"),
        Mutant(_bleu_with(level="sentence"), "averaged sentence-level BLEU: corpus BLEU adds up the matches, the "
                                             "n-gram counts and the lengths over all sentences before dividing"),
        Mutant(_bleu_with(bp="none"), "left out the brevity penalty BP = exp(1 - r/c) for c <= r"),
        Mutant(_bleu_with(bp="always"), "applied the brevity penalty to long candidates too: BP = 1 when c > r"),
        Mutant(_bleu_with(ref_len="longest"), "used the longest reference for r: use the reference length closest "
                                              "to the candidate's (ties: the shorter)"),
        Mutant(_bleu_with(ref_len="shortest"), "used the shortest reference for r: use the reference length "
                                               "closest to the candidate's (ties: the shorter)"),
        Mutant(_bleu_with(ref_len="longer_tie"), "broke ties between equally close references towards the longer "
                                                 "one: sacrebleu takes the shorter"),
        Mutant(_bleu_with(skip_zero=True), "left out the orders n with no match: without smoothing, BLEU is 0 "
                                           "as soon as one precision p_n is 0"),
        Mutant(_bleu_with(scale=1.0), "returned BLEU on a 0-1 scale: report it on sacrebleu's 0-100 scale"),
    ],
    forbidden=(lmbook_metrics.corpus_bleu, lmbook_metrics.modified_precision, lmbook_metrics.brevity_penalty,
               lmbook_metrics.closest_ref_length, lmbook_metrics.ngrams),
    forbidden_attrs=("corpus_bleu", "sentence_bleu", "corpus_score", "sentence_score", "bleu_score"),
    forbidden_modules=(*COURSE, "lmbook.metrics", "sacrebleu", "nltk", "torchmetrics", "torchtext", "evaluate"),
)

CHECKS = [TEACHER_FORCING_LOSS, GREEDY, BEAM, BLEU_CHECK]

from .questions.ch03 import QUESTIONS  # noqa: E402 (the thinking questions, after the code tasks)

check = Registry(CHECKS + QUESTIONS)
