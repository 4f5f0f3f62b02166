"""Calibration searches of the SGLU accountant: the least number of noisy epochs K that meets a privacy
target, and the least noise sigma for which K epochs do (digest 003, sections 3.9, 3.10).

    least K, paper PABI (closed form, digest 3.9)
        K = max(1, ceil( log(Z^2 / (2 eta sigma^2 a*)) / (2 N log(1/c)) )),   a* = (sqrt(B + eps) - sqrt(B))^2
    least sigma for K epochs (closed form, Cor 3.8)
        sigma = Z sqrt(pabi(K)) / sqrt(2 eta a*)
    Algorithm 4 (corrected to return sigma): bisection on sigma over Algorithm 5's least K (Thm 3.2)

with B = log(1/delta) and a* the largest Renyi slope that still meets the target
(:func:`unlearning.privacy.langevin.renyi.slope_budget`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from unlearning.errors import InvalidConfigError
from unlearning.privacy.langevin.constants import (
    DEFAULT_MAX_EPOCHS,
    Conversion,
    PabiVariant,
    PNSGDConstants,
    check_epochs,
    check_target,
    check_variant,
)
from unlearning.privacy.langevin.distance import stationarity_gap, z_single
from unlearning.privacy.langevin.renyi import (
    finite_training_slope,
    log_pabi_factor,
    log_rdp_slope,
    slope_budget,
)
from unlearning.validation import positive_number


def least_epochs(
    const: PNSGDConstants,
    sigma: float,
    z: float,
    epsilon: float,
    delta: float,
    pabi: PabiVariant = "paper",
    conversion: Conversion = "paper",
    max_epochs: int = DEFAULT_MAX_EPOCHS,
) -> int:
    """The least K >= 1 with epsilon_converged(K) <= epsilon (Algorithms 5/6 inner loop, off-by-one fixed).

    paper PABI, closed form [digest 3.9]: K = max(1, ceil( log(Z^2 / (2 eta sigma^2 a*)) / (2 N log(1/c)) )).
    tight PABI: the slope still decreases in K, so the least K is found by doubling and bisection.
    Raises InvalidConfigError when more than ``max_epochs`` would be needed.
    """
    check_target(epsilon, delta)
    check_variant(pabi, conversion)
    positive_number("sigma", sigma)
    if not z > 0:
        return 1
    log_budget = math.log(slope_budget(epsilon, delta, conversion))

    def ok(k: int) -> bool:
        return log_rdp_slope(const, sigma, k, z, pabi) <= log_budget

    if pabi == "paper":
        log_start = 2.0 * math.log(z) - math.log(2.0 * const.eta * sigma**2)
        guess = (log_start - log_budget) / (-2.0 * const.batches * const.log_c)
        k = max(1, math.ceil(guess - 1e-9)) if math.isfinite(guess) else max_epochs + 1
        k = min(k, max_epochs + 1)
        # One step either way absorbs floating-point error in the closed form.
        while k > 1 and ok(k - 1):
            k -= 1
        while k <= max_epochs and not ok(k):
            k += 1
    else:
        k = least_true(ok, max_epochs)
    if k > max_epochs:
        raise InvalidConfigError(
            f"target epsilon {epsilon} (delta {delta}) is unreachable within {max_epochs} unlearning epochs "
            f"at sigma {sigma} from W_inf distance {z}: raise sigma, relax the target, or retrain"
        )
    return k


def least_epochs_finite_training(
    const: PNSGDConstants,
    sigma: float,
    train_epochs: int,
    epsilon: float,
    delta: float,
    pabi: PabiVariant = "paper",
    conversion: Conversion = "paper",
    max_epochs: int = DEFAULT_MAX_EPOCHS,
) -> int:
    """The least K for Theorem 3.2 (Algorithm 5, corrected). The eps1 term does not decay with K, so the
    target is unreachable when it alone exhausts the budget (too few training epochs T): then
    InvalidConfigError says so."""
    check_target(epsilon, delta)
    check_variant(pabi, conversion)
    budget = slope_budget(epsilon, delta, conversion, weak_triangle=True)
    floor = finite_training_slope(const, sigma, 1, train_epochs, pabi) - _eps2_part(
        const, sigma, 1, train_epochs, pabi
    )
    if floor >= budget:
        raise InvalidConfigError(
            f"target epsilon {epsilon} is unreachable for any K: after T = {train_epochs} training epochs the "
            f"distance of the retrain to its stationary law alone costs more (eps1 slope {floor:.3g} >= "
            f"{budget:.3g}); train longer or raise sigma"
        )
    k = least_true(lambda K: finite_training_slope(const, sigma, K, train_epochs, pabi) <= budget, max_epochs)
    if k > max_epochs:
        raise InvalidConfigError(
            f"target epsilon {epsilon} is unreachable within {max_epochs} unlearning epochs at sigma {sigma}"
        )
    return k


def _eps2_part(const: PNSGDConstants, sigma: float, epochs: int, train_epochs: int, pabi: PabiVariant) -> float:
    gap = 0.0 if const.R is None else stationarity_gap(const, train_epochs)
    z_t = gap + z_single(const, epochs=train_epochs)
    return math.exp(2.0 * math.log(z_t) + log_pabi_factor(const, epochs, pabi)) / (2.0 * const.eta * sigma**2)


def least_true(ok: Callable[[int], bool], limit: int) -> int:
    """The least k in [1, limit] with ok(k) for a monotone predicate (limit + 1 when none)."""
    if ok(1):
        return 1
    lo, hi = 1, 2
    while not ok(hi):
        lo = hi
        if hi > limit:
            return limit + 1
        hi *= 2
    while hi - lo > 1:  # ok(hi) and not ok(lo)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi if hi <= limit else limit + 1


def sigma_for_epochs(
    const: PNSGDConstants,
    epsilon: float,
    delta: float,
    epochs: int = 1,
    z: float | None = None,
    pabi: PabiVariant = "paper",
    conversion: Conversion = "paper",
) -> float:
    """The least sigma for which K epochs reach (epsilon, delta) from distance Z (default Z_B), Cor 3.8,
    closed form [digest 3.9]: sigma = Z sqrt(pabi(K)) / sqrt(2 eta a*). Replaces Algorithm 4's bisection."""
    zz = z_single(const) if z is None else positive_number("Z", z)
    budget = slope_budget(epsilon, delta, conversion)
    return zz * math.exp(0.5 * log_pabi_factor(const, check_epochs(epochs), pabi)) / math.sqrt(2.0 * const.eta * budget)


