"""Checks for exercise 9 (chapter 9: GPT, decoder-only pretraining).

The references are written here, independently of the course's answers in ``lmbook.bpe`` and ``lmbook.gpt``:
a brute-force BPE trainer that recounts every pair after each merge, a byte-level encoder and decoder written
from the definition (the tests check them against ``lmbook.bpe`` and against tiktoken built from GPT-2's own
files), torch's ``nn.TransformerEncoderLayer`` for a GPT-2 block (pre-LN, causal, tanh GELU), and torch's
``F.scaled_dot_product_attention`` for attention with a KV cache. Usage in a notebook:
``from lmbook.tasks.ch09 import check``.

Conventions, as in the chapter:

- **BPE.** Ids 0–255 are the bytes; merge i (0-based) makes id 256 + i. A text is first cut into pre-tokens with
  GPT-2's pattern (``GPT2_PATTERN.findall(text)``); pairs are counted, and merged, inside a pre-token only. Training
  merges the most frequent pair (ties: the smallest (left id, right id)), every occurrence left to right without
  overlap, then counts again; it stops after ``n_merges`` merges, or earlier when no pair occurs twice. Encoding a
  pre-token repeatedly merges its adjacent pair of lowest rank (the earliest merge), every occurrence left to right,
  until none of its pairs is a merge. Decoding joins the ids' bytes and decodes them as UTF-8 once, with
  ``errors="replace"``.
- **Blocks.** Batch first, x (B, n, d); weights stored as ``nn.Linear`` stores them, (d_out, d_in), in a dict named
  as ``nn.TransformerEncoderLayer``'s ``state_dict()`` (a GPT-2 block is that layer with ``norm_first=True``, the
  tanh GELU and a causal mask); LayerNorm's ε is 1e-5; no dropout.
- **KV cache.** ``cache`` is None (nothing read yet) or ``{"k": K, "v": V}``, each (B, n_head, t, d_head): the
  keys and values of the t earlier positions, heads split as exercise 6 splits them. The n_new new positions come
  after them: new query i (position t + i) attends to keys 0 … t + i.
- **Fine-tuning.** GPT-1's input [start] a [delim] b [extract]; a right-padded batch's states h (B, n, d) are
  pooled at each sequence's last real token, h[b, lengths[b] − 1].
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from functools import partial

import regex
import torch
import torch.nn.functional as F
from torch import nn

from .. import bpe as _course_bpe
from .. import gpt as _course_gpt
from .. import transformer as _course_transformer
from ..grading.checks import Case, Check, Mutant, Registry
from ..grading.compare import describe_tensor_mismatch, describe_value, to_reference
from .ch05 import COURSE, COURSE_ATTRS, TORCH_ATTENTION, TORCH_ATTENTION_ATTRS
from .common import load_weights
from .common import randn as _randn
from .questions.ch09 import QUESTIONS

# GPT-2's pre-tokeniser: contractions, letters (with one space before), digits, other symbols, whitespace runs
# (a run before a word leaves its last space to the word)
GPT2_PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
NEG_INF = float("-inf")
_B, _G, _T = _course_bpe, _course_gpt, _course_transformer
MODULES = (*COURSE, "lmbook.transformer", "lmbook.bpe", "lmbook.gpt", "tiktoken", "tiktoken_ext", "tokenizers",
           "transformers", "sentencepiece")
ATTRS = (*COURSE_ATTRS, "transformer", "bpe", "gpt", "tiktoken", "tokenizers", "transformers")
_BPE_FORBIDDEN = dict(forbidden=(_B.train_bpe, _B.Tokenizer, _B.merge),
                      forbidden_attrs=(*ATTRS, "train_bpe", "Tokenizer", "load_gpt2"), forbidden_modules=MODULES)


# ----------------------------------------------------------------------------- text for the BPE tasks

_SYLLABLES = ("th", "e", "an", "in", "er", "on", "re", "at", "s", "t", "a", "o", "ing", "ed", "l", "st", "ou",
              "ch", "m", "p")
_UNICODE_WORDS = ("café", "naïve", "déjà", "Ελλάδα", "日本", "東京", "🙂", "👍🏽", "🇫🇷", "Привет")


def _lexicon(g: torch.Generator, size: int = 24, unicode: bool = False) -> list[str]:
    """Made-up words of 1–3 syllables; ``unicode`` adds accented, Greek, Cyrillic and CJK words and emoji (several
    bytes each in UTF-8)."""
    words = ["".join(_SYLLABLES[int(torch.randint(0, len(_SYLLABLES), (1,), generator=g))]
                     for _ in range(1 + int(torch.randint(0, 3, (1,), generator=g)))) for _ in range(size)]
    return words + list(_UNICODE_WORDS) if unicode else words


def _corpus(g: torch.Generator, n_words: int, unicode: bool = False, words: list[str] | None = None) -> str:
    """Made-up text: words of a small lexicon drawn with Zipf-like frequencies, separated by spaces and now and then
    punctuation ("...", "!!"), a newline, a number or a run of spaces."""
    def rand(k: int) -> int:
        return int(torch.randint(0, k, (1,), generator=g))

    words = words if words is not None else _lexicon(g, unicode=unicode)
    weights = torch.tensor([1.0 / (r + 1) for r in range(len(words))])
    picks = torch.multinomial(weights, n_words, replacement=True, generator=g).tolist()
    out = []
    for i, w in enumerate(picks):
        word = words[w].capitalize() if rand(12) == 0 else words[w]
        sep = (" ", " ", " ", " ", " ", " ", ", ", "... ", "!! ", "\n", "   ", " 42 ")[rand(12)]
        out.append(word + (sep if i < n_words - 1 else "\n"))
    return "".join(out)


def _pretokens(text: str) -> list[str]:
    return GPT2_PATTERN.findall(text)


def _merge_ids(ids: list[int], pair: tuple[int, int], new: int) -> list[int]:
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _vocab(merges) -> dict[int, bytes]:
    vocab = {i: bytes([i]) for i in range(256)}
    for i, (a, b) in enumerate(merges):
        vocab[256 + i] = vocab.get(a, b"?") + vocab.get(b, b"?")
    return vocab


# ----------------------------------------------------------------------------- Task 1: train_bpe


def _train_ref(text: str, n_merges: int) -> list[tuple[int, int]]:
    """Brute force: after each merge, count every adjacent pair of every pre-token again, from scratch."""
    chunks = Counter(_pretokens(text))
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
        words = {chunk: _merge_ids(ids, pair, new) for chunk, ids in words.items()}
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
        chunks = [text] if pieces == "whole" else _pretokens(text)
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
                words = [_merge_ids(w, pair, new) for w in words]
        return merges
    return fn


def _as_int(v) -> int | None:
    if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.is_floating_point():
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        return None
    return int(v)


def _as_pairs(out) -> list[tuple[int, int]] | str:
    if not isinstance(out, list | tuple):
        return f"returned {describe_value(out)}, expected a list of merges, each a pair (left id, right id)"
    pairs = []
    for i, p in enumerate(out):
        if not isinstance(p, list | tuple) or len(p) != 2 or None in (_as_int(p[0]), _as_int(p[1])):
            return f"merge {i} is {p!r}: each merge is a pair of two ints (left id, right id)"
        pairs.append((_as_int(p[0]), _as_int(p[1])))
    return pairs


def _show(pair, vocab) -> str:
    return f"({pair[0]}, {pair[1]}) = {vocab.get(pair[0], b'?')!r} + {vocab.get(pair[1], b'?')!r}"


def _merges_compare(out, ref) -> str | None:
    pairs = _as_pairs(out)
    if isinstance(pairs, str):
        return pairs
    ref = [tuple(p) for p in ref]
    vocab = _vocab(ref)
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
        return ((text if text is not None else _corpus(g, n_words, unicode), n_merges), {})
    return make


TIES = "abab\ncdcd\nefef\nghgh\n" * 3 + "ab cd ef gh\n"  # words built alike: their pairs keep tying
RUNS = "aaaa aaa aaaaa aa\nzzz zzzz... mmm!!! 1111 111\n" * 3
UNICODE = "naïve café déjà vu, Ελληνικά, 日本語 日本 東京 👩‍👩‍👧 👩‍👩‍👧 🇫🇷🇫🇷 🙂🙂 🙂\n" * 3
WHITESPACE = "  x\n\n\t y  12 123 1234   \n    indented\n\n\n" * 4


def _train_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("made-up text of 120 words, 30 merges", _text_case(None, 30, 120)),
                Case("'aaaa aaa aaaaa aa ...': runs of one letter, 12 merges", _text_case(RUNS, 12)),
                Case("made-up text with accents, CJK and emoji, 40 merges", _text_case(None, 40, 150, True))]
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
    reference=_train_ref,
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
    **_BPE_FORBIDDEN,
)


# ----------------------------------------------------------------------------- Task 2: encode and decode


def _encode_ref(text: str, merges) -> list[int]:
    ranks = {tuple(p): r for r, p in enumerate(merges)}
    ids: list[int] = []
    for chunk in _pretokens(text):
        tokens = list(chunk.encode("utf-8"))
        while len(tokens) > 1:
            ranked = [ranks[p] for p in zip(tokens, tokens[1:], strict=False) if p in ranks]
            if not ranked:
                break
            r = min(ranked)
            tokens = _merge_ids(tokens, tuple(merges[r]), 256 + r)
        ids.extend(tokens)
    return ids


def _decode_ref(ids, merges) -> str:
    vocab = _vocab([tuple(p) for p in merges])
    return b"".join(vocab[int(i)] for i in ids).decode("utf-8", errors="replace")


def _encode_with(pieces="pretokens", choose="rank", units="utf-8"):
    def fn(text, merges):
        ranks = {tuple(p): r for r, p in enumerate(merges)}
        chunks = {"pretokens": _pretokens(text), "whole": [text], "split": text.split()}[pieces]
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
                else:  # the latest merge first
                    pair = max(pairs, key=ranks.get)
                tokens = _merge_ids(tokens, pair, 256 + ranks[pair])
            ids.extend(tokens)
        return ids
    return fn


def _decode_with(how: str):
    def fn(ids, merges):
        vocab = _vocab([tuple(p) for p in merges])
        pieces = [vocab[int(i)] for i in ids]
        if how == "per_token":
            return "".join(p.decode("utf-8", errors="replace") for p in pieces)
        if how == "spaces":
            return " ".join(p.decode("utf-8", errors="replace") for p in pieces)
        data = b"".join(pieces)
        return {"latin1": lambda: data.decode("latin-1"), "ignore": lambda: data.decode("utf-8", errors="ignore"),
                "strict": lambda: data.decode("utf-8")}[how]()
    return fn


class _Ids(list):
    """The reference's ids, with the bytes each id stands for (to say which token differs)."""

    vocab: dict[int, bytes] = {}


