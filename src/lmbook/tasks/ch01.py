"""Checks for exercise 1 (chapter 1: the feedforward neural LM).

Each task's references are torch's own ops in float64, or closed forms,
never the course's own answers; mutants are the mistakes students make.
Usage in a notebook: ``from lmbook.tasks.ch01 import check``, then
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
from ..grading.checks import Case, Check, CheckFailed, Mutant, Registry, find_forbidden_use, model_logits
from ..grading.compare import describe_scalar_mismatch, describe_tensor_mismatch
from ..grading.verdict import bad_return_message, bad_window_message, not_implemented
from ..ngram import NGramLM
from ..train import fit
from .common import randn as _randn


def _logits(shape, scale=1.0, offset=0.0, dim=None, dtype=torch.float32, row_offsets=None, tie_row=False):
    def make(g, device):
        x = _randn(shape, g, device, scale, offset).to(dtype)
        if row_offsets is not None:  # rows far apart: one maximum for the whole tensor underflows the others
            x = x + torch.tensor(row_offsets, dtype=dtype, device=device).reshape(-1, *[1] * (len(shape) - 1))
        if tie_row:  # a row of equal logits: every class gets log(1/V)
            x[0] = 3.0
        return ((x,), {} if dim is None else {"dim": dim})
    return make


def _scalar_tensor(rtol: float, atol: float):
    """The statement asks for a tensor holding one value: a Python float is not one. (Its shape is not checked:
    a 0-dimensional tensor crosses the sandbox's wall as shape (1,) today.)"""
    return lambda out, ref: describe_scalar_mismatch(out, ref, rtol=rtol, atol=atol, accept=("tensor",))


# ----------------------------------------------------------------------------- Task 1: log-softmax

def _naive_log_softmax(x, dim=-1):
    return x - x.exp().sum(dim=dim, keepdim=True).log()


def _global_max_log_softmax(x, dim=-1):
    m = x.amax()
    total = (x - m).exp().sum() if dim is None else (x - m).exp().sum(dim=dim, keepdim=True)
    return x - m - total.log()


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
        Case("rows whose maxima differ by hundreds", _logits((4, 9), row_offsets=[-300.0, 0.0, 150.0, 40.0])),
        Case("float64 logits around 1000 (the result stays float64)",
             _logits((3, 6), scale=5.0, offset=1000.0, dtype=torch.float64)),
        Case("a row of equal logits (a tie: log(1/V) each)", _logits((3, 5), tie_row=True)),
        Case("dim=0 with columns far apart", _logits((6, 3), dim=0, scale=200.0)),
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
        Mutant(lambda x, dim=-1: torch.log(x.exp() / x.exp().sum(dim=dim, keepdim=True)),
               "computed log(exp(x) / sum(exp(x))) as written: exp overflows to inf / inf = NaN for large logits "
               "(and underflows to 0 / 0 for very negative ones); subtract the maximum along `dim` first"),
        Mutant(lambda x, dim=-1: _global_max_log_softmax(x, None),
               "normalised by the sum over the whole tensor, not along `dim`: each slice along `dim` must sum to "
               "1 on its own"),
        Mutant(_global_max_log_softmax, "subtracted the maximum of the whole tensor, not each row's maximum along "
                                        "`dim`: rows far below the overall maximum underflow to log(0) = -inf"),
    ],
    keep_dtype=True,
    forbidden=(lmbook_functional.log_softmax,),
    forbidden_attrs=("log_softmax", "logsumexp", "LogSoftmax"),
)


# ----------------------------------------------------------------------------- Task 2: cross-entropy, perplexity

def _ce_ref(logits, targets, ignore_index=-100):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=ignore_index)


