"""Task 5 of exercise 1: a training run, judged by the trained model's perplexity."""

from __future__ import annotations

import functools
import math
import time
import weakref
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ...corpus import HMM, Corpus, load_corpus, toy_english
from ...ffnn import FeedforwardLM
from ...grading.checks import Check, CheckFailed, find_forbidden_use, model_logits
from ...grading.verdict import bad_return_message, bad_window_message, not_implemented
from ...ngram import NGramLM
from ...train import fit

TRAIN_TIME_LIMIT_S = 180.0
MAX_WINDOW = 12  # the longest context the graders give a model
EVAL_POSITIONS = 10_000
# One training run serves the visible and the hidden test. Keyed by the function object itself, weakly:
# a redefined train_lm is a new object and trains afresh (an id() could be reused by it).
_trained: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def bigram_perplexity(train: torch.Tensor, test: torch.Tensor, vocab_size: int, k: float = 0.01) -> float:
    """An add-k bigram model's perplexity: the baseline a neural LM with context must beat."""
    return NGramLM(2, vocab_size, k).fit(train.tolist()).perplexity(test.tolist())


@dataclass(frozen=True)
class EvalSet:
    """Held-out (context, next word) pairs. The contexts never contain another pair's next word, so a
    model given all the contexts at once learns nothing about the words it is scored on."""

    contexts: torch.Tensor  # (N, MAX_WINDOW) word ids
    targets: torch.Tensor  # (N,) the next words, which only the grader holds
    floor: float  # the true model's perplexity on these targets (given all the text before each)
    bigram: float  # an add-k bigram model's, trained on the training split
    where: str
    unigram: float = math.inf  # word frequencies alone (no context), from the training split

    @property
    def target(self) -> float:
        """Close at least half the gap from a bigram model to the true model."""
        return self.floor + 0.5 * (self.bigram - self.floor)


@functools.lru_cache(maxsize=8)
def eval_set(hidden: bool, seed: int) -> EvalSet:
    """Fresh text from the true model, scored every MAX_WINDOW + 1 words."""
    corpus = load_corpus()
    stride = MAX_WINDOW + 1
    stream = corpus.hmm.sample(MAX_WINDOW + stride * EVAL_POSITIONS, seed=(10_000 if hidden else 20_000) + seed)
    positions = np.arange(MAX_WINDOW, len(stream), stride)[:EVAL_POSITIONS]
    floor = math.exp(-corpus.hmm.token_log_probs(stream)[positions].mean())
    bigram = NGramLM(2, len(corpus.vocab), 0.01).fit(corpus.train.tolist())
    nll = -np.mean([math.log(bigram.prob(int(stream[t]), (int(stream[t - 1]),))) for t in positions])
    counts = np.bincount(corpus.train.numpy(), minlength=len(corpus.vocab)) + 0.01
    unigram = math.exp(-np.mean(np.log(counts / counts.sum())[stream[positions]]))
    contexts = np.stack([stream[t - MAX_WINDOW:t] for t in positions])
    where = "fresh held-out text" if hidden else "held-out text"
    return EvalSet(torch.from_numpy(contexts), torch.from_numpy(stream[positions]), floor, math.exp(nll), where,
                   unigram)


def train_args() -> tuple:
    corpus = load_corpus()
    return corpus.train.clone(), len(corpus.vocab)