def _encode_ref_shown(text, merges):
    out = _Ids(_encode_ref(text, merges))
    out.vocab = _vocab([tuple(p) for p in merges])
    return out


def _as_ids(out) -> list[int] | str:
    if isinstance(out, torch.Tensor):
        if out.dim() != 1:
            return f"returned a tensor of shape {tuple(out.shape)}, expected a list of token ids"
        out = out.tolist()
    if not isinstance(out, list | tuple):
        return f"returned {describe_value(out)}, expected a list of token ids (ints)"
    ids = [_as_int(v) for v in out]
    if None in ids:
        return f"returned {str(list(out))[:200]}: every token id must be an int"
    return ids


def _ids_compare(out, ref) -> str | None:
    ids = _as_ids(out)
    if isinstance(ids, str):
        return ids
    vocab = getattr(ref, "vocab", None) or _vocab([])
    ref = list(ref)
    if ids == ref:
        return None
    i = next((k for k, (a, b) in enumerate(zip(ids, ref, strict=False)) if a != b), min(len(ids), len(ref)))

    def tok(k, seq):
        return f"{seq[k]} = {vocab[seq[k]]!r}" if k < len(seq) and seq[k] in vocab else (
            str(seq[k]) if k < len(seq) else "nothing")
    return (f"returned {len(ids)} ids, expected {len(ref)}; the first difference is at position {i}: you returned "
            f"{tok(i, ids)}, expected {tok(i, ref)}")


