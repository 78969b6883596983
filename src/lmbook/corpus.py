"""A word-level corpus whose best possible perplexity is known exactly.

Text comes from a hidden Markov model (HMM) that lmbook defines: a small
"toy English" in which the verb agrees in number with a subject that may sit
many words back, behind a prepositional phrase of any length. Because we own
the generating process, the forward algorithm gives the exact probability of
any text under the *true* model, and hence the lowest perplexity any language
model could reach on it. No download, no licence, fully deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

EOS = "."


@dataclass
class Vocab:
    """A bijection between words and integer ids."""

    itos: list[str]
    stoi: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("vocabulary words must be unique")

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, words: str | list[str]) -> list[int]:
        if isinstance(words, str):
            words = words.split()
        unknown = [w for w in words if w not in self.stoi]
        if unknown:
            raise KeyError(f"words not in the vocabulary: {unknown[:5]}")
        return [self.stoi[w] for w in words]

    def decode(self, ids) -> str:
        return " ".join(self.itos[int(i)] for i in ids)


@dataclass
class HMM:
    """A hidden Markov model over words.

    ``A[i, j]`` = P(next state j | state i), ``B[i, w]`` = P(word w | state i),
    ``pi[i]`` = P(first state i).
    """

    states: list[str]
    vocab: Vocab
    pi: np.ndarray
    A: np.ndarray
    B: np.ndarray

    def __post_init__(self) -> None:
        for name, m in (("pi", self.pi), ("A", self.A), ("B", self.B)):
            if not np.allclose(m.sum(-1), 1.0):
                raise ValueError(f"rows of {name} must sum to 1")

    def sample(self, n_tokens: int, seed: int) -> np.ndarray:
        """Sample ``n_tokens`` word ids (a continuous stream of sentences)."""
        rng = np.random.default_rng(seed)
        n_states, n_words = self.B.shape
        cum_A, cum_B = self.A.cumsum(1), self.B.cumsum(1)
        out = np.empty(n_tokens, dtype=np.int64)
        s = rng.choice(n_states, p=self.pi)
        u = rng.random((n_tokens, 2))
        for t in range(n_tokens):
            out[t] = min(np.searchsorted(cum_B[s], u[t, 0], side="right"), n_words - 1)
            s = min(np.searchsorted(cum_A[s], u[t, 1], side="right"), n_states - 1)
        return out

    def token_log_probs(self, ids) -> np.ndarray:
        """ln P(w_t | w_1 .. w_{t-1}) for every position t (scaled forward algorithm)."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty(len(ids))
        alpha = self.pi * self.B[:, ids[0]]
        for t in range(len(ids)):
            if t > 0:
                alpha = (alpha @ self.A) * self.B[:, ids[t]]
            z = alpha.sum()
            out[t] = np.log(z) if z > 0 else -np.inf
            if z == 0.0:
                out[t + 1:] = -np.inf
                break
            alpha = alpha / z
        return out

    def log_prob(self, ids) -> float:
        """Exact natural-log probability of a word sequence."""
        return float(self.token_log_probs(ids).sum())

    def perplexity(self, ids) -> float:
        """Perplexity of the true model on ``ids``: the floor no model can beat on average."""
        return float(np.exp(-self.log_prob(ids) / len(ids)))

    def next_word_probs(self, context) -> np.ndarray:
        """P(next word | all of ``context``) under the true model."""
        ids = np.asarray(context, dtype=np.int64)
        alpha = self.pi * self.B[:, ids[0]]
        alpha = alpha / alpha.sum()
        for t in range(1, len(ids)):
            alpha = (alpha @ self.A) * self.B[:, ids[t]]
            alpha = alpha / alpha.sum()
        return (alpha @ self.A) @ self.B

    def masked_word_probs(self, ids, masked) -> np.ndarray:
        """P(w_t = v | every unmasked word) at each position t, shape (n, V): a masked LM's best possible answer.

        ``masked`` (n,) bool marks the hidden words; they are summed over (an emission of 1 in the
        forward-backward recursions), so each masked word is predicted from all the visible ones on both sides.
        Rows of unmasked positions are computed the same way and are rarely needed."""
        ids, masked = np.asarray(ids, dtype=np.int64), np.asarray(masked, dtype=bool)
        n = len(ids)
        emit = np.where(masked[:, None], 1.0, self.B[:, ids].T)  # (n, S): P(word_t | state), or 1 where hidden
        alpha, beta = np.empty((n, len(self.states))), np.empty((n, len(self.states)))
        a = self.pi * emit[0]
        alpha[0] = a / a.sum()
        for t in range(1, n):
            a = (alpha[t - 1] @ self.A) * emit[t]
            alpha[t] = a / a.sum()
        beta[n - 1] = 1.0
        for t in range(n - 2, -1, -1):
            b = self.A @ (emit[t + 1] * beta[t + 1])
            beta[t] = b / b.sum()
        # the state at t given every visible word except w_t itself: alpha before t's emission, times beta
        prior = np.vstack([self.pi, alpha[:-1] @ self.A]) * beta
        probs = (prior / prior.sum(1, keepdims=True)) @ self.B
        return probs / probs.sum(1, keepdims=True)


