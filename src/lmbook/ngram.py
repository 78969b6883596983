"""Count-based n-gram language models, and why they run out of data.

An n-gram model predicts the next word from the previous ``n - 1`` words by
counting: P(w | h) is the fraction of times context h was followed by w in the
training text. Add-k smoothing pretends every word was seen ``k`` extra times
after every context, so that nothing gets probability zero:

    P(w | h) = (c(h, w) + k) / (c(h) + k V)

where c(h) = sum_w c(h, w) counts the times h occurs *as a context* and V is
the vocabulary size. The chapters use this model as the baseline a neural LM
must beat, and :func:`unseen_ngram_fraction` to show why counting fails as n
grows: most long n-grams of new text never occurred in training.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

Context = tuple[int, ...]


def _as_list(ids: Iterable[int]) -> list[int]:
    # Accept a torch tensor, a NumPy array or any iterable of ints; counting is done in plain Python.
    if hasattr(ids, "tolist"):
        return [int(i) for i in ids.tolist()]
    return [int(i) for i in ids]


def ngrams(ids: Iterable[int], n: int) -> list[Context]:
    """Every run of ``n`` consecutive ids, in order (``len(ids) - n + 1`` of them)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    seq = _as_list(ids)
    return [tuple(seq[i : i + n]) for i in range(len(seq) - n + 1)]


class NGramLM:
    """An add-k smoothed n-gram model over word ids ``0 .. vocab_size - 1``.

    ``n = 1`` is the unigram model (no context), ``n = 2`` the bigram model, and
    so on. ``k = 1`` is Laplace smoothing; ``k = 0`` gives the unsmoothed maximum
    likelihood estimate, under which any unseen n-gram has probability zero.
    """

    def __init__(self, n: int, vocab_size: int, k: float = 1.0) -> None:
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be at least 1, got {vocab_size}")
        if k < 0:
            raise ValueError(f"the smoothing constant k must be >= 0, got {k}")
        self.n = n
        self.vocab_size = vocab_size
        self.k = float(k)
        # context -> counts of each next word; only contexts seen in training are stored
        self.counts: dict[Context, np.ndarray] = {}

    @property
    def order(self) -> int:
        """Context length, n - 1: the number of previous words the model looks at."""
        return self.n - 1

    def fit(self, ids: Iterable[int]) -> NGramLM:
        """Count every n-gram of the token stream ``ids``; return ``self`` so calls can be chained."""
        self.counts = {}
        for gram in ngrams(ids, self.n):
            word = gram[-1]
            if not 0 <= word < self.vocab_size:
                raise ValueError(f"word id {word} is outside the vocabulary 0..{self.vocab_size - 1}")
            row = self.counts.get(gram[:-1])
            if row is None:
                row = self.counts[gram[:-1]] = np.zeros(self.vocab_size, dtype=np.int64)
            row[word] += 1
        return self

    def _context(self, context: Sequence[int]) -> Context:
        # Only the last n - 1 words matter: that is the Markov assumption of an n-gram model.
        ctx = tuple(_as_list(context))
        if len(ctx) < self.order:
            raise ValueError(f"a {self.n}-gram model needs {self.order} context words, got {len(ctx)}")
        return ctx[len(ctx) - self.order :]

    def next_word_probs(self, context: Sequence[int] = ()) -> np.ndarray:
        """P(w | context) for every word w, shape (vocab_size,); sums to 1.

        A context never seen in training has no counts, so every word gets
        k / (k V) = 1 / V. For k = 0 that ratio is undefined; we use the same
        uniform distribution, which is its limit as k -> 0.
        """
        row = self.counts.get(self._context(context))
        if row is None:
            return np.full(self.vocab_size, 1.0 / self.vocab_size)
        total = row.sum() + self.k * self.vocab_size
        return (row + self.k) / total

    def prob(self, word: int, context: Sequence[int] = ()) -> float:
        """P(word | context): the add-k estimate (c(h, w) + k) / (c(h) + k V)."""
        return float(self.next_word_probs(context)[word])

    def log_likelihood(self, ids: Iterable[int]) -> tuple[float, int]:
        """Sum of ln P(w_t | previous n - 1 words) over a token stream, and how many tokens were scored.

        The first n - 1 tokens have no full context and are skipped, exactly
        as a window-based neural LM skips them; so an n-gram model and a
        feedforward LM with window n - 1 are scored on the same targets.
        Returns ``-inf`` if some scored token has probability zero (possible only with k = 0).
        """
        total, count = 0.0, 0
        for gram in ngrams(ids, self.n):
            p = self.prob(gram[-1], gram[:-1])
            if p == 0.0:
                return float("-inf"), count + 1
            total += math.log(p)
            count += 1
        return total, count

    def cross_entropy(self, ids: Iterable[int]) -> float:
        """Mean negative log-likelihood per scored token, in nats."""
        total, count = self.log_likelihood(ids)
        if count == 0:
            raise ValueError(f"need more than {self.order} tokens to score a {self.n}-gram model")
        return -total / count

    def perplexity(self, ids: Iterable[int]) -> float:
        """exp(cross-entropy): the effective number of equally likely choices per token."""
        return math.exp(self.cross_entropy(ids))


def unseen_ngram_fraction(train: Iterable[int], test: Iterable[int], n: int) -> float:
    """Fraction of the n-grams in ``test`` (counted with repetition) that never occur in ``train``.

    For such n-grams a count-based model has no evidence at all: its estimate
    is pure smoothing. The fraction grows quickly with n, which is the data
    sparsity problem that motivates neural language models.
    """
    seen = set(ngrams(train, n))
    grams = ngrams(test, n)
    if not grams:
        raise ValueError(f"the test stream has fewer than {n} tokens")
    return sum(g not in seen for g in grams) / len(grams)
