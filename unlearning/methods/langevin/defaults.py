"""Defaults SGLU derives from the training data when a configuration leaves them unset (None): the
feature bound, the L2 coefficient and the noisy-step budget of the burn-in.

The constants of the guarantee follow from them: L = curvature * B^2 + lam, eta = 1/L, m = lam, and the
burn-in T the least with 2R c^(TN) <= tolerance Z_B (Lemma 3.6, c = 1 - eta m).
"""

from __future__ import annotations

import math

import numpy as np

from unlearning.data import Dataset
from unlearning.errors import InvalidDatasetError
from unlearning.privacy.langevin.constants import PNSGDConstants
from unlearning.privacy.langevin.distance import epochs_to_converge

ROW_NORM_QUANTILE = 0.9  # a derived feature bound: this quantile of the training rows' norms
BURN_IN_STEPS = (50_000, 10, 200_000)  # a derived l2 fits its burn-in in min(200k, max(50k, 10 n)) noisy steps
MAX_BURN_IN_STEPS = 1_000_000  # the burn-in refused when max_burn_in_epochs is None: this many noisy steps
NORM_SLACK = 1e-6  # float32 features: a row may exceed the recorded bound by rounding only


def row_norms(data: Dataset, intercept: bool) -> np.ndarray:
    """||[x, 1]|| (with the intercept) or ||x|| of every row, in float64."""
    sq = np.einsum("ij,ij->i", *(2 * [data.features.reshape(len(data), -1).astype(np.float64)]))
    return np.sqrt(sq + (1.0 if intercept else 0.0))


def derived_feature_bound(norms: np.ndarray, intercept: bool) -> float:
    """The feature bound when ``feature_bound`` is None: B = sqrt(q^2 + intercept), q the
    ``ROW_NORM_QUANTILE`` (0.9) quantile of the rows' norms ||x|| (their maximum when that quantile is 0);
    rows above it are clipped onto it (``LogisticProblem.row_clip``). L = curvature * B^2 + lam sets the step
    size 1/L and the burn-in grows with B^2, so a few rows of large norm must not set B.
    """
    q = float(np.quantile(norms, ROW_NORM_QUANTILE)) if len(norms) else 0.0
    if not q > 0:
        q = float(norms.max()) if len(norms) else 0.0
    if not q > 0:
        raise InvalidDatasetError("every feature vector is zero: nothing to learn from")
    return math.sqrt(q * q + float(intercept))


def burn_in_step_budget(n: int) -> int:
    """S = min(200,000, max(50,000, 10 n)) noisy steps: the burn-in a derived ``l2`` allows (a few seconds
    on one core for a few hundred rows, under a minute at 100,000 rows)."""
    low, per_row, high = BURN_IN_STEPS
    return min(high, max(low, per_row * n))


def derived_l2(
    n: int, data_smoothness: float, clip: float, slots: int, b: int, radius: float, tolerance: float,
    steps: int | None = None,
) -> float:
    """The L2 coefficient when ``l2`` is None: lam = max(1/n, lam_S).

    1/n is scikit-learn's default C = 1 written for the mean loss (mean l_i + lam/2 ||w||^2). lam_S is the
    least lam whose burn-in takes at most S noisy steps (``steps``, default :func:`burn_in_step_budget`),
    N T(lam) <= S with T the epochs of
    :func:`unlearning.privacy.langevin.distance.epochs_to_converge` at eta = 1/L, L = ``data_smoothness``
    + lam (found by bisection on log lam): the contraction c = 1 - lam/L makes the burn-in about
    (L/lam) ln(2R / (tolerance Z_B)) steps, so a weaker regulariser than lam_S trains for longer than
    S steps. When even one epoch exceeds S steps (N > S), lam_S is the least lam with T = 1.
    """
    def burn_in_steps(lam: float) -> int:
        L = data_smoothness + lam
        const = PNSGDConstants(slots, b, 1.0 / L, lam, clip, radius, L)
        return const.batches * epochs_to_converge(const, tolerance)

    target = max(burn_in_step_budget(n) if steps is None else int(steps), slots // b)
    lam = 1.0 / n
    if burn_in_steps(lam) <= target:
        return lam
    lo, hi = lam, 2.0 * lam
    while burn_in_steps(hi) > target and hi < 1e6 * data_smoothness:
        lo, hi = hi, 2.0 * hi
    for _ in range(30):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if burn_in_steps(mid) <= target else (mid, hi)
    return hi
