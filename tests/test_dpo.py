"""lmbook.dpo: the DPO loss against the paper's formula (the Bradley–Terry likelihood of the implicit rewards),
its limits and gradients, sequence log-probabilities against a token-by-token computation, and best-of-n's bad
share and KL to the reference against brute-force enumeration."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from lmbook.dpo import best_of_n_bad_share, best_of_n_kl, dpo_loss, sequence_log_probs, train_dpo


def _logps(seed: int, B: int = 6) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [-(torch.rand(B, generator=g, dtype=torch.float64) * 20 + 1) for _ in range(4)]


@pytest.mark.parametrize("beta", [0.01, 0.1, 0.5, 5.0])
def test_dpo_loss_is_the_bradley_terry_likelihood_of_the_implicit_rewards(beta):
    """Rafailov et al. (2023), eq. 7: r(x, y) = β ln π(y|x)/π_ref(y|x); P(y_w ≻ y_l) = 1/(1 + exp(−(r_w − r_l)))."""
    pc, pr, rc, rr = _logps(1)
    r_w, r_l = beta * (pc - rc), beta * (pr - rr)
    terms = [-math.log(1 / (1 + math.exp(-(w - lo)))) for w, lo in zip(r_w.tolist(), r_l.tolist(), strict=True)]
    assert dpo_loss(pc, pr, rc, rr, beta).item() == pytest.approx(sum(terms) / len(terms), rel=1e-12)


def test_equal_log_probabilities_give_ln_2():
    """A policy equal to its reference gives every pair a margin of 0: σ(0) = 1/2, whatever β."""
    pc, pr, _, _ = _logps(2)
    for beta in (0.01, 1.0, 100.0):
        assert dpo_loss(pc, pr, pc, pr, beta).item() == pytest.approx(math.log(2), abs=1e-12)


def test_the_loss_falls_as_the_chosen_log_ratio_rises_and_never_overflows():
    zero = torch.zeros(1, dtype=torch.float64)
    losses = [dpo_loss(zero + m, zero, zero, zero, beta=1.0).item() for m in (-50.0, -1.0, 0.0, 1.0, 50.0)]
    assert losses == sorted(losses, reverse=True)
    assert losses[0] == pytest.approx(50.0, rel=1e-6)  # −ln σ(−50) ≈ 50, computed without overflow
    assert losses[-1] == pytest.approx(0.0, abs=1e-12)
    huge = dpo_loss(zero - 1e4, zero, zero, zero, beta=10.0)
    assert torch.isfinite(huge) and huge.item() == pytest.approx(1e5)


def test_the_gradient_raises_the_chosen_and_lowers_the_rejected():
    pc, pr, rc, rr = (t.clone().requires_grad_(True) for t in _logps(3))
    dpo_loss(pc, pr, rc.detach(), rr.detach(), beta=0.5).backward()
    assert (pc.grad < 0).all() and (pr.grad > 0).all()  # descent raises ln π(y_w), lowers ln π(y_l)


def test_swapping_the_reference_and_the_policy_flips_the_margin():
    """The log-ratios taken against the wrong model: the margin changes sign, so the loss changes."""
    pc, pr, rc, rr = _logps(4)
    assert not torch.allclose(dpo_loss(pc, pr, rc, rr, 0.1), dpo_loss(rc, rr, pc, pr, 0.1))
    assert torch.allclose(dpo_loss(rc, rr, pc, pr, 0.1), dpo_loss(pr, pc, rr, rc, 0.1))


class _Bigram(torch.nn.Module):
    """logits[t] = table[ids[t]]: a model whose sequence probabilities are easy to compute by hand."""

    def __init__(self, V: int, seed: int):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(V, V, generator=torch.Generator().manual_seed(seed)))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table[ids]


def test_sequence_log_probs_sum_the_response_tokens_only():
    model = _Bigram(5, 0)
    ids = torch.tensor([[0, 1, 2, 3, 4, 0], [4, 3, 2, 1, 0, 0]])
    mask = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 0, 0]], dtype=torch.bool)
    logp = torch.log_softmax(model.table, -1)
    expected = [sum(logp[ids[b, t - 1], ids[b, t]].item() for t in range(1, 6) if mask[b, t]) for b in range(2)]
    got = sequence_log_probs(model, ids, mask)
    assert torch.allclose(got, torch.tensor(expected), atol=1e-5), (got, expected)


def test_train_dpo_raises_the_chosen_responses_relative_to_the_rejected():
    torch.manual_seed(0)
    policy, reference = _Bigram(4, 1), _Bigram(4, 1)
    chosen = torch.tensor([[0, 1, 1, 1]] * 8)
    rejected = torch.tensor([[0, 2, 2, 2]] * 8)
    mask = torch.tensor([[0, 1, 1, 1]] * 8, dtype=torch.bool)
    log = train_dpo(policy, reference, chosen, mask, rejected, mask, beta=0.5, steps=30, batch_size=4, lr=0.1)
    assert log.loss[-1] < 0.1 < math.log(2) == pytest.approx(log.loss[0], abs=1e-6)
    with torch.no_grad():
        margin = sequence_log_probs(policy, chosen[:1], mask[:1]) - sequence_log_probs(reference, chosen[:1], mask[:1])
    assert margin.item() > 0


def _best_of_n_by_enumeration(p: list[float], good: list[bool], n: int) -> tuple[float, float]:
    """Every ordered n-tuple of outcomes: the first good one is kept, or the first if none is good."""
    bon = [0.0] * len(p)
    for draw in itertools.product(range(len(p)), repeat=n):
        prob = math.prod(p[i] for i in draw)
        kept = next((i for i in draw if good[i]), draw[0])
        bon[kept] += prob
    kl = sum(b * math.log(b / q) for b, q in zip(bon, p, strict=True) if b > 0)
    return sum(b for b, g in zip(bon, good, strict=True) if not g), kl


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_best_of_n_bad_share_and_kl_match_enumerating_every_draw(n):
    p = [0.1, 0.25, 0.05, 0.3, 0.2, 0.1]
    good = [True, False, True, True, False, False]
    bad, kl = _best_of_n_by_enumeration(p, good, n)
    q = sum(x for x, g in zip(p, good, strict=True) if g)
    assert best_of_n_bad_share(q, n) == pytest.approx(bad, rel=1e-12)
    assert best_of_n_kl(q, n) == pytest.approx(kl, rel=1e-9, abs=1e-12)


def test_best_of_n_kl_stays_below_log_n_minus_n_minus_one_over_n():
    for q in (0.01, 0.3, 0.9):
        for n in (1, 2, 8, 64):
            assert best_of_n_kl(q, n) <= math.log(n) - (n - 1) / n + 1e-12
    assert best_of_n_kl(1.0, 16) == 0.0
