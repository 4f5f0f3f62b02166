"""The hyperparameters every Newton method shares (:class:`NewtonConfig`) and their declarations."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from unlearning.errors import InvalidConfigError
from unlearning.methods.hyperparameters import HyperParameter
from unlearning.newton.solvers import SOLVERS, Solver
from unlearning.newton.step import BOUND_VARIANTS, BoundVariant
from unlearning.validation import integer_at_least, positive_number

__all__ = ["FAMILIES", "OP_NORMS", "NewtonConfig", "newton_hyperparameters"]

_NEWTON_KEYS = ("lam", "alpha", "bound", "solver", "cg_rtol", "opt_tol", "max_newton", "op_norm")
OP_NORMS: tuple[str, ...] = ("exact", "none")
FAMILIES: tuple[str, ...] = ("logistic_regression", "logistic_regression_ovr")
"""The ``family`` values a Newton method takes: both name its one-vs-rest logistic regression."""


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
        for name in ("lam", "cg_rtol", "opt_tol"):
            positive_number(name, getattr(self, name))
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, int | float) or not (
            self.alpha >= 0 and math.isfinite(self.alpha)
        ):
            raise InvalidConfigError(f"alpha (objective-perturbation std) must be finite and >= 0, got {self.alpha!r}")
        if self.bound not in BOUND_VARIANTS:
            raise InvalidConfigError(f"bound must be 'tight' or 'paper', got {self.bound!r}")
        if self.solver not in SOLVERS:
            raise InvalidConfigError(f"solver must be 'auto', 'cg', 'cholesky' or 'woodbury', got {self.solver!r}")
        if self.op_norm not in OP_NORMS:
            raise InvalidConfigError(f"op_norm must be 'exact' or 'none', got {self.op_norm!r}")
        if self.bound == "paper" and self.op_norm == "none":
            raise InvalidConfigError("the paper bound needs ||Z||_op: use op_norm='exact' with bound='paper'")
        integer_at_least("max_newton", self.max_newton, 1)

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
        HyperParameter("lam", "number", "L2 regularisation strength (per sample, sum form)",
                       minimum=0, exclusive_minimum=True, nullable=bool(lam_derived), null_means=lam_derived),
        HyperParameter("alpha", "number", "Std of the objective perturbation (the certified noise); the residual "
                       "budget per epoch is alpha * epsilon / sqrt(2 ln(1.5/delta))", minimum=0),
        HyperParameter("bound", "string", "Residual bound charged per deletion: tight (data-dependent) or the "
                       "paper's (needs op_norm exact)", choices=BOUND_VARIANTS),
        HyperParameter("solver", "string", "Linear solver of the Newton step (auto: conjugate gradients with "
                       "Hessian-vector products, or a factorisation where cheaper)", choices=SOLVERS),
        HyperParameter("cg_rtol", "number", "Relative tolerance of conjugate gradients (the true residual is "
                       "charged anyway)", minimum=0, exclusive_minimum=True),
        HyperParameter("opt_tol", "number", "Gradient-norm target of training", minimum=0, exclusive_minimum=True),
        HyperParameter("max_newton", "integer", "Most Newton iterations of one training", minimum=1),
        HyperParameter("op_norm", "string", "exact: bound ||Z||_op at each budget epoch's start; none: skip it "
                       "(only the row-norm form of the tight bound is used)", choices=OP_NORMS),
    )
