"""Checks for exercise 1 (chapter 1: the feedforward neural LM).

Each task's references are torch's own ops in float64, or closed forms,
never the course's own answers; mutants are the mistakes students make.
Usage in a notebook: ``from lmbook.grading.ch01 import check``, then
``check("log_softmax", log_softmax)``.
"""

from __future__ import annotations

import functools
import math
import time
import weakref
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .. import functional as lmbook_functional
from .. import word2vec as lmbook_word2vec
from ..corpus import HMM, Corpus, load_corpus, toy_english
from ..ffnn import FeedforwardLM
from ..ngram import NGramLM
from ..train import fit
from .checks import (
    Case,
    Check,
    CheckFailed,
    Mutant,
    Registry,
    bad_return_message,
    bad_window_message,
    describe_scalar_mismatch,
    describe_tensor_mismatch,
    find_forbidden_use,
    model_logits,
    not_implemented,
)
from .checks import randn as _randn

# The grader's own code (references, mutants) is never an answer. The course's answer to each task
# is named in that task's `forbidden`: using it earns nothing for that task, and only that task.
GRADER = ("lmbook.grading",)


def _logits(shape, scale=1.0, offset=0.0, dim=None):
    def make(g, device):
        x = _randn(shape, g, device, scale, offset)
        return ((x,), {} if dim is None else {"dim": dim})
    return make


# ----------------------------------------------------------------------------- Task 1: log-softmax

def _naive_log_softmax(x, dim=-1):
    return x - x.exp().sum(dim=dim, keepdim=True).log()


LOG_SOFTMAX = Check(
    task="log_softmax",
    what="numerically stable log-softmax along `dim`",
    reference=lambda x, dim=-1: torch.log_softmax(x, dim=dim),
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-4, dim=None),
    cases=[
        Case("a (4, 10) batch of logits", _logits((4, 10))),
        Case("a (2, 3, 7) tensor, dim=-1", _logits((2, 3, 7))),
        Case("a (5, 3) tensor with dim=0", _logits((5, 3), dim=0)),
        Case("large logits (around 1000)", _logits((3, 8), scale=10.0, offset=1000.0)),
    ],
    hidden_cases=[
        Case("a batch of one", _logits((1, 47))),
        Case("huge logits of both signs (|x| up to ~2e4)", _logits((4, 6), scale=5000.0)),
        Case("dim=1 of a (3, 5, 4) tensor", _logits((3, 5, 4), dim=1)),
        Case("a single class (log-softmax of one logit is 0)", _logits((4, 1))),
        Case("a wide vocabulary (5000 classes)", _logits((2, 5000), scale=3.0)),
        Case("a 1-D vector", _logits((11,))),
        Case("very negative logits (around -1000)", _logits((3, 9), scale=10.0, offset=-1000.0)),
    ],
    mutants=[
        Mutant(_naive_log_softmax, "exp overflows (or underflows) for large logits: subtract the maximum along "
                                   "`dim` before exponentiating (log-softmax is unchanged by that shift)"),
        Mutant(lambda x, dim=-1: torch.log(torch.softmax(x, dim=dim)),
               "log of softmax underflows: a tiny probability becomes 0 and its log -inf; compute "
               "x - max - log(sum(exp(x - max))) instead"),
        Mutant(lambda x, dim=-1: x - x.amax(dim=dim, keepdim=True),
               "you subtracted the maximum but not log(sum(exp(x - max))): the result is off by a constant"),
        Mutant(lambda x, dim=-1: torch.softmax(x, dim=dim),
               "returned probabilities (softmax), not their logarithms"),
        Mutant(lambda x, dim=-1: torch.log_softmax(x, dim=-1),
               "ignored the `dim` argument: always normalised over the last dimension"),
        Mutant(lambda x, dim=-1: torch.log_softmax(x, dim=0),
               "normalised over dimension 0 instead of `dim`"),
    ],
    forbidden=(lmbook_functional.log_softmax,),
    forbidden_attrs=("log_softmax", "logsumexp", "LogSoftmax"),
    forbidden_modules=GRADER,
)


# ----------------------------------------------------------------------------- Task 2: cross-entropy, perplexity

def _ce_ref(logits, targets, ignore_index=-100):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=ignore_index)