def _text_compare(out, ref) -> str | None:
    if not isinstance(out, str):
        return f"returned {describe_value(out)}, expected a str"
    if out == ref:
        return None
    i = next((k for k, (a, b) in enumerate(zip(out, ref, strict=False)) if a != b), min(len(out), len(ref)))
    hint = " (U+FFFD, '\\ufffd', stands where the bytes are not valid UTF-8)" if "\ufffd" in ref[i:i + 20] else ""
    return (f"returned a text of {len(out)} characters, expected {len(ref)}; they differ from character {i}: you "
            f"returned {out[i:i + 20]!r}, expected {ref[i:i + 20]!r}{hint}")


def _encode_case(n_merges: int, text: str | None = None, n_words: int = 60, unicode: bool = True,
                 train_words: int = 200):
    """Merges learnt (by the reference trainer) on made-up text, and a text to encode: ``text``, or more made-up
    text from the same lexicon (``unicode=False``: its ASCII words only)."""
    def make(g, device):
        words = _lexicon(g, unicode=True)
        merges = _train_ref(_corpus(g, train_words, words=words), n_merges)
        if text is None:
            text_words = words if unicode else [w for w in words if w.isascii()]
            return ((_corpus(g, n_words, words=text_words), merges), {})
        return ((text, merges), {})
    return make


SPACES_TEXT = "  the  cat\n\n\tsat   on\nthe mat.   \n\n  \t x\n"
EMOJI_TEXT = "café déjà naïve 🙂🙂 👍🏽 🇫🇷 日本 東京 Привет Ελλάδα\n"


def _encode_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("50 merges, a text like the training text", _encode_case(50, n_words=40)),
                Case("40 merges, accents, CJK and emoji", _encode_case(40, EMOJI_TEXT)),
                Case("40 merges, whitespace runs and newlines", _encode_case(40, SPACES_TEXT))]
    return [Case("fresh: 80 merges, a text like the training text", _encode_case(80, n_words=120)),
            Case("fresh: 60 merges, ASCII text", _encode_case(60, n_words=80, unicode=False)),
            Case("whitespace runs, tabs, newlines", _encode_case(60, SPACES_TEXT)),
            Case("accents, Greek, Cyrillic, CJK, emoji", _encode_case(70, EMOJI_TEXT)),
            Case("ZWJ emoji and flags", _encode_case(30, "👩‍👩‍👧 👩‍👩‍👧 🇫🇷🇫🇷 🙂🙂🙂 ok\n")),
            Case("no merges: the bytes themselves", _encode_case(0, "bytes: café 🙂\n")),
            Case("one character", _encode_case(20, "a")),
            Case("the empty text", _encode_case(20, "")),
            Case("words the merges were not learnt on, digits and symbols",
                 _encode_case(50, "Zyx qwv 3.14159 == <tag> && {x}  \n"))]


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
        Mutant(_encode_with(choose="latest"), "merged the pair of highest rank (the latest merge) first: merge the "
                                              "pair of lowest rank first, as training made them"),
        Mutant(_encode_with(pieces="split"), "cut the text with str.split(), which drops the spaces and newlines: "
                                             "cut it with GPT2_PATTERN.findall, whose pieces keep every character "
                                             "(' cat' carries its space)"),
        Mutant(_encode_with(units="latin-1"), "encoded the text as Latin-1: its bytes are UTF-8's, "
                                              "text.encode('utf-8') (an emoji is 4 bytes)"),
    ],
    **_BPE_FORBIDDEN,
)


