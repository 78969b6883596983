"""Task 2 of exercise 9: BPE encoding."""

from __future__ import annotations

from collections import Counter

from ...grading.checks import Case, Check, Mutant
from ...grading.reproduce import sized
from .shared import BPE_FORBIDDEN, as_ids, corpus, made_up_lexicon, merge_ids, pretokenize, vocab_of
from .train_bpe import train_ref


def encode_ref(text: str, merges) -> list[int]:
    ranks = {tuple(p): r for r, p in enumerate(merges)}
    ids: list[int] = []
    for chunk in pretokenize(text):
        tokens = list(chunk.encode("utf-8"))
        while len(tokens) > 1:
            ranked = [ranks[p] for p in zip(tokens, tokens[1:], strict=False) if p in ranks]
            if not ranked:
                break
            r = min(ranked)
            tokens = merge_ids(tokens, tuple(merges[r]), 256 + r)
        ids.extend(tokens)
    return ids


def _longest_first(text: str, merges) -> list[int]:
    """Greedy longest match: at each position of a pre-token, the longest token of the vocabulary that fits."""
    by_bytes = {b: i for i, b in vocab_of([tuple(p) for p in merges]).items()}
    ids: list[int] = []
    for chunk in pretokenize(text):
        data, i = chunk.encode("utf-8"), 0
        while i < len(data):
            j = max(k for k in range(i + 1, len(data) + 1) if data[i:k] in by_bytes)
            ids.append(by_bytes[data[i:j]])
            i = j
    return ids


def _encode_with(pieces="pretokens", choose="rank", units="utf-8"):
    def fn(text, merges):
        ranks = {tuple(p): r for r, p in enumerate(merges)}
        chunks = {"pretokens": pretokenize(text), "whole": [text], "split": text.split()}[pieces]
        ids: list[int] = []
        for chunk in chunks:
            tokens = list(chunk.encode(units))
            while len(tokens) > 1:
                pairs = [p for p in zip(tokens, tokens[1:], strict=False) if p in ranks]
                if not pairs:
                    break
                if choose == "rank":
                    pair = min(pairs, key=ranks.get)
                elif choose == "frequent":  # the pair that occurs most often in this piece (first seen on ties)
                    pair = Counter(pairs).most_common(1)[0][0]
                elif choose == "latest":
                    pair = max(pairs, key=ranks.get)
                else:  # greedy: the longest token that matches at each position, left to right
                    return _longest_first(text, merges)
                tokens = merge_ids(tokens, pair, 256 + ranks[pair])
            ids.extend(tokens)
        return ids
    return fn


class _Ids(list):
    """The reference's ids, with the bytes each id stands for (to say which token differs)."""

    vocab: dict[int, bytes] = {}


def _encode_ref_shown(text, merges):
    out = _Ids(encode_ref(text, merges))
    out.vocab = vocab_of([tuple(p) for p in merges])
    return out


def _ids_compare(out, ref) -> str | None:
    ids = as_ids(out)
    if isinstance(ids, str):
        return ids
    vocab = getattr(ref, "vocab", None) or vocab_of([])
    ref = list(ref)
    if ids == ref:
        return None
    i = next((k for k, (a, b) in enumerate(zip(ids, ref, strict=False)) if a != b), min(len(ids), len(ref)))

    def tok(k, seq):
        return f"{seq[k]} = {vocab[seq[k]]!r}" if k < len(seq) and seq[k] in vocab else (
            str(seq[k]) if k < len(seq) else "nothing")
    return (f"returned {len(ids)} ids, expected {len(ref)}; the first difference is at position {i}: you returned "
            f"{tok(i, ids)}, expected {tok(i, ref)}")


def _encode_case(n_merges: int, text: str | None = None, n_words: int = 60, unicode: bool = True,
                 train_words: int = 200, chars: int | None = None):
    """Merges learnt (by the reference trainer) on made-up text, and a text to encode: ``text`` (its first
    ``chars`` characters), or more made-up text from the same lexicon (``unicode=False``: its ASCII words only)."""
    def make(g, device):
        words = made_up_lexicon(g, unicode=True)
        merges = train_ref(corpus(g, train_words, words=words), n_merges)
        if text is None:
            text_words = words if unicode else [w for w in words if w.isascii()]
            return ((corpus(g, n_words, words=text_words), merges), {})
        return ((text[:chars], merges), {})
    return make


