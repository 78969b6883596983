"""lmbook.scaling_laws: the compute-optimal split against its definition and Chinchilla's own numbers, the
closed-form optimum of the parametric loss against a search, and the power-law fit recovering known laws."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lmbook.scaling_laws import (
    CHINCHILLA,
    chinchilla_loss,
    chinchilla_optimal,
    compute_optimal,
    fit_power_law,
    training_flops,
)


def test_compute_optimal_spends_the_budget_at_20_tokens_per_parameter():
    for C in (1e12, 5.76e23, 3.0):
        N, D = compute_optimal(C)
        assert training_flops(N, D) == pytest.approx(C, rel=1e-12)
        assert D / N == pytest.approx(20.0)


def test_chinchillas_own_budget_gives_chinchillas_size():
    """Chinchilla: 70B parameters, 1.4T tokens, C = 6 N D = 5.88e23 FLOPs (Hoffmann et al., 2022)."""
    N, D = compute_optimal(training_flops(70e9, 1.4e12))
    assert N == pytest.approx(70e9, rel=1e-9) and D == pytest.approx(1.4e12, rel=1e-9)


def test_compute_optimal_refuses_a_budget_of_zero():
    with pytest.raises(ValueError, match="positive"):
        compute_optimal(0.0)


def test_chinchilla_optimal_is_the_minimum_of_the_parametric_loss_along_the_budget():
    C = 5.88e23
    N_opt, D_opt = chinchilla_optimal(C)
    assert training_flops(N_opt, D_opt) == pytest.approx(C)
    grid = np.geomspace(N_opt / 10, N_opt * 10, 4001)
    losses = [chinchilla_loss(n, C / 6 / n) for n in grid]
    assert grid[int(np.argmin(losses))] == pytest.approx(N_opt, rel=2e-3)


def test_chinchilla_fit_grows_n_and_d_about_equally_with_compute():
    """N_opt ∝ C^(β/(α+β)) = C^0.45 with the fitted α = 0.34, β = 0.28."""
    (n1, _), (n2, _) = chinchilla_optimal(1e21), chinchilla_optimal(1e23)
    exponent = math.log(n2 / n1) / math.log(100)
    assert exponent == pytest.approx(CHINCHILLA["beta"] / (CHINCHILLA["alpha"] + CHINCHILLA["beta"]), rel=1e-9)
    assert 0.4 < exponent < 0.5


def test_fit_power_law_recovers_a_known_law_with_its_floor():
    x = np.geomspace(1e3, 1e6, 8)
    y = 1.7 + 30.0 * x ** -0.4
    E, A, alpha = fit_power_law(x, y)
    assert (E, A, alpha) == pytest.approx((1.7, 30.0, 0.4), rel=1e-4)


def test_fit_power_law_with_noise_stays_near_the_truth():
    rng = np.random.default_rng(0)
    x = np.geomspace(1e3, 1e6, 12)
    y = 2.0 + 50.0 * x ** -0.5 * np.exp(rng.normal(0, 0.01, len(x)))
    E, _, alpha = fit_power_law(x, y)
    assert abs(E - 2.0) < 0.01 and abs(alpha - 0.5) < 0.05


def test_fit_power_law_respects_a_cap_on_the_floor():
    x = np.geomspace(10, 1e4, 6)
    y = 1.0 + 5.0 * x ** -0.3
    E, _, _ = fit_power_law(x, y, floor_at_most=0.5)
    assert E == 0.5


def test_fit_power_law_needs_three_points():
    with pytest.raises(ValueError, match="at least 3"):
        fit_power_law([1, 2], [3, 4])
