"""A translation task that ships with the book: toy English into "Tarn", an SOV language.

Each sentence pair comes from one tree, read out in two word orders (a
synchronous grammar), so the translation is a function of the source, and
learnable exactly; what makes it hard is order:

    English (SVO)   NP_subj VERB [NP_obj]            NP = DET ADJ* NOUN [PREP NP']
    Tarn    (SOV)   NP_subj ga [NP_obj o] VERB       NP = [NP' POST] NOUN ADJ* DET

Tarn puts the verb last, marks subject (``ga``) and object (``o``), puts
adjectives and the determiner after the noun, and turns prepositional phrases
into postpositional ones *before* the noun they modify; a plural noun is
followed by ``ru``. Two clauses may be joined by "and"/``ke``. Sentences run
from 4 to 32 words (up to 39 are possible), so an encoder that squeezes a whole sentence into
one vector has to keep the first words until the last: the bottleneck of
chapter 3. To keep the source unambiguous, a phrase inside a phrase has no
phrase of its own.

    >>> en, tarn = sample_pairs(1, seed=3)[0]
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from .corpus import ADJS, DETS_PL, DETS_SG, NOUNS_PL, NOUNS_SG, PREPS, VERBS_INTRANS, VERBS_TRANS, Vocab

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"

# The Tarn lexicon: every English word's translation (verbs do not agree in number in Tarn).
LEXICON = {
    "a": "en", "one": "yun", "this": "ki", "the": "ta", "some": "sami", "two": "tu", "these": "kira",
    "big": "maro", "small": "piko", "old": "oru", "young": "wen", "red": "aka", "happy": "hapi",
    "quiet": "sizu", "clever": "kashi",
    "cat": "neko", "dog": "inu", "bird": "tori", "child": "ko", "teacher": "sensa", "farmer": "nofu",
    "horse": "uma", "robot": "robo",
    "near": "chika", "with": "tomo", "behind": "ushi",
    "sleeps": "nemu", "sleep": "nemu", "runs": "hashi", "run": "hashi", "sings": "uta", "sing": "uta",
    "sees": "mi", "see": "mi", "likes": "suki", "like": "suki", "chases": "oi", "chase": "oi",
    "and": "ke",
}
PLURAL, SUBJECT, OBJECT = "ru", "ga", "o"
SINGULAR_OF = dict(zip(NOUNS_PL, NOUNS_SG, strict=True))


@dataclass(frozen=True)
class NP:
    det: str
    adjs: tuple[str, ...]
    noun: str
    prep: str | None = None
    inner: NP | None = None  # the noun phrase of the prepositional phrase

    @property
    def plural(self) -> bool:
        return self.noun in NOUNS_PL

    def english(self) -> list[str]:
        pp = [self.prep, *self.inner.english()] if self.inner else []
        return [self.det, *self.adjs, self.noun, *pp]

    def tarn(self) -> list[str]:
        pp = [*self.inner.tarn(), LEXICON[self.prep]] if self.inner else []
        noun = [LEXICON[SINGULAR_OF.get(self.noun, self.noun)]] + ([PLURAL] if self.plural else [])
        return [*pp, *noun, *(LEXICON[a] for a in self.adjs), LEXICON[self.det]]


@dataclass(frozen=True)
class Clause:
    subj: NP
    verb: str
    obj: NP | None = None

    def english(self) -> list[str]:
        return [*self.subj.english(), self.verb, *(self.obj.english() if self.obj else [])]

    def tarn(self) -> list[str]:
        obj = [*self.obj.tarn(), OBJECT] if self.obj else []
        return [*self.subj.tarn(), SUBJECT, *obj, LEXICON[self.verb]]


def _np(rng: random.Random, depth: int) -> NP:
    plural = rng.random() < 0.4
    det = rng.choice(DETS_PL if plural else DETS_SG)
    k = rng.choice([0, 0, 1, 1, 2])
    adjs = tuple(rng.sample(ADJS, k=k)) if k else ()  # sample(k=0) draws nothing: skipping it is the same
    noun = rng.choice(NOUNS_PL if plural else NOUNS_SG)
    if depth == 0 and rng.random() < 0.6:
        return NP(det, adjs, noun, rng.choice(PREPS), _np(rng, 1))
    return NP(det, adjs, noun)


def _clause(rng: random.Random) -> Clause:
    subj = _np(rng, 0)
    number = 1 if subj.plural else 0
    if rng.random() < 0.5:
        return Clause(subj, rng.choice(VERBS_INTRANS)[number])
    return Clause(subj, rng.choice(VERBS_TRANS)[number], _np(rng, 0))


def _sentence(rng: random.Random) -> list[Clause]:
    """One clause, or two to be joined by "and"."""
    return [_clause(rng)] + ([_clause(rng)] if rng.random() < 0.5 else [])


def _joined(readings: list[list[str]], conjunction: str) -> list[str]:
    """Clauses read out in one language, joined by its word for "and"."""
    words = readings[0]
    for r in readings[1:]:
        words = [*words, conjunction, *r]
    return words


def _english(clauses: list[Clause]) -> list[str]:
    return _joined([c.english() for c in clauses], "and")


def _tarn(clauses: list[Clause]) -> list[str]:
    return _joined([c.tarn() for c in clauses], LEXICON["and"])


def sample_pair(rng: random.Random) -> tuple[list[str], list[str]]:
    """One (English, Tarn) pair: one clause, or two joined by "and"."""
    clauses = _sentence(rng)
    return _english(clauses), _tarn(clauses)


def sample_pairs(n: int, seed: int, min_len: int = 4, max_len: int = 32) -> list[tuple[list[str], list[str]]]:
    """``n`` distinct pairs whose English side has ``min_len`` to ``max_len`` words.

    Lengths are spread about evenly (so long sentences, where the bottleneck shows, are not rare): each
    length has a quota, and what the rarest lengths cannot fill goes to the others.
    """
    rng = random.Random(seed)
    lengths = range(min_len, max_len + 1)
    quota = {L: -(-n // len(lengths)) for L in lengths}  # ceil: the even share of each length
    pairs, seen = [], set()
    for attempt in range(60 * n + 1000):
        clauses = _sentence(rng)  # the same draws as sample_pair, but Tarn is read out only if kept
        en = _english(clauses)
        key = " ".join(en)
        if min_len <= len(en) <= max_len and key not in seen and (quota[len(en)] > 0 or attempt > 30 * n):
            quota[len(en)] -= 1
            seen.add(key)
            pairs.append((en, _tarn(clauses)))
            if len(pairs) == n:
                break
    if len(pairs) < n:
        raise ValueError(f"could not draw {n} distinct pairs of {min_len}-{max_len} words")
    rng.shuffle(pairs)
    return pairs


def vocabularies() -> tuple[Vocab, Vocab]:
    """(English, Tarn) vocabularies, each starting with <pad>=0, <bos>=1, <eos>=2."""
    en = [*DETS_SG, *DETS_PL, *ADJS, *NOUNS_SG, *NOUNS_PL, *PREPS,
          *(v for pair in VERBS_INTRANS + VERBS_TRANS for v in pair), "and"]
    tarn = [*LEXICON.values(), PLURAL, SUBJECT, OBJECT]
    return (Vocab([PAD, BOS, EOS, *dict.fromkeys(en)]), Vocab([PAD, BOS, EOS, *dict.fromkeys(tarn)]))


@dataclass
class TranslationData:
    train: list[tuple[list[str], list[str]]]
    val: list[tuple[list[str], list[str]]]
    test: list[tuple[list[str], list[str]]]
    src_vocab: Vocab
    tgt_vocab: Vocab


def load_translation(n_train: int = 20_000, n_val: int = 1_000, n_test: int = 1_000, seed: int = 0,
                     max_len: int = 32) -> TranslationData:
    """Train, validation and test pairs with no English sentence in two splits."""
    pairs = sample_pairs(n_train + n_val + n_test, seed, max_len=max_len)
    src_vocab, tgt_vocab = vocabularies()
    return TranslationData(pairs[:n_train], pairs[n_train:n_train + n_val], pairs[n_train + n_val:],
                           src_vocab, tgt_vocab)


def to_batch(sentences: list[list[str]], vocab: Vocab, bos: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded ids (B, T) ending in <eos> (and starting with <bos> if asked), and the lengths (B,)."""
    ids = [([vocab.stoi[BOS]] if bos else []) + vocab.encode(s) + [vocab.stoi[EOS]] for s in sentences]
    lengths = torch.tensor([len(x) for x in ids])
    out = torch.full((len(ids), int(lengths.max())), vocab.stoi[PAD], dtype=torch.long)
    for i, x in enumerate(ids):
        out[i, :len(x)] = torch.tensor(x)
    return out, lengths