def _targets_case(shape, vocab, pad_frac=0.0, pad_id=-100, scale=1.0, keep_one=False, pad_scale=None,
                  dtype=torch.float32, lengths=None):
    def make(g, device):
        logits = _randn((*shape, vocab), g, device, scale).to(dtype)
        targets = torch.randint(0, vocab, shape, generator=g)
        if pad_id >= 0:  # a real word id used as padding: no target may use it by accident
            targets = torch.randint(1, vocab, shape, generator=g)
        pad = torch.rand(shape, generator=g) < pad_frac
        if keep_one:
            pad[:] = True
            pad.view(-1)[0] = False
        if lengths is not None:  # sentences of different lengths, padded at the end
            pad = torch.arange(shape[-1]) >= torch.tensor(lengths)[:, None]
        targets[pad] = pad_id
        if pad_scale is not None:  # padded positions' logits far above the real ones: they dominate if counted
            logits[pad.to(device)] = _randn((int(pad.sum()), vocab), g, device, pad_scale).to(dtype)
        kwargs = {} if pad_id == -100 else {"ignore_index": pad_id}
        return ((logits, targets.to(device)), kwargs)
    return make


def _naive_logp(x):
    return x - x.exp().sum(-1, keepdim=True).log()


def _masked(logits, targets, ignore_index=-100, logp_of=lambda x: torch.log_softmax(x, -1)):
    logp = logp_of(logits).reshape(-1, logits.shape[-1])
    t = targets.reshape(-1)
    keep = t != ignore_index
    picked = logp[keep].gather(1, t[keep].unsqueeze(1)).squeeze(1)
    return picked, keep


CE_CASES = [
    Case("(8, 10) logits, no padding", _targets_case((8,), 10)),
    Case("(2, 5, 10): sentences of lengths 5 and 2, padded with -100", _targets_case((2, 5), 10, lengths=[5, 2])),
    Case("large logits (scale 100)", _targets_case((6,), 12, scale=100.0)),
]
CE_HIDDEN = [
    Case("a batch of one", _targets_case((1,), 47)),
    Case("padding id 0 passed as ignore_index=0", _targets_case((3, 6), 20, pad_frac=0.4, pad_id=0)),
    Case("every position but one is padding", _targets_case((4, 5), 9, keep_one=True)),
    Case("(3, 7, 47) with 20% padding", _targets_case((3, 7), 47, pad_frac=0.2)),
    Case("huge logits (scale 1000)", _targets_case((5,), 30, scale=1000.0)),
    Case("padded positions' logits far above the real ones (scale 1e4)",
         _targets_case((3, 6), 11, pad_frac=0.5, pad_scale=1e4)),
    Case("float64 logits, ignore_index=0", _targets_case((2, 4), 8, pad_frac=0.3, pad_id=0, dtype=torch.float64)),
]
def _per_sentence_ce(logits, targets, ignore_index=-100):
    """The mean of each sentence's mean (a 1-D batch of targets is one sentence)."""
    if targets.dim() == 1:
        logits, targets = logits[None], targets[None]
    logits, targets = logits.reshape(-1, *logits.shape[-2:]), targets.reshape(-1, targets.shape[-1])
    return torch.stack([-_masked(lg, t, ignore_index)[0].mean() for lg, t in zip(logits, targets, strict=True)]).mean()


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
    Mutant(lambda lg, t, ignore_index=-100: _masked(lg, t, -100)[0].neg().mean(),
           "compared the targets with -100 instead of the `ignore_index` argument: padding marked with another "
           "id was counted as words"),
    Mutant(lambda lg, t, ignore_index=-100: _masked(lg, t, ignore_index, _naive_logp)[0].neg().mean(),
           "exp overflows for large logits: compute the log-probabilities stably (subtract each row's maximum "
           "first, as in Task 1)"),
    Mutant(_per_sentence_ce, "averaged each sentence's words, then the sentences: every real word of the batch counts "
                             "the same, so divide the batch's total by its number of non-padding targets"),
]