def sigma_for_epochs_finite_training(
    const: PNSGDConstants,
    epsilon: float,
    delta: float,
    train_epochs: int,
    epochs: int = 1,
    pabi: PabiVariant = "paper",
    conversion: Conversion = "paper",
) -> float:
    """The least sigma for Theorem 3.2 in closed form: A_tot is proportional to 1/sigma^2, so
    sigma = sqrt(A_tot(sigma = 1) / A*), A* the Theorem 3.2 slope budget [digest 3.9]."""
    budget = slope_budget(epsilon, delta, conversion, weak_triangle=True)
    return math.sqrt(finite_training_slope(const, 1.0, epochs, train_epochs, pabi) / budget)


def bisect_sigma(
    meets_target: Callable[[float], bool], lo: float = 1e-15, hi: float = 10.0, tol: float = 1e-8
) -> float:
    """Algorithm 4 [paper, corrected to return sigma]: bisection on sigma in [lo, hi] until hi - lo <= tol,
    keeping ``meets_target(hi)``; returns hi (the authors' code). ``meets_target(sigma)`` is
    "least K(sigma) <= K_hat", monotone in sigma. InvalidConfigError if even ``hi`` misses the target."""
    if not meets_target(hi):
        raise InvalidConfigError(f"no sigma <= {hi} meets the target: the search interval is too small")
    while hi - lo > tol:
        mid = (lo + hi) / 2.0
        if meets_target(mid):
            hi = mid
        else:
            lo = mid
    return hi


def table3_sigma(
    const: PNSGDConstants, epsilon: float, delta: float, train_epochs: int, epochs: int = 1
) -> float:
    """Table 3's procedure: Algorithm 4 bisection over Algorithm 5's least K (Theorem 3.2, K_hat epochs)."""

    def meets(sigma: float) -> bool:
        try:
            return least_epochs_finite_training(const, sigma, train_epochs, epsilon, delta, max_epochs=epochs) <= epochs
        except InvalidConfigError:
            return False

    return bisect_sigma(meets)


def steady_state_sigma(
    const: PNSGDConstants,
    epsilon: float,
    delta: float,
    epochs: int = 1,
    initial_gap: float = 0.0,
    pabi: PabiVariant = "paper",
    conversion: Conversion = "paper",
) -> float:
    """The least sigma for which EVERY single-point request of an unbounded sequence needs at most K epochs
    [mine, from Thm 3.11]: with K epochs per request Z^(s) stays below
    Z_sup = max(gap + Z_B, Z_B / (1 - c^(KN))) (the recursion's fixed point; capped at 2R), so
    sigma_for_epochs(K, Z_sup) suffices for all s. Induction: if K' <= K epochs met the target at Z_s
    then c^(K'N) Z_s <= c^(KN) Z_sup (both PABI forms), hence Z_(s+1) <= c^(KN) Z_sup + Z_B <= Z_sup.

    sigma is rounded up by a relative 1e-9: at exactly the least sigma the fixed point meets the target
    with equality, and floating-point rounding of the recursion could otherwise ask for one more epoch."""
    K = check_epochs(epochs)
    zb = z_single(const)
    fixed = zb / -math.expm1(K * const.batches * const.log_c)
    z_sup = min(max(initial_gap + zb, fixed), const.cap)
    return sigma_for_epochs(const, epsilon, delta, K, z_sup, pabi, conversion) * (1.0 + 1e-9)
