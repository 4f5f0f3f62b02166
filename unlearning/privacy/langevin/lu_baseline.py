"""The accountant of the Langevin-unlearning (LU) baseline (Chien et al. 2024; App. M of the SGLU paper,
digest 003 section 4.2), used only to reproduce the digest's comparison figures: LU tracks a Renyi
divergence, so every request goes through the weak triangle inequality and the Renyi order doubles,
while SGLU tracks the W_inf distance Z (:mod:`unlearning.privacy.langevin.sequential`).
"""

from __future__ import annotations

import math

from scipy.optimize import minimize_scalar

from unlearning.privacy.langevin.calibration import least_true
from unlearning.privacy.langevin.constants import DEFAULT_MAX_EPOCHS, check_target


def lu_sequential_epochs(
    n: int,
    eta: float,
    m: float,
    M: float,
    sigma: float,
    epsilon: float,
    delta: float,
    requests: int,
    size: int = 1,
    alpha_range: tuple[float, float] = (2.0, 1e5),
) -> list[int]:
    """K per request of the Langevin-unlearning baseline (Chien et al. 2024; App. M, recursion of the
    authors' baseline code quoted in digest 4.2), for ``requests`` batch requests of ``size`` points:

        eps0(a)  = 4 a S^2 M^2 / (m sigma^2 n^2)                         (Thm M.2, T -> infinity)
        eps_1(a) = exp(-eta m K_1 / a) eps0(a)                           (Thm M.1 with C_LSI = 2 sigma^2/m)
        eps_s(a) = exp(-eta m K_s / a) (a - 1/2)/(a - 1) [eps0(2a) + eps_{s-1}(2a)]

    each K_s the least integer with min_{a in alpha_range} eps_s(a) + log(1/delta)/(a - 1) <= epsilon.
    The order doubles with every request, which is why LU's cost grows (digest 3.7).
    """
    check_target(epsilon, delta)
    B = math.log(1.0 / delta)
    rate = eta * m
    base = 4.0 * size**2 * M**2 / (m * sigma**2 * n**2)
    ks: list[int] = []
    for _ in range(requests):

        def ok(K: int) -> bool:
            history = [*ks, K]
            res = minimize_scalar(
                lambda a: _lu_eps(a, history, rate, base) + B / (a - 1.0),
                bounds=alpha_range, method="bounded", options={"xatol": 1e-10},
            )
            return float(res.fun) <= epsilon

        ks.append(least_true(ok, DEFAULT_MAX_EPOCHS))
    return ks


def _lu_eps(a: float, history: list[int], rate: float, base: float) -> float:
    """eps_s(a) of the LU recursion for the requests already charged (``history`` = K_1..K_s)."""
    if not history:
        return 0.0
    K = history[-1]
    if len(history) == 1:
        return math.exp(-rate * K / a) * base * a
    previous = _lu_eps(2.0 * a, history[:-1], rate, base)
    return math.exp(-rate * K / a) * (a - 0.5) / (a - 1.0) * (base * 2.0 * a + previous)