def judge_model(ev: EvalSet, logits, window: int, seconds: float) -> tuple[bool, str]:
    """(passed, message): does the trained model meet the target on ``ev``? In the student's terms."""
    if seconds > TRAIN_TIME_LIMIT_S:
        return False, (f"train_lm: training took {seconds:.0f} s; the limit is {TRAIN_TIME_LIMIT_S:.0f} s "
                       "on a laptop CPU. Use fewer epochs or a smaller model.")
    V = int(ev.targets.max()) + 1
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.shape[0] != len(ev.targets) \
            or logits.shape[1] < V:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        return False, (f"train_lm: your model returned {shape} for {len(ev.targets)} contexts of {window} words; "
                       "expected (B, V) logits")
    finite = torch.isfinite(logits).all(dim=1)
    if not finite.all():
        return False, (f"train_lm: your model's logits are NaN or inf for {int((~finite).sum())} of {len(finite)} "
                       "contexts: training diverged. Print the loss every few hundred steps: if it grows or becomes "
                       "nan, lower the learning rate; and never take the log of a probability that can be 0.")
    ppl = math.exp(min(float(F.cross_entropy(logits.double(), ev.targets)), 700.0))
    if ppl <= ev.target:
        return True, (f"✓ train_lm: perplexity {ppl:.3f} on {ev.where} (target ≤ {ev.target:.3f}; "
                      f"bigram {ev.bigram:.3f}, best possible {ev.floor:.3f}); trained in {seconds:.1f} s")
    return False, (f"train_lm: perplexity {ppl:.3f} on {ev.where}; the target is at most {ev.target:.3f} "
                   f"(a bigram model gets {ev.bigram:.3f}, the true model {ev.floor:.3f}).\n  "
                   + _diagnosis(ev, ppl, logits.shape[1], window))


def _diagnosis(ev: EvalSet, ppl: float, V: int, window: int) -> str:
    """What the model's perplexity says about what went wrong, from the worst symptom to the mildest."""
    if ppl > V:
        return (f"That is worse than guessing uniformly among the {V} words: the model is confidently wrong. "
                "Check that each context is paired with the word that follows it (not shifted by one or "
                "shuffled separately), and that the training loss goes down.")
    if ppl >= 0.97 * ev.unigram:
        return (f"That is the level of word frequencies alone (a model that ignores its context gets "
                f"{ev.unigram:.3f}): your model does not use its context. Check that the context words reach "
                "the model (the embeddings of the whole window, flattened) and that the loss is computed on its "
                "output for those contexts.")
    if window < 2:
        return ("A window of 1 word sees no more than a bigram model, so it cannot close the gap to the true "
                "model: use a window of 3 or more words.")
    if ppl > ev.bigram:
        return ("The model uses some context but does not yet beat a bigram model: it is under-trained. Train "
                "for more steps (a few epochs over the data), with Adam and a learning rate around 3e-3.")
    return ("The model beats a bigram model but not by enough: train a little longer, or give it a wider window "
            "or more hidden units.")


def _run_training(check: Check, answer, *, hidden: bool, seed: int, device: torch.device, verbose: bool) -> int:
    if answer not in _trained:
        start = time.perf_counter()
        try:
            result = answer(*train_args())
        except NotImplementedError:
            raise CheckFailed(not_implemented(check)) from None
        _trained[answer] = (result, time.perf_counter() - start)
    result, seconds = _trained[answer]
    if not (isinstance(result, tuple) and len(result) == 2 and callable(result[0]) and isinstance(result[1], int)):
        raise CheckFailed(bad_return_message(check, type(result).__name__))
    model, window = result
    reason = find_forbidden_use(model, check)
    if reason:
        raise CheckFailed(f"train_lm: not graded — your model {reason}.")
    if not 1 <= window <= MAX_WINDOW:
        raise CheckFailed(bad_window_message(check, window, MAX_WINDOW))
    ev = eval_set(hidden, seed)
    try:
        logits = model_logits(model, window, ev.contexts, device)
    except Exception as e:
        raise CheckFailed(f"train_lm: evaluating your model on ({window}-word) contexts raised "
                          f"{type(e).__name__}: {e}") from None
    passed, message = judge_model(ev, logits, window, seconds)
    if not passed:
        raise CheckFailed(message)
    if verbose:
        print(message)
    return 1


TRAIN_LM = Check(
    task="train_lm",
    what="a trained feedforward LM that beats the perplexity target",
    reference=lambda: None, compare=lambda out, ref: None, cases=(), hidden_cases=(),
    run=_run_training, probe="train", train_args=train_args, eval_set=eval_set, judge_model=judge_model,
    forbidden=(FeedforwardLM, fit, toy_english, load_corpus, HMM, Corpus),
    forbidden_attrs=("next_word_probs", "hmm", "FeedforwardLM", "token_log_probs"),
)