# The grammar's words. Nouns and verbs come in singular/plural pairs.
DETS_SG = ["a", "the", "one", "this"]
DETS_PL = ["the", "some", "two", "these"]
ADJS = ["big", "small", "old", "young", "red", "happy", "quiet", "clever"]
NOUNS_SG = ["cat", "dog", "bird", "child", "teacher", "farmer", "horse", "robot"]
NOUNS_PL = ["cats", "dogs", "birds", "children", "teachers", "farmers", "horses", "robots"]
PREPS = ["near", "with", "behind"]
VERBS_INTRANS = [("sleeps", "sleep"), ("runs", "run"), ("sings", "sing")]
VERBS_TRANS = [("sees", "see"), ("likes", "like"), ("chases", "chase")]


def toy_english() -> HMM:
    """The HMM behind :func:`load_corpus`.

    A sentence is ``DET ADJ* NOUN [PREP the ADJ* NOUN] VERB [DET ADJ* NOUN] .``
    The hidden state remembers the subject's number through the optional
    prepositional phrase, so predicting "sleeps" vs "sleep" can need a word
    arbitrarily far back: no fixed window is ever large enough.
    """
    words = ([EOS] + sorted(set(DETS_SG + DETS_PL)) + ADJS + NOUNS_SG + NOUNS_PL + PREPS
             + [v for pair in VERBS_INTRANS + VERBS_TRANS for v in pair])
    vocab = Vocab(list(dict.fromkeys(words)))
    # (state, {word: weight}, {next state: probability})
    spec: list[tuple[str, dict[str, float], dict[str, float]]] = [(EOS, {EOS: 1}, {"det_sg": 0.5, "det_pl": 0.5})]
    for n, dets, nouns, verb_i in (("sg", DETS_SG, NOUNS_SG, 0), ("pl", DETS_PL, NOUNS_PL, 1)):
        spec += [
            (f"det_{n}", _zipf(dets), {f"adj_{n}": 0.4, f"noun_{n}": 0.6}),
            (f"adj_{n}", _zipf(ADJS), {f"adj_{n}": 0.3, f"noun_{n}": 0.7}),
            (f"noun_{n}", _zipf(nouns), {f"prep_{n}": 0.4, f"vi_{n}": 0.3, f"vt_{n}": 0.3}),
            (f"prep_{n}", _zipf(PREPS), {f"pdet_{n}": 1.0}),
            (f"pdet_{n}", {"the": 1}, {f"padj_{n}": 0.5, f"pnoun_{n}": 0.5}),
            (f"padj_{n}", _zipf(ADJS), {f"padj_{n}": 0.45, f"pnoun_{n}": 0.55}),
            # the noun inside the phrase has either number: it must not decide the verb
            (f"pnoun_{n}", _zipf(NOUNS_SG + NOUNS_PL), {f"vi_{n}": 0.5, f"vt_{n}": 0.5}),
            (f"vi_{n}", _zipf([v[verb_i] for v in VERBS_INTRANS]), {EOS: 1.0}),
            (f"vt_{n}", _zipf([v[verb_i] for v in VERBS_TRANS]), {"odet": 1.0}),
        ]
    spec += [
        ("odet", _zipf(["the", "a", "some"]), {"oadj": 0.3, "onoun": 0.7}),
        ("oadj", _zipf(ADJS), {"oadj": 0.2, "onoun": 0.8}),
        ("onoun", _zipf(NOUNS_SG + NOUNS_PL), {EOS: 1.0}),
    ]
    states = [s for s, _, _ in spec]
    index = {s: i for i, s in enumerate(states)}
    A = np.zeros((len(states), len(states)))
    B = np.zeros((len(states), len(vocab)))
    for s, emit, nxt in spec:
        for w, p in emit.items():
            B[index[s], vocab.stoi[w]] = p
        for t, p in nxt.items():
            A[index[s], index[t]] = p
    B /= B.sum(1, keepdims=True)
    pi = np.zeros(len(states))
    pi[index[EOS]] = 1.0
    return HMM(states, vocab, pi, A, B)