def _decode_case(n_merges: int, text: str, cut: str = "none"):
    """The ids of ``text`` under merges learnt on made-up text; ``cut``: "end" drops the last byte of the last
    character (a multi-byte one), "middle" takes single bytes out of the middle of characters, "noise" adds ids
    whose bytes are not UTF-8 on their own."""
    def make(g, device):
        merges = _train_ref(_corpus(g, 200, unicode=True), n_merges)
        if cut == "end":  # the last token replaced by its bytes, the last byte left out
            ids = _encode_ref(text, merges)
            ids = ids[:-1] + list(_vocab(merges)[ids[-1]][:-1])
        elif cut == "split":  # each character's bytes as separate ids, so characters straddle ids
            ids = list(text.encode("utf-8"))
        elif cut == "noise":
            ids = _encode_ref(text, merges)
            ids = ids[:3] + [0xE6, 0x97] + ids[3:] + [0xF0, 0x9F, 0x99]  # two truncated multi-byte characters
        else:
            ids = _encode_ref(text, merges)
        return ((ids, merges), {})
    return make


def _decode_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("40 merges, accents, CJK and emoji", _decode_case(40, EMOJI_TEXT)),
                Case("40 merges, ASCII with whitespace runs", _decode_case(40, SPACES_TEXT)),
                Case("each byte its own id: characters cut across ids", _decode_case(30, "café 🙂 日本\n", "split")),
                Case("the last character cut short (its last byte missing)", _decode_case(30, "café 🙂", "end"))]
    return [Case("fresh: 70 merges, accents, CJK and emoji", _decode_case(70, EMOJI_TEXT)),
            Case("ZWJ emoji and flags", _decode_case(30, "👩‍👩‍👧 👩‍👩‍👧 🇫🇷🇫🇷 🙂🙂🙂 ok\n")),
            Case("whitespace runs, tabs, newlines", _decode_case(60, SPACES_TEXT)),
            Case("each byte its own id", _decode_case(20, "naïve Ελλάδα 🇫🇷\n", "split")),
            Case("the last character cut short (its last byte missing): U+FFFD", _decode_case(40, "déjà vu 🙂", "end")),
            Case("ids whose bytes are not UTF-8 (truncated characters inside): U+FFFD",
                 _decode_case(40, "hello café 東京", "noise")),
            Case("no ids: the empty text", _decode_case(10, "")),
            Case("no merges", _decode_case(0, "plain bytes é\n"))]


DECODE = Check(
    task="decode",
    what="join the ids' bytes, then decode them as UTF-8 once with errors='replace'",
    reference=_decode_ref,
    compare=_text_compare,
    cases=_decode_cases(hidden=False),
    hidden_cases=_decode_cases(hidden=True),
    mutants=[
        Mutant(_decode_with("per_token"), "decoded each token on its own: a character whose bytes are split across "
                                          "tokens then becomes U+FFFD; join all the bytes first, then decode once"),
        Mutant(_decode_with("spaces"), "put a space between the tokens: the bytes are joined with nothing between "
                                       "them (a token carries its own space, ' cat')"),
        Mutant(_decode_with("latin1"), "decoded the bytes as Latin-1: they are UTF-8, "
                                       "data.decode('utf-8', errors='replace')"),
        Mutant(_decode_with("ignore"), "dropped the invalid bytes (errors='ignore'): use errors='replace', which "
                                       "shows each invalid sequence as U+FFFD"),
        Mutant(_decode_with("strict"), "decoded with errors='strict' (the default), which raises on bytes that "
                                       "are not valid UTF-8 (a character cut short): use errors='replace'"),
    ],
    **_BPE_FORBIDDEN,
)


# ----------------------------------------------------------------------------- Task 3: gpt_block


def _block_params(g, device, d: int, d_ff: int) -> dict:
    """A block's weights, named and ordered as nn.TransformerEncoderLayer's state_dict()."""
    return {"self_attn.in_proj_weight": _randn((3 * d, d), g, device, 1 / math.sqrt(d)),
            "self_attn.in_proj_bias": _randn((3 * d,), g, device, 0.5),
            "self_attn.out_proj.weight": _randn((d, d), g, device, 1 / math.sqrt(d)),
            "self_attn.out_proj.bias": _randn((d,), g, device, 0.5),
            "linear1.weight": _randn((d_ff, d), g, device, 1 / math.sqrt(d)),
            "linear1.bias": _randn((d_ff,), g, device, 0.5),
            "linear2.weight": _randn((d, d_ff), g, device, 1 / math.sqrt(d_ff)),
            "linear2.bias": _randn((d,), g, device, 0.5),
            "norm1.weight": _randn((d,), g, device, 0.3, 1.0), "norm1.bias": _randn((d,), g, device, 0.3),
            "norm2.weight": _randn((d,), g, device, 0.3, 1.0), "norm2.bias": _randn((d,), g, device, 0.3)}


def _block_case(B: int, n: int, d: int, n_head: int, d_ff: int, scale: float = 1.0, dtype=torch.float32):
    def make(g, device):
        x = _randn((B, n, d), g, device, scale)
        params = _block_params(g, device, d, d_ff)
        return ((x.to(dtype), {k: v.to(dtype) for k, v in params.items()}, n_head), {})
    return make


