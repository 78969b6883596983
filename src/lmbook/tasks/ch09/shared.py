"""What exercise 9's tasks share: GPT-2's pre-tokeniser, made-up text, merges, and id lists."""

from __future__ import annotations

import regex
import torch

from ... import bpe as _course_bpe
from ...grading.compare import describe_value
from ..common import COURSE, COURSE_ATTRS

_B = _course_bpe


# GPT-2's pre-tokeniser: contractions, letters (with one space before), digits, other symbols, whitespace runs
# (a run before a word leaves its last space to the word)
GPT2_PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
MODULES = (*COURSE, "lmbook.transformer", "lmbook.bpe", "lmbook.gpt", "tiktoken", "tiktoken_ext", "tokenizers",
           "transformers", "sentencepiece")
ATTRS = (*COURSE_ATTRS, "transformer", "bpe", "gpt", "tiktoken", "tokenizers", "transformers")
BPE_FORBIDDEN = dict(forbidden=(_B.train_bpe, _B.Tokenizer, _B.merge),
                      forbidden_attrs=(*ATTRS, "train_bpe", "Tokenizer", "load_gpt2"), forbidden_modules=MODULES)


_SYLLABLES = ("th", "e", "an", "in", "er", "on", "re", "at", "s", "t", "a", "o", "ing", "ed", "l", "st", "ou",
              "ch", "m", "p")
_UNICODE_WORDS = ("café", "naïve", "déjà", "Ελλάδα", "日本", "東京", "🙂", "👍🏽", "🇫🇷", "Привет")


def made_up_lexicon(g: torch.Generator, size: int = 24, unicode: bool = False) -> list[str]:
    """Made-up words of 1–3 syllables; ``unicode`` adds accented, Greek, Cyrillic and CJK words and emoji (several
    bytes each in UTF-8)."""
    words = ["".join(_SYLLABLES[int(torch.randint(0, len(_SYLLABLES), (1,), generator=g))]
                     for _ in range(1 + int(torch.randint(0, 3, (1,), generator=g)))) for _ in range(size)]
    return words + list(_UNICODE_WORDS) if unicode else words


def corpus(g: torch.Generator, n_words: int, unicode: bool = False, words: list[str] | None = None) -> str:
    """Made-up text: words of a small lexicon drawn with Zipf-like frequencies, separated by spaces and now and then
    punctuation ("...", "!!"), a newline, a number or a run of spaces."""
    def rand(k: int) -> int:
        return int(torch.randint(0, k, (1,), generator=g))

    words = words if words is not None else made_up_lexicon(g, unicode=unicode)
    weights = torch.tensor([1.0 / (r + 1) for r in range(len(words))])
    picks = torch.multinomial(weights, n_words, replacement=True, generator=g).tolist()
    out = []
    for i, w in enumerate(picks):
        word = words[w].capitalize() if rand(12) == 0 else words[w]
        sep = (" ", " ", " ", " ", " ", " ", ", ", "... ", "!! ", "\n", "   ", " 42 ")[rand(12)]
        out.append(word + (sep if i < n_words - 1 else "\n"))
    return "".join(out)


def pretokenize(text: str) -> list[str]:
    return GPT2_PATTERN.findall(text)


def merge_ids(ids: list[int], pair: tuple[int, int], new: int) -> list[int]:
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def vocab_of(merges) -> dict[int, bytes]:
    vocab = {i: bytes([i]) for i in range(256)}
    for i, (a, b) in enumerate(merges):
        vocab[256 + i] = vocab.get(a, b"?") + vocab.get(b, b"?")
    return vocab


def python_int(v) -> str | None:
    """None if ``v`` is a Python int (not a bool); otherwise what it is instead, in the student's terms."""
    if type(v) is int:
        return None
    if isinstance(v, torch.Tensor):
        return f"a tensor ({v.dtype}; .item() or .tolist() gives Python ints)"
    if type(v).__module__ == "numpy":
        return f"a numpy.{type(v).__name__} (int(...) makes a Python int)"
    return f"a {type(v).__name__}"


def as_ids(out, what: str = "a list of token ids") -> list[int] | str:
    """``out`` as a list of ints if it is one (a ``list`` of Python ints, as the statements ask), or what is
    wrong with it."""
    if isinstance(out, torch.Tensor):
        return f"returned a tensor of shape {tuple(out.shape)}, expected {what}, a Python list (.tolist() makes one)"
    if not isinstance(out, list):
        return f"returned {describe_value(out)}, expected {what}, a Python list"
    for i, v in enumerate(out):
        wrong = python_int(v)
        if wrong:
            return f"item {i} of your list is {wrong}, expected a Python int: every token id must be an int"
    return list(out)