def _zipf(words: list[str]) -> dict[str, float]:
    # Natural text is Zipfian: the k-th most common word has weight 1/k.
    return {w: 1.0 / (k + 1) for k, w in enumerate(words)}


@dataclass
class Corpus:
    """Train/validation/test splits of word ids, the vocabulary and the true model."""

    hmm: HMM
    train: torch.Tensor
    val: torch.Tensor
    test: torch.Tensor

    @property
    def vocab(self) -> Vocab:
        return self.hmm.vocab

    def floor_perplexity(self, split: str = "test") -> float:
        """The true model's perplexity on a split: no model can beat it on average."""
        return self.hmm.perplexity(getattr(self, split).numpy())


def load_corpus(n_train: int = 60_000, n_val: int = 10_000, n_test: int = 10_000, seed: int = 0) -> Corpus:
    """Generate the toy-English corpus, deterministically from ``seed``.

    Each split is an independent sample (different seeds), so a model cannot
    memorise the test text.
    """
    hmm = toy_english()
    splits = [torch.from_numpy(hmm.sample(n, seed=seed * 1000 + k)) for k, n in enumerate((n_train, n_val, n_test))]
    return Corpus(hmm, *splits)


def make_windows(ids: torch.Tensor, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All (context, next word) pairs: contexts of ``window`` ids, shape (N, window), targets (N,)."""
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    if len(ids) <= window:
        raise ValueError(f"need more than {window} tokens to make a window of {window}, got {len(ids)}")
    contexts = ids.unfold(0, window, 1)[:-1]
    return contexts.contiguous(), ids[window:].clone()


def sentence_windows(ids: torch.Tensor, length: int, count: int, seed: int = 0, eos: int = 0) -> torch.Tensor:
    """``count`` windows of ``length`` ids, each starting at an end of sentence (id ``eos``), shape (count, length).

    Starting at a sentence boundary, a window holds all the history the true model uses: after "." the
    hidden state is known, so ``hmm.token_log_probs`` of the window gives the floor at every position of it."""
    starts = (ids[: len(ids) - length] == eos).nonzero().flatten()
    if len(starts) < count:
        raise ValueError(f"only {len(starts)} sentence starts leave room for a window of {length}, asked for {count}")
    g = torch.Generator().manual_seed(seed)
    starts = starts[torch.randperm(len(starts), generator=g)[:count]].sort().values
    return torch.stack([ids[s : s + length] for s in starts])
