"""Task 1 of exercise 1: log-softmax."""

from __future__ import annotations

import torch

from ... import functional as lmbook_functional
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import OVERFLOW_HINT, describe_tensor_mismatch
from .inputs import logits_case


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
    grad_of=(0,),  # a language model's loss is trained through it
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-4, dim=None,
                                                      nan_hint=OVERFLOW_HINT),
    cases=[
        Case("a (4, 10) batch of logits", logits_case((4, 10))),
        Case("a (2, 3, 7) tensor, dim=-1", logits_case((2, 3, 7))),
        Case("a (5, 3) tensor with dim=0", logits_case((5, 3), dim=0)),
        Case("large logits (around 1000)", logits_case((3, 8), scale=10.0, offset=1000.0)),
    ],
    hidden_cases=[
        Case("a batch of one", logits_case((1, 47))),
        Case("huge logits of both signs (|x| up to ~2e4)", logits_case((4, 6), scale=5000.0)),
        Case("dim=1 of a (3, 5, 4) tensor", logits_case((3, 5, 4), dim=1)),
        Case("a single class (log-softmax of one logit is 0)", logits_case((4, 1))),
        Case("a wide vocabulary (5000 classes)", logits_case((2, 5000), scale=3.0)),
        Case("a 1-D vector", logits_case((11,))),
        Case("very negative logits (around -1000)", logits_case((3, 9), scale=10.0, offset=-1000.0)),
        Case("rows whose maxima differ by hundreds", logits_case((4, 9), row_offsets=[-300.0, 0.0, 150.0, 40.0])),
        Case("float64 logits around 1000 (the result stays float64)",
             logits_case((3, 6), scale=5.0, offset=1000.0, dtype=torch.float64)),
        Case("a row of equal logits (a tie: log(1/V) each)", logits_case((3, 5), tie_row=True)),
        Case("dim=0 with columns far apart", logits_case((6, 3), dim=0, scale=200.0)),
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