CROSS_ENTROPY = Check(
    task="cross_entropy",
    what="mean negative log-likelihood over non-padding targets",
    reference=_ce_ref,
    compare=_scalar_tensor(rtol=1e-4, atol=1e-5),  # the statement: a tensor holding one value
    cases=CE_CASES, hidden_cases=CE_HIDDEN, mutants=CE_MUTANTS,
    forbidden=(lmbook_functional.cross_entropy, lmbook_functional.perplexity),
    forbidden_attrs=("cross_entropy", "nll_loss", "CrossEntropyLoss", "NLLLoss"),
)

PERPLEXITY = Check(
    task="perplexity",
    what="exp of the mean negative log-likelihood",
    reference=lambda logits, targets, ignore_index=-100: math.exp(float(_ce_ref(logits, targets, ignore_index))),
    # the statement: a number (a Python float; a NumPy float is one too), not a tensor
    compare=lambda out, ref: describe_scalar_mismatch(out, ref, rtol=1e-3, atol=1e-6, accept=("number",)),
    cases=CE_CASES[:2], hidden_cases=[*CE_HIDDEN[:4], *CE_HIDDEN[5:7]],  # not scale 1000: exp(CE) overflows
    mutants=[
        Mutant(lambda lg, t, ignore_index=-100: 2 ** float(_ce_ref(lg, t, ignore_index)),
               "used 2 ** cross-entropy: with natural-log cross-entropy, perplexity is exp(cross-entropy)"),
        Mutant(lambda lg, t, ignore_index=-100: float(_ce_ref(lg, t, ignore_index)),
               "returned the cross-entropy itself; perplexity is its exponential"),
        Mutant(lambda lg, t, ignore_index=-100: math.exp(-float(_masked(lg, t, ignore_index)[0].sum())),
               "exponentiated the total, not the mean, negative log-likelihood"),
        Mutant(lambda lg, t, ignore_index=-100: float(_masked(lg, t, ignore_index)[0].neg().exp().mean()),
               "averaged the per-word perplexities exp(-log p); perplexity is exp of the average negative "
               "log-likelihood (a geometric mean of 1/p, not an arithmetic one)"),
        Mutant(lambda lg, t, ignore_index=-100: math.exp(float(CE_MUTANTS[0].fn(lg, t, ignore_index))),
               "averaged over padding positions too: divide by the number of non-padding targets"),
        Mutant(lambda lg, t, ignore_index=-100: math.exp(float(_ce_ref(lg, t))),
               "did not pass `ignore_index` on: padding marked with another id than -100 was counted as words"),
        Mutant(lambda lg, t, ignore_index=-100: 1.0 / float(_masked(lg, t, ignore_index)[0].exp().mean()),
               "took 1 / (the average probability of the targets): perplexity is exp of the average negative "
               "log-probability, which weighs the unlikely words much more"),
    ],
    forbidden=(lmbook_functional.cross_entropy, lmbook_functional.perplexity),
    forbidden_attrs=("cross_entropy", "nll_loss", "CrossEntropyLoss", "NLLLoss"),
)


# ----------------------------------------------------------------------------- Task 3: FFNN forward pass

def _ffnn_case(batch, window, V, d, H, repeat=False, dtype=torch.float32):
    def make(g, device):
        context = torch.randint(0, V, (batch, window), generator=g)
        if repeat:
            context[:, 1:] = context[:, :1]
        weights = [_randn(s, g, device, 0.5).to(dtype) for s in ((V, d), (H, window * d), (H,), (V, H), (V,))]
        return ((context.to(device), *weights), {})
    return make


def _ffnn_ref(context, E, W, b, U, c):
    # torch's own layers, given the student's weights
    x = F.embedding(context, E).flatten(start_dim=1)
    return F.linear(torch.tanh(F.linear(x, W, b)), U, c)


