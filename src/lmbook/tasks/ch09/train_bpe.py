"""Task 1 of exercise 9: training BPE."""

from __future__ import annotations

from collections import Counter

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_value
from ...grading.reproduce import sized
from .shared import BPE_FORBIDDEN, corpus, merge_ids, pretokenize, python_int, vocab_of


def train_ref(text: str, n_merges: int) -> list[tuple[int, int]]:
    """Brute force: after each merge, count every adjacent pair of every pre-token again, from scratch."""
    chunks = Counter(pretokenize(text))
    words = {chunk: list(chunk.encode("utf-8")) for chunk in chunks}
    merges: list[tuple[int, int]] = []
    for _ in range(n_merges):
        counts: Counter = Counter()
        for chunk, ids in words.items():
            for pair in zip(ids, ids[1:], strict=False):
                counts[pair] += chunks[chunk]
        if not counts or max(counts.values()) < 2:
            break
        best = max(counts.values())
        pair = min(p for p, c in counts.items() if c == best)
        new = 256 + len(merges)
        words = {chunk: merge_ids(ids, pair, new) for chunk, ids in words.items()}
        merges.append(pair)
    return merges


def _merge_overlapping(ids: list[int], pair: tuple[int, int], new: int) -> list[int]:
    out = []
    for i in range(len(ids)):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new)
        elif i > 0 and (ids[i - 1], ids[i]) == pair:
            continue  # the right half of a pair just merged
        else:
            out.append(ids[i])
    return out


def _train_with(pieces="pretokens", ties="smallest", overlap=False, recount=True, min_count=2, units="bytes"):
    def fn(text, n_merges):
        chunks = [text] if pieces == "whole" else pretokenize(text)
        if units == "chars":
            words = [[ord(c) for c in chunk] for chunk in chunks]
        else:
            words = [list(chunk.encode("utf-8")) for chunk in chunks]
        merges: list[tuple[int, int]] = []
        counts: Counter = Counter()
        for _ in range(n_merges):
            if recount or not merges:
                counts = Counter(p for w in words for p in zip(w, w[1:], strict=False))
            if not counts:
                break
            best = max(counts.values())
            if best < min_count:
                break
            tied = [p for p, c in counts.items() if c == best]  # in the order first seen
            pair = {"smallest": min(tied), "largest": max(tied), "first": tied[0]}[ties]
            new = 256 + len(merges)
            merges.append(pair)
            if not recount:  # the first counts, used up one pair after another
                del counts[pair]
                continue
            if overlap:  # every position where the pair starts becomes the new token: a a a → aa aa
                words = [_merge_overlapping(w, pair, new) for w in words]
            else:
                words = [merge_ids(w, pair, new) for w in words]
        return merges
    return fn


def _as_pairs(out) -> list[tuple[int, int]] | str:
    if isinstance(out, tuple):
        return "returned a tuple of merges, expected a list of them (the merges are made one after another)"
    if not isinstance(out, list):
        return f"returned {describe_value(out)}, expected a list of merges, each a tuple (left id, right id)"
    for i, p in enumerate(out):
        if not isinstance(p, tuple) or len(p) != 2:
            kind = f"a {type(p).__name__} of {len(p)}" if isinstance(p, list | tuple) else describe_value(p)
            return f"merge {i} is {kind}: each merge is a tuple of two ints (left id, right id), as Counter's keys are"
        for v in p:
            wrong = python_int(v)
            if wrong:
                return f"merge {i} holds {wrong}: each merge is a tuple of two Python ints"
    return list(out)


def _show(pair, vocab) -> str:
    return f"({pair[0]}, {pair[1]}) = {vocab.get(pair[0], b'?')!r} + {vocab.get(pair[1], b'?')!r}"


def _merges_compare(out, ref) -> str | None:
    pairs = _as_pairs(out)
    if isinstance(pairs, str):
        return pairs
    ref = [tuple(p) for p in ref]
    vocab = vocab_of(ref)
    for i, (got, want) in enumerate(zip(pairs, ref, strict=False)):
        if got != want:
            before = {0: "", 1: " (merge 0 is right)"}.get(i, f" (merges 0 to {i - 1} are right)")
            return f"merge {i} (id {256 + i}): you merged {_show(got, vocab)}, expected {_show(want, vocab)}{before}"
    if len(pairs) != len(ref):
        more = (f"; merge {len(ref)}, {_show(pairs[len(ref)], vocab)}, should not be there" if len(pairs) > len(ref)
                else f"; the next expected is {_show(ref[len(pairs)], vocab)}")
        return f"returned {len(pairs)} merges, expected {len(ref)} (the first {min(len(pairs), len(ref))} agree){more}"
    return None


