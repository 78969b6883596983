"""Task 5 of exercise 9: GPT-1's input format for a pair."""

from __future__ import annotations

import torch

from ... import gpt as _course_gpt
from ...grading.checks import Case, Check, Mutant
from ...grading.reproduce import sized
from .shared import ATTRS, MODULES, as_ids

_G = _course_gpt


def _format_ref(a, b, start, delim, extract):
    return [start, *a, delim, *b, extract]


def _format_with(mistake: str):
    def fn(a, b, start, delim, extract):
        return {"no_delim": lambda: [start, *a, *b, extract], "swapped": lambda: [start, *b, delim, *a, extract],
                "no_extract": lambda: [start, *a, delim, *b], "no_start": lambda: [*a, delim, *b, extract],
                "ends_swapped": lambda: [extract, *a, delim, *b, start]}[mistake]()
    return fn


def _format_case(len_a: int, len_b: int, specials=(50257, 50258, 50259), V: int = 50257):
    def make(g, device):
        a = torch.randint(0, V, (len_a,), generator=g).tolist()
        b = torch.randint(0, V, (len_b,), generator=g).tolist()
        return ((a, b, *specials), {})
    return make


def _format_compare(out, ref) -> str | None:
    ids = as_ids(out, "a list of ids")
    if isinstance(ids, str):
        return ids
    if ids == list(ref):
        return None
    return f"returned {ids}, expected {list(ref)} ([start] a [delim] b [extract])"


FORMAT_PAIR = Check(
    task="format_pair",
    what="[start] a [delim] b [extract], one list of ids",
    reference=_format_ref,
    compare=_format_compare,
    cases=[sized("a of 4 ids, b of 3", _format_case, len_a=4, len_b=3, floors={"len_a": 1, "len_b": 1}),
           sized("a of 2 ids, b of 5", _format_case, len_a=2, len_b=5, floors={"len_a": 1, "len_b": 1})],
    hidden_cases=[Case("fresh ids, a of 6, b of 6", _format_case(6, 6)),
                  Case("a and b of one id each", _format_case(1, 1)),
                  Case("special ids inside the vocabulary (0, 1, 2)", _format_case(3, 4, (0, 1, 2), V=10)),
                  Case("a long a (40), a short b (2)", _format_case(40, 2))],
    mutants=[Mutant(_format_with("no_delim"), "left out the delimiter: a and b are separated by [delim], or the "
                                              "model cannot tell where a ends"),
             Mutant(_format_with("swapped"), "put b before a: the order is [start] a [delim] b [extract]"),
             Mutant(_format_with("no_extract"), "left out the extract token: the sequence ends with [extract], the "
                                                "position whose state the classifier reads"),
             Mutant(_format_with("no_start"), "left out the start token: the sequence begins with [start]"),
             Mutant(_format_with("ends_swapped"), "swapped [start] and [extract]: [start] comes first, [extract] "
                                                  "last")],
    forbidden=(_G.format_pair, _G.format_single),
    forbidden_attrs=(*ATTRS, "format_pair", "format_single"),
    forbidden_modules=MODULES,
)
