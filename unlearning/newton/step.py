"""The Newton removal step and the data-dependent bound on the gradient residual it leaves.

Removal (digest 001 section 1.4, Eq. 3)
---------------------------------------
``W <- W + V`` with ``V = H^{-1} Delta`` column by column, where ``Delta = grad L(W; D) - grad L(W; D')``
is the exact gradient difference AT THE CURRENT WEIGHTS (B cancels) and ``H`` the Hessian of
``L(.; D')`` at ``W``. ``Delta`` is evaluated only on the rows that changed or left: every other row
contributes the same term to both gradients. A request with several removals is one step with the
summed ``Delta`` (the bounds below hold for any ``Delta``).

The linear solve is in :mod:`unlearning.newton.solvers`; its true residual is charged too.

Gradient-residual accounting (digest 001 section 3.5, Cor. 5.1 = Guo et al. Cor. 1)
----------------------------------------------------------------------------------
After the step the joint gradient of ``L_B(.; D')`` at ``W + V`` is
``g_new = g_old + (H V - Delta) + R`` with the Taylor remainder, per column,
``R_k = Z'^T (y_k * c_k)``, ``c_ik = l'(a_ik + u_ik) - l'(a_ik) - l''(a_ik) u_ik``, ``u_k = y_k * (Z' v_k)``.
Because ``l''`` is gamma-Lipschitz, ``|c_ik| <= (gamma / 2) u_ik^2`` (integral form of Taylor's
theorem: the remainder is ``int_0^1 (l''(a + t u) - l''(a)) u dt``). Two data-dependent bounds:

* ``tight`` (default): ``||R_k|| <= (gamma/2) min( s ||u_k||_4^2 , sum_i r_i u_ik^2 )`` with
  ``gamma = 1/(6 sqrt 3)``, the exact Lipschitz constant of ``sigma(1 - sigma)`` (max of
  ``|sigma(1-sigma)(1-2 sigma)|``), ``s >= ||Z'||_op`` and ``r_i = ||z'_i||``. The first form is
  ``||Z'^T c|| <= ||Z'||_op ||c||_2``, the second ``||Z'^T c|| <= sum_i |c_i| ||z'_i||``.
* ``paper``: Cor. 5.1 as printed, ``gamma2 ||Z'||_op ||v_k|| ||Z' v_k||`` with ``gamma2 = 1/4``,
  times ``R = max_i ||z'_i||`` (the paper assumes ``R <= 1``; keeping the factor keeps it valid for
  any data). It follows from the same remainder with ``|u_ik| <= R ||v_k||``.

Where this departs from the papers, and why (the maths was checked, not just copied): the papers write
the remainder as ``(H_{w_eta} - H_w) H^{-1} Delta`` "for some eta in [0, 1]", a mean-value theorem that
does not hold for vector-valued maps; the integral form above is exact and gives the same bound with an
extra factor 1/2 (the ``tight`` variant keeps it; ``paper`` drops it, which is still valid). gamma = 1/4
is a valid but loose constant (digest 001 section 2.2 verifies 1/(6 sqrt 3)).

Only the remaining training rows enter ``Z'``. The per-request charge is the joint norm
``sqrt(sum_k (beta_k + rho_k + slack_k)^2)`` where ``rho_k`` is the solver residual and ``slack_k`` a
floating-point allowance; a budget epoch starts at the optimiser residual and adds the charges
(triangle inequality, digest 001 section 4.1).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal

import torch

from unlearning.errors import DimensionMismatchError, InvalidConfigError
from unlearning.newton.objective import EPS, Objective
from unlearning.newton.solvers import LiveGram, Solver, pick_solver, solve_hessian, tracked_cg

__all__ = [
    "BOUND_VARIANTS",
    "GAMMA_LOGISTIC",
    "GAMMA_PAPER",
    "BoundVariant",
    "StepReport",
    "bound_per_column",
    "charge_from",
    "gradient_difference",
    "newton_step",
    "step_terms",
]

GAMMA_LOGISTIC = 1.0 / (6.0 * math.sqrt(3.0))
"""Exact Lipschitz constant of the logistic l'' = sigma(1 - sigma): max |sigma(1-sigma)(1-2 sigma)|."""
GAMMA_PAPER = 0.25
"""The constant the papers and their code use (a valid, looser upper bound)."""
BoundVariant = Literal["tight", "paper"]
BOUND_VARIANTS: tuple[BoundVariant, ...] = ("tight", "paper")


def gradient_difference(
    W: torch.Tensor,
    targets: torch.Tensor,
    old_rows: torch.Tensor,
    old_weight: torch.Tensor,
    new_rows: torch.Tensor,
    new_weight: torch.Tensor,
    lam: float,
    old_count: float,
    new_count: float,
) -> torch.Tensor:
    """``Delta = grad L(W; D) - grad L(W; D')`` from the rows that differ between D and D' only.

    ``old_rows``/``new_rows`` are the same design rows before and after (weights 0 where a row is not
    in that training set); every other row contributes identically to both gradients and cancels.
    The regulariser contributes ``lam (m - m') W``.
    """
    def grad_terms(rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        a = targets * (rows @ W)
        return rows.T @ (weight[:, None] * (-torch.sigmoid(-a)) * targets)

    return grad_terms(old_rows, old_weight) - grad_terms(new_rows, new_weight) + lam * (old_count - new_count) * W


@dataclass(frozen=True)
class StepReport:
    """One Newton removal: the new weights and every number the certificate's charge is computed from."""

    weights: torch.Tensor
    step: torch.Tensor
    variant: BoundVariant
    gamma: float
    op_norm: float | None
    op_norm_exact: bool
    """Whether ``op_norm`` was computed exactly from the remaining rows in this step (Woodbury path)."""
    max_row_norm: float
    bound: list[float]
    """beta_k: the data-dependent bound on ||R_k|| per column."""
    solver_residual: list[float]
    """rho_k = ||H v_k - Delta_k||, recomputed exactly."""
    slack: list[float]
    """Floating-point allowance per column."""
    u4sq: list[float]
    row_weighted_u2: list[float]
    u_norm: list[float]
    v_norm: list[float]
    path_norm: list[float]
    delta_norm: list[float]
    iterations: int
    hessian_products: int
    seconds: float

    @property
    def charge(self) -> float:
        return charge_from(self.bound, self.solver_residual, self.slack)


def charge_from(bound: list[float], solver_residual: list[float], slack: list[float]) -> float:
    """The joint increment of the gradient residual: sqrt(sum_k (beta_k + rho_k + slack_k)^2)."""
    return math.sqrt(sum((b + r + s) ** 2 for b, r, s in zip(bound, solver_residual, slack)))


def bound_per_column(
    variant: BoundVariant,
    *,
    op_norm: float | None,
    max_row_norm: float,
    u4sq: float,
    row_weighted_u2: float,
    u_norm: float,
    v_norm: float,
) -> tuple[float, float]:
    """(beta_k, gamma) of the module docstring from the recorded summaries (used by verification too)."""
    if variant == "tight":
        gamma = GAMMA_LOGISTIC
        candidates = [row_weighted_u2]
        if op_norm is not None:
            candidates.append(op_norm * u4sq)
        return 0.5 * gamma * min(candidates), gamma
    if variant == "paper":
        if op_norm is None:
            raise InvalidConfigError("the paper's bound needs an operator-norm bound of the design")
        return GAMMA_PAPER * max_row_norm * op_norm * v_norm * u_norm, GAMMA_PAPER
    raise InvalidConfigError(f"bound variant must be 'tight' or 'paper', got {variant!r}")


def newton_step(
    objective: Objective,
    W: torch.Tensor,
    delta: torch.Tensor,
    *,
    op_norm: float | None,
    variant: BoundVariant = "tight",
    solver: Solver = "cg",
    rtol: float = 1e-10,
    max_iter: int = 500,
    row_norms: torch.Tensor | None = None,
) -> StepReport:
    """``W + H^{-1} Delta`` on ``objective`` (the data after the removal) and its residual accounting.

    ``row_norms`` (the design's row norms, if the caller keeps them) saves a pass over the data.
    """
    started = time.perf_counter()
    if delta.shape != W.shape:
        raise DimensionMismatchError(f"Delta has shape {tuple(delta.shape)}, the weights {tuple(W.shape)}")
    chosen = pick_solver(solver, objective)
    if chosen == "cg":
        # One pass over the data gives the margins Z W (for the curvature S at W) and Z Delta, CG's first
        # product (P_0 = Delta does not depend on S): 2k passes for k CG iterations instead of 2k + 1. The
        # products are tall-skinny, so the extra columns cost far less than a second pass.
        cols = W.shape[1]
        both = objective.design.mm(torch.cat([W, delta], dim=1))
        S = objective.curvature(objective.targets * both[:, :cols])
        V, U, HV, path, iters = tracked_cg(objective, S, delta, rtol, max_iter, first_product=both[:, cols:])
        products, exact_now = iters, False
    else:
        S = objective.curvature(objective.margins(W))
        cache = None
        exact_now = False
        if chosen == "woodbury":
            # The Gram of the remaining rows is at hand: the exact operator norm costs one small eigensolve.
            cache = LiveGram.of(objective)
            exact = cache.operator_norm()
            exact_now = op_norm is None or exact <= op_norm
            op_norm = exact if op_norm is None else min(op_norm, exact)
        V, _ = solve_hessian(objective, S, delta, chosen, rtol=rtol, max_iter=max_iter, cache=cache)
        U = objective.design.mm(V)
        HV = objective.design.tmm(S * U) + (objective.lam * objective.count) * V
        path, iters, products = torch.linalg.vector_norm(V, dim=0), 1, 1
    rho = torch.linalg.vector_norm(HV - delta, dim=0)
    live = objective.weight > 0
    Ul = U[live]
    norms = (objective.design.row_norms() if row_norms is None else row_norms.to(U.device))[live]
    max_row = float(norms.max()) if len(norms) else 0.0
    u4sq = torch.sqrt((Ul**4).sum(0))
    weighted = (norms[:, None] * Ul * Ul).sum(0)
    u_norm = torch.linalg.vector_norm(Ul, dim=0)
    v_norm = torch.linalg.vector_norm(V, dim=0)
    d_norm = torch.linalg.vector_norm(delta, dim=0)
    bounds, slack = step_terms(
        variant, op_norm=op_norm, max_row_norm=max_row, u4sq=[float(x) for x in u4sq],
        row_weighted_u2=[float(x) for x in weighted], u_norm=[float(x) for x in u_norm],
        v_norm=[float(x) for x in v_norm], path_norm=[float(x) for x in path],
        delta_norm=[float(x) for x in d_norm], rows=objective.design.rows, dim=objective.design.dim,
        iterations=iters, count=objective.count, lam=objective.lam,
    )
    gamma = GAMMA_LOGISTIC if variant == "tight" else GAMMA_PAPER
    return StepReport(
        weights=W + V,
        step=V,
        variant=variant,
        gamma=gamma,
        op_norm=op_norm,
        op_norm_exact=exact_now,
        max_row_norm=max_row,
        bound=bounds,
        solver_residual=[float(r) for r in rho],
        slack=slack,
        u4sq=[float(x) for x in u4sq],
        row_weighted_u2=[float(x) for x in weighted],
        u_norm=[float(x) for x in u_norm],
        v_norm=[float(x) for x in v_norm],
        path_norm=[float(x) for x in path],
        delta_norm=[float(x) for x in d_norm],
        iterations=iters,
        hessian_products=products,
        seconds=time.perf_counter() - started,
    )


def step_terms(
    variant: BoundVariant,
    *,
    op_norm: float | None,
    max_row_norm: float,
    u4sq: list[float],
    row_weighted_u2: list[float],
    u_norm: list[float],
    v_norm: list[float],
    path_norm: list[float],
    delta_norm: list[float],
    rows: int,
    dim: int,
    iterations: int,
    count: float,
    lam: float,
) -> tuple[list[float], list[float]]:
    """(beta_k, slack_k) for every column from the recorded summaries; :func:`newton_step` and the
    certificate verification share this arithmetic so a certificate recomputes exactly.

    ``slack_k`` bounds the floating-point error of the computed solver residual: every Hessian product is
    a chain of at most ``rows + dim`` additions and the solver accumulates ``iterations`` of them, so the
    error is below ``(rows + dim + iterations) eps`` times the magnitudes involved (taken 8x); the
    products enter through ``path_k = sum_j |alpha_j| ||P_j||`` (>= ||v_k||). beta_k is inflated by the
    same relative allowance.
    """
    rel = 8.0 * (rows + dim + iterations) * EPS
    hess_scale = count * max_row_norm**2 / 4.0 + lam * count
    bounds, slack = [], []
    for k in range(len(u4sq)):
        beta, _ = bound_per_column(variant, op_norm=op_norm, max_row_norm=max_row_norm, u4sq=u4sq[k],
                                   row_weighted_u2=row_weighted_u2[k], u_norm=u_norm[k], v_norm=v_norm[k])
        bounds.append(beta * (1.0 + rel))
        slack.append(rel * (hess_scale * max(path_norm[k], v_norm[k]) + delta_norm[k]))
    return bounds, slack
