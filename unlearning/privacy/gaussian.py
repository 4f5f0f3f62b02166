"""Noise calibration for the Gaussian mechanism.

A query whose value moves by at most ``sensitivity`` (Delta, in L2 norm) between neighbouring inputs is
released as ``value + N(0, sigma^2 I)``. This module picks ``sigma`` for a target ``(epsilon, delta)``.

Two calibrations:

- **classical** (Dwork & Roth 2014, Theorem A.1):
  ``sigma = Delta * sqrt(2 ln(1.25/delta)) / epsilon``. The theorem is proved for ``0 < epsilon < 1``
  (we also accept ``epsilon == 1``, as the Hessian-free paper's Definition 1 does); it is loose.
- **analytic** (Balle & Wang 2018, "Improving the Gaussian mechanism for differential privacy", ICML,
  Theorem 8 / Algorithm 1): the exact privacy profile of the Gaussian mechanism is

  ``delta(sigma) = Phi(Delta/(2 sigma) - epsilon sigma/Delta) - e^epsilon Phi(-Delta/(2 sigma) - epsilon sigma/Delta)``

  and the analytic sigma is the smallest sigma with ``delta(sigma) <= delta``. It is valid for every
  ``epsilon > 0`` and never larger than the classical sigma.

In both, sigma is linear in Delta: ``sigma(Delta) = Delta * sigma(1)``. For the classical formula this is
plain; for the analytic one, ``delta(sigma)`` depends on sigma and Delta only through ``sigma/Delta``.
:func:`largest_sensitivity` uses this to invert the calibration.
"""

from __future__ import annotations

import math
import numbers
from typing import Literal

from scipy.optimize import brentq
from scipy.special import log_ndtr

from unlearning.errors import InvalidConfigError

__all__ = [
    "analytic_sigma",
    "calibrate_sigma",
    "classical_sigma",
    "gaussian_delta",
    "largest_sensitivity",
]

CalibrationName = Literal["classical", "analytic"]

_MAX_BRACKET_STEPS = 2100  # halvings/doublings of the noise ratio; covers the whole float64 range


# --------------------------------------------------------------------------------------------------
# validation