def _targets_case(shape, vocab, pad_frac=0.0, pad_id=-100, scale=1.0, keep_one=False):
    def make(g, device):
        logits = _randn((*shape, vocab), g, device, scale)
        targets = torch.randint(0, vocab, shape, generator=g)
        if pad_id >= 0:  # a real word id used as padding: no target may use it by accident
            targets = torch.randint(1, vocab, shape, generator=g)
        pad = torch.rand(shape, generator=g) < pad_frac
        if keep_one:
            pad[:] = True
            pad.view(-1)[0] = False
        targets[pad] = pad_id
        kwargs = {} if pad_id == -100 else {"ignore_index": pad_id}
        return ((logits, targets.to(device)), kwargs)
    return make


def _masked(logits, targets, ignore_index=-100):
    logp = torch.log_softmax(logits, -1).reshape(-1, logits.shape[-1])
    t = targets.reshape(-1)
    keep = t != ignore_index
    picked = logp[keep].gather(1, t[keep].unsqueeze(1)).squeeze(1)
    return picked, keep


CE_CASES = [
    Case("(8, 10) logits, no padding", _targets_case((8,), 10)),
    Case("(2, 5, 10) batch of sequences with padding (-100)", _targets_case((2, 5), 10, pad_frac=0.3)),
    Case("large logits (scale 100)", _targets_case((6,), 12, scale=100.0)),
]
CE_HIDDEN = [
    Case("a batch of one", _targets_case((1,), 47)),
    Case("padding id 0 passed as ignore_index=0", _targets_case((3, 6), 20, pad_frac=0.4, pad_id=0)),
    Case("every position but one is padding", _targets_case((4, 5), 9, keep_one=True)),
    Case("(3, 7, 47) with 20% padding", _targets_case((3, 7), 47, pad_frac=0.2)),
    Case("huge logits (scale 1000)", _targets_case((5,), 30, scale=1000.0)),
]
CE_MUTANTS = [
    Mutant(lambda lg, t, ignore_index=-100: _masked(lg, t, ignore_index)[0].sum().neg() / t.numel(),
           "averaged over padding positions too: divide by the number of non-padding targets"),
    Mutant(lambda lg, t, ignore_index=-100: _masked(lg, t, ignore_index)[0].sum().neg(),
           "returned the sum over positions; cross-entropy is the mean"),
    Mutant(lambda lg, t, ignore_index=-100: _masked(lg, t, ignore_index)[0].mean(),
           "sign error: returned the mean log-likelihood, not its negative"),
    Mutant(lambda lg, t, ignore_index=-100: _masked(lg, t, ignore_index)[0].neg().mean() / math.log(2),
           "measured in bits (log base 2); this course uses natural logs (nats)"),
    Mutant(lambda lg, t, ignore_index=-100: _masked(lg, t, ignore_index)[0].exp().neg().mean(),
           "averaged probabilities, not log-probabilities"),
]

CROSS_ENTROPY = Check(
    task="cross_entropy",
    what="mean negative log-likelihood over non-padding targets",
    reference=_ce_ref,
    compare=lambda out, ref: describe_scalar_mismatch(out, ref, rtol=1e-4, atol=1e-5),
    cases=CE_CASES, hidden_cases=CE_HIDDEN, mutants=CE_MUTANTS,
    forbidden=(lmbook_functional.cross_entropy, lmbook_functional.perplexity),
    forbidden_attrs=("cross_entropy", "nll_loss", "CrossEntropyLoss", "NLLLoss"),
    forbidden_modules=GRADER,
)

