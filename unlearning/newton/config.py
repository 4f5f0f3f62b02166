"""The hyperparameters every Newton method shares (:class:`NewtonConfig`) and their declarations."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from unlearning.errors import InvalidConfigError
from unlearning.methods.hyperparameters import HyperParameter, check_declared
from unlearning.newton.solvers import SOLVERS, Solver
from unlearning.newton.step import BOUND_VARIANTS, BoundVariant

__all__ = [
    "FAMILIES",
    "MAX_ALPHA",
    "MAX_CG_RTOL",
    "MAX_LAM",
    "MAX_NEWTON",
    "MAX_OPT_TOL",
    "MIN_LAM",
    "MIN_TOLERANCE",
    "OP_NORMS",
    "NewtonConfig",
    "newton_hyperparameters",
]

# Bounds on the shared Newton settings, checked at registration (``check_config``) and again when a
# configuration is built for training. Generous: the papers (digests 000, 001) and the defaults use lam 1e-4
# to 1e-2, alpha 0.1 to 10, cg_rtol 1e-6, opt_tol 1e-9, and training converges in at most about 20 Newton steps.
MIN_LAM = 1e-12  # the data-derived lam 1 / (C n D) is above 2e-9 on the largest upload (5e7 cells, C = 10)
MAX_LAM = 1e4  # per sample: beyond it the penalty alone pins W at 0 (the logistic loss per row is at most ~1)
MAX_ALPHA = 1e6  # the noise std; the worst-case bound of digest 001 would need alpha in the thousands
MIN_TOLERANCE = 1e-15  # cg_rtol and opt_tol: float64 rounding (2.2e-16) makes a smaller target unreachable
MAX_CG_RTOL = 0.5  # a relative tolerance of 1 or more stops CG before its first step
MAX_OPT_TOL = 1.0  # a looser gradient-norm target leaves a residual larger than any deletion budget
MAX_NEWTON = 500  # Newton-CG converges superlinearly: every measured training took at most 20 steps

_NEWTON_KEYS = ("lam", "alpha", "bound", "solver", "cg_rtol", "opt_tol", "max_newton", "op_norm")
OP_NORMS: tuple[str, ...] = ("exact", "none")
FAMILIES: tuple[str, ...] = ("logistic_regression", "logistic_regression_ovr")
"""The ``family`` values a Newton method takes: both name its one-vs-rest logistic regression."""


_NUMERIC: dict[str, HyperParameter] = {
    p.name: p
    for p in (
        HyperParameter("lam", "number", "L2 regularisation strength (per sample, sum form)", minimum=MIN_LAM,
                       maximum=MAX_LAM),
        HyperParameter("alpha", "number", "Std of the objective perturbation (the certified noise); the residual "
                       "budget per epoch is alpha * epsilon / sqrt(2 ln(1.5/delta))", minimum=0,
                       exclusive_minimum=True, maximum=MAX_ALPHA),
        HyperParameter("cg_rtol", "number", "Relative tolerance of conjugate gradients (the true residual is "
                       "charged anyway)", minimum=MIN_TOLERANCE, maximum=MAX_CG_RTOL),
        HyperParameter("opt_tol", "number", "Gradient-norm target of training", minimum=MIN_TOLERANCE,
                       maximum=MAX_OPT_TOL),
        HyperParameter("max_newton", "integer", "Most Newton iterations of one training", minimum=1,
                       maximum=MAX_NEWTON),
    )
}
"""The numeric keys of :class:`NewtonConfig` with their bounds, as its ``__post_init__`` checks them."""


@dataclass(frozen=True)
class NewtonConfig:
    """Hyperparameters every Newton method shares.

    ``lam`` L2 strength (per sample, sum form); ``alpha`` std of the objective perturbation; ``bound``
    the residual bound ("tight" or "paper"); ``solver`` "cg" or "cholesky"; ``cg_rtol`` CG's relative
    tolerance (its true residual is charged anyway); ``opt_tol`` the training gradient-norm target;
    ``op_norm`` "exact" (an exact ||Z||_op bound at each epoch start) or "none" (skip it: only the
    row-norm form of the tight bound is used; the paper bound then is unavailable).
    """

    lam: float = 1e-2
    alpha: float = 0.1
    bound: BoundVariant = "tight"
    solver: Solver = "auto"
    cg_rtol: float = 1e-6
    opt_tol: float = 1e-9
    max_newton: int = 100
    op_norm: Literal["exact", "none"] = "exact"

    def __post_init__(self) -> None:
        check_declared(_NUMERIC.values(), {k: getattr(self, k) for k in _NUMERIC})
        if self.bound not in BOUND_VARIANTS:
            raise InvalidConfigError(f"bound must be 'tight' or 'paper', got {self.bound!r}")
        if self.solver not in SOLVERS:
            raise InvalidConfigError(f"solver must be 'auto', 'cg', 'cholesky' or 'woodbury', got {self.solver!r}")
        if self.op_norm not in OP_NORMS:
            raise InvalidConfigError(f"op_norm must be 'exact' or 'none', got {self.op_norm!r}")
        if self.bound == "paper" and self.op_norm == "none":
            raise InvalidConfigError("the paper bound needs ||Z||_op: use op_norm='exact' with bound='paper'")

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> NewtonConfig:
        values = {k: config[k] for k in _NEWTON_KEYS if k in config}
        for k in ("lam", "alpha", "cg_rtol", "opt_tol"):
            if k in values and isinstance(values[k], int) and not isinstance(values[k], bool):
                values[k] = float(values[k])
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in _NEWTON_KEYS}


def newton_hyperparameters(lam_derived: str = "") -> tuple[HyperParameter, ...]:
    """The declarations of :class:`NewtonConfig`'s keys, as its ``__post_init__`` checks them;
    ``lam_derived``: what a null ``lam`` means, for a method that derives it from the data."""
    return (
        replace(_NUMERIC["lam"], nullable=bool(lam_derived), null_means=lam_derived),
        _NUMERIC["alpha"],
        HyperParameter("bound", "string", "Residual bound charged per deletion: tight (data-dependent) or the "
                       "paper's (needs op_norm exact)", choices=BOUND_VARIANTS),
        HyperParameter("solver", "string", "Linear solver of the Newton step (auto: conjugate gradients with "
                       "Hessian-vector products, or a factorisation where cheaper)", choices=SOLVERS),
        _NUMERIC["cg_rtol"],
        _NUMERIC["opt_tol"],
        _NUMERIC["max_newton"],
        HyperParameter("op_norm", "string", "exact: bound ||Z||_op at each budget epoch's start; none: skip it "
                       "(only the row-norm form of the tight bound is used)", choices=OP_NORMS),
    )
