"""The linear solvers of the Newton methods and the optimiser that trains them.

Solving ``H V = Delta`` (never an explicit inverse): ``auto`` (default, :func:`auto_solver`) picks an exact
Woodbury solve through the n x n Gram matrix of the rows when they are few compared with the columns (IMDB:
100 graphs x 8,568 scattering coefficients; the same Gram then gives ``||Z'||_op`` exactly on every request),
else the explicit d x d Hessian per class factorised by Cholesky when d is at most
:data:`CHOLESKY_MAX_DIM`, else conjugate gradients with Hessian-vector products ``Z^T (S * (Z V)) + lam m V``.
Why Cholesky for small d: building H costs ``C m d^2`` against ``2 k C m d`` for k CG iterations, so it is
the cheaper one once k > d / 2, and k grows with the rows: the data-derived ``lam`` is ``1 / (C n D)``, the
Hessian's condition number grows as 1/lam and CG's iterations as its square root (Covertype, d = 55: 63
iterations at 1,000 rows, 159 at 16,000; a deletion 32 ms -> 4.1 s from 1,000 to 64,000 rows with CG, 11 ms
-> 0.52 s with Cholesky, whose residual is also at rounding, 1e-16 against 1e-7).
Why CG for larger d: building H costs O(m d^2) and factorising it O(d^3) PER CLASS on every request (Cora:
7 x 1,433^2, which is what makes the authors' code as slow as retraining), while H is well conditioned
-- its spectrum lies in ``[lam m', lam m' + ||Z||^2 / 4]`` -- so CG reaches a relative residual of 1e-6
in a few O(m d) products (3 iterations on Cora). The first CG direction is ``Delta`` itself, so
its product ``Z Delta`` comes from the same GEMM as the margins ``Z W`` (``Z [W, Delta]``): a step
costs 2k passes over the data for k iterations, not 2k + 1. Preconditioning does not pay on Cora
(measured): H = lam m' (I + E) with ||E|| about 0.03 and a slowly decaying spectrum, so even an exact
factor of the epoch-start Hessian (or deflating its top 300 eigenvectors) leaves ~1e-5 after two
iterations, and a third is still needed for 1e-6, while applying a full-rank factor costs more than
the pass it would save (7 classes x d^2 against one m x d design).
The solve is not trusted: the residual ``||H v_k - Delta_k||`` is computed from the products the
solver made (each one exact up to rounding, with a rounding allowance) and added to the charge, because an inexact solve leaves exactly that much extra gradient (digest 001
section 4.4).

:func:`tracked_cg` is the CG of a Newton removal step (:func:`unlearning.newton.step.newton_step`): it
keeps the products it makes so the step's residual costs no extra pass. :func:`train_perturbed` is the
Newton-CG optimiser that opens a budget epoch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from unlearning.errors import DimensionMismatchError, InvalidConfigError
from unlearning.newton.objective import EPS, Objective

__all__ = [
    "CHOLESKY_MAX_DIM",
    "SOLVERS",
    "LiveGram",
    "Solver",
    "TrainResult",
    "auto_solver",
    "conjugate_gradient",
    "pick_solver",
    "solve_hessian",
    "tracked_cg",
    "train_perturbed",
]

Solver = Literal["auto", "cg", "cholesky", "woodbury"]
SOLVERS: tuple[Solver, ...] = ("auto", "cg", "cholesky", "woodbury")
CHOLESKY_MAX_DIM = 128  # auto: explicit Hessians up to this many columns (CG past it)


def conjugate_gradient(
    apply: Callable[[torch.Tensor], torch.Tensor],
    rhs: torch.Tensor,
    *,
    rtol: float,
    atol: float = 0.0,
    max_iter: int = 500,
) -> tuple[torch.Tensor, int]:
    """Solve ``apply(X) = rhs`` column by column (SPD operator), all columns in one batched iteration.

    Stops when every column's recursive residual is below ``max(rtol ||rhs_k||, atol)``. Returns the
    solution and the number of operator applications. Callers must not trust the recursive residual:
    recompute the true one.
    """
    X = torch.zeros_like(rhs)
    R = rhs.clone()
    P = R.clone()
    rs = (R * R).sum(0)
    target = torch.clamp(rtol * torch.linalg.vector_norm(rhs, dim=0), min=atol) ** 2
    iters = 0
    while iters < max_iter and bool((rs > target).any()):
        AP = apply(P)
        curv = (P * AP).sum(0)
        active = (rs > target) & (curv > 0)
        alpha = torch.where(active, rs / torch.where(curv > 0, curv, torch.ones_like(curv)), torch.zeros_like(rs))
        X = X + alpha * P
        R = R - alpha * AP
        rs_new = (R * R).sum(0)
        beta = torch.where(active, rs_new / torch.where(rs > 0, rs, torch.ones_like(rs)), torch.zeros_like(rs))
        P = R + beta * P
        rs = torch.where(active, rs_new, rs)
        iters += 1
    return X, iters


def _cholesky_solve(objective: Objective, curvature: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """Per column: H_k = Z^T diag(S_k) Z + lam m I, Cholesky-factorised, then two triangular solves."""
    Z = objective.design.materialize()
    eye = torch.eye(Z.shape[1], dtype=Z.dtype, device=Z.device)
    out = torch.empty_like(rhs)
    for k in range(rhs.shape[1]):
        H = Z.T @ (curvature[:, k : k + 1] * Z) + (objective.lam * objective.count) * eye
        L = torch.linalg.cholesky(H)
        out[:, k : k + 1] = torch.cholesky_solve(rhs[:, k : k + 1], L)
    return out


@dataclass(frozen=True)
class LiveGram:
    """The live rows of a design and their Gram matrix ``Z_L Z_L^T`` (shared by Woodbury solves and the
    exact operator norm; it does not depend on the weights, so one training run computes it once)."""

    live: torch.Tensor
    rows: torch.Tensor
    gram: torch.Tensor

    @classmethod
    def of(cls, objective: Objective) -> LiveGram:
        live = torch.nonzero(objective.weight > 0).squeeze(1)
        rows = objective.design.take(live)
        return cls(live, rows, rows @ rows.T)

    def operator_norm(self) -> float:
        """Rigorous upper bound on ``||Z_L||_op`` from the Gram (see :func:`operator_norm_upper`)."""
        if len(self.live) == 0:
            return 0.0
        top = float(torch.linalg.eigvalsh(self.gram)[-1])
        fro2 = float(torch.diagonal(self.gram).sum())
        m, d = self.rows.shape
        return math.sqrt(max(top, 0.0) + 8.0 * (m + d) * EPS * fro2)


def _woodbury_solve(
    objective: Objective, curvature: torch.Tensor, rhs: torch.Tensor, cache: LiveGram | None = None
) -> torch.Tensor:
    """Exact ``H^{-1} rhs`` through the live rows' Gram matrix, for designs with far fewer rows than columns.

    With ``B_k = diag(sqrt(s_k)) Z`` (live rows), ``H_k = lam m I + B_k^T B_k`` and Woodbury gives
    ``H_k^{-1} r = (r - B_k^T (lam m I + B_k B_k^T)^{-1} B_k r) / (lam m)``; ``B_k B_k^T`` is the n x n
    Gram ``Z Z^T`` scaled by ``sqrt(s_k)`` on both sides, factorised by Cholesky (it is >= lam m I).
    Cost O(n^2 d + C n^3) instead of O(d^3) per class (digest 000 section 9.4; IMDB: n = 100, d = 8,568).
    """
    cache = cache or LiveGram.of(objective)
    Z, gram = cache.rows, cache.gram
    lam_m = objective.lam * objective.count
    ZR = Z @ rhs
    eye = torch.eye(len(cache.live), dtype=rhs.dtype, device=rhs.device)
    Y = torch.empty_like(ZR)
    root = torch.sqrt(curvature[cache.live])
    for k in range(rhs.shape[1]):
        d = root[:, k]
        L = torch.linalg.cholesky(lam_m * eye + d[:, None] * gram * d[None, :])
        Y[:, k : k + 1] = d[:, None] * torch.cholesky_solve((d * ZR[:, k])[:, None], L)
    return (rhs - Z.T @ Y) / lam_m


def auto_solver(rows: int, dim: int) -> Solver:
    """What ``auto`` means for ``rows`` live rows of ``dim`` columns: Woodbury when the rows are few
    compared with the columns (<= min(1024, d/4)), Cholesky when d <= :data:`CHOLESKY_MAX_DIM`, else CG."""
    if rows <= min(1024, dim // 4):
        return "woodbury"
    return "cholesky" if dim <= CHOLESKY_MAX_DIM else "cg"


def pick_solver(solver: Solver, objective: Objective) -> Solver:
    """``solver``, with ``auto`` resolved for the objective's live rows (:func:`auto_solver`)."""
    if solver != "auto":
        return solver
    return auto_solver(int((objective.weight > 0).sum()), objective.design.dim)


