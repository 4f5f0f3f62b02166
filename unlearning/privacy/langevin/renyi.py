"""Renyi curves of SGLU and their conversion to (epsilon, delta) (digest 003, sections 3.1, 3.3, 3.4, 3.9).

PABI (Lemma 3.4) after k = K N noisy steps from two laws at W_inf distance Z gives the linear RDP curve

    Cor 3.8 / Thm 3.11   eps(alpha) = alpha A,   A = Z^2 pabi(K) / (2 eta sigma^2),   pabi(K) = c^(2KN)
    Thm 3.2 (finite T)   eps(alpha) = (alpha - 1/2)/(alpha - 1) * 2 alpha A_tot

and Prop K.2 (Mironov 2017, Prop. 3) converts a curve into (epsilon, delta):

    epsilon = min_{alpha > 1} eps(alpha) + log(1/delta)/(alpha - 1)

in closed form for both curves (digest 3.9), or numerically with dp-accounting's tighter conversion.
All the Renyi quantities are computed in log space (c^(2KN) underflows).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from unlearning.errors import InvalidConfigError
from unlearning.privacy.langevin.constants import (
    PABI_VARIANTS,
    Conversion,
    PabiVariant,
    PNSGDConstants,
    check_epochs,
    check_target,
    check_variant,
)
from unlearning.privacy.langevin.distance import stationarity_gap, z_single
from unlearning.validation import positive_number

# Orders for dp-accounting's conversion: alpha - 1 log-spaced over [1e-3, 1e6]. Any order gives a valid
# epsilon, so a finite grid only makes the reported epsilon (very slightly) conservative.
_DP_ORDERS = 1.0 + np.logspace(-3, 6, 4000)


def log_pabi_factor(const: PNSGDConstants, epochs: int, pabi: PabiVariant = "paper") -> float:
    """log of the PABI contraction after K epochs = k = K N noisy steps (Lemma 3.4):

    paper: c^(2k)  [paper];   tight: c^(2k) (1 - c^2) / (1 - c^(2k))  [digest 3.1, shift-optimal].
    """
    k = check_epochs(epochs) * const.batches
    two_log_c = 2.0 * const.log_c
    if pabi == "paper":
        return k * two_log_c
    if pabi == "tight":
        return k * two_log_c + math.log(-math.expm1(two_log_c)) - math.log(-math.expm1(k * two_log_c))
    raise InvalidConfigError(f"pabi must be one of {PABI_VARIANTS}, got {pabi!r}")


def log_rdp_slope(
    const: PNSGDConstants, sigma: float, epochs: int, z: float, pabi: PabiVariant = "paper"
) -> float:
    """log A, where eps(alpha) = alpha * A is the RDP curve of Cor 3.8 / Thm 3.11:
    A = Z^2 * pabi_factor(K) / (2 eta sigma^2) [paper]."""
    positive_number("sigma", sigma)
    if not z > 0:
        return -math.inf
    return 2.0 * math.log(z) - math.log(2.0 * const.eta * sigma**2) + log_pabi_factor(const, epochs, pabi)


def renyi_epsilon(
    const: PNSGDConstants,
    alpha: float,
    sigma: float,
    epochs: int,
    z: float | None = None,
    pabi: PabiVariant = "paper",
) -> float:
    """epsilon(alpha, sigma, b, K) of Algorithm 7 / Cor 3.8: alpha Z^2 c^(2KN) / (2 eta sigma^2) [paper],
    with Z = Z_B (Algorithm 8) unless the sequential Z^(s) of Thm 3.11 is given."""
    if not alpha > 1:
        raise InvalidConfigError(f"the Renyi order alpha must be > 1, got {alpha}")
    zz = z_single(const) if z is None else z
    return float(alpha) * math.exp(log_rdp_slope(const, sigma, epochs, zz, pabi))


def finite_training_slope(
    const: PNSGDConstants, sigma: float, epochs: int, train_epochs: int, pabi: PabiVariant = "paper"
) -> float:
    """A_tot of Theorem 3.2 [paper, Algorithm 5 corrected]: eps(alpha) = (alpha-1/2)/(alpha-1) * 2 alpha A_tot
    with A_tot = [(2R)^2 c^(2TN) + Z_T^2 pabi(K)] / (2 eta sigma^2) and
    Z_T = 2R c^(TN) + min((1 - c^(TN))/(1 - c^N) 2 eta M / b, 2R). Without projection (R None, the
    authors' code) the 2R terms vanish."""
    positive_number("sigma", sigma)
    T = check_epochs(train_epochs, "T (training epochs)")
    gap = 0.0 if const.R is None else stationarity_gap(const, T)
    z_t = gap + z_single(const, epochs=T)
    scale = 2.0 * const.eta * sigma**2
    eps1 = gap**2 / scale  # (2R)^2 c^(2TN) / (2 eta sigma^2)
    eps2 = math.exp(2.0 * math.log(z_t) + log_pabi_factor(const, epochs, pabi)) / scale
    return eps1 + eps2


def dp_from_linear_rdp(slope: float, delta: float, conversion: Conversion = "paper") -> tuple[float, float]:
    """(epsilon, alpha*) for the RDP curve eps(alpha) = alpha A at every alpha > 1.

    paper (Prop K.2, closed form [digest 3.9]): min_alpha alpha A + log(1/delta)/(alpha - 1)
    = A + 2 sqrt(A log(1/delta)), attained at alpha* = 1 + sqrt(log(1/delta)/A).
    dp_accounting: dp-accounting's improved conversion minimised over a fixed grid of orders.
    """
    check_target(1.0, delta)
    if slope <= 0:
        return 0.0, math.inf
    if conversion == "paper":
        B = math.log(1.0 / delta)
        return slope + 2.0 * math.sqrt(slope * B), 1.0 + math.sqrt(B / slope)
    return _dp_accounting_epsilon(_DP_ORDERS * slope, delta)


def dp_from_weak_triangle_rdp(slope: float, delta: float, conversion: Conversion = "paper") -> tuple[float, float]:
    """(epsilon, alpha*) for Theorem 3.2's curve eps(alpha) = (alpha - 1/2)/(alpha - 1) * 2 alpha A.

    paper (Prop K.2, closed form [digest 3.9]): with u = alpha - 1 the objective is
    2A u + 3A + (A + B)/u, so epsilon = 3A + 2 sqrt(2A (A + B)) at alpha* = 1 + sqrt((A + B)/(2A)).
    """
    check_target(1.0, delta)
    if slope <= 0:
        return 0.0, math.inf
    if conversion == "paper":
        B = math.log(1.0 / delta)
        return 3.0 * slope + 2.0 * math.sqrt(2.0 * slope * (slope + B)), 1.0 + math.sqrt((slope + B) / (2.0 * slope))
    rdp = (_DP_ORDERS - 0.5) / (_DP_ORDERS - 1.0) * 2.0 * _DP_ORDERS * slope
    return _dp_accounting_epsilon(rdp, delta)


def dp_from_rdp_curve(
    rdp: Callable[[float], float], delta: float, alpha_range: tuple[float, float] = (1.0 + 1e-9, 1e5)
) -> tuple[float, float]:
    """Prop K.2 [paper] for any RDP curve, minimised numerically over alpha in ``alpha_range`` (the
    authors' code: scipy's bounded scalar minimiser); used to cross-check the closed forms."""
    check_target(1.0, delta)
    B = math.log(1.0 / delta)
    res = minimize_scalar(
        lambda a: rdp(a) + B / (a - 1.0), bounds=alpha_range, method="bounded", options={"xatol": 1e-10}
    )
    return float(res.fun), float(res.x)


def _dp_accounting_epsilon(rdp: np.ndarray, delta: float) -> tuple[float, float]:
    from dp_accounting.rdp import compute_epsilon  # imported lazily: only this option needs it

    eps, order = compute_epsilon(list(_DP_ORDERS), list(rdp), delta)
    return float(eps), float(order)


def slope_budget(epsilon: float, delta: float, conversion: Conversion, weak_triangle: bool = False) -> float:
    """The largest slope A whose converted epsilon meets the target: the inverse of the conversion.

    Linear curve, paper: A <= a* = (sqrt(B + eps) - sqrt(B))^2 [digest 3.9].
    Theorem 3.2 curve, paper: 3A + 2 sqrt(2A(A+B)) = eps  <=>  A^2 - (8B + 6 eps) A + eps^2 = 0, smaller root.
    dp_accounting: bisection on log A (the converted epsilon is increasing in A).
    """
    check_target(epsilon, delta)
    B = math.log(1.0 / delta)
    if conversion == "paper":
        if not weak_triangle:
            return (math.sqrt(B + epsilon) - math.sqrt(B)) ** 2
        p = 8.0 * B + 6.0 * epsilon
        # Smaller root of A^2 - pA + eps^2, written without cancellation: eps^2 / larger root.
        return epsilon**2 / ((p + math.sqrt(p * p - 4.0 * epsilon**2)) / 2.0)
    convert = dp_from_weak_triangle_rdp if weak_triangle else dp_from_linear_rdp
    lo, hi = math.log(1e-300), math.log(1e300)
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if convert(math.exp(mid), delta, "dp_accounting")[0] <= epsilon:
            lo = mid
        else:
            hi = mid
    return math.exp(lo)


@dataclass(frozen=True)
class PrivacyLoss:
    """(epsilon, delta) reached, with the optimal Renyi order and the RDP value there."""

    epsilon: float
    delta: float
    alpha: float
    rdp: float


def epsilon_converged(
    const: PNSGDConstants,
    sigma: float,
    epochs: int,
    z: float,
    delta: float,
    pabi: PabiVariant = "paper",
    conversion: Conversion = "paper",
) -> PrivacyLoss:
    """(epsilon, delta) after K unlearning epochs from a law within W_inf ``z`` of the target's stationary
    law: Cor 3.8 / Thm 3.11 converted by Prop K.2 (closed form)."""
    check_variant(pabi, conversion)
    slope = math.exp(log_rdp_slope(const, sigma, epochs, z, pabi)) if z > 0 else 0.0
    eps, alpha = dp_from_linear_rdp(slope, delta, conversion)
    return PrivacyLoss(eps, delta, alpha, alpha * slope if math.isfinite(alpha) else 0.0)


def epsilon_finite_training(
    const: PNSGDConstants,
    sigma: float,
    epochs: int,
    train_epochs: int,
    delta: float,
    pabi: PabiVariant = "paper",
    conversion: Conversion = "paper",
) -> PrivacyLoss:
    """(epsilon, delta) of Theorem 3.2 (one request, training for T epochs, reference = T-epoch retrain)."""
    check_variant(pabi, conversion)
    slope = finite_training_slope(const, sigma, epochs, train_epochs, pabi)
    eps, alpha = dp_from_weak_triangle_rdp(slope, delta, conversion)
    rdp = (alpha - 0.5) / (alpha - 1.0) * 2.0 * alpha * slope if math.isfinite(alpha) else 0.0
    return PrivacyLoss(eps, delta, alpha, rdp)
