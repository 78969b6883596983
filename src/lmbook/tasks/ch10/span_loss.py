"""Task 3 of exercise 10: the span-extraction loss."""

from __future__ import annotations

import torch

from ... import bert as _course_bert
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_scalar_mismatch
from ...grading.reproduce import sized
from ..common import in_dtype
from .shared import ATTRS, MODULES

_BERT = _course_bert


def _span_loss_ref(start_logits, end_logits, start, end):
    def ce(logits, target):  # −log softmax(logits)[target], averaged over the batch
        logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
        return -logp.gather(1, target[:, None].long()).mean()
    return (ce(start_logits, start) + ce(end_logits, end)) / 2


def _span_loss_with(mistake: str):
    def fn(start_logits, end_logits, start, end):
        def ce(logits, target, reduce="mean"):
            if mistake == "naive":
                logp = logits - torch.log(torch.exp(logits).sum(-1, keepdim=True))
            elif mistake == "no_log_softmax":
                logp = logits
            else:
                logp = torch.log_softmax(logits, -1)
            picked = -logp[torch.arange(len(target), device=logits.device), target]
            return picked.sum() if reduce == "sum" else picked.mean()

        if mistake == "swapped":
            return (ce(start_logits, end) + ce(end_logits, start)) / 2
        if mistake == "start_only":
            return ce(start_logits, start)
        if mistake == "sum_two":
            return ce(start_logits, start) + ce(end_logits, end)
        if mistake == "sum_batch":
            return (ce(start_logits, start, "sum") + ce(end_logits, end, "sum")) / 2
        return (ce(start_logits, start) + ce(end_logits, end)) / 2
    return fn


def _span_inputs(g, B: int, n: int, scale: float = 2.0, same: bool = False, at_zero: bool = False):
    s_log, e_log = torch.randn(B, n, generator=g) * scale, torch.randn(B, n, generator=g) * scale
    start = torch.randint(0, n, (B,), generator=g)
    length = torch.randint(0, 4, (B,), generator=g)
    end = start if same else (start + length).clamp(max=n - 1)
    if at_zero:  # SQuAD 2.0's "no answer": the span is [CLS], position 0
        start = end = torch.zeros(B, dtype=torch.long)
    return s_log, e_log, start, end


def _span_loss_case(B: int, n: int, scale: float = 2.0, dtype=torch.float32, same: bool = False,
                    at_zero: bool = False):
    def make(g, device):
        s_log, e_log, start, end = _span_inputs(g, B, n, scale, same, at_zero)
        return ((in_dtype(s_log, dtype).to(device), in_dtype(e_log, dtype).to(device), start.to(device),
                 end.to(device)), {})
    return make


SHRINK = {"B": 1, "n": 1}


SPAN_LOSS = Check(
    task="span_loss",
    what="(CE(start_logits, start) + CE(end_logits, end)) / 2, each cross-entropy averaged over the batch",
    reference=_span_loss_ref,
    grad_of=(0, 1),  # the reader is trained through it
    compare=lambda out, ref: describe_scalar_mismatch(out, ref, rtol=1e-4, atol=1e-6, accept=("tensor",)),
    cases=[sized("batch 4, n = 12", _span_loss_case, B=4, n=12, floors=SHRINK),
           sized("batch 8, n = 20", _span_loss_case, B=8, n=20, floors=SHRINK),
           sized("float64 logits, batch 3, n = 5", _span_loss_case, B=3, n=5, dtype=torch.float64, floors=SHRINK)],
    hidden_cases=[Case("a batch of one", _span_loss_case(1, 9)),
                  Case("length one (the only span is (0, 0)): the loss is 0", _span_loss_case(3, 1)),
                  Case("one-token answers (start = end)", _span_loss_case(5, 10, same=True)),
                  Case("'no answer': every span is [CLS], (0, 0)", _span_loss_case(4, 10, at_zero=True)),
                  Case("float64 logits", _span_loss_case(4, 16, dtype=torch.float64)),
                  Case("large logits (std 100): exp overflows", _span_loss_case(4, 16, scale=100.0)),
                  Case("fresh: batch 32, n = 128", _span_loss_case(32, 128))],
    mutants=[
        Mutant(_span_loss_with("sum_two"), "added the two cross-entropies without halving them: the loss is their "
                                           "mean, (CE_start + CE_end) / 2"),
        Mutant(_span_loss_with("sum_batch"), "summed the cross-entropies over the batch: each is averaged over the "
                                             "batch (F.cross_entropy's default reduction='mean')"),
        Mutant(_span_loss_with("start_only"), "used the start's cross-entropy only: the end's is the other half of "
                                              "the loss"),
        Mutant(_span_loss_with("swapped"), "paired the start logits with the end positions (and the end logits "
                                           "with the start positions): CE(start_logits, start), CE(end_logits, "
                                           "end)"),
        Mutant(_span_loss_with("no_log_softmax"), "took −logits[target] without the log-softmax: the "
                                                  "cross-entropy is −log softmax(logits)[target]"),
        Mutant(_span_loss_with("naive"), "computed the softmax from exp(logits) itself (exp(z) / sum(exp(z)), or "
                                         "z − log(sum(exp(z)))): exp overflows for large logits; use "
                                         "torch.log_softmax, logsumexp or F.cross_entropy"),
    ],
    forbidden=(_BERT.span_loss,),
    forbidden_attrs=(*ATTRS, "span_loss"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)