def _ffnn_with(act=torch.tanh, flip=False, use_b=True, use_c=True, post=None, b_outside=False, interleave=False):
    def fn(context, E, W, b, U, c):
        ctx = context.flip(1) if flip else context
        emb = F.embedding(ctx, E)
        z = emb.transpose(1, 2).flatten(1) if interleave else emb.flatten(1)
        h = act(z @ W.T + (b if use_b and not b_outside else 0))
        h = h + b if b_outside else h
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
        Case("a square W (H = window * d = 12)", _ffnn_case(5, 3, 9, 4, 12)),
        Case("float64 weights (the logits stay float64)", _ffnn_case(4, 2, 11, 3, 5, dtype=torch.float64)),
        Case("the longest window (12 words)", _ffnn_case(3, 12, 25, 2, 6)),
    ],
    mutants=[
        Mutant(_ffnn_with(flip=True), "concatenated the window's embeddings in reverse order: keep e_1 first"),
        Mutant(_ffnn_with(act=lambda z: z), "left out the tanh non-linearity"),
        Mutant(_ffnn_with(act=torch.sigmoid), "used a sigmoid; this model uses tanh"),
        Mutant(_ffnn_with(act=torch.relu), "used ReLU; this model uses tanh"),
        Mutant(_ffnn_with(use_b=False), "left out the hidden bias b"),
        Mutant(_ffnn_with(use_c=False), "left out the output bias c"),
        Mutant(_ffnn_with(interleave=True), "flattened the (B, m, d) embeddings after transposing them to (B, d, m): "
                                            "z must hold e_{t-m}'s d values, then e_{t-m+1}'s, and so on"),
        Mutant(_ffnn_with(b_outside=True), "added the hidden bias b after the tanh; it goes inside: tanh(W z + b)"),
        Mutant(_ffnn_with(post=lambda z: torch.softmax(z, -1)), "returned probabilities; the task asks for logits"),
        Mutant(_ffnn_with(post=lambda z: torch.log_softmax(z, -1)),
               "returned log-probabilities; the task asks for logits (before any softmax)"),
    ],
    keep_dtype=True,
    forbidden=(FeedforwardLM,),
    forbidden_attrs=("FeedforwardLM",),
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


def _sgns_mean_of_all_terms(v_c, u_o, u_neg):
    scores = torch.cat([(u_o * v_c).sum(-1, keepdim=True), -torch.einsum("bkd,bd->bk", u_neg, v_c)], dim=1)
    return -F.logsigmoid(scores).mean()


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
    compare=_scalar_tensor(rtol=1e-4, atol=1e-5),  # the statement: a tensor holding one value
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
        Case("as many negatives as pairs (k = B = 4)", _sgns_case(4, 4, 6)),
    ],
    mutants=[
        Mutant(_sgns_with(neg_sign=1.0), "used σ(u_k·v_c) for the negatives; noise words need σ(-u_k·v_c)"),
        Mutant(_sgns_with(reduce="sum"), "summed over the batch; the loss is the batch mean"),
        Mutant(_sgns_with(with_neg=False), "left out the negative samples' term"),
        Mutant(_sgns_with(naive=True), "log(sigmoid(x)) underflows to log(0) = -inf for large |x|: use "
                                       "torch.nn.functional.logsigmoid"),
        Mutant(_sgns_with(neg_reduce="mean"), "averaged over the k negatives; they are summed"),
        Mutant(_sgns_mean_of_all_terms, "took one mean over the batch and the k+1 terms: sum a pair's k+1 terms, "
                                        "then average over the batch"),
    ],
    forbidden=(lmbook_word2vec.sgns_loss, lmbook_word2vec.SkipGram),
    forbidden_attrs=("sgns_loss", "SkipGram"),
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

CHECKS = [LOG_SOFTMAX, CROSS_ENTROPY, PERPLEXITY, FFNN_FORWARD, SGNS_LOSS, TRAIN_LM]

from .questions.ch01 import QUESTIONS  # noqa: E402 (the thinking questions, after the code tasks)

check = Registry(CHECKS + QUESTIONS)
