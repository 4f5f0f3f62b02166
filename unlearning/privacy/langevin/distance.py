"""W_inf distance bounds between laws of PNSGD iterates (digest 003, sections 3.2, 3.7, 3.8).

These distances Z are what the SGLU accountant carries from request to request: PABI
(:mod:`unlearning.privacy.langevin.renyi`) turns a W_inf distance between two starting laws into a Renyi
bound after K noisy epochs.

    Lemma 3.5   W_inf(nu_T, nu'_T) <= min( (1 - c^(TN))/(1 - c^N) * c^(N - j0 - 1) * 2 eta M / b , 2R )
    Cor 3.8     Z_B = min( 2 eta M / (b (1 - c^N)), 2R )                     (T -> infinity, j0 = N - 1)
    Cor 3.12    Z_B(S) = min( S Z_B, 2R )                                    (S points, worst positions)
    Lemma 3.6   W_inf(nu_T, nu_{D|B}) <= 2R c^(TN)                             (from any start in C_R)
"""

from __future__ import annotations

import math

import numpy as np

from unlearning.errors import InvalidConfigError
from unlearning.privacy.langevin.constants import PNSGDConstants, check_epochs
from unlearning.validation import positive_number


def z_single(const: PNSGDConstants, *, epochs: int | None = None, position: int | None = None) -> float:
    """W_inf between learning on adjacent datasets (one replaced point), Lemma 3.5 [paper]:

        min( (1 - c^(TN))/(1 - c^N) * c^(N - j0 - 1) * 2 eta M / b , 2R )

    ``epochs`` = T (None: T -> infinity, Cor 3.8 / Algorithm 8); ``position`` = j0, the batch of the
    replaced point (None: the worst case j0 = N - 1, factor 1, which the paper's algorithms use).
    """
    N = const.batches
    log_c = const.log_c
    geo = 1.0 if epochs is None else -math.expm1(check_epochs(epochs, "T (training epochs)") * N * log_c)
    if position is not None and not 0 <= position < N:
        raise InvalidConfigError(f"batch position j0 must lie in [0, {N - 1}], got {position}")
    pos = 1.0 if position is None else math.exp((N - position - 1) * log_c)
    z = geo * pos * 2.0 * const.eta * const.M / (const.b * -math.expm1(N * log_c))
    return min(z, const.cap)


def z_batch(const: PNSGDConstants, size: int = 1, *, epochs: int | None = None) -> float:
    """W_inf for a batch request of ``size`` replaced points, Cor 3.12 with every point in the worst
    position [paper, prefactor corrected]: min(S * Z_B, 2R) (linear in S, so K grows like log S)."""
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
        raise InvalidConfigError(f"a request must replace at least one point, got size {size!r}")
    return min(int(size) * z_single(const, epochs=epochs), const.cap)


def stationarity_gap(const: PNSGDConstants, epochs: int) -> float:
    """W_inf between the law after T training epochs (from any start in C_R) and the stationary law
    nu_{D|B}: Lemma 3.6 with W_inf(nu_0, nu_D) <= 2R, i.e. 2R c^(TN) [paper]. Needs a projection."""
    if const.R is None:
        raise InvalidConfigError("the stationarity gap needs a projection radius R (C_R bounded)")
    return 2.0 * const.R * math.exp(check_epochs(epochs, "T (training epochs)") * const.batches * const.log_c)


def epochs_to_converge(const: PNSGDConstants, tolerance: float, *, reference: float | None = None) -> int:
    """The least T with 2R c^(TN) <= tolerance * reference (default reference Z_B): the burn-in after
    which the stationarity gap adds at most a ``tolerance`` fraction to the first request's Z."""
    positive_number("burn-in tolerance", tolerance)
    if const.R is None:
        raise InvalidConfigError("a burn-in criterion needs a projection radius R")
    ref = z_single(const) if reference is None else positive_number("reference distance", reference)
    needed = math.log(tolerance * ref / (2.0 * const.R)) / (const.batches * const.log_c)
    T = max(1, math.ceil(needed - 1e-12))
    while stationarity_gap(const, T) > tolerance * ref:  # guard against rounding in the closed form
        T += 1
    return T