PERPLEXITY = Check(
    task="perplexity",
    what="exp of the mean negative log-likelihood",
    reference=lambda logits, targets, ignore_index=-100: math.exp(float(_ce_ref(logits, targets, ignore_index))),
    compare=lambda out, ref: describe_scalar_mismatch(out, ref, rtol=1e-3, atol=1e-6),
    cases=CE_CASES[:2], hidden_cases=CE_HIDDEN[:4],
    mutants=[
        Mutant(lambda lg, t, ignore_index=-100: 2 ** float(_ce_ref(lg, t, ignore_index)),
               "used 2 ** cross-entropy: with natural-log cross-entropy, perplexity is exp(cross-entropy)"),
        Mutant(lambda lg, t, ignore_index=-100: float(_ce_ref(lg, t, ignore_index)),
               "returned the cross-entropy itself; perplexity is its exponential"),
        Mutant(lambda lg, t, ignore_index=-100: math.exp(-float(_masked(lg, t, ignore_index)[0].sum())),
               "exponentiated the total, not the mean, negative log-likelihood"),
    ],
    forbidden=(lmbook_functional.cross_entropy, lmbook_functional.perplexity),
    forbidden_attrs=("cross_entropy", "nll_loss", "CrossEntropyLoss", "NLLLoss"),
    forbidden_modules=GRADER,
)


# ----------------------------------------------------------------------------- Task 3: FFNN forward pass

def _ffnn_case(batch, window, V, d, H, repeat=False):
    def make(g, device):
        context = torch.randint(0, V, (batch, window), generator=g)
        if repeat:
            context[:, 1:] = context[:, :1]
        weights = [_randn(s, g, device, 0.5) for s in ((V, d), (H, window * d), (H,), (V, H), (V,))]
        return ((context.to(device), *weights), {})
    return make


def _ffnn_ref(context, E, W, b, U, c):
    # torch's own layers, given the student's weights
    x = F.embedding(context, E).flatten(start_dim=1)
    return F.linear(torch.tanh(F.linear(x, W, b)), U, c)


def _ffnn_with(act=torch.tanh, flip=False, use_b=True, use_c=True, post=None):
    def fn(context, E, W, b, U, c):
        ctx = context.flip(1) if flip else context
        h = act(F.embedding(ctx, E).flatten(1) @ W.T + (b if use_b else 0))
        out = h @ U.T + (c if use_c else 0)
        return post(out) if post else out
    return fn


FFNN_FORWARD = Check(
    task="ffnn_forward",
    what="logits = U tanh(W z + b) + c, z = [e_{t-m}; ...; e_{t-1}]",
    reference=_ffnn_ref,
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-4, dim=None),
    cases=[
        Case("batch 4, window 3, V=12, d=5, H=7", _ffnn_case(4, 3, 12, 5, 7)),
        Case("window 1", _ffnn_case(6, 1, 10, 4, 8)),
    ],
    hidden_cases=[
        Case("a batch of one", _ffnn_case(1, 4, 15, 3, 6)),
        Case("window 5 with a repeated word", _ffnn_case(3, 5, 20, 4, 9, repeat=True)),
        Case("V=47, d=16, H=32, batch 64", _ffnn_case(64, 3, 47, 16, 32)),
    ],
    mutants=[
        Mutant(_ffnn_with(flip=True), "concatenated the window's embeddings in reverse order: keep e_1 first"),
        Mutant(_ffnn_with(act=lambda z: z), "left out the tanh non-linearity"),
        Mutant(_ffnn_with(act=torch.sigmoid), "used a sigmoid; this model uses tanh"),
        Mutant(_ffnn_with(act=torch.relu), "used ReLU; this model uses tanh"),
        Mutant(_ffnn_with(use_b=False), "left out the hidden bias b"),
        Mutant(_ffnn_with(use_c=False), "left out the output bias c"),
        Mutant(_ffnn_with(post=lambda z: torch.softmax(z, -1)), "returned probabilities; the task asks for logits"),
        Mutant(_ffnn_with(post=lambda z: torch.log_softmax(z, -1)),
               "returned log-probabilities; the task asks for logits (before any softmax)"),
    ],
    forbidden=(FeedforwardLM,),
    forbidden_attrs=("FeedforwardLM",),
    forbidden_modules=GRADER,
)


# ----------------------------------------------------------------------------- Task 4: SGNS loss

def _sgns_case(batch, k, d, scale=1.0, zeros=False):
    def make(g, device):
        shapes = ((batch, d), (batch, d), (batch, k, d))
        ts = [_randn(s, g, device, scale) * (0 if zeros else 1) for s in shapes]
        return (tuple(ts), {})
    return make


