"""Task 2 of exercise 3: greedy decoding."""

from __future__ import annotations

import torch

from ... import decoding as lmbook_decoding
from ...grading.checks import Case, Check, Mutant
from .toy_decoder import COURSE, decoder_case, greedy_ref, tokens_compare


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
            y = greedy_ref(lp, bos, eos, max_len)
            return y[-1] == eos and 2 <= len(y) < max_len
    elif ends == "eos_first":
        def when(lp):
            return greedy_ref(lp, bos, eos, max_len) == [eos]
    else:  # runs into max_len without <eos>
        def when(lp):
            return eos not in greedy_ref(lp, bos, eos, max_len)
    return decoder_case(V, max_len, bos, eos, when=when, **kw)


GREEDY = Check(
    task="greedy_decode",
    what="y_{t+1} = argmax_j log_probs[t, y_t, j] until <eos> (kept) or max_len tokens",
    reference=greedy_ref,
    compare=tokens_compare,
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
