"""Privacy accountant of stochastic-gradient Langevin unlearning (SGLU; Chien, Wang, Chen, Li, arXiv
2403.17105 v1; digest ``003_langevin.md``).

Learning and unlearning run projected noisy mini-batch SGD (PNSGD) over a fixed cyclic partition of the
n training slots into N = n/b batches. With step size eta <= 1/L and m-strong convexity each step is a
c-contraction, c = 1 - eta*m, so Privacy Amplification by Iteration (PABI) turns a W_inf distance Z
between two starting laws into a Renyi bound after K epochs (K*N noisy steps):

    Cor 3.8 / Thm 3.11    eps(alpha) = alpha * Z^2 * c^(2KN) / (2 eta sigma^2)                   [paper]
    Z_B (Cor 3.8, Alg 8)  Z_B = min(2 eta M / (b (1 - c^N)), 2R)                                  [paper]
    batch (Cor 3.12)      Z_B(S) = min(S * 2 eta M / (b (1 - c^N)), 2R)   (worst batch positions)  [paper]
    sequential (Thm 3.11) Z^(s+1) = min(c^(K_s N) Z^(s) + Z_B, 2R)                                 [paper]
    finite T (Thm 3.2)    eps(alpha) = (alpha - 1/2)/(alpha - 1) * (eps1(2 alpha) + eps2(2 alpha))  [paper]
    conversion (Prop K.2) epsilon = min_alpha eps(alpha) + log(1/delta)/(alpha - 1)               [paper]

Which formulas are the paper's own and which are not:

- ``[paper]`` above are stated in the paper; the corrections of its printed algorithms (digest 3.11) are
  applied: Algorithm 5 puts 2R c^(TN) outside the square (Theorem 3.2 puts it inside Z, as we do),
  Algorithms 6-8 use the constant Z_B for every sequential request (the Thm 3.11 recursion is
  implemented here; the constant Z_B understates the loss), Algorithm 4 returns sigma (not K), and
  Cor 3.12's prefactor is (1 - c^(TN))/(1 - c^N) (its own proof), not (1 - c^T)/(1 - c).
- the closed forms of the conversion for linear RDP curves (epsilon = A + 2 sqrt(A log(1/delta)) at
  alpha* = 1 + sqrt(log(1/delta)/A), and 3A + 2 sqrt(2A(A + log(1/delta))) for Theorem 3.2) and the
  closed forms for the least K and the least sigma derived from them are the digest's (section 3.9),
  re-derived here; they equal the paper's numerical minimisation over alpha and bisection over sigma
  (checked by the tests, which reproduce Table 3 both ways).
- ``pabi="tight"`` is the shift-optimal PABI factor c^(2k)(1 - c^2)/(1 - c^(2k)) over k = K*N steps
  (digest 3.1: Cauchy-Schwarz over the shifts of Feldman et al.'s shift-reduction lemma); it is what the
  authors' code uses for sequential requests and never exceeds the paper's c^(2k). ``"paper"`` is the
  default.
- ``conversion="dp_accounting"`` replaces Prop K.2 (Mironov 2017, Prop. 3) by dp-accounting's
  :func:`dp_accounting.rdp.compute_epsilon`, which implements the tighter conversion of Canonne, Kamath
  and Steinke 2020 (Prop. 12) / Asoodeh et al. 2020. We checked its code: it does NOT implement the
  paper's Prop K.2 (it only keeps the improved bound), so Table 3 is reproduced with the paper's
  conversion, implemented here in closed form; dp-accounting is used only for the optional tighter
  conversion. Both are statements about one pair of distributions, so both apply to (epsilon, delta)-
  unlearning (Definition K.1), in each direction of the two-sided Renyi difference.
- :func:`stationarity_gap` (Lemma 3.6 from any start in C_R: W_inf <= 2R c^(TN)) seeds the sequential
  recursion of a model trained for a finite T (the paper assumes T = infinity in Theorem 3.11); this
  makes the recursion rigorous with respect to the stationary law without assuming exact convergence.
- The noise of Algorithm 1 has variance 2 eta sigma^2 per step, but the paper's PABI uses eta sigma^2
  (digest 3.1, UNSURE whether intended): every bound here keeps the paper's constant, which is a valid
  upper bound, conservative by a factor 2 in the RDP.

Everything is computed in log space: c^(2KN) underflows for realistic K*N (digest 6.6.9).

The module also holds the accountant of the Langevin-unlearning (LU) baseline of Chien et al. 2024
(:func:`lu_sequential_epochs`, the recursion of the authors' baseline code quoted by digest 4.2), used
only to reproduce the digest's comparison figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import minimize_scalar

from unlearning.errors import InvalidConfigError
from unlearning.validation import positive_number

PabiVariant = Literal["paper", "tight"]
Conversion = Literal["paper", "dp_accounting"]
PABI_VARIANTS: tuple[str, ...] = ("paper", "tight")
CONVERSIONS: tuple[str, ...] = ("paper", "dp_accounting")

DEFAULT_MAX_EPOCHS = 1_000_000
"""The largest K the least-K searches consider before declaring a target unreachable."""

# Orders for dp-accounting's conversion: alpha - 1 log-spaced over [1e-3, 1e6]. Any order gives a valid
# epsilon, so a finite grid only makes the reported epsilon (very slightly) conservative.
_DP_ORDERS = 1.0 + np.logspace(-3, 6, 4000)


# ---------------------------------------------------------------------------------------- constants
@dataclass(frozen=True)
class PNSGDConstants:
    """The constants of projected noisy mini-batch SGD that every bound depends on.

    ``n`` counts training *slots* (a multiple of ``b``; the method pads with null slots), ``b`` is the
    mini-batch size, ``eta`` the step size, ``m`` the strong-convexity constant (the L2 coefficient),
    ``M`` the per-sample gradient bound (clip norm; Remark 3.7 only needs ||grad f(d) - grad f(d')|| <= 2M),
    ``R`` the projection radius (None: no projection, as the authors' code; the 2R caps are then
    dropped), and ``L`` the smoothness constant, given so that eta <= 1/L is checked.
    """

    n: int
    b: int
    eta: float
    m: float
    M: float
    R: float | None = None
    L: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise InvalidConfigError(f"n (training slots) must be a positive integer, got {self.n!r}")
        if isinstance(self.b, bool) or not isinstance(self.b, int) or not 1 <= self.b <= self.n:
            raise InvalidConfigError(f"batch size b must be an integer in [1, n={self.n}], got {self.b!r}")
        if self.n % self.b:
            raise InvalidConfigError(
                f"n = {self.n} is not a multiple of b = {self.b}: pad with null slots (or drop points) so "
                "that the cyclic partition has n/b batches of exactly b slots"
            )
        for name in ("eta", "m", "M"):
            _positive(name, getattr(self, name))
        if self.R is not None:
            _positive("R (projection radius)", self.R)
        if self.L is not None:
            _positive("L (smoothness)", self.L)
            if self.eta > 1.0 / self.L * (1 + 1e-12):
                raise InvalidConfigError(
                    f"step size eta = {self.eta} exceeds 1/L = {1.0 / self.L} (L = {self.L}): PNSGD is a "
                    "contraction, and every bound holds, only for eta <= 1/L"
                )
        if self.eta * self.m >= 1:
            raise InvalidConfigError(
                f"eta * m = {self.eta * self.m} >= 1: the contraction factor c = 1 - eta m must lie in (0, 1)"
            )

    @classmethod
    def logistic(
        cls,
        n: int,
        b: int,
        lam: float,
        *,
        M: float = 1.0,
        R: float | None = None,
        feature_bound: float = 1.0,
        curvature: float = 0.25,
        eta: float | None = None,
    ) -> PNSGDConstants:
        """The paper's constants for L2-regularised logistic regression (digest 1.3, App. K.3):
        L = curvature * feature_bound^2 + lam (curvature 1/4 for the binary loss), m = lam, eta = 1/L."""
        _positive("lam (L2 coefficient)", lam)
        L = curvature * feature_bound**2 + lam
        return cls(n=n, b=b, eta=1.0 / L if eta is None else eta, m=lam, M=M, R=R, L=L)

    @property
    def batches(self) -> int:
        """N = n/b, the noisy steps per epoch."""
        return self.n // self.b

    @property
    def log_c(self) -> float:
        """log c = log(1 - eta m), computed with log1p to keep precision when eta m is small."""
        return math.log1p(-self.eta * self.m)

    @property
    def c(self) -> float:
        return 1.0 - self.eta * self.m

    @property
    def cap(self) -> float:
        """2R, the diameter of C_R (infinite without projection)."""
        return math.inf if self.R is None else 2.0 * self.R


def _positive(name: str, value: float) -> float:
    return positive_number(name, value)


def check_target(epsilon: float, delta: float) -> None:
    """A privacy target must have 0 < epsilon < inf and 0 < delta < 1."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not (
        epsilon > 0 and math.isfinite(epsilon)
    ):
        raise InvalidConfigError(f"target epsilon must be a finite number > 0, got {epsilon!r}")
    if isinstance(delta, bool) or not isinstance(delta, int | float) or not 0 < delta < 1:
        raise InvalidConfigError(f"target delta must lie in (0, 1), got {delta!r}")


def _check_epochs(epochs: int, name: str = "K (unlearning epochs)") -> int:
    if isinstance(epochs, bool) or not isinstance(epochs, int | np.integer) or epochs < 1:
        raise InvalidConfigError(
            f"{name} must be an integer >= 1 (PABI needs at least one noisy step), got {epochs!r}"
        )
    return int(epochs)


def _check_variant(pabi: str, conversion: str) -> None:
    if pabi not in PABI_VARIANTS:
        raise InvalidConfigError(f"pabi must be one of {PABI_VARIANTS}, got {pabi!r}")
    if conversion not in CONVERSIONS:
        raise InvalidConfigError(f"conversion must be one of {CONVERSIONS}, got {conversion!r}")


# ------------------------------------------------------------------------------------- W_inf bounds
def z_single(const: PNSGDConstants, *, epochs: int | None = None, position: int | None = None) -> float:
    """W_inf between learning on adjacent datasets (one replaced point), Lemma 3.5 [paper]:

        min( (1 - c^(TN))/(1 - c^N) * c^(N - j0 - 1) * 2 eta M / b , 2R )

    ``epochs`` = T (None: T -> infinity, Cor 3.8 / Algorithm 8); ``position`` = j0, the batch of the
    replaced point (None: the worst case j0 = N - 1, factor 1, which the paper's algorithms use).
    """
    N = const.batches
    log_c = const.log_c
    geo = 1.0 if epochs is None else -math.expm1(_check_epochs(epochs, "T (training epochs)") * N * log_c)
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
    return 2.0 * const.R * math.exp(_check_epochs(epochs, "T (training epochs)") * const.batches * const.log_c)


def epochs_to_converge(const: PNSGDConstants, tolerance: float, *, reference: float | None = None) -> int:
    """The least T with 2R c^(TN) <= tolerance * reference (default reference Z_B): the burn-in after
    which the stationarity gap adds at most a ``tolerance`` fraction to the first request's Z."""
    _positive("burn-in tolerance", tolerance)
    if const.R is None:
        raise InvalidConfigError("a burn-in criterion needs a projection radius R")
    ref = z_single(const) if reference is None else _positive("reference distance", reference)
    needed = math.log(tolerance * ref / (2.0 * const.R)) / (const.batches * const.log_c)
    T = max(1, math.ceil(needed - 1e-12))
    while stationarity_gap(const, T) > tolerance * ref:  # guard against rounding in the closed form
        T += 1
    return T


# ---------------------------------------------------------------------------------------- PABI + RDP
def log_pabi_factor(const: PNSGDConstants, epochs: int, pabi: PabiVariant = "paper") -> float:
    """log of the PABI contraction after K epochs = k = K N noisy steps (Lemma 3.4):

    paper: c^(2k)  [paper];   tight: c^(2k) (1 - c^2) / (1 - c^(2k))  [digest 3.1, shift-optimal].
    """
    k = _check_epochs(epochs) * const.batches
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
    _positive("sigma", sigma)
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
    _positive("sigma", sigma)
    T = _check_epochs(train_epochs, "T (training epochs)")
    gap = 0.0 if const.R is None else stationarity_gap(const, T)
    z_t = gap + z_single(const, epochs=T)
    scale = 2.0 * const.eta * sigma**2
    eps1 = gap**2 / scale  # (2R)^2 c^(2TN) / (2 eta sigma^2)
    eps2 = math.exp(2.0 * math.log(z_t) + log_pabi_factor(const, epochs, pabi)) / scale
    return eps1 + eps2


# ---------------------------------------------------------------------------------------- conversion
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


def _slope_budget(epsilon: float, delta: float, conversion: Conversion, weak_triangle: bool = False) -> float:
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


# ------------------------------------------------------------------------------------ privacy loss
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
    _check_variant(pabi, conversion)
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
    _check_variant(pabi, conversion)
    slope = finite_training_slope(const, sigma, epochs, train_epochs, pabi)
    eps, alpha = dp_from_weak_triangle_rdp(slope, delta, conversion)
    rdp = (alpha - 0.5) / (alpha - 1.0) * 2.0 * alpha * slope if math.isfinite(alpha) else 0.0
    return PrivacyLoss(eps, delta, alpha, rdp)


# -------------------------------------------------------------------------------------- least K
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
    _check_variant(pabi, conversion)
    _positive("sigma", sigma)
    if not z > 0:
        return 1
    log_budget = math.log(_slope_budget(epsilon, delta, conversion))

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
        k = _least_true(ok, max_epochs)
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
    _check_variant(pabi, conversion)
    budget = _slope_budget(epsilon, delta, conversion, weak_triangle=True)
    floor = finite_training_slope(const, sigma, 1, train_epochs, pabi) - _eps2_part(
        const, sigma, 1, train_epochs, pabi
    )
    if floor >= budget:
        raise InvalidConfigError(
            f"target epsilon {epsilon} is unreachable for any K: after T = {train_epochs} training epochs the "
            f"distance of the retrain to its stationary law alone costs more (eps1 slope {floor:.3g} >= "
            f"{budget:.3g}); train longer or raise sigma"
        )
    k = _least_true(lambda K: finite_training_slope(const, sigma, K, train_epochs, pabi) <= budget, max_epochs)
    if k > max_epochs:
        raise InvalidConfigError(
            f"target epsilon {epsilon} is unreachable within {max_epochs} unlearning epochs at sigma {sigma}"
        )
    return k


def _eps2_part(const: PNSGDConstants, sigma: float, epochs: int, train_epochs: int, pabi: PabiVariant) -> float:
    gap = 0.0 if const.R is None else stationarity_gap(const, train_epochs)
    z_t = gap + z_single(const, epochs=train_epochs)
    return math.exp(2.0 * math.log(z_t) + log_pabi_factor(const, epochs, pabi)) / (2.0 * const.eta * sigma**2)


def _least_true(ok: Callable[[int], bool], limit: int) -> int:
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


# ---------------------------------------------------------------------------------------- sigma
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
    zz = z_single(const) if z is None else _positive("Z", z)
    budget = _slope_budget(epsilon, delta, conversion)
    return zz * math.exp(0.5 * log_pabi_factor(const, _check_epochs(epochs), pabi)) / math.sqrt(2.0 * const.eta * budget)


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
    budget = _slope_budget(epsilon, delta, conversion, weak_triangle=True)
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
    K = _check_epochs(epochs)
    zb = z_single(const)
    fixed = zb / -math.expm1(K * const.batches * const.log_c)
    z_sup = min(max(initial_gap + zb, fixed), const.cap)
    return sigma_for_epochs(const, epsilon, delta, K, z_sup, pabi, conversion) * (1.0 + 1e-9)


# ---------------------------------------------------------------------------------- sequential
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
    (:func:`stationarity_gap`), and the previous request's ``z_out`` afterwards.
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


# ------------------------------------------------------------------------------ baseline: LU
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

        ks.append(_least_true(ok, DEFAULT_MAX_EPOCHS))
    return ks


def _lu_eps(a: float, history: list[int], rate: float, base: float) -> float:
    """eps_s(a) of the LU recursion for the requests already charged (``history`` = K_1..K_s)."""
    if not history:
        return 0.0
    K = history[-1]
    if len(history) == 1:
        return math.exp(-rate * K / a) * base * a
    return math.exp(-rate * K / a) * (a - 0.5) / (a - 1.0) * (base * 2.0 * a + _lu_eps(2.0 * a, history[:-1], rate, base))