def _text_case(text: str | None, n_merges: int, n_words: int = 0, unicode: bool = False):
    def make(g, device):
        return ((text if text is not None else corpus(g, n_words, unicode), n_merges), {})
    return make


TIES = "abab\ncdcd\nefef\nghgh\n" * 3 + "ab cd ef gh\n"  # words built alike: their pairs keep tying
RUNS = "aaaa aaa aaaaa aa\nzzz zzzz... mmm!!! 1111 111\n" * 3
UNICODE = "naïve café déjà vu, Ελληνικά, 日本語 日本 東京 👩‍👩‍👧 👩‍👩‍👧 🇫🇷🇫🇷 🙂🙂 🙂\n" * 3
WHITESPACE = "  x\n\n\t y  12 123 1234   \n    indented\n\n\n" * 4


def _train_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [sized("made-up text of 120 words, 30 merges", _text_case, text=None, n_merges=30, n_words=120,
                      floors={"n_merges": 1, "n_words": 2}),
                sized("'aaaa aaa aaaaa aa ...': runs of one letter, 12 merges", _text_case, text=RUNS, n_merges=12,
                      floors={"n_merges": 1}),
                sized("made-up text with accents, CJK and emoji, 40 merges", _text_case, text=None, n_merges=40,
                      n_words=150, unicode=True, floors={"n_merges": 1, "n_words": 2})]
    return [Case("fresh made-up text of 300 words, 60 merges", _text_case(None, 60, 300)),
            Case("fresh made-up text with accents, CJK and emoji, 60 merges", _text_case(None, 60, 250, True)),
            Case("four words built alike, many ties ('abab cdcd efef ghgh'), 12 merges", _text_case(TIES, 12)),
            Case("runs of one letter ('aaaa', 'zzz', '...'), 20 merges", _text_case(RUNS, 20)),
            Case("accents, Greek, CJK, emoji (several bytes each), 40 merges", _text_case(UNICODE, 40)),
            Case("whitespace runs, tabs, newlines, numbers, 25 merges", _text_case(WHITESPACE, 25)),
            Case("a short text: fewer merges are possible than asked (50)", _text_case("the cat, the hat\n", 50)),
            Case("every pre-token once: no pair occurs twice", _text_case("The quick brown fox jumps\n", 10)),
            Case("n_merges = 0", _text_case(None, 0, 40)),
            Case("one merge", _text_case(None, 1, 60))]


TRAIN_BPE = Check(
    task="train_bpe",
    what="merge the most frequent pair inside GPT-2's pre-tokens (ties: the smallest pair), left to right, count "
         "again; stop at n_merges or when no pair occurs twice",
    reference=train_ref,
    compare=_merges_compare,
    cases=_train_cases(hidden=False),
    hidden_cases=_train_cases(hidden=True),
    mutants=[
        Mutant(_train_with(pieces="whole"), "counted pairs across pre-token boundaries (the whole text as one "
                                            "sequence, e.g. a word's last letter with the next space): cut the text "
                                            "with GPT2_PATTERN.findall first and count pairs inside each piece"),
        Mutant(_train_with(ties="largest"), "broke ties towards the largest pair: among the pairs with the highest "
                                            "count, merge the smallest (left id, right id)"),
        Mutant(_train_with(ties="first"), "broke ties by the pair seen first (max over a Counter, or most_common, "
                                          "returns the first of the tied pairs): among the pairs with the highest "
                                          "count, merge the smallest (left id, right id)"),
        Mutant(_train_with(overlap=True), "merged overlapping occurrences ('a a a' became two 'aa' tokens, one "
                                          "byte counted twice): go left to right and, after a merge, skip both "
                                          "tokens of the pair, so 'a a a' becomes 'aa a'"),
        Mutant(_train_with(recount=False), "counted the pairs once, at the start: after each merge the counts "
                                           "change (pairs with the new token appear, merged ones vanish), so count "
                                           "again before choosing the next merge"),
        Mutant(_train_with(min_count=1), "kept merging pairs that occur only once: stop as soon as the most "
                                         "frequent pair occurs fewer than twice"),
        Mutant(_train_with(units="chars"), "worked on characters (ord(c)) instead of UTF-8 bytes: start each "
                                           "pre-token from list(piece.encode('utf-8')), so an emoji is 4 bytes, "
                                           "ids 0-255"),
    ],
    **BPE_FORBIDDEN,
)
