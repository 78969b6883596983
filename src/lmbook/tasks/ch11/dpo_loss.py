"""Task 5 of exercise 11: the DPO loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ... import dpo as _course_dpo
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_scalar_mismatch
from ..common import in_dtype
from .shared import ATTRS, MODULES

_D = _course_dpo


def _dpo_ref(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    """−mean ln σ(β Δ), Δ = (ln π(y_w) − ln π_ref(y_w)) − (ln π(y_l) − ln π_ref(y_l)); ln σ(z) = −softplus(−z)."""
    margin = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    return F.softplus(-beta * margin).mean()


def _dpo_with(mistake: str):
    def fn(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
        pc, pr, rc, rr = policy_chosen, policy_rejected, ref_chosen, ref_rejected
        margin = {"no_reference": lambda: pc - pr,
                  "crossed": lambda: (pc - rr) - (pr - rc)}.get(mistake, lambda: (pc - rc) - (pr - rr))()
        if mistake == "flipped":
            margin = -margin
        if mistake == "beta_outside":
            return -(beta * F.logsigmoid(margin)).mean()
        if mistake == "no_log":
            return -torch.sigmoid(beta * margin).mean()
        if mistake == "naive":
            return -torch.log(torch.sigmoid(beta * margin)).mean()
        if mistake == "sum":
            return -F.logsigmoid(beta * margin).sum()
        return -F.logsigmoid(beta * margin).mean()
    return fn


def _dpo_case(B: int, beta: float, spread: float = 2.0, dtype=torch.float32, equal: str | None = None):
    """Sequence log-probabilities (negative, tens of nats) of a batch of pairs; the policy near the reference
    (log-ratios of about ``spread``). ``equal``: "policy" (the policy is the reference: every log-ratio 0),
    "all" (every log-probability the same)."""
    def make(g, device):
        ref_c = -torch.rand(B, generator=g) * 40 - 5
        ref_r = -torch.rand(B, generator=g) * 40 - 5
        pol_c = ref_c + torch.randn(B, generator=g) * spread
        pol_r = ref_r + torch.randn(B, generator=g) * spread
        if equal == "policy":
            pol_c, pol_r = ref_c.clone(), ref_r.clone()
        if equal == "all":
            pol_c = pol_r = ref_c = ref_r = torch.full((B,), -12.5)
        args = tuple(in_dtype(t.clone(), dtype).to(device) for t in (pol_c, pol_r, ref_c, ref_r))
        return ((*args, beta), {})
    return make


DPO_LOSS = Check(
    task="dpo_loss",
    what="−mean ln σ(β [(ln π(y_w) − ln π_ref(y_w)) − (ln π(y_l) − ln π_ref(y_l))])",
    reference=_dpo_ref,
    grad_of=(0, 1),  # the policy's log-probabilities; the reference model's are fixed
    compare=lambda out, ref: describe_scalar_mismatch(out, ref, rtol=1e-4, atol=1e-6, accept=("tensor",)),
    cases=[Case("8 pairs, β = 0.1", _dpo_case(8, 0.1)),
           Case("5 pairs, β = 0.5, log-ratios of about 4", _dpo_case(5, 0.5, spread=4.0)),
           Case("float64, 6 pairs, β = 0.2", _dpo_case(6, 0.2, dtype=torch.float64))],
    hidden_cases=[Case("one pair", _dpo_case(1, 0.1)),
                  Case("the policy is the reference (the loss is ln 2)", _dpo_case(6, 0.1, equal="policy")),
                  Case("every log-probability equal", _dpo_case(4, 0.3, equal="all")),
                  Case("β = 0 (the loss is ln 2 whatever the policy)", _dpo_case(5, 0.0)),
                  Case("β = 1000: σ(βΔ) underflows to 0 for a wrong pair", _dpo_case(8, 1000.0)),
                  Case("β = 1e-6", _dpo_case(8, 1e-6)),
                  Case("float64, β = 50", _dpo_case(10, 50.0, dtype=torch.float64)),
                  Case("fresh: 64 pairs, β = 0.1, log-ratios of about 10", _dpo_case(64, 0.1, spread=10.0))],
    mutants=[
        Mutant(_dpo_with("flipped"), "flipped the sign of the margin (or took the log-ratios the wrong way round, "
                                     "ln π_ref − ln π): the loss is −ln σ(β Δ), small when the chosen response's "
                                     "log-ratio ln π(y_w) − ln π_ref(y_w) is the larger one"),
        Mutant(_dpo_with("no_reference"), "left out the reference model: each log-probability is taken relative to "
                                          "the reference's, ln π(y|x) − ln π_ref(y|x)"),
        Mutant(_dpo_with("crossed"), "took each log-ratio against the other response's reference: y_w's is "
                                     "ln π(y_w) − ln π_ref(y_w), y_l's is ln π(y_l) − ln π_ref(y_l)"),
        Mutant(_dpo_with("beta_outside"), "multiplied the loss by β instead of the margin: β goes inside the "
                                          "sigmoid, −ln σ(β Δ)"),
        Mutant(_dpo_with("no_log"), "left out the logarithm: the loss is −ln σ(β Δ), the negative log-likelihood "
                                    "of the preference"),
        Mutant(_dpo_with("naive"), "computed ln σ(z) in a form that is infinite for a large negative z: "
                                   "log(sigmoid(z)) is log(0) once σ(z) underflows to 0, and log(1 + exp(−z)) "
                                   "overflows in exp(−z) first, at the same z; the loss becomes inf; use "
                                   "F.logsigmoid (or −softplus(−z))"),
        Mutant(_dpo_with("sum"), "summed over the pairs: the loss is the mean over the batch"),
    ],
    forbidden=(_D.dpo_loss,),
    forbidden_attrs=(*ATTRS, "dpo_loss"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)