def solve_hessian(
    objective: Objective, curvature: torch.Tensor, rhs: torch.Tensor, solver: Solver, rtol: float, max_iter: int,
    cache: LiveGram | None = None,
) -> tuple[torch.Tensor, int]:
    solver = pick_solver(solver, objective)
    if solver == "cholesky":
        return _cholesky_solve(objective, curvature, rhs), 0
    if solver == "woodbury":
        return _woodbury_solve(objective, curvature, rhs, cache), 0
    if solver == "cg":
        return conjugate_gradient(lambda V: objective.hvp(V, curvature), rhs, rtol=rtol, max_iter=max_iter)
    raise InvalidConfigError(f"solver must be 'auto', 'cg', 'cholesky' or 'woodbury', got {solver!r}")



def tracked_cg(
    objective: Objective, curvature: torch.Tensor, rhs: torch.Tensor, rtol: float, max_iter: int,
    first_product: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """CG for ``H V = rhs`` that also accumulates ``U = Z V`` and ``H V`` from the products it computes.

    Each iteration's ``Z P`` and ``H P`` are exact products (up to rounding), so ``HV = sum alpha_j H P_j``
    needs no extra pass over the data, and neither does ``U``. Returns (V, U, HV, path, iterations), where
    ``path_k = sum_j |alpha_jk| ||P_jk||`` scales the rounding allowance of the accumulated sums.
    ``first_product``, when given, is ``Z rhs`` (the first direction is ``P_0 = rhs``), computed by the
    caller in the same pass as the margins ``Z W``: it is the same product, so nothing changes but the
    pass it saves.
    """
    lam_m = objective.lam * objective.count
    V = torch.zeros_like(rhs)
    U = rhs.new_zeros((objective.design.rows, rhs.shape[1]))
    HV = torch.zeros_like(rhs)
    R = rhs.clone()
    P = R.clone()
    rs = (R * R).sum(0)
    path = torch.zeros_like(rs)
    target = (rtol * torch.linalg.vector_norm(rhs, dim=0)) ** 2
    iters = 0
    while iters < max_iter and bool((rs > target).any()):
        ZP = first_product if iters == 0 and first_product is not None else objective.design.mm(P)
        HP = objective.design.tmm(curvature * ZP) + lam_m * P
        curv = (P * HP).sum(0)
        active = (rs > target) & (curv > 0)
        alpha = torch.where(active, rs / torch.where(curv > 0, curv, torch.ones_like(curv)), torch.zeros_like(rs))
        V = V + alpha * P
        U = U + alpha * ZP
        HV = HV + alpha * HP
        path = path + alpha.abs() * torch.linalg.vector_norm(P, dim=0)
        R = rhs - HV
        rs_new = (R * R).sum(0)
        beta = torch.where(active, rs_new / torch.where(rs > 0, rs, torch.ones_like(rs)), torch.zeros_like(rs))
        P = R + beta * P
        rs = torch.where(active, rs_new, rs)
        iters += 1
    return V, U, HV, path, iters




# --------------------------------------------------------------------------------------------------
# training


@dataclass(frozen=True)
class TrainResult:
    weights: torch.Tensor
    residual_norm: float
    """``||grad L_B(W; D)||`` at the returned weights (joint over all columns, noise included)."""
    iterations: int
    hessian_products: int
    seconds: float
    converged: bool


def train_perturbed(
    objective: Objective,
    noise: torch.Tensor,
    *,
    tol: float = 1e-9,
    max_iter: int = 100,
    init: torch.Tensor | None = None,
    solver: Solver = "cg",
    on_step: Callable[[int], None] | None = None,
) -> TrainResult:
    """Minimise ``L(W) + <noise, W>`` by Newton-CG with Armijo backtracking, to ``||grad|| <= tol``.
    ``on_step(it)`` is called before each Newton step (it may raise to stop the training).

    Inexact Newton: the CG forcing term ``min(0.1, sqrt(||g|| / ||g_0||))`` gives superlinear
    convergence without over-solving far from the optimum. Near the optimum the loss value is
    dominated by rounding, so a full step that lowers the gradient norm is accepted there.
    """
    started = time.perf_counter()
    if noise.shape != (objective.design.dim, objective.columns):
        raise DimensionMismatchError(f"noise has shape {tuple(noise.shape)}, expected "
                                     f"({objective.design.dim}, {objective.columns})")
    W = torch.zeros_like(noise) if init is None else init.clone()
    a = objective.margins(W)
    g = objective.gradient(W, a) + noise
    f = objective.value(W, a, noise)
    g0 = max(float(torch.linalg.vector_norm(g)), 1e-300)
    cache = LiveGram.of(objective) if pick_solver(solver, objective) == "woodbury" else None
    products, it = 0, 0
    for it in range(1, max_iter + 1):
        if on_step is not None:
            on_step(it)
        gn = float(torch.linalg.vector_norm(g))
        if gn <= tol:
            it -= 1
            break
        S = objective.curvature(a)
        forcing = min(0.1, math.sqrt(gn / g0))
        P, k = solve_hessian(objective, S, -g, solver, rtol=forcing, max_iter=200, cache=cache)
        products += k
        slope = float((g * P).sum())
        step = 1.0
        while True:
            W_try = W + step * P
            a_try = objective.margins(W_try)
            f_try = objective.value(W_try, a_try, noise)
            if f_try <= f + 1e-4 * step * slope:
                g_try = objective.gradient(W_try, a_try) + noise
                break
            if abs(f_try - f) <= 1e-12 * max(abs(f), 1.0):
                g_try = objective.gradient(W_try, a_try) + noise
                if float(torch.linalg.vector_norm(g_try)) < gn:
                    break
            step *= 0.5
            if step < 1e-10:
                g_try = g
                W_try, a_try, f_try = W, a, f
                break
        if step < 1e-10:
            break  # no progress possible in floating point; report the residual as it is
        W, a, f, g = W_try, a_try, f_try, g_try
    residual = float(torch.linalg.vector_norm(g))
    return TrainResult(W, residual, it, products, time.perf_counter() - started, residual <= tol)