def _block_ref(x, params, n_head):
    """torch's encoder layer as a GPT-2 block: pre-LN, tanh GELU, a causal mask; evaluation mode."""
    d, d_ff, n = x.shape[-1], params["linear1.weight"].shape[0], x.shape[1]
    layer = nn.TransformerEncoderLayer(d, n_head, d_ff, dropout=0.0, activation=partial(F.gelu, approximate="tanh"),
                                       batch_first=True, norm_first=True, layer_norm_eps=1e-5)
    layer = load_weights(layer, {k: v.to(x.dtype) for k, v in params.items()}).eval()
    mask = nn.Transformer.generate_square_subsequent_mask(n, device=x.device, dtype=x.dtype)
    return layer(x, src_mask=mask, is_causal=True)


def _mha(h, p: dict, prefix: str, n_head: int, blocked, scale: float | None = None):
    """The mutants' multi-head self-attention; ``blocked`` (n, n) True where a query may not look."""
    B, n, d = h.shape
    w_q, w_k, w_v = p[f"{prefix}in_proj_weight"].chunk(3)
    b_q, b_k, b_v = p[f"{prefix}in_proj_bias"].chunk(3)
    q, k, v = ((h @ w.T + b).view(B, n, n_head, d // n_head).transpose(1, 2)
               for w, b in ((w_q, b_q), (w_k, b_k), (w_v, b_v)))
    scores = q @ k.transpose(-2, -1) / (scale or math.sqrt(d // n_head))
    if blocked is not None:
        scores = scores.masked_fill(blocked, NEG_INF)
    y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, n, d)
    return y @ p[f"{prefix}out_proj.weight"].T + p[f"{prefix}out_proj.bias"]


def _block_with(gelu="tanh", mask="causal", order="pre", residual="x", scale="d_head", norms=(1, 2)):
    def fn(x, params, n_head):
        p, n, d = params, x.shape[1], x.shape[-1]
        blocked = {"causal": torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1),
                   "strict": torch.ones(n, n, dtype=torch.bool, device=x.device).triu(0),
                   "none": None}[mask]

        def ln(h, i):
            return F.layer_norm(h, (d,), p[f"norm{i}.weight"], p[f"norm{i}.bias"], 1e-5)

        def attn(h):
            return _mha(h, p, "self_attn.", n_head, blocked, math.sqrt(d) if scale == "d" else None)

        def mlp(h):
            a = h @ p["linear1.weight"].T + p["linear1.bias"]
            a = torch.relu(a) if gelu == "relu" else F.gelu(a, approximate="tanh" if gelu == "tanh" else "none")
            return a @ p["linear2.weight"].T + p["linear2.bias"]

        n1, n2 = norms
        if order == "post":
            x = ln(x + attn(x), n1)
            return ln(x + mlp(x), n2)
        h = ln(x, n1)
        x = (h if residual == "ln" else x) + attn(h)
        h = ln(x, n2)
        return (h if residual == "ln" else x) + mlp(h)
    return fn


def _block_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("batch 2, n=5, d=8, n_head=2, d_ff=32", _block_case(2, 5, 8, 2, 32)),
                Case("batch 1, n=6, d=12, n_head=3, d_ff=48", _block_case(1, 6, 12, 3, 48))]
    return [Case("a batch of one, length one, d=8, n_head=2", _block_case(1, 1, 8, 2, 32)),
            Case("length 2, batch 3", _block_case(3, 2, 8, 4, 16)),
            Case("n_head = 1 (one head of size d)", _block_case(2, 5, 6, 1, 24)),
            Case("n_head = d (heads of size 1)", _block_case(2, 4, 4, 4, 16)),
            Case("d_ff < d", _block_case(2, 5, 8, 2, 4)),
            Case("large inputs (std 30)", _block_case(2, 5, 8, 2, 32, scale=30.0)),
            Case("float64 inputs, d=12, n_head=3", _block_case(2, 7, 12, 3, 48, dtype=torch.float64)),
            Case("batch 4, n=16, d=16, n_head=4, d_ff=64", _block_case(4, 16, 16, 4, 64))]


GPT_BLOCK = Check(
    task="gpt_block",
    what="x = x + attn(LN_1(x)); x = x + mlp(LN_2(x)), causal, tanh GELU: nn.TransformerEncoderLayer("
         "norm_first=True) with a causal mask",
    reference=_block_ref,
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-4, dim=None),
    cases=_block_cases(hidden=False),
    hidden_cases=_block_cases(hidden=True),
    mutants=[
        Mutant(_block_with(gelu="erf"), "used the exact (erf) GELU: GPT-2's is the tanh approximation, "
                                        "F.gelu(x, approximate='tanh')"),
        Mutant(_block_with(gelu="relu"), "used ReLU in the MLP: GPT-2's activation is the tanh GELU, "
                                         "F.gelu(x, approximate='tanh')"),
        Mutant(_block_with(mask="none"), "left out the causal mask: position t may attend only to positions ≤ t, "
                                         "or the model sees the tokens it must predict"),
        Mutant(_block_with(mask="strict"), "masked the diagonal too (triu(0), or tril(-1)): position t attends "
                                           "to itself as well, keys 0 … t; with the diagonal masked, position 0 "
                                           "sees nothing and its softmax is NaN"),
        Mutant(_block_with(order="post"), "wrote a post-LN block, LN(x + f(x)): GPT-2's block is pre-LN, "
                                          "x + f(LN(x)), and the residual stream x itself is never normalised"),
        Mutant(_block_with(residual="ln"), "added the normalised input as the residual, LN(x) + f(LN(x)): the "
                                           "residual carries x itself, x + f(LN(x))"),
        Mutant(_block_with(scale="d"), "scaled the attention scores by 1/sqrt(d_model): each head's scores are "
                                       "divided by sqrt(d_head), d_head = d / n_head"),
        Mutant(_block_with(norms=(2, 1)), "swapped the norms: norm1 goes before the attention, norm2 before the "
                                          "MLP"),
    ],
    # torch's F.layer_norm and F.gelu are allowed: the task is the block, not its parts
    forbidden=(*TORCH_ATTENTION, _G.Block, _G.CausalSelfAttention, _G.GPT, _T.EncoderBlock, _T.FeedForward),
    forbidden_attrs=(*ATTRS, *TORCH_ATTENTION_ATTRS, "Block", "CausalSelfAttention", "EncoderBlock", "FeedForward"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)


