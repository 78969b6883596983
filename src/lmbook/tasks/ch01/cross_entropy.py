"""Task 2 of exercise 1: cross-entropy and perplexity."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ... import functional as lmbook_functional
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import OVERFLOW_HINT, describe_scalar_mismatch
from .. import earlier
from ..common import randn as _randn
from ..common import sliced
from .inputs import scalar_tensor


def _ce_ref(logits, targets, ignore_index=-100):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=ignore_index)


def _targets_case(shape, vocab, pad_frac=0.0, pad_id=-100, scale=1.0, keep_one=False, pad_scale=None,
                  dtype=torch.float32, lengths=None, sliced_logits=False, shift=0.0, far_targets=False):
    """``shift``: added to every logit (all near +100: exp overflows, the probabilities do not underflow);
    ``far_targets``: each target the least likely word of its row, its logit over 103 below the row's maximum of
    60 (its probability underflows in float32, while exp of the logits does not overflow)."""
    def make(g, device):
        logits = (_randn((*shape, vocab), g, device, scale) + shift).to(dtype)
        if far_targets:
            logits = logits - logits.amax(-1, keepdim=True) + 60.0
        targets = torch.randint(0, vocab, shape, generator=g)
        if pad_id >= 0:  # a real word id used as padding: no target may use it by accident
            targets = torch.randint(1, vocab, shape, generator=g)
        if far_targets:
            targets = logits.argmin(-1).cpu()
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
        if sliced_logits:  # logits[:, :-1] of a longer sequence, as a language model's loss takes them
            logits = sliced(logits, 1)
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
    Case("logits all near +100 (exp overflows; no probability is tiny)", _targets_case((5,), 9, shift=100.0)),
    Case("each target its row's least likely word, 150 below the best (its probability underflows)",
         _targets_case((6,), 12, scale=50.0, far_targets=True)),
    Case("(3, 4, 7) logits sliced from a longer sequence (logits[:, :-1]: not contiguous)",
         _targets_case((3, 4), 7, sliced_logits=True)),
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
    Case("(4, 6, 11) sliced logits, 30% padding", _targets_case((4, 6), 11, pad_frac=0.3, sliced_logits=True)),
    Case("logits near +200 in float32", _targets_case((2, 3), 15, shift=200.0)),
    Case("targets the least likely words of their rows (probabilities under 1e-45)",
         _targets_case((2, 5), 20, scale=60.0, far_targets=True)),
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
    Mutant(lambda lg, t, ignore_index=-100: _masked(lg, t, ignore_index, lambda x: torch.softmax(x, -1).log())[0]
           .neg().mean(),
           "took log(softmax(logits)): the probability of a word far below its row's best underflows to 0 and its "
           "log to -inf; take x - logsumexp(x) (log_softmax), as in Task 1"),
    Mutant(_per_sentence_ce, "averaged each sentence's words, then the sentences: every real word of the batch counts "
                             "the same, so divide the batch's total by its number of non-padding targets"),
]

CROSS_ENTROPY = Check(
    task="cross_entropy",
    what="mean negative log-likelihood over non-padding targets",
    reference=_ce_ref,
    builds_on=(("log_softmax", earlier.log_softmax),),
    grad_of=(0,),  # a language model is trained through it
    compare=scalar_tensor(rtol=1e-4, atol=1e-5),  # the statement: a tensor holding one value
    cases=CE_CASES, hidden_cases=CE_HIDDEN, mutants=CE_MUTANTS,
    forbidden=(lmbook_functional.cross_entropy, lmbook_functional.perplexity),
    forbidden_attrs=("cross_entropy", "nll_loss", "CrossEntropyLoss", "NLLLoss"),
)

PERPLEXITY = Check(
    task="perplexity",
    what="exp of the mean negative log-likelihood",
    reference=lambda logits, targets, ignore_index=-100: math.exp(float(_ce_ref(logits, targets, ignore_index))),
    builds_on=(("cross_entropy", earlier.cross_entropy), ("log_softmax", earlier.log_softmax)),
    # the statement: a number (a Python float; a NumPy float is one too), not a tensor
    compare=lambda out, ref: describe_scalar_mismatch(out, ref, rtol=1e-3, atol=1e-6, accept=("number",),
                                                                nan_hint=OVERFLOW_HINT),
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
