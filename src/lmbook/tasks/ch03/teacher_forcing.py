"""Task 1 of exercise 3: the teacher-forcing loss."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ... import functional as lmbook_functional
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import OVERFLOW_HINT, describe_scalar_mismatch
from .toy_decoder import COURSE


def _tf_case(B, T, V, pad_id, bos, eos, lengths=None, scale=2.0, spread=0.0, pad_shift=0.0, dtype=torch.float32):
    """A padded target batch <bos> w_1 ... w_n <eos> <pad>..., and the decoder's (B, T, V) logits.

    ``spread``: each position's logits are shifted by a random offset in [-spread, spread] (log-softmax does not
    change, a softmax stabilised with one maximum for the whole batch underflows); ``pad_shift``: added to the
    logits where the target is padding (they dominate any computation that lets them in)."""
    def make(g, device):
        words = torch.tensor([v for v in range(V) if v not in (pad_id, bos, eos)])
        n = torch.tensor(lengths) if lengths is not None else torch.randint(0, T, (B,), generator=g)
        if lengths is None:
            n[int(torch.randint(0, B, (1,), generator=g))] = T - 1  # the longest sentence fills the batch
        y = torch.full((B, T + 1), pad_id, dtype=torch.long)
        y[:, 0] = bos
        for b in range(B):
            k = int(n[b])
            y[b, 1:k + 1] = words[torch.randint(0, len(words), (k,), generator=g)]
            y[b, k + 1] = eos
        logits = torch.randn(B, T, V, generator=g) * scale
        garbage = torch.randn(B, T, V, generator=g) * 8.0  # where the target is padding: it must not count
        if spread:
            logits = logits + (torch.rand(B, T, 1, generator=g) * 2 - 1) * spread
        logits = torch.where((y[:, 1:] == pad_id).unsqueeze(-1), garbage + pad_shift, logits)
        return ((logits.to(device, dtype), y.to(device), pad_id), {})
    return make


def _tf_loss_ref(logits, y, pad_id):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), y[:, 1:].reshape(-1), ignore_index=pad_id)


def _tf_with(shift=True, mask="target", reduce="token", log_softmax=True, pad=None):
    def fn(logits, y, pad_id):
        pad_id = pad_id if pad is None else pad
        targets = y[:, 1:] if shift else y[:, :-1]
        if log_softmax == "naive":
            logp = torch.log(torch.softmax(logits, -1))
        elif log_softmax == "exp":  # a softmax by hand, without subtracting the maximum
            logp = torch.log(logits.exp() / logits.exp().sum(-1, keepdim=True))
        else:
            logp = torch.log_softmax(logits, -1) if log_softmax else logits
        nll = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
        real = {"target": targets != pad_id, "input": y[:, :-1] != pad_id,
                "none": torch.ones_like(targets, dtype=torch.bool)}[mask]
        nll = torch.where(real, nll, 0.0)  # dropped, not multiplied by 0: inf * 0 at padding would be NaN
        real = real.to(nll.dtype)
        total = nll.sum()
        if reduce == "token":
            return total / real.sum()
        if reduce == "sentence":
            return (nll.sum(1) / real.sum(1)).mean()
        if reduce == "sum":
            return total
        return total / y.shape[0]  # "batch"
    return fn


def _loss_compare(out, ref) -> str | None:
    """A scalar loss; NaN matches NaN only when ``ref`` is NaN, i.e. a known mistake's output (never the reference's),
    so a student whose code gives NaN where that mistake does is recognised."""
    if isinstance(ref, torch.Tensor | float) and math.isnan(float(ref)) and isinstance(out, torch.Tensor | float) \
            and (not isinstance(out, torch.Tensor) or out.numel() == 1) and math.isnan(float(out)):
        return None
    return describe_scalar_mismatch(out, float(ref), rtol=1e-4, atol=1e-6, nan_hint=OVERFLOW_HINT)


TEACHER_FORCING_LOSS = Check(
    task="teacher_forcing_loss",
    what="mean of -log P(y_{t+1} | y_<=t) over the real (non-pad) target tokens of the batch",
    reference=_tf_loss_ref,
    grad_of=(0,),  # the decoder is trained through it
    compare=lambda out, ref: _loss_compare(out, ref),
    cases=[Case("batch 3, T=6, V=7, pad_id=0, target lengths (2, 6, 4)",
                _tf_case(3, 6, 7, pad_id=0, bos=1, eos=2, lengths=[1, 5, 3])),
           Case("batch 4, T=8, V=10, pad_id=9, bos=0, eos=1, random lengths", _tf_case(4, 8, 10, 9, 0, 1))],
    hidden_cases=[Case("a batch of one, no padding", _tf_case(1, 5, 6, 0, 1, 2, lengths=[4])),
                  Case("sentences with no words (<bos> <eos>)", _tf_case(3, 4, 5, 0, 1, 2, lengths=[0, 3, 0])),
                  Case("pad_id=3 in the middle of the vocabulary", _tf_case(5, 7, 8, 3, 6, 7)),
                  Case("batch 16, T=20, V=50, random lengths", _tf_case(16, 20, 50, 0, 1, 2)),
                  Case("large logits (scale 40): use log-softmax, not log(softmax)",
                       _tf_case(4, 6, 30, 0, 1, 2, scale=40.0)),
                  # a softmax stabilised with the batch's maximum underflows in the rows far below it
                  Case("positions whose logits lie up to 90 apart, padded logits 200 above the real ones",
                       _tf_case(6, 7, 12, 0, 1, 2, spread=90.0, pad_shift=200.0)),
                  Case("T=1: every target is <eos> alone", _tf_case(3, 1, 5, 0, 1, 2, lengths=[0, 0, 0])),
                  Case("float64 logits, pad_id=V-1", _tf_case(5, 6, 9, 8, 0, 1, dtype=torch.float64))],
    mutants=[
        Mutant(_tf_with(shift=False), "did not shift the targets: the logits at position t predict the next "
                                      "token, y[:, t+1] (the decoder read y[:, t]); compare them with y[:, 1:]"),
        Mutant(_tf_with(pad=0), "assumed the padding id is 0: use pad_id"),
        Mutant(_tf_with(mask="none"), "averaged over padding too: leave out the positions whose target is pad_id "
                                      "(from the sum and from the count)"),
        Mutant(_tf_with(mask="input"), "masked with the decoder's inputs y[:, :-1] instead of the targets "
                                       "y[:, 1:]: the step that reads <eos> has a padding target and must not count"),
        Mutant(_tf_with(reduce="sentence"), "averaged each sentence's loss, then the sentences: take the mean over "
                                            "all real target tokens of the batch (long sentences weigh more)"),
        Mutant(_tf_with(reduce="sum"), "returned the sum of the token losses; return their mean"),
        Mutant(_tf_with(reduce="batch"), "divided the summed loss by the batch size; divide by the number of real "
                                         "(non-pad) target tokens"),
        Mutant(_tf_with(log_softmax=False), "used the raw logits as log-probabilities: apply log-softmax first"),
        Mutant(_tf_with(log_softmax="naive"), "computed log(softmax(logits)): for large logits the softmax "
                                              "underflows to 0 and its log to -inf; use log_softmax"),
        Mutant(_tf_with(log_softmax="exp"), "computed the softmax as exp(logits) / sum exp(logits) without "
                                            "subtracting each row's maximum: exp overflows to inf for logits above "
                                            "about 88 (in float32); use log_softmax"),
    ],
    forbidden=(lmbook_functional.cross_entropy,),
    forbidden_attrs=("cross_entropy", "nll_loss", "CrossEntropyLoss", "NLLLoss", "masked_cross_entropy"),
    forbidden_modules=COURSE,
)
