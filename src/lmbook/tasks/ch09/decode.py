"""Task 2 of exercise 9: BPE decoding."""

from __future__ import annotations

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_value
from ...grading.reproduce import sized
from .encode import EMOJI_TEXT, SPACES_TEXT, encode_ref
from .shared import BPE_FORBIDDEN, corpus, vocab_of
from .train_bpe import train_ref


def _decode_ref(ids, merges) -> str:
    vocab = vocab_of([tuple(p) for p in merges])
    return b"".join(vocab[int(i)] for i in ids).decode("utf-8", errors="replace")


def _decode_with(how: str):
    def fn(ids, merges):
        vocab = vocab_of([tuple(p) for p in merges])
        pieces = [vocab[int(i)] for i in ids]
        if how == "per_token":
            return "".join(p.decode("utf-8", errors="replace") for p in pieces)
        if how == "spaces":
            return " ".join(p.decode("utf-8", errors="replace") for p in pieces)
        data = b"".join(pieces)
        return {"latin1": lambda: data.decode("latin-1"), "ignore": lambda: data.decode("utf-8", errors="ignore"),
                "sig": lambda: data.decode("utf-8-sig", errors="replace")}[how]()
    return fn


def _text_compare(out, ref) -> str | None:
    if not isinstance(out, str):
        return f"returned {describe_value(out)}, expected a str"
    if out == ref:
        return None
    i = next((k for k, (a, b) in enumerate(zip(out, ref, strict=False)) if a != b), min(len(out), len(ref)))
    hint = " (U+FFFD, '\\ufffd', stands where the bytes are not valid UTF-8)" if "\ufffd" in ref[i:i + 20] else ""
    return (f"returned a text of {len(out)} characters, expected {len(ref)}; they differ from character {i}: you "
            f"returned {out[i:i + 20]!r}, expected {ref[i:i + 20]!r}{hint}")


def _decode_case(n_merges: int, text: str, cut: str = "none", chars: int | None = None):
    """The ids of ``text`` under merges learnt on made-up text; ``cut``: "end" drops the last byte of the last
    character (a multi-byte one), "middle" takes single bytes out of the middle of characters, "noise" adds ids
    whose bytes are not UTF-8 on their own."""
    text = text[:chars]

    def make(g, device):
        merges = train_ref(corpus(g, 200, unicode=True), n_merges)
        if cut == "end" and text:  # the last token replaced by its bytes, the last byte left out
            ids = encode_ref(text, merges)
            ids = ids[:-1] + list(vocab_of(merges)[ids[-1]][:-1])
        elif cut == "split":  # each character's bytes as separate ids, so characters straddle ids
            ids = list(text.encode("utf-8"))
        elif cut == "noise":
            ids = encode_ref(text, merges)
            ids = ids[:3] + [0xE6, 0x97] + ids[3:] + [0xF0, 0x9F, 0x99]  # two truncated multi-byte characters
        else:
            ids = encode_ref(text, merges)
        return ((ids, merges), {})
    return make


BOM_TEXT = "\ufeffhello wörld 🙂\n"


def _sized(name: str, n_merges: int, text: str, cut: str = "none") -> Case:
    return sized(name, _decode_case, n_merges=n_merges, text=text, cut=cut, chars=len(text),
                 floors={"n_merges": 0, "chars": 1})


def _decode_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [_sized("40 merges, accents, CJK and emoji", 40, EMOJI_TEXT),
                _sized("40 merges, ASCII with whitespace runs", 40, SPACES_TEXT),
                _sized("each byte its own id: characters cut across ids", 30, "café 🙂 日本\n", "split"),
                _sized("the last character cut short (its last byte missing)", 30, "café 🙂", "end"),
                _sized("a text that starts with a byte-order mark (U+FEFF, bytes EF BB BF)", 30, BOM_TEXT)]
    return [Case("fresh: 70 merges, accents, CJK and emoji", _decode_case(70, EMOJI_TEXT)),
            Case("ZWJ emoji and flags", _decode_case(30, "👩‍👩‍👧 👩‍👩‍👧 🇫🇷🇫🇷 🙂🙂🙂 ok\n")),
            Case("whitespace runs, tabs, newlines", _decode_case(60, SPACES_TEXT)),
            Case("each byte its own id", _decode_case(20, "naïve Ελλάδα 🇫🇷\n", "split")),
            Case("the last character cut short (its last byte missing): U+FFFD", _decode_case(40, "déjà vu 🙂", "end")),
            Case("ids whose bytes are not UTF-8 (truncated characters inside): U+FFFD",
                 _decode_case(40, "hello café 東京", "noise")),
            Case("no ids: the empty text", _decode_case(10, "")),
            Case("no merges", _decode_case(0, "plain bytes é\n")),
            Case("byte-order marks at the start and inside (U+FEFF)", _decode_case(40, "\ufeff\ufeffa \ufeff b\n"))]


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
        Mutant(_decode_with("sig"), "dropped the byte-order mark (U+FEFF) at the start ('utf-8-sig' does, and so "
                                    "does a strip): decode(ids) gives back the text that was encoded, every "
                                    "character of it; decode with 'utf-8' and leave the text as it is"),
    ],
    **BPE_FORBIDDEN,
)
