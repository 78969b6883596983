"""Task 2 of exercise 10: BERT's inputs for a pair, and their segments."""

from __future__ import annotations

import torch

from ... import bert as _course_bert
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_value
from ...grading.reproduce import sized
from .shared import ATTRS, MODULES

_BERT = _course_bert


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
        ids = [*head, *a, *mid, *b, *tail]
        if mistake == "by_value":  # segment A ends at the first [SEP] id found
            first = ids.index(sep)
            return ids, [seg_a] * (first + 1) + [seg_b] * (len(ids) - first - 1)
        return ids, segs_a + segs_b
    return fn


def _int_list(v, what: str) -> list[int] | str:
    if isinstance(v, torch.Tensor):
        return f"{what}: returned a tensor of shape {tuple(v.shape)}, expected a list of Python ints (.tolist())"
    if not isinstance(v, list):
        return f"{what}: returned {describe_value(v)}, expected a list of Python ints"
    for i, x in enumerate(v):
        if type(x) is not int:
            kind = f"numpy.{type(x).__name__}" if type(x).__module__ == "numpy" else type(x).__name__
            return f"{what}: item {i} is a {kind}, expected a Python int (int(...) makes one)"
    return list(v)


def _build_compare(out, ref) -> str | None:
    if isinstance(out, list) and len(out) == 2:
        return "returned a list [ids, segments], expected a tuple (ids, segments): return ids, segments"
    if not isinstance(out, tuple) or len(out) != 2:
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


def _build_case(len_a: int, len_b: int | None, cls: int = 101, sep: int = 102, V: int = 30522,
                stray: bool = False):
    """``stray``: a holds the [SEP] id and the [CLS] id itself (an id is just an int: nothing in the statement
    keeps them out of a sentence), so only positions, not values, tell where a ends."""
    def make(g, device):
        draw = [i for i in range(V) if i not in (cls, sep)]
        pick = torch.randint(0, len(draw), (len_a + (len_b or 0),), generator=g).tolist()
        toks = [draw[i] for i in pick]
        if stray:
            at = torch.randperm(len_a, generator=g)[:2].tolist()
            toks[at[0]] = sep
            if len(at) > 1:
                toks[at[1]] = cls
        return ((toks[:len_a], None if len_b is None else toks[len_a:], cls, sep), {})
    return make


BUILD_INPUTS = Check(
    task="build_inputs",
    what="[CLS] a [SEP] b [SEP] (or [CLS] a [SEP] when b is None), segments 0 for [CLS] a [SEP] and 1 for b [SEP]",
    reference=_build_ref,
    compare=_build_compare,
    cases=[sized("a of 4 ids, b of 3 (BERT's [CLS] 101, [SEP] 102)", _build_case, len_a=4, len_b=3,
                 floors={"len_a": 1, "len_b": 1}),
           sized("a single sentence of 5 ids, b = None", _build_case, len_a=5, len_b=None, floors={"len_a": 1}),
           sized("a of 5 ids that holds the [SEP] id 102 and the [CLS] id 101 itself, b of 3", _build_case,
                 len_a=5, len_b=3, stray=True, floors={"len_a": 2, "len_b": 1})],
    hidden_cases=[Case("fresh: a of 6, b of 9", _build_case(6, 9)),
                  Case("a and b of one id each", _build_case(1, 1)),
                  Case("a single id, b = None", _build_case(1, None)),
                  Case("a small vocabulary: [CLS] 1, [SEP] 2", _build_case(3, 4, cls=1, sep=2, V=20)),
                  Case("a long a (50 ids), a short b (2)", _build_case(50, 2)),
                  Case("a holds the [SEP] and [CLS] ids itself", _build_case(7, 4, stray=True))],
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
        Mutant(_build_with("by_value"), "found where segment A ends by looking for the [SEP] id: a sentence may "
                                        "hold that id itself; A is [CLS] a [SEP] by position, len(a) + 2 tokens"),
        Mutant(_build_with("none_as_empty"), "added a second [SEP] when b is None (treating it as an empty b): a "
                                             "single sentence is [CLS] a [SEP]"),
    ],
    forbidden=(_BERT.build_inputs,),
    forbidden_attrs=(*ATTRS, "build_inputs", "build_inputs_with_special_tokens",
                     "create_token_type_ids_from_sequences"),
    forbidden_modules=MODULES,
)
