"""The SGLU accountant against the paper's Table 3 and the digest's deterministic checks (digest 003,
section 7(A), A1-A17), plus its invariants: more epochs never raise epsilon, closed forms equal the
paper's numerical procedures, and invalid targets fail with clear messages."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest

from bench.baselines.descent_to_delete import (
    D2DConstants,
    iterations_without_state,
    request_iterations,
    sigma_with_state,
)
from unlearning.errors import InvalidConfigError
from unlearning.privacy.langevin.calibration import (
    least_epochs,
    least_epochs_finite_training,
    sigma_for_epochs,
    sigma_for_epochs_finite_training,
    steady_state_sigma,
    table3_sigma,
)
from unlearning.privacy.langevin.constants import PNSGDConstants
from unlearning.privacy.langevin.distance import epochs_to_converge, stationarity_gap, z_batch, z_single
from unlearning.privacy.langevin.lu_baseline import lu_sequential_epochs
from unlearning.privacy.langevin.renyi import (
    dp_from_linear_rdp,
    dp_from_rdp_curve,
    dp_from_weak_triangle_rdp,
    epsilon_converged,
    epsilon_finite_training,
    log_pabi_factor,
    renyi_epsilon,
)
from unlearning.privacy.langevin.sequential import sequential_plan

MNIST = (11264, 0.011264, 784)  # n (after the paper's trim), lam = 1e-6 n, d
CIFAR = (9728, 0.009728, 512)
EPSILONS = (0.05, 0.1, 0.5, 1.0, 2.0, 5.0)
# Table 3 of the paper: sigma reaching epsilon with K_hat = 1 epoch (Thm 3.2), printed truncated.
TABLE3 = {
    ("cifar", 128): (0.2165, 0.1084, 0.0220, 0.0112, 0.0058, 0.0025),
    ("cifar", "full"): (1.2592, 0.6308, 0.1282, 0.0653, 0.0338, 0.0148),
    ("mnist", 128): (0.0790, 0.0396, 0.0080, 0.0041, 0.0021, 0.0009),
    ("mnist", "full"): (0.9438, 0.4728, 0.0960, 0.0489, 0.0253, 0.0111),
}
SETTINGS: dict[str, tuple[int, float, int]] = {"mnist": MNIST, "cifar": CIFAR}


def const(name: str, b: int | str, R: float | None = None) -> PNSGDConstants:
    n, lam, _ = SETTINGS[name]
    return PNSGDConstants.logistic(n, n if b == "full" else int(b), lam, R=R)


def delta(name: str) -> float:
    return 1.0 / SETTINGS[name][0]


def d2d_constants(name: str) -> D2DConstants:
    _, lam, d = SETTINGS[name]
    return D2DConstants(L=0.25 + lam, m=lam, M=1.0, d=d)


def truncate4(x: float) -> float:
    return math.floor(x * 1e4 + 1e-9) / 1e4


# --------------------------------------------------------------------------------------------- A1-A4
@pytest.mark.parametrize(
    ("name", "c", "eta"), [("mnist", 0.9568865, 3.8275461), ("cifar", 0.9625454, 3.8501817)]
)
def test_a1_a2_contraction_and_step_size(name: str, c: float, eta: float) -> None:
    k = const(name, 128)
    assert round(k.c, 7) == c and round(k.eta, 7) == eta


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("mnist", (0.2392217, 0.0610688, 0.0240861, 0.0157632)),
        ("cifar", (0.2406386, 0.0636574, 0.0291568, 0.0211341)),
    ],
)
def test_a3_a4_algorithm8_z_b(name: str, expected: tuple[float, ...]) -> None:
    got = tuple(round(z_single(const(name, b)), 7) for b in (32, 128, 512, "full"))
    assert got == expected


# ----------------------------------------------------------------------------------------------- A5
@pytest.mark.parametrize(("name", "b"), list(TABLE3))
def test_a5_table3_by_the_papers_bisection(name: str, b: int | str) -> None:
    """Algorithm 4 (bisection, returns sigma_high) over Algorithm 5 (Thm 3.2, corrected), R = 100,
    T = 30 epochs (b = 128) / 3000 (full batch), delta = 1/n: every entry to the printed 4 decimals."""
    k = const(name, b, R=100.0)
    T = 30 if b == 128 else 3000
    got = tuple(truncate4(table3_sigma(k, e, delta(name), T)) for e in EPSILONS)
    assert got == TABLE3[(name, b)]


@pytest.mark.parametrize(("name", "b"), list(TABLE3))
def test_a5_table3_closed_form_agrees_and_projection_is_irrelevant(name: str, b: int | str) -> None:
    T = 30 if b == 128 else 3000
    with_r = [
        sigma_for_epochs_finite_training(const(name, b, R=100.0), e, delta(name), T) for e in EPSILONS
    ]
    without_r = [sigma_for_epochs_finite_training(const(name, b), e, delta(name), T) for e in EPSILONS]
    assert tuple(truncate4(s) for s in with_r) == TABLE3[(name, b)]
    assert with_r == pytest.approx(without_r, rel=1e-12)  # the 2R c^(TN) terms are ~e^-116: the code's R = 0


def test_table3_needs_the_finite_T_bound_not_the_converged_one() -> None:
    """Digest 5.2: Cor 3.8 gives a visibly smaller sigma (0.0029 vs 0.0041 at MNIST b=128, eps=1)."""
    k = const("mnist", 128, R=100.0)
    assert round(sigma_for_epochs(k, 1.0, delta("mnist")), 4) == 0.0029
    assert truncate4(sigma_for_epochs_finite_training(k, 1.0, delta("mnist"), 30)) == 0.0041


# -------------------------------------------------------------------------------------------- A6-A8
@pytest.mark.parametrize(
    ("name", "b", "expected"),
    [
        ("mnist", 128, (0.0559, 0.0280, 0.0057, 0.0029, 0.0015, 0.0006)),
        ("mnist", "full", (0.6670, 0.3339, 0.0675, 0.0342, 0.0175, 0.0075)),
        ("cifar", 128, (0.1530, 0.0766, 0.0155, 0.0078, 0.0040, 0.0017)),
        ("cifar", "full", (0.8898, 0.4455, 0.0901, 0.0456, 0.0234, 0.0100)),
    ],
)
def test_a6_a8_converged_closed_form_sigma(name: str, b: int | str, expected: tuple[float, ...]) -> None:
    got = tuple(round(sigma_for_epochs(const(name, b), e, delta(name)), 4) for e in EPSILONS)
    assert got == expected


# ------------------------------------------------------------------------------------------- A9-A12
def _plan(
    name: str, b: int | str, sigma: float, pabi: str, eps: float = 1.0, requests: int = 100
) -> list[int]:
    charges = sequential_plan(const(name, b), sigma, eps, delta(name), [1] * requests, pabi=pabi)  # type: ignore[arg-type]
    return [c.epochs for c in charges]


@pytest.mark.parametrize(
    ("name", "b", "prefix", "total"),
    [
        ("mnist", 128, [1] * 8, 100),
        ("mnist", 512, [1, 1, 1, 2, 1, 1, 2], 133),
        ("mnist", "full", [9, 16, 18, 18], 1789),
        ("cifar", 128, [1] * 8, 100),
        ("cifar", 512, [1, 2, 2, 2], 199),
        ("cifar", "full", [13, 22, 23, 24, 23, 23], 2322),
    ],
)
def test_a9_a10_sequential_tight_k_lists_match_the_official_logs(
    name: str, b: int | str, prefix: list[int], total: int
) -> None:
    ks = _plan(name, b, 0.01, "tight")
    assert ks[: len(prefix)] == prefix and sum(ks) == total


def test_a11_z_trace_follows_the_thm311_recursion() -> None:
    charges = sequential_plan(const("mnist", 128), 0.01, 1.0, delta("mnist"), [1] * 4, pabi="tight")
    assert [round(c.z_in, 8) for c in charges] == [0.0610688, 0.06233219, 0.06235833, 0.06235887]
    for prev, nxt in itertools.pairwise(charges):
        assert nxt.z_in == pytest.approx(prev.z_out + z_single(const("mnist", 128)), rel=1e-14)


@pytest.mark.parametrize(
    ("name", "b", "pabi", "prefix", "total"),
    [
        ("mnist", 128, "paper", [1] * 5, 100),
        ("mnist", 128, "tight", [1] * 5, 100),
        ("mnist", "full", "paper", [4, 18, 18], 1786),
        ("mnist", "full", "tight", [2, 5, 7, 8, 9, 9], 886),
        ("cifar", 128, "paper", [1] * 5, 100),
        ("cifar", "full", "paper", [12, 25], 2487),
        ("cifar", "full", "tight", [3, 7, 10, 11, 12, 12], 1183),
    ],
)
def test_a12_fig3b_setting_sigma_003(
    name: str, b: int | str, pabi: str, prefix: list[int], total: int
) -> None:
    ks = _plan(name, b, 0.03, pabi)
    assert ks[: len(prefix)] == prefix and sum(ks) == total


def test_constant_z_b_of_the_printed_algorithm7_understates_sequential_cost() -> None:
    """Algorithms 6-8 as printed use Z_B for every request; the recursion needs more epochs (A12: 18 vs 4)."""
    k = const("mnist", "full")
    printed = least_epochs(k, 0.03, z_single(k), 1.0, delta("mnist"))
    assert printed == 4 and max(_plan("mnist", "full", 0.03, "paper", requests=5)) == 18


# ------------------------------------------------------------------------------------- A13, A17 (D2D)
@pytest.mark.parametrize(
    ("name", "I", "first", "last", "total"), [("mnist", 98, 132, 134, 13374), ("cifar", 111, 149, 152, 15169)]
)
def test_a13_d2d_theorem_l2_iterations(name: str, I: int, first: int, last: int, total: int) -> None:
    d2d = d2d_constants(name)
    assert iterations_without_state(d2d, 1.0, delta(name)) == I
    ks = [request_iterations(d2d, I, i, delta(name)) for i in range(1, 101)]
    assert (ks[0], ks[-1], sum(ks)) == (first, last, total)


@pytest.mark.parametrize(("name", "expected"), [("mnist", (3.101, 0.5181)), ("cifar", (4.779, 0.8181))])
def test_a17_d2d_theorem_l1_noise(name: str, expected: tuple[float, float]) -> None:
    d2d, n = d2d_constants(name), SETTINGS[name][0]
    got = (sigma_with_state(d2d, 1, n, 1.0, delta(name)), sigma_with_state(d2d, 5, n, 1.0, delta(name)))
    assert (round(got[0], 3), round(got[1], 4)) == expected


def test_a13_gamma() -> None:
    assert round(d2d_constants("mnist").gamma, 6) == 0.917337
    assert round(d2d_constants("cifar").gamma, 6) == 0.927795


# ---------------------------------------------------------------------------------------- A14-A16
@pytest.mark.parametrize(
    ("name", "expected", "total"),
    [("mnist", [875, 1147, 1186, 1216, 1250, 1291, 1344, 1408, 1481, 1559], 12757), ("cifar", None, 15461)],
)
def test_a14_lu_baseline_recursion(name: str, expected: list[int] | None, total: int) -> None:
    k = const(name, "full")
    ks = lu_sequential_epochs(SETTINGS[name][0], k.eta, k.m, 1.0, 0.03, 1.0, delta(name), 10, size=10)
    assert sum(ks) == total and (expected is None or ks == expected)


def test_a15_full_batch_sglu_is_under_10_percent_of_d2d() -> None:
    for name in ("mnist", "cifar"):
        d2d = d2d_constants(name)
        I = iterations_without_state(d2d, 1.0, delta(name))
        d2d_total = sum(request_iterations(d2d, I, i, delta(name)) for i in range(1, 101))
        ratio = sum(_plan(name, "full", 0.03, "tight")) / d2d_total
        assert ratio == pytest.approx({"mnist": 886 / 13374, "cifar": 1183 / 15169}[name]) and ratio < 0.1


@pytest.mark.parametrize(
    ("name", "b", "pabi", "most"),
    [
        ("mnist", 32, "tight", 1),
        ("mnist", 32, "paper", 1),
        ("cifar", 32, "tight", 1),
        ("cifar", 32, "paper", 1),
        ("mnist", 512, "tight", 4),
        ("mnist", 512, "paper", 5),
        ("cifar", 512, "tight", 5),
        ("cifar", 512, "paper", 7),
    ],
)
def test_a16_fig3cd_at_most_k_epochs_per_request(name: str, b: int, pabi: str, most: int) -> None:
    worst = max(max(_plan(name, b, s, pabi, eps=0.01)) for s in (0.05, 0.1, 0.2, 0.5, 1.0))
    assert worst == most


# --------------------------------------------------------------------------------------- invariants
@pytest.mark.parametrize("pabi", ["paper", "tight"])
@pytest.mark.parametrize("conversion", ["paper", "dp_accounting"])
def test_more_unlearning_epochs_never_increase_epsilon(pabi: str, conversion: str) -> None:
    for b in (32, 128, "full"):
        k = const("mnist", b)
        eps = [
            epsilon_converged(k, 0.03, K, z_single(k), 1e-4, pabi, conversion).epsilon  # type: ignore[arg-type]
            for K in range(1, 40)
        ]
        assert all(later <= earlier for earlier, later in itertools.pairwise(eps))
        assert eps[-1] < eps[0] or eps[0] == 0.0  # dp-accounting reports 0 once the RDP is negligible


def test_more_epochs_never_increase_the_finite_T_epsilon() -> None:
    k = const("mnist", 128, R=100.0)
    eps = [epsilon_finite_training(k, 0.004, K, 30, delta("mnist")).epsilon for K in range(1, 20)]
    assert all(b <= a for a, b in itertools.pairwise(eps)) and eps[-1] < eps[0]


def test_tight_pabi_never_exceeds_the_papers_and_equals_it_for_one_step() -> None:
    k = const("mnist", 128)
    for K in (1, 2, 5, 50):
        assert log_pabi_factor(k, K, "tight") <= log_pabi_factor(k, K, "paper")
    full = const("mnist", "full")
    assert log_pabi_factor(full, 1, "tight") == pytest.approx(
        log_pabi_factor(full, 1, "paper"), rel=1e-12
    )


def _linear(slope: float) -> Callable[[float], float]:
    return lambda a: a * slope


def _weak_triangle(slope: float) -> Callable[[float], float]:
    return lambda a: (a - 0.5) / (a - 1) * 2 * a * slope


def test_closed_form_conversions_equal_numerical_minimisation() -> None:
    for slope in (1e-4, 0.03, 0.5, 3.0):
        closed, alpha = dp_from_linear_rdp(slope, 1e-4)
        numeric, _ = dp_from_rdp_curve(_linear(slope), 1e-4)
        assert closed == pytest.approx(numeric, rel=1e-7) and alpha > 1
        closed_wt, _ = dp_from_weak_triangle_rdp(slope, 1e-4)
        numeric_wt, _ = dp_from_rdp_curve(_weak_triangle(slope), 1e-4)
        assert closed_wt == pytest.approx(numeric_wt, rel=1e-7)


def test_dp_accounting_conversion_is_tighter_and_never_needs_more_epochs() -> None:
    for slope in (0.01, 0.1, 1.0):
        assert (
            dp_from_linear_rdp(slope, 1e-4, "dp_accounting")[0] < dp_from_linear_rdp(slope, 1e-4)[0]
        )
    k = const("mnist", "full")
    z = z_single(k)
    assert least_epochs(k, 0.03, z, 1.0, 1e-4, conversion="dp_accounting") <= least_epochs(
        k, 0.03, z, 1.0, 1e-4
    )


@pytest.mark.parametrize("pabi", ["paper", "tight"])
def test_least_epochs_is_the_least_k_meeting_the_target(pabi: str) -> None:
    k = const("mnist", "full")
    for sigma in (0.01, 0.03, 0.1):
        for z in (z_single(k), 3 * z_single(k)):
            K = least_epochs(k, sigma, z, 1.0, delta("mnist"), pabi)  # type: ignore[arg-type]
            assert epsilon_converged(k, sigma, K, z, delta("mnist"), pabi).epsilon <= 1.0  # type: ignore[arg-type]
            if K > 1:
                assert epsilon_converged(k, sigma, K - 1, z, delta("mnist"), pabi).epsilon > 1.0  # type: ignore[arg-type]


def test_sigma_for_epochs_is_the_least_sigma() -> None:
    k = const("mnist", 128)
    for K in (1, 3):
        s = sigma_for_epochs(k, 1.0, 1e-4, K)
        assert epsilon_converged(k, s, K, z_single(k), 1e-4).epsilon == pytest.approx(1.0, rel=1e-9)
        assert least_epochs(k, s * (1 + 1e-9), z_single(k), 1.0, 1e-4) <= K
        assert least_epochs(k, s * 0.999, z_single(k), 1.0, 1e-4) > K


@pytest.mark.parametrize("pabi", ["paper", "tight"])
@pytest.mark.parametrize(("b", "K"), [(512, 2), (128, 1), ("full", 3)])
def test_steady_state_sigma_keeps_every_request_within_the_epoch_budget(
    pabi: str, b: int | str, K: int
) -> None:
    k = const("mnist", b)
    s = steady_state_sigma(k, 1.0, 1e-4, epochs=K, initial_gap=1e-6, pabi=pabi)  # type: ignore[arg-type]
    ks = [c.epochs for c in sequential_plan(k, s, 1.0, 1e-4, [1] * 300, pabi=pabi, z0=1e-6)]  # type: ignore[arg-type]
    assert max(ks) == K  # reached near the fixed point, never exceeded
    assert max(_plan_sigma(k, s * 0.95, pabi)) > K


def _plan_sigma(k: PNSGDConstants, sigma: float, pabi: str) -> list[int]:
    return [c.epochs for c in sequential_plan(k, sigma, 1.0, 1e-4, [1] * 300, pabi=pabi)]  # type: ignore[arg-type]


def test_batch_requests_scale_z_linearly_and_epochs_logarithmically() -> None:
    k = const("mnist", "full", R=100.0)
    zb = z_single(k)
    assert z_batch(k, 10) == pytest.approx(10 * zb) and z_batch(k, 10**9) == 200.0
    k1 = least_epochs(k, 0.03, z_batch(k, 1), 1.0, 1e-4)
    k100 = least_epochs(k, 0.03, z_batch(k, 100), 1.0, 1e-4)
    # log(100^2) / (2 log(1/c)) = 104.3 more epochs at most: K grows like log S, not like S.
    assert k1 < k100 <= k1 + math.ceil(math.log(100) / -math.log(k.c))


def test_positions_and_finite_training_never_exceed_the_worst_case_z() -> None:
    k = const("mnist", 128)
    worst = z_single(k)
    assert z_single(k, position=k.batches - 1) == pytest.approx(worst)
    assert z_single(k, position=0) < worst and z_single(k, epochs=3) < worst


def test_burn_in_reaches_the_tolerance_and_no_earlier() -> None:
    k = const("mnist", 128, R=100.0)
    T = epochs_to_converge(k, 1e-3)
    assert stationarity_gap(k, T) <= 1e-3 * z_single(k) < stationarity_gap(k, T - 1)


# -------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("epsilon", [0.0, -1.0, math.inf, math.nan])
def test_invalid_epsilon_is_refused_with_a_clear_message(epsilon: float) -> None:
    k = const("mnist", 128)
    with pytest.raises(InvalidConfigError, match="target epsilon must be a finite number > 0"):
        least_epochs(k, 0.03, z_single(k), epsilon, 1e-4)
    with pytest.raises(InvalidConfigError, match="target epsilon"):
        sigma_for_epochs(k, epsilon, 1e-4)


@pytest.mark.parametrize("bad_delta", [0.0, 1.0, -0.1, 1.5])
def test_invalid_delta_is_refused_with_a_clear_message(bad_delta: float) -> None:
    k = const("mnist", 128)
    with pytest.raises(InvalidConfigError, match=r"target delta must lie in \(0, 1\)"):
        least_epochs(k, 0.03, z_single(k), 1.0, bad_delta)
    with pytest.raises(InvalidConfigError, match="delta"):
        epsilon_converged(k, 0.03, 1, z_single(k), bad_delta)


def test_unreachable_k_is_reported() -> None:
    k = const("mnist", "full")
    with pytest.raises(InvalidConfigError, match="unreachable within 5 unlearning epochs"):
        least_epochs(k, 0.001, z_single(k), 0.01, 1e-4, max_epochs=5)
    with pytest.raises(InvalidConfigError, match="unreachable within 5 unlearning epochs"):
        least_epochs(k, 0.001, z_single(k), 0.01, 1e-4, pabi="tight", max_epochs=5)


def test_finite_training_too_short_makes_every_k_unreachable() -> None:
    k = const("mnist", 128, R=100.0)
    with pytest.raises(InvalidConfigError, match="unreachable for any K.*train longer"):
        least_epochs_finite_training(k, 0.01, 1, 1.0, 1e-4)


def test_step_size_above_one_over_l_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match=r"exceeds 1/L"):
        PNSGDConstants.logistic(1000, 100, 0.01, eta=1.0 / 0.26 * 1.01)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 100, "b": 30}, "not a multiple of b"),
        ({"n": 100, "b": 0}, "batch size b"),
        ({"n": 100, "b": 10, "m": 0.0}, "m must be"),
        ({"n": 100, "b": 10, "R": -1.0}, "projection radius"),
    ],
)
def test_invalid_constants_are_refused(kwargs: dict[str, float], message: str) -> None:
    base = {"n": 100, "b": 10, "eta": 1.0, "m": 0.01, "M": 1.0}
    with pytest.raises(InvalidConfigError, match=message):
        PNSGDConstants(**{**base, **kwargs})  # type: ignore[arg-type]


def test_k_must_be_at_least_one_epoch() -> None:
    with pytest.raises(InvalidConfigError, match="at least one noisy step"):
        renyi_epsilon(const("mnist", 128), 2.0, 0.03, 0)