# ----------------------------------------------------------------------------- Task 4: cached_attention


def _attn_params(g, device, d: int) -> dict:
    """nn.MultiheadAttention's state_dict() names."""
    return {"in_proj_weight": _randn((3 * d, d), g, device, 1 / math.sqrt(d)),
            "in_proj_bias": _randn((3 * d,), g, device, 0.5),
            "out_proj.weight": _randn((d, d), g, device, 1 / math.sqrt(d)),
            "out_proj.bias": _randn((d,), g, device, 0.5)}


def project_kv(x, params: dict, n_head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """k, v (B, n_head, n, d_head) of the positions x (B, n, d): what a cache holds for them."""
    B, n, d = x.shape
    _, w_k, w_v = params["in_proj_weight"].chunk(3)
    _, b_k, b_v = params["in_proj_bias"].chunk(3)
    return tuple(F.linear(x, w, b).view(B, n, n_head, d // n_head).transpose(1, 2) for w, b in ((w_k, b_k), (w_v, b_v)))


def _sequence(g, device, B: int, t: int, n_new: int, d: int, n_head: int, scale: float, dtype):
    x = _randn((B, t + n_new, d), g, device, scale).to(dtype)
    params = {k: v.to(dtype) for k, v in _attn_params(g, device, d).items()}
    return x, params


def _cache_of(x_prev, params, n_head):
    if x_prev.shape[1] == 0:
        return None
    k, v = project_kv(x_prev, params, n_head)
    return {"k": k, "v": v}


def _cached_case(B: int, t: int, n_new: int, d: int, n_head: int, scale: float = 1.0, dtype=torch.float32):
    """A sequence of t + n_new positions: the cache holds the first t (their true k and v), x_new the rest."""
    def make(g, device):
        x, params = _sequence(g, device, B, t, n_new, d, n_head, scale, dtype)
        return ((x[:, t:].clone(), _cache_of(x[:, :t], params, n_head), params, n_head), {})
    return make


def _loop_case(prompt: int, step: int, seed: int, B: int = 2, d: int = 8, n_head: int = 2):
    """Step ``step`` of a generation loop over one fixed sequence (drawn from ``seed``, the same at every step):
    step 0 reads the prompt with no cache, step s ≥ 1 one new token with the cache of the prompt and s − 1 tokens."""
    def make(g, device):
        x, params = _sequence(torch.Generator().manual_seed(seed), device, B, prompt + 8, 0, d, n_head, 1.0,
                              torch.float32)
        t, n_new = (0, prompt) if step == 0 else (prompt + step - 1, 1)
        return ((x[:, t:t + n_new].clone(), _cache_of(x[:, :t], params, n_head), params, n_head), {})
    return make


def _cached_ref(x_new, cache, params, n_head):
    B, n_new, d = x_new.shape
    params = {k: v.to(x_new.dtype) for k, v in params.items()}
    w_q, w_k, w_v = params["in_proj_weight"].chunk(3)
    b_q, b_k, b_v = params["in_proj_bias"].chunk(3)
    q, k, v = (F.linear(x_new, w, b).view(B, n_new, n_head, d // n_head).transpose(1, 2)
               for w, b in ((w_q, b_q), (w_k, b_k), (w_v, b_v)))
    if cache is not None:
        k, v = torch.cat([cache["k"].to(k.dtype), k], dim=2), torch.cat([cache["v"].to(v.dtype), v], dim=2)
    t = k.shape[2] - n_new
    allowed = torch.ones(n_new, t + n_new, dtype=torch.bool, device=x_new.device).tril(diagonal=t)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    y = F.linear(y.transpose(1, 2).reshape(B, n_new, d), params["out_proj.weight"], params["out_proj.bias"])
    return y, {"k": k, "v": v}


def _cached_with(order="append_first", extend=True, mask="end", where="append", scale="d_head"):
    def fn(x_new, cache, params, n_head):
        B, n_new, d = x_new.shape
        w_q, w_k, w_v = params["in_proj_weight"].chunk(3)
        b_q, b_k, b_v = params["in_proj_bias"].chunk(3)
        q, k, v = ((x_new @ w.T + b).view(B, n_new, n_head, d // n_head).transpose(1, 2)
                   for w, b in ((w_q, b_q), (w_k, b_k), (w_v, b_v)))
        if cache is None:
            k_all, v_all = k, v
        elif where == "prepend":
            k_all, v_all = torch.cat([k, cache["k"]], dim=2), torch.cat([v, cache["v"]], dim=2)
        else:
            k_all, v_all = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
        # attention after appending, or (the mistake) over the cached keys only, the new ones appended after
        k_att, v_att = (k_all, v_all) if order == "append_first" or cache is None else (cache["k"], cache["v"])
        n_k = k_att.shape[2]
        scores = q @ k_att.transpose(-2, -1) / math.sqrt(d if scale == "d" else d // n_head)
        if mask == "end":
            allowed = torch.ones(n_new, n_k, dtype=torch.bool, device=x_new.device).tril(diagonal=n_k - n_new)
        elif mask == "start":
            allowed = torch.ones(n_new, n_k, dtype=torch.bool, device=x_new.device).tril()
        elif mask == "prefill_only":  # causal when there is no cache, no mask among several new tokens otherwise
            allowed = (torch.ones(n_new, n_k, dtype=torch.bool, device=x_new.device).tril() if cache is None
                       else torch.ones(n_new, n_k, dtype=torch.bool, device=x_new.device))
        else:
            allowed = torch.ones(n_new, n_k, dtype=torch.bool, device=x_new.device)
        if order != "append_first" and cache is not None:
            allowed = torch.ones(n_new, n_k, dtype=torch.bool, device=x_new.device)
        y = torch.softmax(scores.masked_fill(~allowed, NEG_INF), dim=-1) @ v_att
        y = y.transpose(1, 2).reshape(B, n_new, d) @ params["out_proj.weight"].T + params["out_proj.bias"]
        return y, ({"k": k_all, "v": v_all} if extend else cache)
    return fn


def _cached_compare(out, ref) -> str | None:
    if not isinstance(out, tuple | list) or len(out) != 2:
        return f"returned {describe_value(out)}, expected a tuple (y_new, cache)"
    y, cache = out
    problem = describe_tensor_mismatch(y, ref[0], rtol=1e-4, atol=1e-4, dim=None)
    if problem:
        return f"y_new: {problem}"
    if ref[1] is None:  # a mistake's output (the reference's cache is always a dict)
        return None if cache is None else f"cache: returned {describe_value(cache)}, expected None"
    if not isinstance(cache, dict) or not {"k", "v"} <= set(cache):
        return f"cache: returned {describe_value(cache)}, expected a dict {{'k': K, 'v': V}}"
    for name in ("k", "v"):
        want = to_reference(ref[1][name])  # inside a dict: to_reference does not reach it
        got = cache[name]
        if isinstance(got, torch.Tensor) and got.dim() == 4 and got.shape[2] != want.shape[2] \
                and tuple(got.shape[:2]) == tuple(want.shape[:2]):
            return (f"cache['{name}']: holds {got.shape[2]} positions, expected {want.shape[2]} (the t cached ones "
                    "and the n_new new ones)")
        problem = describe_tensor_mismatch(got, want, rtol=1e-4, atol=1e-4, dim=None)
        if problem:
            return f"cache['{name}']: {problem}"
    return None


def _cached_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("the prompt: no cache, 4 new positions, d=8, n_head=2", _cached_case(2, 0, 4, 8, 2)),
                Case("one new token after 5 cached positions", _cached_case(2, 5, 1, 8, 2)),
                Case("3 new tokens after 4 cached positions (causal among the new ones)", _cached_case(2, 4, 3, 8, 4)),
                *[Case(f"a generation loop over one sequence, step {s}: "
                       + ("the prompt of 3 tokens, no cache" if s == 0 else
                          f"one new token, the cache holding the prompt and {s - 1} generated"),
                       _loop_case(3, s, 9401)) for s in range(4)]]
    return [Case("a batch of one, no cache, one token (the first step)", _cached_case(1, 0, 1, 8, 2)),
            Case("fresh: no cache, 6 new positions", _cached_case(3, 0, 6, 12, 3)),
            Case("one new token after 1 cached position", _cached_case(2, 1, 1, 8, 2)),
            Case("5 new tokens after 3 cached positions", _cached_case(2, 3, 5, 8, 2)),
            Case("2 new tokens after 7 cached positions, n_head=1", _cached_case(2, 7, 2, 6, 1)),
            Case("n_head = d (heads of size 1), 3 new after 2", _cached_case(2, 2, 3, 4, 4)),
            Case("float64, 2 new after 6", _cached_case(2, 6, 2, 8, 2, dtype=torch.float64)),
            Case("large inputs (std 10), 1 new after 9", _cached_case(2, 9, 1, 8, 2, scale=10.0)),
            *[Case(f"a generation loop over one sequence, step {s}: "
                   + ("the prompt of 4 tokens, no cache" if s == 0 else
                      f"one new token, the cache holding the prompt and {s - 1} generated"),
                   _loop_case(4, s, 9453, B=3, d=12, n_head=3)) for s in range(6)]]


CACHED_ATTENTION = Check(
    task="cached_attention",
    what="the new queries attend to the cached keys and to the new ones up to themselves; the cache grows by n_new "
         "positions",
    reference=_cached_ref,
    compare=_cached_compare,
    cases=_cached_cases(hidden=False),
    hidden_cases=_cached_cases(hidden=True),
    mutants=[
        Mutant(_cached_with(order="attend_first"), "attended to the cached positions only and appended the new k, v "
                                                   "afterwards: a new token must see itself too (and the new tokens "
                                                   "before it), so append first, then attend"),
        Mutant(_cached_with(extend=False), "returned the cache as it came in: return it with the new positions' k "
                                           "and v appended (dim 2), t + n_new positions, for the next step"),
        Mutant(_cached_with(mask="start"), "aligned the causal mask at the start, torch.ones(n_new, t + n_new)"
                                           ".tril(): the new queries are the last n_new positions, so new query i "
                                           "sees keys 0 … t + i, .tril(diagonal=t)"),
        Mutant(_cached_with(where="prepend"), "put the new k, v before the cached ones: they come after, "
                                              "torch.cat([cache['k'], k_new], dim=2)"),
        Mutant(_cached_with(mask="prefill_only"), "left out the mask among several new tokens when there is a "
                                                  "cache: new query i must not see the new tokens after it "
                                                  "(keys 0 … t + i)"),
        Mutant(_cached_with(scale="d"), "scaled the scores by 1/sqrt(d_model): each head's scores are divided by "
                                        "sqrt(d_head)"),
    ],
    forbidden=(*TORCH_ATTENTION, _G.CausalSelfAttention, _G.KVCache, _G.Block, _G.GPT),
    forbidden_attrs=(*ATTRS, *TORCH_ATTENTION_ATTRS, "CausalSelfAttention", "KVCache"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)


# ----------------------------------------------------------------------------- Task 5: format_pair and pool_last


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
    ids = _as_ids(out)
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
    cases=[Case("a of 4 ids, b of 3", _format_case(4, 3)), Case("a of 2 ids, b of 5", _format_case(2, 5))],
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


def _pool_case(B: int, n: int, d: int, lengths=None, dtype=torch.float32):
    def make(g, device):
        lens = torch.tensor(lengths) if lengths is not None else torch.randint(1, n + 1, (B,), generator=g)
        if lengths is None:
            lens[int(torch.randint(0, B, (1,), generator=g))] = n  # the longest fills the batch
        h = _randn((B, n, d), g, device)
        pad = (torch.arange(n).unsqueeze(0) >= lens.unsqueeze(1)).to(device)
        h = torch.where(pad.unsqueeze(-1), 50.0 + 10.0 * h, h)  # made-up large states at padding
        return ((h.to(dtype), lens.to(device)), {})
    return make


def _pool_ref(h, lengths):
    idx = (lengths.long() - 1).view(-1, 1, 1).expand(-1, 1, h.shape[-1])
    return h.gather(1, idx).squeeze(1)


def _pool_with(mistake: str):
    def fn(h, lengths):
        B = h.shape[0]
        rows = torch.arange(B, device=h.device)
        if mistake == "last":
            return h[:, -1]
        if mistake == "first":
            return h[:, 0]
        if mistake == "no_minus_one":
            return h[rows, lengths]
        if mistake == "columns":
            return h[:, lengths - 1]
        if mistake == "mean_all":
            return h.mean(1)
        real = (torch.arange(h.shape[1], device=h.device) < lengths[:, None]).to(h.dtype)
        return (h * real[..., None]).sum(1) / real.sum(1, keepdim=True)
    return fn


POOL_LAST = Check(
    task="pool_last",
    what="row b of the output is h[b, lengths[b] − 1], the last real token's state",
    reference=_pool_ref,
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-6, atol=1e-6, dim=None),
    cases=[Case("batch 3, n=6, lengths (6, 2, 4), d=5", _pool_case(3, 6, 5, [6, 2, 4])),
           Case("batch 4, n=5, random lengths, d=8", _pool_case(4, 5, 8))],
    hidden_cases=[Case("a batch of one, no padding", _pool_case(1, 7, 6, [7])),
                  Case("all but one sequence of length 1", _pool_case(3, 6, 4, [1, 6, 1])),
                  Case("length one everywhere (n=1)", _pool_case(2, 1, 4, [1, 1])),
                  Case("fresh: batch 6, n=9, random lengths", _pool_case(6, 9, 16)),
                  Case("float64 states", _pool_case(3, 5, 8, dtype=torch.float64))],
    mutants=[Mutant(_pool_with("last"), "took the last position, h[:, -1]: in a right-padded batch it is padding; "
                                        "take position lengths[b] − 1 of each row"),
             Mutant(_pool_with("first"), "took the first position ([start]): under causal attention it has seen "
                                         "only itself; the last real token ([extract]) has read the whole input"),
             Mutant(_pool_with("no_minus_one"), "indexed with lengths instead of lengths − 1: the last real token "
                                                "of a sequence of length L is at position L − 1 (position L is "
                                                "padding, or past the end)"),
             Mutant(_pool_with("columns"), "indexed h[:, lengths - 1], which takes every sequence at every length "
                                           "(B, B, d): pair each row with its own position, "
                                           "h[torch.arange(B), lengths - 1]"),
             Mutant(_pool_with("mean_all"), "averaged over all positions, padding included: take the last real "
                                            "token's state"),
             Mutant(_pool_with("mean_real"), "averaged the real positions: GPT reads the last real token's state "
                                             "([extract]), which has attended to all the others")],
    forbidden=(_G.last_token_state, _G.GPTClassifier),
    forbidden_attrs=(*ATTRS, "last_token_state"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)

CHECKS = [TRAIN_BPE, ENCODE, DECODE, GPT_BLOCK, CACHED_ATTENTION, FORMAT_PAIR, POOL_LAST]
check = Registry(CHECKS + QUESTIONS)