def _sgns_ref(v_c, u_o, u_neg):
    # Independent of the formula students write: k+1 binary classifications, via torch's BCE-with-logits.
    scores = torch.cat([(u_o * v_c).sum(-1, keepdim=True), torch.einsum("bkd,bd->bk", u_neg, v_c)], dim=1)
    labels = torch.zeros_like(scores)
    labels[:, 0] = 1.0
    return F.binary_cross_entropy_with_logits(scores, labels, reduction="none").sum(-1).mean()


def _sgns_with(neg_sign=-1.0, reduce="mean", naive=False, with_neg=True, neg_reduce="sum"):
    def fn(v_c, u_o, u_neg):
        logsig = (lambda z: torch.log(torch.sigmoid(z))) if naive else F.logsigmoid
        pos = logsig((u_o * v_c).sum(-1))
        neg = logsig(neg_sign * torch.einsum("bkd,bd->bk", u_neg, v_c))
        neg = neg.sum(-1) if neg_reduce == "sum" else neg.mean(-1)
        per = -(pos + (neg if with_neg else 0))
        return per.mean() if reduce == "mean" else per.sum()
    return fn


SGNS_LOSS = Check(
    task="sgns_loss",
    what="-log σ(u_o·v_c) - Σ_j log σ(-u_{n_j}·v_c), averaged over the batch",
    reference=_sgns_ref,
    compare=lambda out, ref: describe_scalar_mismatch(out, ref, rtol=1e-4, atol=1e-5),
    cases=[
        Case("batch 8, d=5, k=3 negatives", _sgns_case(8, 3, 5)),
        Case("a single negative (k=1)", _sgns_case(4, 1, 6)),
        Case("large dot products (|u·v| ~ 100)", _sgns_case(5, 4, 10, scale=4.0)),
    ],
    hidden_cases=[
        Case("a batch of one", _sgns_case(1, 5, 8)),
        Case("k=10, d=50", _sgns_case(16, 10, 50)),
        Case("huge dot products (|u·v| ~ 1000)", _sgns_case(3, 2, 20, scale=10.0)),
        Case("all-zero vectors (loss = (k+1) log 2)", _sgns_case(4, 3, 5, zeros=True)),
    ],
    mutants=[
        Mutant(_sgns_with(neg_sign=1.0), "used σ(u_k·v_c) for the negatives; noise words need σ(-u_k·v_c)"),
        Mutant(_sgns_with(reduce="sum"), "summed over the batch; the loss is the batch mean"),
        Mutant(_sgns_with(with_neg=False), "left out the negative samples' term"),
        Mutant(_sgns_with(naive=True), "log(sigmoid(x)) underflows to log(0) = -inf for large |x|: use "
                                       "torch.nn.functional.logsigmoid"),
        Mutant(_sgns_with(neg_reduce="mean"), "averaged over the k negatives; they are summed"),
    ],
    forbidden=(lmbook_word2vec.sgns_loss, lmbook_word2vec.SkipGram),
    forbidden_attrs=("sgns_loss", "SkipGram"),
    forbidden_modules=GRADER,
)


# ----------------------------------------------------------------------------- Task 5: a training run

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
    contexts = np.stack([stream[t - MAX_WINDOW:t] for t in positions])
    where = "fresh held-out text" if hidden else "held-out text"
    return EvalSet(torch.from_numpy(contexts), torch.from_numpy(stream[positions]), floor, math.exp(nll), where)


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
    ppl = math.exp(float(F.cross_entropy(logits.double(), ev.targets)))
    if not math.isfinite(ppl) or ppl > ev.target:
        return False, (f"train_lm: perplexity {ppl:.3f} on {ev.where}; the target is at most {ev.target:.3f} "
                       f"(a bigram model gets {ev.bigram:.3f}, the true model {ev.floor:.3f}).\n"
                       "  Try a window of 3 or more words, a few epochs, and Adam with lr around 3e-3.")
    return True, (f"✓ train_lm: perplexity {ppl:.3f} on {ev.where} (target ≤ {ev.target:.3f}; bigram {ev.bigram:.3f}, "
                  f"best possible {ev.floor:.3f}); trained in {seconds:.1f} s")


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
    forbidden_modules=GRADER,
)

CHECKS = [LOG_SOFTMAX, CROSS_ENTROPY, PERPLEXITY, FFNN_FORWARD, SGNS_LOSS, TRAIN_LM]
check = Registry(CHECKS)
