"""Bookkeeping of SGLU's sequential (batch) requests: the W_inf state Z carried from one request to the
next (Theorem 3.11 with Cor 3.12; the corrected Algorithm 6, digest 003 sections 3.7 and 6.3).

    Z_in  = min(Z_prev + Z_B(S), 2R)          Z_prev = W_inf(current law, stationary law of the current data)
    K     = least K with epsilon(K, Z_in) <= target
    Z_out = c^(KN) Z_in                       (Lemma 3.6 on the updated data)

There is no additive epsilon budget: each release meets the target with respect to the stationary law on
its own data; what accumulates is Z, bounded by the fixed point Z_B / (1 - c^(KN)) and by 2R.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from unlearning.errors import InvalidConfigError
from unlearning.privacy.langevin.calibration import least_epochs
from unlearning.privacy.langevin.constants import DEFAULT_MAX_EPOCHS, Conversion, PabiVariant, PNSGDConstants
from unlearning.privacy.langevin.distance import z_batch
from unlearning.privacy.langevin.renyi import PrivacyLoss, epsilon_converged


@dataclass(frozen=True)
class RequestCharge:
    """The accounting of one (batch) request: W_inf in, epochs, the loss reached, W_inf out."""

    size: int
    z_in: float
    epochs: int
    loss: PrivacyLoss
    z_out: float


def charge_request(
    const: PNSGDConstants,
    sigma: float,
    z_prev: float,
    size: int,
    epsilon: float,
    delta: float,
    pabi: PabiVariant = "paper",
    conversion: Conversion = "paper",
    max_epochs: int = DEFAULT_MAX_EPOCHS,
) -> RequestCharge:
    """One step of the corrected Algorithm 6 (Thm 3.11 + Cor 3.12):

        Z_in  = min(z_prev + Z_B(S), 2R)     z_prev = W_inf(current law, stationary law of the current data)
        K     = least K with epsilon(K, Z_in) <= target
        Z_out = c^(KN) Z_in                  (Lemma 3.6 on the updated data)

    ``z_prev`` is 0 right after an exactly stationary (re)train, 2R c^(TN) after T training epochs
    (:func:`unlearning.privacy.langevin.distance.stationarity_gap`), and the previous request's ``z_out`` afterwards.
    """
    if not (z_prev >= 0 and math.isfinite(z_prev)):
        raise InvalidConfigError(f"the W_inf state Z must be a finite number >= 0, got {z_prev!r}")
    z_in = min(z_prev + z_batch(const, size), const.cap)
    K = least_epochs(const, sigma, z_in, epsilon, delta, pabi, conversion, max_epochs)
    loss = epsilon_converged(const, sigma, K, z_in, delta, pabi, conversion)
    z_out = z_in * math.exp(K * const.batches * const.log_c)
    return RequestCharge(int(size), z_in, K, loss, z_out)


def sequential_plan(
    const: PNSGDConstants,
    sigma: float,
    epsilon: float,
    delta: float,
    sizes: Sequence[int],
    pabi: PabiVariant = "paper",
    conversion: Conversion = "paper",
    z0: float = 0.0,
    max_epochs: int = DEFAULT_MAX_EPOCHS,
) -> list[RequestCharge]:
    """The charges of a sequence of (batch) requests of the given sizes, through the Z recursion."""
    out: list[RequestCharge] = []
    z = z0
    for size in sizes:
        charge = charge_request(const, sigma, z, size, epsilon, delta, pabi, conversion, max_epochs)
        out.append(charge)
        z = charge.z_out
    return out