def _check_real(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidConfigError(f"{name} must be a real number, got {value!r}")
    result = float(value)
    if math.isnan(result):
        raise InvalidConfigError(f"{name} must be a number, got NaN")
    return result


def _check_sensitivity(sensitivity: float, name: str = "sensitivity") -> float:
    value = _check_real(name, sensitivity)
    if not math.isfinite(value) or value < 0:
        raise InvalidConfigError(
            f"{name} (the L2 sensitivity Delta) must be finite and >= 0, got {value!r}; an infinite "
            "bound cannot be certified with finite noise"
        )
    return value


def _check_epsilon(epsilon: float) -> float:
    value = _check_real("epsilon", epsilon)
    if not math.isfinite(value) or value <= 0:
        raise InvalidConfigError(f"epsilon must be finite and > 0, got {value!r}")
    return value


def _check_delta(delta: float) -> float:
    value = _check_real("delta", delta)
    if not (0.0 < value < 1.0):
        raise InvalidConfigError(f"delta must lie strictly between 0 and 1, got {value!r}")
    return value


def _check_sigma(sigma: float, name: str = "sigma") -> float:
    value = _check_real(name, sigma)
    if not math.isfinite(value) or value < 0:
        raise InvalidConfigError(
            f"{name} (the noise standard deviation) must be finite and >= 0, got {value!r}"
        )
    return value


# --------------------------------------------------------------------------------------------------
# classical


def _classical_unit(epsilon: float, delta: float) -> float:
    """sigma for Delta = 1 under the classical calibration (inputs already validated)."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def classical_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """Classical Gaussian mechanism (Dwork & Roth 2014, Theorem A.1).

    ``sigma = Delta * sqrt(2 ln(1.25/delta)) / epsilon``. This is the calibration the Hessian-free paper
    writes in Algorithm 1 (digest section 3.3). The theorem needs ``epsilon <= 1``; a larger epsilon raises
    :class:`InvalidConfigError` (use :func:`analytic_sigma` there).
    """
    sensitivity = _check_sensitivity(sensitivity)
    epsilon = _check_epsilon(epsilon)
    delta = _check_delta(delta)
    if epsilon > 1.0:
        raise InvalidConfigError(
            f"the classical Gaussian mechanism is only valid for epsilon <= 1, got epsilon={epsilon!r}; "
            "use analytic_sigma (Balle & Wang 2018) or calibrate_sigma for epsilon > 1"
        )
    return sensitivity * _classical_unit(epsilon, delta)


# --------------------------------------------------------------------------------------------------
# analytic (Balle & Wang 2018)


def _log_delta_unit(ratio: float, epsilon: float) -> float:
    """``log delta`` of the Gaussian mechanism with ``sigma / Delta = ratio > 0`` (Balle & Wang Thm 8).

    ``delta = Phi(a) - e^eps Phi(b)`` with ``a = 1/(2 ratio) - eps ratio`` and ``b = -1/(2 ratio) - eps ratio``.
    Written as ``log delta = log Phi(a) + log(1 - exp(eps + log Phi(b) - log Phi(a)))`` so that neither
    ``e^eps`` nor the two nearly equal terms are ever formed: no overflow for large epsilon, no
    cancellation for tiny delta. Returns ``-inf`` where the profile is 0 to working precision.
    """
    a = 0.5 / ratio - epsilon * ratio
    b = -0.5 / ratio - epsilon * ratio
    log_pa = float(log_ndtr(a))
    log_pb = float(log_ndtr(b))
    gap = epsilon + log_pb - log_pa  # log of e^eps Phi(b) / Phi(a), < 0 in exact arithmetic
    if not gap < 0.0:
        return -math.inf
    return log_pa + math.log(-math.expm1(gap))


def gaussian_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    """Exact delta of the Gaussian mechanism at ``epsilon`` (Balle & Wang 2018, Theorem 8).

    ``delta = Phi(Delta/(2 sigma) - epsilon sigma/Delta) - e^epsilon Phi(-Delta/(2 sigma) - epsilon sigma/Delta)``.

    This is the smallest delta for which ``N(0, sigma^2 I)`` noise on a query of L2 sensitivity ``Delta`` is
    ``(epsilon, delta)``-DP. Edge cases are the limits: ``Delta = 0`` gives 0 (nothing to hide);
    ``sigma = 0`` with ``Delta > 0`` gives 1 (no noise, no privacy).
    """
    sigma = _check_sigma(sigma)
    sensitivity = _check_sensitivity(sensitivity)
    epsilon = _check_epsilon(epsilon)
    if sensitivity == 0.0:
        return 0.0
    if sigma == 0.0:
        return 1.0
    ratio = sigma / sensitivity
    if ratio == 0.0 or not math.isfinite(ratio):
        return 1.0 if ratio == 0.0 else 0.0
    return math.exp(_log_delta_unit(ratio, epsilon))


def _analytic_unit(epsilon: float, delta: float, tol: float) -> float:
    """The smallest ``s = sigma/Delta`` with ``delta(s) <= delta`` (inputs already validated).

    ``delta(s)`` decreases strictly from 1 (s -> 0) to 0 (s -> inf). Bracket the root by halving/doubling,
    solve ``log delta(s) = log delta`` with Brent's method, then step up until the constraint holds so
    the returned ratio is never on the unsafe side.
    """
    target = math.log(delta)

    def f(s: float) -> float:
        value = _log_delta_unit(s, epsilon) - target
        return value if math.isfinite(value) else -1e4  # profile underflowed: far below the target

    lo = hi = 1.0
    steps = 0
    while f(hi) > 0.0:
        lo, hi = hi, hi * 2.0
        steps += 1
        if steps > _MAX_BRACKET_STEPS:  # pragma: no cover - impossible for 0 < delta < 1
            raise InvalidConfigError(
                f"could not calibrate analytic sigma for epsilon={epsilon}, delta={delta}"
            )
    if lo == hi:
        while f(lo) <= 0.0:
            lo, hi = lo / 2.0, lo
            steps += 1
            if steps > _MAX_BRACKET_STEPS or lo == 0.0:  # pragma: no cover
                raise InvalidConfigError(
                    f"could not calibrate analytic sigma for epsilon={epsilon}, delta={delta}"
                )
    rtol = max(tol, 4.0 * 2.220446049250313e-16)
    root = float(brentq(f, lo, hi, xtol=1e-300, rtol=rtol, maxiter=500))
    # Verify: brentq may land a hair on the unsafe side of the root; move up until delta(s) <= target.
    step = rtol
    s = root
    for _ in range(200):
        if _log_delta_unit(s, epsilon) <= target:
            return s
        s = root * (1.0 + step)
        step *= 2.0
    raise InvalidConfigError(  # pragma: no cover - the profile is monotone, the loop always ends
        f"could not verify analytic sigma for epsilon={epsilon}, delta={delta}"
    )


def analytic_sigma(sensitivity: float, epsilon: float, delta: float, tol: float = 1e-12) -> float:
    """Analytic Gaussian mechanism (Balle & Wang 2018, Theorem 8 / Algorithm 1).

    Returns the smallest sigma such that

    ``Phi(Delta/(2 sigma) - epsilon sigma/Delta) - e^epsilon Phi(-Delta/(2 sigma) - epsilon sigma/Delta) <= delta``,

    i.e. :func:`gaussian_delta` ``(sigma, Delta, epsilon) <= delta``, to relative accuracy ``tol`` (the
    result is always on the safe side of the root). Valid for every ``epsilon > 0``. The profile depends
    only on ``sigma/Delta``, so the ratio is solved once and scaled: ``sigma = Delta * s*(epsilon, delta)``.
    """
    sensitivity = _check_sensitivity(sensitivity)
    epsilon = _check_epsilon(epsilon)
    delta = _check_delta(delta)
    tol = _check_real("tol", tol)
    if not (0.0 < tol < 1e-2):
        raise InvalidConfigError(f"tol must lie in (0, 0.01), got {tol!r}")
    if sensitivity == 0.0:
        return 0.0
    return sensitivity * _analytic_unit(epsilon, delta, tol)


# --------------------------------------------------------------------------------------------------
# the service's choice and its inverse


def calibrate_sigma(sensitivity: float, epsilon: float, delta: float) -> tuple[float, CalibrationName]:
    """Noise for an (epsilon, delta) release of a query with L2 sensitivity ``Delta``.

    Returns ``(sigma, calibration)``:

    - ``epsilon <= 1``: ``classical``, ``sigma = Delta sqrt(2 ln(1.25/delta)) / epsilon``. The Hessian-free
      paper (Algorithm 1; Definition 1 takes ``0 < epsilon <= 1``) uses the classical Gaussian mechanism,
      whose proof assumes ``epsilon <= 1``; keeping it there reproduces the paper's sigma exactly.
    - ``epsilon > 1``: ``analytic`` (Balle & Wang 2018), which the paper cites for that regime and the
      classical formula does not cover.

    ``Delta = 0`` gives ``sigma = 0`` (nothing to hide).
    """
    sensitivity = _check_sensitivity(sensitivity)
    epsilon = _check_epsilon(epsilon)
    delta = _check_delta(delta)
    if epsilon <= 1.0:
        return classical_sigma(sensitivity, epsilon, delta), "classical"
    return analytic_sigma(sensitivity, epsilon, delta), "analytic"


def largest_sensitivity(sigma_max: float, epsilon: float, delta: float) -> float:
    """The largest ``Delta`` whose :func:`calibrate_sigma` noise stays ``<= sigma_max``.

    Both calibrations are linear in Delta (``sigma(Delta) = Delta * sigma(1)``; the analytic profile depends
    only on ``sigma/Delta``), so ``Delta_max = sigma_max / sigma(1)``, then nudged down by at most a few
    ulps so that ``calibrate_sigma(Delta_max, ...)[0] <= sigma_max`` holds in floating point too.
    """
    sigma_max = _check_sigma(sigma_max, "sigma_max")
    epsilon = _check_epsilon(epsilon)
    delta = _check_delta(delta)
    unit, _ = calibrate_sigma(1.0, epsilon, delta)
    bound = sigma_max / unit
    if not math.isfinite(bound):
        raise InvalidConfigError(
            f"sigma_max={sigma_max!r} is too large for (epsilon={epsilon}, delta={delta}): the sensitivity "
            "it allows overflows"
        )
    while bound > 0.0 and calibrate_sigma(bound, epsilon, delta)[0] > sigma_max:
        bound = math.nextafter(bound, 0.0)
    return bound
