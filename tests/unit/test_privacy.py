"""Gaussian-mechanism calibration and the Hessian-free Eq. 56 bound (unlearning.privacy)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from scipy.stats import norm

from unlearning.errors import InvalidConfigError
from unlearning.privacy.gaussian import (
    analytic_sigma,
    calibrate_sigma,
    classical_sigma,
    gaussian_delta,
    largest_sensitivity,
)
from unlearning.privacy.hf_bound import hf_per_sample_bound, hf_total_bound

# ------------------------------------------------------------------------------------------------
# classical


def test_classical_sigma_known_value() -> None:
    expected = 1.0 * math.sqrt(2.0 * math.log(1.25 / 1e-5)) / 1.0
    assert classical_sigma(1.0, 1.0, 1e-5) == pytest.approx(expected, rel=1e-15)
    assert classical_sigma(1.0, 1.0, 1e-5) == pytest.approx(4.844805262605389, rel=1e-12)
    # the paper's LR setting: epsilon = 1, delta = 1e-3
    assert classical_sigma(2.5, 0.5, 1e-3) == pytest.approx(2.5 * math.sqrt(2 * math.log(1250.0)) / 0.5)


def test_classical_sigma_is_linear_in_sensitivity() -> None:
    assert classical_sigma(3.0, 0.7, 1e-6) == pytest.approx(3.0 * classical_sigma(1.0, 0.7, 1e-6), rel=1e-15)
    assert classical_sigma(0.0, 0.7, 1e-6) == 0.0


def test_classical_sigma_rejects_epsilon_above_one() -> None:
    with pytest.raises(InvalidConfigError, match="epsilon <= 1"):
        classical_sigma(1.0, 1.5, 1e-5)


# ------------------------------------------------------------------------------------------------
# analytic


PRIVACY_TARGETS = [
    (1.0, 1e-5),
    (0.5, 1e-5),
    (1.0, 1e-3),
    (2.0, 1e-5),
    (10.0, 1e-6),
    (100.0, 0.1),  # the paper's CNN setting
    (1000.0, 1e-10),  # e^eps overflows float64: must be handled in log space
    (0.01, 1e-12),
    (1e-4, 0.5),
]


@pytest.mark.parametrize(("epsilon", "delta"), PRIVACY_TARGETS)
def test_analytic_sigma_meets_delta_exactly(epsilon: float, delta: float) -> None:
    sigma = analytic_sigma(1.0, epsilon, delta)
    achieved = gaussian_delta(sigma, 1.0, epsilon)
    assert achieved == pytest.approx(delta, rel=1e-9)
    assert achieved <= delta  # never on the unsafe side
    # and it is the smallest such sigma: a hair less noise breaks the target
    assert gaussian_delta(sigma * (1 - 1e-7), 1.0, epsilon) > delta


@pytest.mark.parametrize(("epsilon", "delta"), [t for t in PRIVACY_TARGETS if t[0] <= 1.0])
def test_analytic_never_exceeds_classical(epsilon: float, delta: float) -> None:
    assert analytic_sigma(1.0, epsilon, delta) <= classical_sigma(1.0, epsilon, delta)


def test_analytic_sigma_known_values() -> None:
    # Verified independently by a 50-digit mpmath bisection on Balle & Wang's Theorem 8 profile.
    assert round(analytic_sigma(1.0, 1.0, 1e-5), 3) == 3.731
    assert round(analytic_sigma(1.0, 1.0, 1e-3), 3) == 2.575
    assert round(analytic_sigma(1.0, 2.0, 1e-5), 3) == 1.994
    assert round(analytic_sigma(1.0, 100.0, 0.1), 4) == 0.0770


def test_analytic_sigma_agrees_with_high_precision_bisection() -> None:
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    epsilon, delta = 1.0, 1e-5

    def profile(x: Any) -> Any:
        e = mpmath.mpf(epsilon)
        return mpmath.ncdf(1 / (2 * x) - e * x) - mpmath.exp(e) * mpmath.ncdf(-1 / (2 * x) - e * x)

    lo, hi = mpmath.mpf(1), mpmath.mpf(10)
    for _ in range(120):
        mid = (lo + hi) / 2
        if profile(mid) > delta:
            lo = mid
        else:
            hi = mid
    assert analytic_sigma(1.0, epsilon, delta) == pytest.approx(float(hi), rel=1e-11)


def test_gaussian_delta_matches_plain_formula_where_it_is_safe() -> None:
    sigma, sens, eps = 3.0, 1.5, 0.8
    plain = norm.cdf(sens / (2 * sigma) - eps * sigma / sens) - math.exp(eps) * norm.cdf(
        -sens / (2 * sigma) - eps * sigma / sens
    )
    assert gaussian_delta(sigma, sens, eps) == pytest.approx(plain, rel=1e-10)


def test_gaussian_delta_edges_and_monotonicity() -> None:
    assert gaussian_delta(1.0, 0.0, 1.0) == 0.0
    assert gaussian_delta(0.0, 1.0, 1.0) == 1.0
    values = [gaussian_delta(s, 1.0, 1.0) for s in np.linspace(0.2, 10.0, 50)]
    assert all(a > b for a, b in itertools.pairwise(values))
    assert gaussian_delta(1e3, 1.0, 1.0) >= 0.0


def test_analytic_sigma_is_linear_in_sensitivity() -> None:
    unit = analytic_sigma(1.0, 3.0, 1e-6)
    assert analytic_sigma(7.5, 3.0, 1e-6) == pytest.approx(7.5 * unit, rel=1e-15)
    assert analytic_sigma(0.0, 3.0, 1e-6) == 0.0


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-5), (2.0, 1e-5), (0.5, 1e-3), (5.0, 1e-6)])
def test_analytic_sigma_agrees_with_dp_accounting_pld(epsilon: float, delta: float) -> None:
    from dp_accounting.pld import privacy_loss_distribution

    sigma = analytic_sigma(1.0, epsilon, delta)
    pld = privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=sigma, sensitivity=1.0, value_discretization_interval=1e-4
    )
    assert pld.get_delta_for_epsilon(epsilon) == pytest.approx(delta, rel=1e-2)


# ------------------------------------------------------------------------------------------------
# calibrate_sigma / largest_sensitivity


def test_calibrate_sigma_switches_at_epsilon_one() -> None:
    sigma, kind = calibrate_sigma(2.0, 1.0, 1e-5)
    assert kind == "classical"
    assert sigma == classical_sigma(2.0, 1.0, 1e-5)
    sigma, kind = calibrate_sigma(2.0, 1.0 + 1e-9, 1e-5)
    assert kind == "analytic"
    assert sigma == analytic_sigma(2.0, 1.0 + 1e-9, 1e-5)
    assert calibrate_sigma(0.0, 5.0, 1e-5) == (0.0, "analytic")
    assert calibrate_sigma(0.0, 0.5, 1e-5) == (0.0, "classical")


@pytest.mark.parametrize(("epsilon", "delta"), [(0.3, 1e-6), (1.0, 1e-5), (2.0, 1e-5), (50.0, 1e-3)])
@pytest.mark.parametrize("sigma_max", [1e-3, 0.37, 1.0, 12.5, 1e4])
def test_largest_sensitivity_inverts_calibrate_sigma(epsilon: float, delta: float, sigma_max: float) -> None:
    sens = largest_sensitivity(sigma_max, epsilon, delta)
    sigma, _ = calibrate_sigma(sens, epsilon, delta)
    assert sigma <= sigma_max
    assert sigma == pytest.approx(sigma_max, rel=1e-12)
    # anything noticeably larger needs more noise than allowed
    assert calibrate_sigma(sens * (1 + 1e-9), epsilon, delta)[0] > sigma_max


def test_largest_sensitivity_of_zero_noise_is_zero() -> None:
    assert largest_sensitivity(0.0, 1.0, 1e-5) == 0.0


# ------------------------------------------------------------------------------------------------
# Gaussian validation


@pytest.mark.parametrize(
    "call",
    [
        lambda: classical_sigma(-1.0, 0.5, 1e-5),
        lambda: classical_sigma(math.inf, 0.5, 1e-5),
        lambda: classical_sigma(math.nan, 0.5, 1e-5),
        lambda: classical_sigma(1.0, 0.0, 1e-5),
        lambda: classical_sigma(1.0, -1.0, 1e-5),
        lambda: classical_sigma(1.0, 0.5, 0.0),
        lambda: classical_sigma(1.0, 0.5, 1.0),
        lambda: classical_sigma(1.0, 0.5, -0.1),
        lambda: classical_sigma("1", 0.5, 1e-5),  # type: ignore[arg-type]
        lambda: classical_sigma(True, 0.5, 1e-5),
        lambda: analytic_sigma(-1.0, 2.0, 1e-5),
        lambda: analytic_sigma(math.inf, 2.0, 1e-5),
        lambda: analytic_sigma(1.0, 0.0, 1e-5),
        lambda: analytic_sigma(1.0, math.inf, 1e-5),
        lambda: analytic_sigma(1.0, math.nan, 1e-5),
        lambda: analytic_sigma(1.0, 2.0, 0.0),
        lambda: analytic_sigma(1.0, 2.0, 1.5),
        lambda: analytic_sigma(1.0, 2.0, 1e-5, tol=0.0),
        lambda: analytic_sigma(1.0, 2.0, 1e-5, tol=0.5),
        lambda: gaussian_delta(-1.0, 1.0, 1.0),
        lambda: gaussian_delta(math.inf, 1.0, 1.0),
        lambda: gaussian_delta(1.0, -1.0, 1.0),
        lambda: gaussian_delta(1.0, 1.0, 0.0),
        lambda: calibrate_sigma(-1.0, 1.0, 1e-5),
        lambda: calibrate_sigma(1.0, 0.0, 1e-5),
        lambda: calibrate_sigma(1.0, 1.0, 1.0),
        lambda: largest_sensitivity(-1.0, 1.0, 1e-5),
        lambda: largest_sensitivity(math.inf, 1.0, 1e-5),
        lambda: largest_sensitivity(1.0, 0.0, 1e-5),
        lambda: largest_sensitivity(1.0, 1.0, 0.0),
    ],
)
def test_gaussian_invalid_inputs_raise(call: object) -> None:
    with pytest.raises(InvalidConfigError):
        call()  # type: ignore[operator]


# ------------------------------------------------------------------------------------------------
# Hessian-free Eq. 56


def _paper_closed_form(
    eta: float, q: float, G: float, rho: float, batch: int, per_epoch: int, steps: int, b: int
) -> float:
    """Eq. 56 as printed (needs rho != q, rho != q^2 and steps = E_eff * per_epoch)."""
    term1 = (
        2
        * eta**2
        * G
        / (1 - q)
        * ((rho**steps - q**steps) / (rho - q) - (rho**steps - q ** (2 * steps)) / (rho - q**2))
    )
    term2 = (
        2
        * eta
        * G
        / batch
        * (rho**steps - q**steps)
        / (rho**per_epoch - q**per_epoch)
        * rho ** (per_epoch - b - 1)
        * q**b
    )
    return term1 + term2


def _direct_sum(
    eta: float, q: float, G: float, rho: float, batch: int, per_epoch: int, steps: int, b: int
) -> float:
    """The bound from its origin, step by step, in plain floats (for a partial last epoch too)."""
    term1 = sum(
        rho ** (steps - 1 - k) * eta * q**k * 2 * eta * G * (1 - q**k) / (1 - q) for k in range(steps)
    )
    term2 = sum(2 * G * eta * q**t / batch * rho ** (steps - 1 - t) for t in range(b, steps, per_epoch))
    return term1 + term2


HF_CASES = [
    # eta, q, G, rho, |B|, B, T, b
    (0.05, 0.995, 5.0, 0.9, 64, 10, 50, 0),
    (0.05, 0.995, 5.0, 0.999, 64, 10, 50, 3),
    (0.1, 0.9, 1.0, 0.95, 32, 7, 21, 6),
    (0.01, 0.5, 2.0, 1.2, 16, 4, 40, 1),
    (0.05, 0.99, 10.0, 0.5, 128, 5, 30, 2),  # rho < q
]


@pytest.mark.parametrize("case", HF_CASES)
def test_hf_bound_equals_paper_closed_form(
    case: tuple[float, float, float, float, int, int, int, int],
) -> None:
    eta, q, G, rho, batch, per_epoch, steps, b = case
    got = hf_per_sample_bound(eta, q, G, rho, batch, per_epoch, steps, position=b)
    assert got == pytest.approx(_paper_closed_form(*case), rel=1e-9)
    assert got == pytest.approx(_direct_sum(*case), rel=1e-12)


def test_hf_bound_known_value() -> None:
    # the closed form above gives 7.338125860004309 (eta 0.05, q 0.995, G 5, rho 0.9, |B| 64, B 10, T 50)
    assert hf_per_sample_bound(0.05, 0.995, 5.0, 0.9, 64, 10, 50, position=0) == pytest.approx(
        7.338125860004288, rel=1e-12
    )
    assert hf_per_sample_bound(0.1, 0.9, 1.0, 0.95, 32, 7, 21, position=6) == pytest.approx(
        0.45864662716212, rel=1e-12
    )


def test_hf_bound_partial_last_epoch_sums_only_the_steps_run() -> None:
    case = (0.05, 0.99, 3.0, 0.97, 32, 10, 47, 8)  # 4 full epochs + 7 steps: b = 8 is not reached in epoch 5
    eta, q, G, rho, batch, per_epoch, steps, b = case
    assert hf_per_sample_bound(eta, q, G, rho, batch, per_epoch, steps, position=b) == pytest.approx(
        _direct_sum(*case), rel=1e-12
    )
    case2 = (0.05, 0.99, 3.0, 0.97, 32, 10, 47, 2)
    assert hf_per_sample_bound(*case2[:7], position=case2[7]) == pytest.approx(_direct_sum(*case2), rel=1e-12)
    # fewer steps than one epoch: a position past the last step only pays term 1
    only_term1 = hf_per_sample_bound(0.05, 0.99, 3.0, 0.97, 32, 10, 3, position=5)
    assert only_term1 == pytest.approx(_direct_sum(0.05, 0.99, 3.0, 0.97, 32, 10, 3, 5), rel=1e-12)


def test_hf_bound_continuous_at_rho_equal_q() -> None:
    args = (0.05, 0.99, 5.0)
    at = hf_per_sample_bound(*args, 0.99, 64, 10, 50, position=0)
    near = hf_per_sample_bound(*args, 0.99 + 1e-9, 64, 10, 50, position=0)
    assert math.isfinite(at)
    assert at == pytest.approx(near, rel=1e-6)
    # rho == q^2 is the other singular point of the closed form
    at2 = hf_per_sample_bound(*args, 0.99**2, 64, 10, 50, position=0)
    near2 = hf_per_sample_bound(*args, 0.99**2 + 1e-9, 64, 10, 50, position=0)
    assert math.isfinite(at2)
    assert at2 == pytest.approx(near2, rel=1e-6)
    assert at == pytest.approx(_direct_sum(*args, 0.99, 64, 10, 50, 0), rel=1e-12)


def test_hf_bound_monotone_in_rho_and_g() -> None:
    rhos = np.linspace(0.0, 1.1, 23)
    values = [hf_per_sample_bound(0.05, 0.995, 5.0, float(r), 64, 10, 60) for r in rhos]
    assert all(a < b for a, b in itertools.pairwise(values))
    gs = [0.0, 0.1, 1.0, 5.0, 50.0]
    values = [hf_per_sample_bound(0.05, 0.995, g, 0.9, 64, 10, 60) for g in gs]
    assert values[0] == 0.0
    assert all(a < b for a, b in itertools.pairwise(values))
    # linear in G
    assert values[-1] == pytest.approx(10 * values[-2], rel=1e-12)


@pytest.mark.parametrize(
    ("q", "rho", "steps"), [(0.995, 0.9, 60), (0.9, 0.99, 60), (0.99, 0.5, 60), (0.99, 0.5, 57)]
)
def test_hf_worst_case_position_dominates(q: float, rho: float, steps: int) -> None:
    worst = hf_per_sample_bound(0.05, q, 5.0, rho, 64, 10, steps)
    fixed = [hf_per_sample_bound(0.05, q, 5.0, rho, 64, 10, steps, position=b) for b in range(10)]
    assert worst >= max(fixed) * (1 - 1e-12)
    if steps % 10 == 0:  # full epochs: the worst case is the worst fixed position
        assert worst == pytest.approx(max(fixed), rel=1e-12)
        expected_b = 0 if q < rho else 9
        assert int(np.argmax(fixed)) == expected_b


def test_hf_bound_large_and_overflowing() -> None:
    # q close to 1 and many steps stays finite and positive
    value = hf_per_sample_bound(0.01, 0.99995, 10.0, 0.999, 128, 391, 391 * 30)
    assert math.isfinite(value) and value > 0
    # rho > 1 over many steps: vacuous, reported as inf, never NaN
    assert hf_per_sample_bound(0.05, 0.99, 5.0, 1.5, 64, 100, 100_000) == math.inf
    # rho = 0: only the last step's remainder and u's last injection survive
    eta, q, G = 0.1, 0.9, 1.0
    assert hf_per_sample_bound(eta, q, G, 0.0, 4, 5, 10, position=4) == pytest.approx(
        _direct_sum(eta, q, G, 0.0, 4, 5, 10, 4), rel=1e-12
    )


def test_hf_total_bound_is_linear_in_m() -> None:
    per = hf_per_sample_bound(0.05, 0.995, 5.0, 0.9, 64, 10, 50)
    assert hf_total_bound(per, 0) == 0.0
    assert hf_total_bound(per, 1) == per
    assert hf_total_bound(per, 7) == pytest.approx(7 * per)
    assert hf_total_bound(per, 14) == pytest.approx(2 * hf_total_bound(per, 7))
    assert hf_total_bound(math.inf, 0) == 0.0
    assert hf_total_bound(math.inf, 3) == math.inf


@pytest.mark.parametrize(
    "kwargs",
    [
        {"eta": 0.0},
        {"eta": -0.1},
        {"eta": math.inf},
        {"eta": math.nan},
        {"q": 1.0},
        {"q": 0.0},
        {"q": -0.5},
        {"q": 1.5},
        {"q": math.nan},
        {"G": -1.0},
        {"G": math.inf},
        {"rho": -0.1},
        {"rho": math.inf},
        {"rho": math.nan},
        {"batch_size": 0},
        {"batch_size": 2.0},
        {"batches_per_epoch": 0},
        {"batches_per_epoch": True},
        {"total_steps": 0},
        {"total_steps": -5},
        {"total_steps": 10.5},
        {"position": -1},
        {"position": 10},
        {"position": 1.0},
    ],
)
def test_hf_bound_invalid_inputs_raise(kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {
        "eta": 0.05,
        "q": 0.995,
        "G": 5.0,
        "rho": 0.9,
        "batch_size": 64,
        "batches_per_epoch": 10,
        "total_steps": 50,
        "position": None,
    }
    args.update(kwargs)
    with pytest.raises(InvalidConfigError):
        hf_per_sample_bound(**args)  # type: ignore[arg-type]


def test_hf_bound_q_one_message() -> None:
    with pytest.raises(InvalidConfigError, match="decaying step size q < 1"):
        hf_per_sample_bound(0.05, 1.0, 5.0, 0.9, 64, 10, 50)


@pytest.mark.parametrize(
    ("per_sample", "m"),
    [(-1.0, 1), (math.nan, 1), (1.0, -1), (1.0, 2.0), (1.0, True), ("1", 1)],
)
def test_hf_total_bound_invalid_inputs_raise(per_sample: float, m: int) -> None:
    with pytest.raises(InvalidConfigError):
        hf_total_bound(per_sample, m)
