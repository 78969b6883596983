"""Preference tuning with DPO, and best-of-n, the baseline it is measured against (chapter 11).

**The objective.** RLHF (Ouyang et al., 2022) maximises a reward while staying near a reference model π_ref:

    max_π  E_{y ~ π(·|x)} [ r(x, y) ] − β KL(π(·|x) ‖ π_ref(·|x)),

whose solution is π*(y|x) ∝ π_ref(y|x) exp(r(x, y) / β). **DPO** (Rafailov et al., 2023) turns this around:
the reward is β ln(π(y|x) / π_ref(y|x)) up to a term of x alone, and with the Bradley–Terry model of
preferences, P(y_w ≻ y_l) = σ(r(x, y_w) − r(x, y_l)), maximum likelihood on preferred (y_w) and rejected (y_l)
responses is the loss

    L_DPO = −E ln σ( β [ ln π(y_w|x)/π_ref(y_w|x) − ln π(y_l|x)/π_ref(y_l|x) ] ),

with no reward model and no sampling during training. ln π(y|x) is a *sequence* log-probability: the sum of the
response tokens' log-probabilities (the prompt's are not counted). TRL's ``DPOTrainer`` computes the same,
``-F.logsigmoid(beta * delta_score)`` with ``delta_score`` the difference of the two log-ratios.

**Best-of-n** samples n responses from π_ref and keeps the one the reward likes best. With a reward that says
only good (1) or bad (0), and q = P_ref(good), the chosen response is bad only if all n are:

    P_bon(bad) = (1 − q)^n,
    KL(π_bon ‖ π_ref) = (1 − (1 − q)^n) ln((1 − (1 − q)^n) / q) + (1 − q)^n ln((1 − q)^(n−1)),

exactly (:func:`best_of_n_kl`): the good responses keep their relative odds and are scaled up together, the bad
ones are scaled down together. KL to the reference is the price of moving away from it; best-of-n pays at most
ln n − (n − 1)/n for it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


def sequence_log_probs(model: nn.Module, ids: torch.Tensor,
                       response_mask: torch.Tensor) -> torch.Tensor:
    """ln π(y|x) for each row of ``ids`` (B, n): the sum over positions t ≥ 1 with
    ``response_mask[:, t]`` True of ln P(ids[t] | ids[<t]). The mask marks the
    response's tokens (B, n); the prompt and padding are left out. The sums are
    on the model's device, wherever ``ids`` and the mask come from."""
    device = next(model.parameters()).device
    ids, response_mask = ids.to(device), response_mask.to(device)
    logits = model(ids[:, :-1])
    logp = torch.log_softmax(logits.float(), dim=-1)
    logp = logp.gather(-1, ids[:, 1:, None])[..., 0]  # (B, n − 1): each next token's
    return (logp * response_mask[:, 1:].to(logp.dtype)).sum(-1)


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
             ref_chosen: torch.Tensor, ref_rejected: torch.Tensor,
             beta: float) -> torch.Tensor:
    """−mean ln σ(β [(ln π(y_w) − ln π_ref(y_w)) − (ln π(y_l) − ln π_ref(y_l))]),
    all arguments (B,)."""
    # ln π(y_w|x)/π_ref(y_w|x): the implicit reward of y_w, divided by β
    chosen_ratio = policy_chosen - ref_chosen
    rejected_ratio = policy_rejected - ref_rejected
    # logsigmoid: no overflow for large margins
    return -F.logsigmoid(beta * (chosen_ratio - rejected_ratio)).mean()


def best_of_n_bad_share(q_good: float, n: int) -> float:
    """P(the best of n samples is bad) = (1 − q)^n, for a reward that is 1 (good) or 0 (bad)."""
    return (1.0 - q_good) ** n


def best_of_n_kl(q_good: float, n: int) -> float:
    """KL(π_bon ‖ π_ref) in nats for a good/bad reward, q = P_ref(good): see the module's docstring."""
    if not 0.0 < q_good <= 1.0:
        raise ValueError(f"q_good must be in (0, 1], got {q_good}")
    bad = (1.0 - q_good) ** n  # P_bon(bad)
    kl = (1.0 - bad) * math.log((1.0 - bad) / q_good)
    if bad > 0:
        kl += bad * (n - 1) * math.log(1.0 - q_good)
    return kl


@dataclass
class DPOLog:
    loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)  # share of pairs whose implicit reward ranks y_w first
    seconds: float = 0.0


def train_dpo(policy: nn.Module, reference: nn.Module, chosen: torch.Tensor, chosen_mask: torch.Tensor,
              rejected: torch.Tensor, rejected_mask: torch.Tensor, *, beta: float = 0.1, steps: int = 200,
              batch_size: int = 32, lr: float = 1e-3, seed: int = 0) -> DPOLog:
    """Adam on :func:`dpo_loss` over pairs (chosen[i], rejected[i]) (N, n) with their response masks.

    The reference model is frozen: its sequence log-probabilities are computed once, before training."""
    device = next(policy.parameters()).device
    reference.eval()
    with torch.no_grad():
        ref_c = torch.cat([sequence_log_probs(reference, c.to(device), m.to(device))
                           for c, m in zip(chosen.split(256), chosen_mask.split(256), strict=True)])
        ref_r = torch.cat([sequence_log_probs(reference, r.to(device), m.to(device))
                           for r, m in zip(rejected.split(256), rejected_mask.split(256), strict=True)])
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    log, t0 = DPOLog(), time.perf_counter()
    for _ in range(steps):
        policy.train()
        i = torch.randint(0, len(chosen), (batch_size,), generator=g)
        pc = sequence_log_probs(policy, chosen[i].to(device), chosen_mask[i].to(device))
        pr = sequence_log_probs(policy, rejected[i].to(device), rejected_mask[i].to(device))
        loss = dpo_loss(pc, pr, ref_c[i.to(device)], ref_r[i.to(device)], beta)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
        log.loss.append(loss.item())
        log.accuracy.append(((pc - ref_c[i.to(device)]) > (pr - ref_r[i.to(device)])).float().mean().item())
    log.seconds = time.perf_counter() - t0
    return log