# Merge 0 makes "bc" (256), merge 1 "ab" (257), merge 2 "abc" (258, from "ab" and "c"), ... By rank, "abc" becomes
# a + "bc" (merge 0 first; "a" + "bc" is no merge), never the longest token "abc": the order of the merges decides,
# not the length of the tokens they make, nor how often a pair occurs in the piece ("abcbc"), nor the latest merge.
CRAFTED_MERGES = [(98, 99), (97, 98), (257, 99), (32, 97), (256, 100), (99, 100)]
CRAFTED_TEXT = "abcbc abc abcd cab bcd ab\n"


def _crafted_case(text: str, chars: int | None = None):
    def make(g, device):
        return ((text[:chars], [tuple(m) for m in CRAFTED_MERGES]), {})
    return make


SPACES_TEXT = "  the  cat\n\n\tsat   on\nthe mat.   \n\n  \t x\n"
ACCENTS_TEXT = "café naïve déjà vu à l'été, Ça où\n"
EMOJI_TEXT = "café déjà naïve 🙂🙂 👍🏽 🇫🇷 日本 東京 Привет Ελλάδα\n"


def _encode_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [sized("50 merges, a text like the training text", _encode_case, n_merges=50, n_words=40,
                      floors={"n_merges": 1, "n_words": 1}),
                sized("40 merges, accents, CJK and emoji", _encode_case, n_merges=40, text=EMOJI_TEXT,
                      chars=len(EMOJI_TEXT), floors={"n_merges": 1, "chars": 1}),
                sized("40 merges, whitespace runs and newlines", _encode_case, n_merges=40, text=SPACES_TEXT,
                      chars=len(SPACES_TEXT), floors={"n_merges": 1, "chars": 1}),
                sized("30 merges, accented Latin letters (two bytes each in UTF-8)", _encode_case, n_merges=30,
                      text=ACCENTS_TEXT, chars=len(ACCENTS_TEXT), floors={"n_merges": 1, "chars": 1}),
                sized(f"5 merges made by hand, where the longest token is not the earliest merge: {CRAFTED_MERGES}",
                      _crafted_case, text=CRAFTED_TEXT, chars=len(CRAFTED_TEXT), floors={"chars": 1})]
    return [Case("fresh: 80 merges, a text like the training text", _encode_case(80, n_words=120)),
            Case("fresh: 60 merges, ASCII text", _encode_case(60, n_words=80, unicode=False)),
            Case("whitespace runs, tabs, newlines", _encode_case(60, SPACES_TEXT)),
            Case("accents, Greek, Cyrillic, CJK, emoji", _encode_case(70, EMOJI_TEXT)),
            Case("ZWJ emoji and flags", _encode_case(30, "👩‍👩‍👧 👩‍👩‍👧 🇫🇷🇫🇷 🙂🙂🙂 ok\n")),
            Case("no merges: the bytes themselves", _encode_case(0, "bytes: café 🙂\n")),
            Case("one character", _encode_case(20, "a")),
            Case("the empty text", _encode_case(20, "")),
            Case("words the merges were not learnt on, digits and symbols",
                 _encode_case(50, "Zyx qwv 3.14159 == <tag> && {x}  \n")),
            Case("merges made by hand, where the longest token is not the earliest merge",
                 _crafted_case("bcd abc cabc abcd  ab bc\n"))]


ENCODE = Check(
    task="encode",
    what="pre-tokenise, UTF-8 bytes, then merge each pre-token's lowest-rank pair until none is a merge",
    reference=_encode_ref_shown,
    compare=_ids_compare,
    cases=_encode_cases(hidden=False),
    hidden_cases=_encode_cases(hidden=True),
    mutants=[
        Mutant(_encode_with(pieces="whole"), "merged across pre-token boundaries (the whole text as one sequence): "
                                             "cut the text with GPT2_PATTERN.findall first and merge inside each "
                                             "piece, as training did"),
        Mutant(_encode_with(choose="frequent"), "merged the most frequent pair of the piece first: encoding replays "
                                                "training's order, so merge the pair of lowest rank (the earliest "
                                                "merge) first"),
        Mutant(_encode_with(choose="longest"), "took the longest token that matches at each position (greedy "
                                               "longest match): BPE merges by rank, the earliest merge first, "
                                               "which need not give the longest tokens"),
        Mutant(_encode_with(choose="latest"), "merged the pair of highest rank (the latest merge) first: merge the "
                                              "pair of lowest rank first, as training made them"),
        Mutant(_encode_with(pieces="split"), "cut the text with str.split(), which drops the spaces and newlines: "
                                             "cut it with GPT2_PATTERN.findall, whose pieces keep every character "
                                             "(' cat' carries its space)"),
        Mutant(_encode_with(units="latin-1"), "encoded the text as Latin-1: its bytes are UTF-8's, "
                                              "text.encode('utf-8') (an emoji is 4 bytes)"),
    ],
    **BPE_FORBIDDEN,
)
