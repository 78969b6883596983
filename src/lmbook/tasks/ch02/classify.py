"""Task 5 of exercise 2: the pooled classifier."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ... import rnn as lmbook_rnn
from ...grading.checks import Case, Check, Mutant
from ..common import randn as _randn
from .inputs import f64, tensor_compare


def _pool_case(B, T, H, C, how, lengths=None, negative=False):
    def make(g, device):
        lens = torch.tensor(lengths) if lengths is not None else torch.randint(1, T + 1, (B,), generator=g)
        lens[int(torch.randint(0, B, (1,), generator=g))] = T
        mask = torch.arange(T).unsqueeze(0) < lens.unsqueeze(1)  # True at real tokens, padding at the end
        states = _randn((B, T, H), g, device) - (3.0 if negative else 0.0)
        garbage = _randn((B, T, H), g, device, 5.0).abs() + 1.0  # padding states are large: they must not count
        states = torch.where(mask.to(device).unsqueeze(-1), states, garbage)
        W, b = _randn((C, H), g, device), _randn((C,), g, device)
        return ((states, mask.to(device), W, b, how), {})
    return make


def _classify_ref(states, mask, W, b, how):
    # one sequence at a time, keeping only its real positions: no masking arithmetic to get wrong
    pooled = []
    for s, m in zip(states, mask.bool(), strict=True):
        real = s[m]
        pooled.append({"last": lambda r: r[-1], "mean": lambda r: r.mean(0), "max": lambda r: r.amax(0)}[how](real))
    return F.linear(torch.stack(pooled), W, b)


def _classify_with(last="real", mean="real", max_="real", bias=True):
    def fn(states, mask, W, b, how):
        mask = mask.bool()
        m = mask.unsqueeze(-1).to(states.dtype)
        if how == "last":
            idx = {"real": mask.sum(1) - 1, "end": torch.full_like(mask.sum(1), mask.shape[1] - 1),
                   "length": mask.sum(1).clamp(max=mask.shape[1] - 1),
                   "first": torch.zeros_like(mask.sum(1))}[last]
            v = states[torch.arange(states.shape[0]), idx]
        elif how == "mean":
            v = {"real": (states * m).sum(1) / m.sum(1), "all": states.mean(1),
                 "divide_T": (states * m).sum(1) / states.shape[1]}[mean]
        else:
            v = states.amax(1) if max_ == "all" else (states * m).amax(1) if max_ == "zeroed" else \
                states.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(1)
        return v @ W.T + (b if bias else 0)
    return fn


def _pool_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case(f"how='{how}', batch 3, lengths (4, 1, 6)", _pool_case(3, 6, 5, 2, how, lengths=[4, 1, 6]))
                for how in ("last", "mean", "max")]
    return [Case("how='last', a batch of one without padding", _pool_case(1, 5, 4, 3, "last", lengths=[5])),
            Case("how='mean', batch 8, random lengths", _pool_case(8, 9, 6, 4, "mean")),
            Case("how='max', all states negative (a zero at padding would win the max)",
                 _pool_case(4, 7, 5, 2, "max", lengths=[2, 7, 3, 1], negative=True)),
            Case("how='last', batch 8, random lengths", _pool_case(8, 10, 3, 5, "last")),
            Case("how='max', batch 6, random lengths", _pool_case(6, 8, 7, 3, "max")),
            Case("how='mean', sequences of length 1", _pool_case(3, 4, 4, 2, "mean", lengths=[1, 1, 4])),
            Case("how='last', every sequence fills the batch", _pool_case(3, 5, 4, 2, "last", lengths=[5, 5, 5])),
            Case("how='max', float64 inputs", f64(_pool_case(3, 6, 4, 2, "max", lengths=[6, 2, 4], negative=True))),
            Case("how='mean', float64 inputs", f64(_pool_case(3, 6, 4, 2, "mean", lengths=[3, 6, 1]))),
            Case("how='max', one position per sequence (T = 1) and states of size 1",
                 _pool_case(3, 1, 1, 2, "max", lengths=[1, 1, 1]))]


CLASSIFY = Check(
    task="classify",
    what="logits = W pool(states) + b, pooling only real positions (last / mean / max)",
    reference=_classify_ref,
    grad_of=(0, 2, 3),  # the states, W and b: the classifier and the RNN below it are trained through it
    compare=tensor_compare(),
    cases=_pool_cases(hidden=False),
    hidden_cases=_pool_cases(hidden=True),
    keep_dtype=True,
    mutants=[
        Mutant(_classify_with(last="end"), "how='last' took the state at the final position, which is padding for "
                                           "shorter sequences: take each sequence's last real position"),
        Mutant(_classify_with(last="length"), "how='last' took position lengths[i], one past the last real "
                                              "token (padding): the last real token is at lengths[i] - 1"),
        Mutant(_classify_with(last="first"), "how='last' took the first position"),
        Mutant(_classify_with(mean="all"), "how='mean' averaged over padding too: average only real positions"),
        Mutant(_classify_with(mean="divide_T"), "how='mean' summed the real positions but divided by the padded "
                                                "length T; divide by each sequence's own length"),
        Mutant(_classify_with(max_="all"), "how='max' let padded positions win the maximum: exclude them "
                                           "(fill them with -inf first)"),
        Mutant(_classify_with(max_="zeroed"), "how='max' zeroed padded positions before the maximum: a 0 beats "
                                              "negative states; fill padding with -inf instead"),
        Mutant(_classify_with(bias=False), "left out the classifier's bias b"),
        # one mistake behind all three: the mask was never used
        Mutant(_classify_with(last="end", mean="all", max_="all"),
               "ignored the mask in every pooling: how='last' took the final (padded) position, how='mean' averaged "
               "over padding too and how='max' let padding win; pool only each sequence's real positions"),
    ],
    forbidden=(lmbook_rnn.pool,),
    forbidden_attrs=("pool",),
)
