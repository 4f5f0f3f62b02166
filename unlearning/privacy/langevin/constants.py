"""The constants of projected noisy mini-batch SGD (PNSGD) every SGLU bound depends on, and the checks of
an accountant's inputs (digest 003, section 1.1).

With step size eta <= 1/L on an m-strongly convex, L-smooth objective one PNSGD step is a contraction
with factor c = 1 - eta m (the hypothesis of Lemma 3.4); N = n/b noisy steps make one epoch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from unlearning.errors import InvalidConfigError
from unlearning.validation import positive_number

PabiVariant = Literal["paper", "tight"]
"""The PABI contraction: the paper's c^(2k) or the shift-optimal c^(2k) (1 - c^2)/(1 - c^(2k)) (digest 3.1)."""
Conversion = Literal["paper", "dp_accounting"]
"""RDP -> (epsilon, delta): the paper's Prop K.2 or dp-accounting's tighter conversion."""
PABI_VARIANTS: tuple[str, ...] = ("paper", "tight")
CONVERSIONS: tuple[str, ...] = ("paper", "dp_accounting")

DEFAULT_MAX_EPOCHS = 1_000_000
"""The largest K the least-K searches consider before declaring a target unreachable."""


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
            positive_number(name, getattr(self, name))
        if self.R is not None:
            positive_number("R (projection radius)", self.R)
        if self.L is not None:
            positive_number("L (smoothness)", self.L)
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
        positive_number("lam (L2 coefficient)", lam)
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
        """c = 1 - eta m, the contraction factor of one step (Lemma 3.4's c-CNI)."""
        return 1.0 - self.eta * self.m

    @property
    def cap(self) -> float:
        """2R, the diameter of C_R (infinite without projection)."""
        return math.inf if self.R is None else 2.0 * self.R


def check_target(epsilon: float, delta: float) -> None:
    """A privacy target must have 0 < epsilon < inf and 0 < delta < 1."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not (
        epsilon > 0 and math.isfinite(epsilon)
    ):
        raise InvalidConfigError(f"target epsilon must be a finite number > 0, got {epsilon!r}")
    if isinstance(delta, bool) or not isinstance(delta, int | float) or not 0 < delta < 1:
        raise InvalidConfigError(f"target delta must lie in (0, 1), got {delta!r}")


def check_epochs(epochs: int, name: str = "K (unlearning epochs)") -> int:
    """``epochs`` as an int, if it is an integer >= 1: PABI needs at least one noisy step."""
    if isinstance(epochs, bool) or not isinstance(epochs, int | np.integer) or epochs < 1:
        raise InvalidConfigError(
            f"{name} must be an integer >= 1 (PABI needs at least one noisy step), got {epochs!r}"
        )
    return int(epochs)


def check_variant(pabi: str, conversion: str) -> None:
    """``pabi`` and ``conversion`` must name one of the supported variants."""
    if pabi not in PABI_VARIANTS:
        raise InvalidConfigError(f"pabi must be one of {PABI_VARIANTS}, got {pabi!r}")
    if conversion not in CONVERSIONS:
        raise InvalidConfigError(f"conversion must be one of {CONVERSIONS}, got {conversion!r}")
