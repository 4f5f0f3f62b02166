"""The terms of a Newton method's job estimate: training by Newton-CG on an (n, d) design with C' columns
(:func:`~unlearning.newton.solvers.train_perturbed`) and the operator norm of the epoch's start.

Every Newton step takes the margins and the gradient (two passes over the design, a pass being one
(n, d) x (d, C') product: 2 n d C' flops), conjugate gradients (two passes per Hessian-vector product)
and a backtracking line search (one pass per trial); Woodbury replaces CG by C' Cholesky factors of the
n x n Gram, Cholesky by C' explicit d x d Hessians. The count of steps and products is not known before
training: Newton-CG converges superlinearly, and every measured training (docs/decisions.md, "Job
estimates") took 4 to 17 steps of 2 to 45 products, more as lam is smaller, so the estimate charges
:func:`newton_steps` of lam. ``op_norm`` "exact" adds the Gram of
the smaller side and its top eigenvalue. Memory: the design copies the method makes, a dozen (n, C')
arrays (targets, margins, curvature, trial margins, CG products), a dozen (d, C') ones, and the solver's
factors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from unlearning.methods.job_estimate import FLOAT64, STEP_SECONDS
from unlearning.newton.method import columns_for
from unlearning.newton.solvers import auto_solver

CG_LIMIT = 200  # CG iterations of one Newton step of train_perturbed
LINE_SEARCH_TRIALS = 3  # margins evaluations per step (a full step is accepted near the optimum)
EIGH_FLOPS = 2.0  # per k^3 of the symmetric eigensolver of a k x k Gram (tridiagonalisation: 4/3 k^3)
SQUARE_SPEEDUP = 3.0  # square products (Grams, factorisations) ran 3 to 6 times faster than the thin passes
ROW_ARRAYS = 12  # (n, C') float64 arrays alive at once
WEIGHT_ARRAYS = 12  # (d, C') float64 arrays alive at once

Terms = dict[str, float]


def newton_steps(lam: float, max_newton: int) -> tuple[int, int]:
    """(Newton steps, CG products per step) charged for a training at ``lam``: ``6 + 2 log10(1/lam)`` steps
    (at least 2, at most ``max_newton``) and ``8 + 0.025 / sqrt(lam)`` products (at most ``CG_LIMIT``). The Hessian's
    condition number grows as 1/lam, CG's iterations as its square root; the constants bound every measured
    training with room to spare (docs/decisions.md, "Job estimates")."""
    steps = min(max_newton, max(2, math.ceil(6 + 2 * math.log10(1 / lam))))
    return steps, min(CG_LIMIT, math.ceil(8 + 0.025 / math.sqrt(lam)))


def newton_terms(rows: int, dim: int, classes: int, merged: Mapping[str, Any]) -> tuple[Terms, Terms, Terms]:
    """(memory bytes, flops, fixed seconds) of training on ``rows`` x ``dim`` with ``classes`` labels under the
    (merged) Newton settings; the design itself is the caller's term."""
    n, d, c = max(rows, 1), max(dim, 1), columns_for(classes)
    lam = float(merged["lam"])
    steps, per_step = newton_steps(lam, int(merged.get("max_newton", 100)))
    solver = str(merged.get("solver", "auto"))
    if solver == "auto":
        solver = auto_solver(n, d)
    one_pass = 2.0 * n * d * c
    memory: Terms = {
        "Newton's per-row arrays (rows x columns)": ROW_ARRAYS * n * c * FLOAT64,
        "Newton's weight-sized arrays (dim x columns)": WEIGHT_ARRAYS * d * c * FLOAT64,
    }
    flops: Terms = {"Newton steps' gradients and line searches": steps * (2 + LINE_SEARCH_TRIALS) * one_pass}
    products = 0
    if solver == "cg":
        products = steps * per_step
        flops["conjugate gradients (Newton steps x products x 2 passes)"] = products * 2 * one_pass
    elif solver == "woodbury":
        memory["Woodbury factors (rows^2)"] = 3.0 * n * n * FLOAT64 + n * d * FLOAT64
        flops["Woodbury solves (Newton steps x columns x rows^3)"] = (
            steps * 2 * one_pass + (2.0 * n * n * d + steps * c * (n**3 / 3.0 + 4.0 * n * n)) / SQUARE_SPEEDUP
        )
    else:
        memory["explicit Hessians (dim^2)"] = 3.0 * d * d * FLOAT64 + n * d * FLOAT64
        flops["Cholesky solves (Newton steps x columns x dim^2 x rows)"] = (
            steps * c * (2.0 * n * d * d + d**3 / 3.0) / SQUARE_SPEEDUP
        )
    if merged.get("op_norm", "exact") == "exact":
        k = min(n, d)
        memory["operator norm (a design copy and a Gram)"] = n * d * FLOAT64 + 2.0 * k * k * FLOAT64
        flops["operator norm (Gram and its top eigenvalue)"] = (
            2.0 * n * d * k + EIGH_FLOPS * k**3
        ) / SQUARE_SPEEDUP
    fixed: Terms = {"Newton's small steps": (steps * (2 + LINE_SEARCH_TRIALS) + products) * STEP_SECONDS}
    return memory, flops, fixed


__all__ = ["newton_steps", "newton_terms"]
