"""Certified removal by a Newton step for L2-regularised logistic regression with objective perturbation.

Shared core of the ``newton_removal`` (tabular, Guo et al. 2020), ``graph_node_newton`` (SGC/GPR,
digest 001) and ``graph_classification_newton`` (scattering transform, digest 000) methods.

Model and training (digest 001 section 1.2, digest 000 section 3)
-----------------------------------------------------------------
Binary labels y in {-1, +1}; several classes are one-vs-rest: column k of ``W`` (d x C) separates
class k (+1) from the rest (-1). A two-class problem uses ONE column (C = 1), so the noise and the
budget below are those of one d-dimensional model. The loss is the paper's sum form with the
regulariser inside the per-sample sum, plus the objective perturbation ``<B, W>``::

    L_B(W; D) = sum_k [ sum_{i in D} log(1 + exp(-y_ik z_i^T w_k)) + (lam m / 2) ||w_k||^2 + b_k^T w_k ]

with ``m = |D|`` and ``B`` (d x C) i.i.d. ``N(0, alpha^2)``, drawn from a recorded seed. Gradient and
Hessian per column are ``Z^T (-sigmoid(-a_k) * y_k) + lam m w_k + b_k`` and
``H_k = Z^T diag(s_k (1 - s_k)) Z + lam m I`` with ``a_k = y_k * (Z w_k)``, ``s_k = sigmoid(a_k)``.
:func:`train_perturbed` minimises ``L_B`` by Newton-CG with an Armijo line search to a gradient norm
below ``tol`` (1e-9 by default; the loss is lam m-strongly convex and smooth, so a few Newton
iterations reach it) and reports the remaining joint gradient norm ``||grad L_B(W)||``, which the
certificate counts: Theorem 4.1 (Guo et al., Thm 3) assumes the exact minimiser, and the public code
ignores the optimiser's residual (digest 001 section 4.4).

Removal (digest 001 section 1.4, Eq. 3)
---------------------------------------
``W <- W + V`` with ``V = H^{-1} Delta`` column by column, where ``Delta = grad L(W; D) - grad L(W; D')``
is the exact gradient difference AT THE CURRENT WEIGHTS (B cancels) and ``H`` the Hessian of
``L(.; D')`` at ``W``. ``Delta`` is evaluated only on the rows that changed or left: every other row
contributes the same term to both gradients. A request with several removals is one step with the
summed ``Delta`` (the bounds below hold for any ``Delta``).

Solver (never an explicit inverse). ``auto`` (default) picks conjugate gradients with Hessian-vector
products ``Z^T (S * (Z V)) + lam m V`` when the design has many rows, and an exact Woodbury solve through
the n x n Gram matrix of the rows when they are few compared with the columns (IMDB: 100 graphs x 8,568
scattering coefficients; the same Gram then gives ``||Z'||_op`` exactly on every request); ``cholesky`` factorises the explicit d x d Hessian per class (small d, tests).
Why CG: building H costs O(m d^2) and factorising it O(d^3) PER CLASS on every request (Cora:
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

Budget (digest 001 section 4.2(b), Guo et al. Algorithm 2)
----------------------------------------------------------
``budget = alpha * epsilon / sqrt(2 ln(1.5 / delta))``. Theorem 4.1: if the released weights satisfy
``||grad L_B(W; D')|| <= budget`` and ``B ~ N(0, alpha^2 I)``, the removal is (epsilon, delta)-certified
with ``delta = 1.5 exp(-c0^2 / 2)``. The noise is isotropic Gaussian over all d*C coordinates of ``W``,
so the theorem applies to the concatenated model and its JOINT gradient residual: the budget is NOT
multiplied by the number of classes (the public code compares the sum of per-class bounds with
``C * budget``, which certifies roughly ``C * epsilon``; digest 001 section 4.3).
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, Protocol

import numpy as np
import torch

from unlearning.errors import DimensionMismatchError, InvalidConfigError, UnsupportedRequestError
from unlearning.methods.hyperparameters import HyperParameter
from unlearning.methods.protocol import BudgetPolicy, MethodState, PrivacyTarget
from unlearning.privacy.certificate import Certificate, ReleaseMode
from unlearning.validation import integer_at_least, positive_number

__all__ = [
    "GAMMA_LOGISTIC",
    "GAMMA_PAPER",
    "BoundVariant",
    "DenseDesign",
    "Design",
    "Objective",
    "Solver",
    "StepReport",
    "TrainResult",
    "c0",
    "conjugate_gradient",
    "draw_noise",
    "gradient_difference",
    "newton_step",
    "operator_norm_upper",
    "residual_budget",
    "signed_targets",
    "train_perturbed",
]

GAMMA_LOGISTIC = 1.0 / (6.0 * math.sqrt(3.0))
"""Exact Lipschitz constant of the logistic l'' = sigma(1 - sigma): max |sigma(1-sigma)(1-2 sigma)|."""
GAMMA_PAPER = 0.25
"""The constant the papers and their code use (a valid, looser upper bound)."""
EPS = float(np.finfo(np.float64).eps)

BoundVariant = Literal["tight", "paper"]
Solver = Literal["auto", "cg", "cholesky", "woodbury"]
BOUND_VARIANTS: tuple[BoundVariant, ...] = ("tight", "paper")
SOLVERS: tuple[Solver, ...] = ("auto", "cg", "cholesky", "woodbury")
DTYPE = torch.float64


def c0(delta: float) -> float:
    """c0 = sqrt(2 ln(1.5 / delta)) of Theorem 4.1 (delta = 1.5 exp(-c0^2 / 2))."""
    if not 0 < delta < 1.5:
        raise InvalidConfigError(f"delta must lie in (0, 1.5) for the Gaussian objective perturbation, got {delta}")
    return math.sqrt(2.0 * math.log(1.5 / delta))


def residual_budget(alpha: float, epsilon: float, delta: float) -> float:
    """The gradient-residual budget ``alpha * epsilon / sqrt(2 ln(1.5/delta))`` (alpha = noise std)."""
    if not (alpha >= 0 and math.isfinite(alpha)):
        raise InvalidConfigError(f"alpha (the objective-perturbation std) must be finite and >= 0, got {alpha}")
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise InvalidConfigError(f"epsilon must be finite and > 0, got {epsilon}")
    return alpha * epsilon / c0(delta)


def signed_targets(labels: np.ndarray, num_classes: int, device: torch.device | None = None) -> torch.Tensor:
    """(m, C) targets in {-1, +1}: one column (class 1 is +1) for two classes, one-vs-rest otherwise."""
    y = torch.as_tensor(np.asarray(labels, dtype=np.int64), device=device)
    if num_classes == 2:
        return (2.0 * (y == 1).to(DTYPE) - 1.0).unsqueeze(1)
    out = -torch.ones(len(y), num_classes, dtype=DTYPE, device=device)
    valid = y >= 0
    out[torch.nonzero(valid).squeeze(1), y[valid]] = 1.0
    return out


def draw_noise(dim: int, columns: int, alpha: float, seed: int, device: torch.device | None = None) -> torch.Tensor:
    """B ~ N(0, alpha^2) entrywise, (dim, columns), from a CPU generator seeded with ``seed`` (reproducible)."""
    gen = torch.Generator(device="cpu").manual_seed(int(seed) % (2**63))
    return (alpha * torch.randn(dim, columns, generator=gen, dtype=DTYPE)).to(device or "cpu")


# --------------------------------------------------------------------------------------------------
# design matrices


class Design(Protocol):
    """The rows z_i of the data matrix as a linear operator (only products are needed)."""

    @property
    def rows(self) -> int: ...

    @property
    def dim(self) -> int: ...

    def mm(self, V: torch.Tensor) -> torch.Tensor:
        """Z V, (rows, C)."""
        ...

    def tmm(self, T: torch.Tensor) -> torch.Tensor:
        """Z^T T, (dim, C)."""
        ...

    def take(self, idx: torch.Tensor) -> torch.Tensor:
        """Rows ``idx`` of Z."""
        ...

    def materialize(self) -> torch.Tensor: ...

    def row_norms(self) -> torch.Tensor: ...


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b``; float64 on the CPU goes through numpy's BLAS.

    Why: the products here are tall-skinny (a few to a few dozen columns: one per class). On the
    benchmark machine torch's CPU path runs them 1.5-2x slower than numpy's BLAS with the same thread
    count (Cora, 1,208 x 1,433 times 7 columns: 3.4-4.2 ms against 2.0-2.7 ms). Both are one GEMM of
    the same operands, rounded by the same IEEE arithmetic; training, retraining and removal all go
    through here, so every side of a timing comparison gets the same kernel.
    """
    if a.device.type == "cpu" and b.device.type == "cpu" and a.dtype == b.dtype == torch.float64:
        return torch.from_numpy(np.matmul(a.detach().numpy(), b.detach().numpy()))
    return a @ b


@dataclass(frozen=True)
class DenseDesign:
    """A plain (rows, dim) float64 matrix."""

    matrix: torch.Tensor

    @property
    def rows(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def mm(self, V: torch.Tensor) -> torch.Tensor:
        return _matmul(self.matrix, V)

    def tmm(self, T: torch.Tensor) -> torch.Tensor:
        return _matmul(self.matrix.T, T)

    def take(self, idx: torch.Tensor) -> torch.Tensor:
        return self.matrix[idx]

    def materialize(self) -> torch.Tensor:
        return self.matrix

    def row_norms(self) -> torch.Tensor:
        return torch.linalg.vector_norm(self.matrix, dim=1)


def operator_norm_upper(matrix: torch.Tensor) -> float:
    """A rigorous upper bound on ``||matrix||_op`` (the largest singular value), computed exactly.

    The largest eigenvalue of the smaller Gram matrix (LAPACK, symmetric eigensolver) plus an allowance
    for the rounding of the Gram product and of the eigensolver (both below ``c (m + d) eps ||Z||_F^2``).
    Cost O(m d min(m, d) + min(m, d)^3): paid once per budget epoch.
    """
    m, d = matrix.shape
    if m == 0 or d == 0:
        return 0.0
    mat = matrix.to(DTYPE)
    gram = mat @ mat.T if m <= d else mat.T @ mat
    fro2 = float((mat * mat).sum())
    try:
        import scipy.linalg as sla

        top = float(sla.eigh(gram.cpu().numpy(), eigvals_only=True, subset_by_index=[len(gram) - 1] * 2,
                             driver="evr")[0])
    except (ImportError, ValueError, np.linalg.LinAlgError):
        top = float(torch.linalg.eigvalsh(gram)[-1])
    margin = 8.0 * (m + d) * EPS * fro2
    return math.sqrt(max(top, 0.0) + margin)


# --------------------------------------------------------------------------------------------------
# objective


@dataclass(frozen=True)
class Objective:
    """The b-free sum-form loss ``sum_i w_i l(y_i z_i^T W) + (lam m / 2) ||W||^2`` over rows with weight 1.

    ``weight`` (rows,) holds 1 for the rows in the training set now and 0 for rows that left: the
    design keeps its shape through a budget epoch and departures are masked.
    """

    design: Design
    targets: torch.Tensor
    weight: torch.Tensor
    lam: float

    def __post_init__(self) -> None:
        if self.targets.shape[0] != self.design.rows or self.weight.shape != (self.design.rows,):
            raise DimensionMismatchError(
                f"targets {tuple(self.targets.shape)} / weight {tuple(self.weight.shape)} do not match the "
                f"design's {self.design.rows} rows"
            )
        if not (self.lam > 0 and math.isfinite(self.lam)):
            raise InvalidConfigError(f"lam (the L2 strength) must be finite and > 0, got {self.lam}")

    @property
    def count(self) -> float:
        return float(self.weight.sum())

    @property
    def columns(self) -> int:
        return int(self.targets.shape[1])

    def margins(self, W: torch.Tensor) -> torch.Tensor:
        return self.targets * self.design.mm(W)

    def gradient(self, W: torch.Tensor, margins: torch.Tensor) -> torch.Tensor:
        coeff = self.weight[:, None] * (-torch.sigmoid(-margins)) * self.targets
        return self.design.tmm(coeff) + (self.lam * self.count) * W

    def curvature(self, margins: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(margins)
        return self.weight[:, None] * s * (1.0 - s)

    def hvp(self, V: torch.Tensor, curvature: torch.Tensor) -> torch.Tensor:
        return self.design.tmm(curvature * self.design.mm(V)) + (self.lam * self.count) * V

    def value(self, W: torch.Tensor, margins: torch.Tensor, noise: torch.Tensor | None = None) -> float:
        loss = float((self.weight[:, None] * torch.nn.functional.softplus(-margins)).sum())
        reg = 0.5 * self.lam * self.count * float((W * W).sum())
        return loss + reg + (float((noise * W).sum()) if noise is not None else 0.0)

    def with_weight(self, weight: torch.Tensor) -> Objective:
        return replace(self, weight=weight)


# --------------------------------------------------------------------------------------------------
# solvers


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


def pick_solver(solver: Solver, objective: Objective) -> Solver:
    """``auto``: Woodbury when the live rows are few compared with the columns (<= min(1024, d/4)), else CG."""
    if solver != "auto":
        return solver
    rows = int((objective.weight > 0).sum())
    return "woodbury" if rows <= min(1024, objective.design.dim // 4) else "cg"


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
) -> TrainResult:
    """Minimise ``L(W) + <noise, W>`` by Newton-CG with Armijo backtracking, to ``||grad|| <= tol``.

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


# --------------------------------------------------------------------------------------------------
# removal


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


def _tracked_cg(
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
        V, U, HV, path, iters = _tracked_cg(objective, S, delta, rtol, max_iter, first_product=both[:, cols:])
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


# --------------------------------------------------------------------------------------------------
# protocol glue shared by the Newton methods (newton_removal, graph_node_newton,
# graph_classification_newton): configuration, budget epochs, certificates and their verification.

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
    def from_mapping(cls, config: dict[str, Any]) -> NewtonConfig:
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


@dataclass(frozen=True)
class EpochStart:
    """A freshly trained model: what a new budget epoch starts from."""

    weights: torch.Tensor
    train: TrainResult
    op_norm: float | None
    noise_seed: int
    noise_std: float


def start_epoch(
    objective: Objective, cfg: NewtonConfig, noise_std: float, noise_seed: int, init: torch.Tensor | None = None
) -> EpochStart:
    """Train on ``objective`` with fresh noise ``B ~ N(0, noise_std^2)`` from ``noise_seed``; bound ||Z||_op.

    The result must be the minimiser of the new perturbed objective; a warm start only saves time (the
    minimiser does not depend on it, and the optimiser's residual is charged to the new epoch).
    """
    noise = draw_noise(objective.design.dim, objective.columns, noise_std, noise_seed,
                       device=objective.targets.device)
    result = train_perturbed(objective, noise, tol=cfg.opt_tol, max_iter=cfg.max_newton, init=init,
                             solver=cfg.solver)
    op = None
    if cfg.op_norm == "exact":
        op = operator_norm_upper(objective.design.materialize()[objective.weight > 0])
    return EpochStart(result.weights, result, op, int(noise_seed), noise_std)


def epoch_accounting(
    start: EpochStart, cfg: NewtonConfig, privacy_epsilon: float, privacy_delta: float, train_size: int,
    *, fit_seed: int, epoch: int, retrains: int, extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The accounting scalars of a new budget epoch (JSON-able)."""
    cap = residual_budget(cfg.alpha, privacy_epsilon, privacy_delta)
    residual = start.train.residual_norm
    if cap == 0.0:
        raise InvalidConfigError("alpha = 0 leaves no gradient-residual budget: set alpha > 0 (the noise std)")
    if residual > cap:
        raise InvalidConfigError(
            f"training stopped at gradient norm {residual:.3g}, above the whole residual budget {cap:.3g}: "
            "raise max_newton, lower opt_tol or raise alpha"
        )
    return {
        **(extra or {}),
        "deleted_count": 0,
        "train_size": int(train_size),
        "remaining": int(train_size),
        "epoch": int(epoch),
        "retrains": int(retrains),
        "fit_seed": int(fit_seed),
        "noise_seed": int(start.noise_seed),
        "noise_std": float(start.noise_std),
        "cap": cap,
        "spent": residual,
        "optimizer_residual": residual,
        "optimizer_iterations": start.train.iterations,
        "optimizer_hessian_products": start.train.hessian_products,
        "optimizer_seconds": start.train.seconds,
        "op_norm_bound": start.op_norm,
        "op_norm_source": "exact_at_epoch_start" if start.op_norm is not None else "none",
        "max_charge_per_item": 0.0,
        "last_charge": 0.0,
        "config": cfg.to_dict(),
    }


def accept_step(accounting: dict[str, Any], step: StepReport, items: int, remaining: int,
                carried_source: str) -> dict[str, Any]:
    """The accounting after an accepted Newton step that removed ``items`` things.

    The operator-norm bound kept for the next step is the step's (exact on the remaining rows when the
    step computed it, else ``carried_source`` names how the caller carried it forward).
    """
    charge = step.charge
    return {
        **accounting,
        "deleted_count": int(accounting["deleted_count"]) + items,
        "remaining": int(remaining),
        "spent": float(accounting["spent"]) + charge,
        "last_charge": charge,
        "max_charge_per_item": max(float(accounting["max_charge_per_item"]), charge / max(items, 1)),
        "op_norm_bound": step.op_norm,
        "op_norm_source": "none" if step.op_norm is None else (
            "exact_remaining_rows" if step.op_norm_exact else carried_source),
    }


def step_inputs(step: StepReport, spent_before: float, count: float, lam: float) -> dict[str, Any]:
    """Everything :func:`verify_newton_certificate` needs to recompute a step's charge."""
    return {
        "kind": "removal",
        "spent_before": spent_before,
        "bound_variant": step.variant,
        "gamma": step.gamma,
        "op_norm_bound": step.op_norm,
        "max_row_norm": step.max_row_norm,
        "u4sq": step.u4sq,
        "row_weighted_u2": step.row_weighted_u2,
        "u_norm": step.u_norm,
        "v_norm": step.v_norm,
        "path_norm": step.path_norm,
        "iterations": step.iterations,
        "delta_norm": step.delta_norm,
        "solver_residual": step.solver_residual,
        "design_rows": None,  # filled by the caller
        "design_dim": None,
        "count": count,
        "lam": lam,
        "per_class_bound": step.bound,
        "slack": step.slack,
        "hessian_products": step.hessian_products,
    }


def newton_certificate(
    method: str,
    accounting: dict[str, Any],
    release_mode: str,
    epsilon: float,
    delta: float,
    *,
    charge: float,
    inputs: dict[str, Any],
    notes: str,
) -> Certificate:
    """The Certificate of a Newton-method release (``release_mode`` audited: no noise, empirical)."""
    certified = release_mode == "certified"
    spent = float(accounting["spent"])
    remaining = max(int(accounting["remaining"]), 1)
    lam = float(accounting["config"]["lam"])
    measured = {
        "residual_bound": spent,
        # Strong convexity: ||W - W_retrain(same B)|| <= ||grad L_B(W; D')|| / (lam m').
        "distance_to_same_noise_retrain_bound": spent / (lam * remaining),
    }
    return Certificate(
        method=method,
        release_mode=release_mode,  # type: ignore[arg-type]
        guarantee="certified" if certified else "empirical",
        epsilon=epsilon if certified else None,
        delta=delta if certified else None,
        bound_name=f"newton_gradient_residual_{accounting['config']['bound']}",
        bound=spent,
        sigma=float(accounting["noise_std"]),
        calibration="none",
        cumulative_deletions=int(accounting["deleted_count"]),
        budget_unit="gradient_residual",
        budget_cap=float(accounting["cap"]),
        budget_spent=spent,
        charge=charge,
        noise_seed=int(accounting["noise_seed"]),
        inputs={
            "alpha": float(accounting["config"]["alpha"]),
            "noise_std": float(accounting["noise_std"]),
            "lam": lam,
            "target_epsilon": epsilon,
            "target_delta": delta,
            "c0": c0(delta),
            "optimizer_residual": accounting["optimizer_residual"],
            "optimizer_iterations": accounting["optimizer_iterations"],
            "epoch": accounting["epoch"],
            "retrains": accounting["retrains"],
            "fit_seed": accounting["fit_seed"],
            "noise_seed": accounting["noise_seed"],
            "train_size": accounting["train_size"],
            "remaining": accounting["remaining"],
            "config": accounting["config"],
            **inputs,
        },
        measured=measured,
        notes=notes,
    )


def _close(a: float, b: float, rel: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-300)


def verify_newton_certificate(cert: Certificate) -> list[str]:
    """Recompute the budget, the charge of a removal from its recorded summaries, and the spending."""
    problems: list[str] = []
    inp = cert.inputs
    try:
        alpha, eps, dlt = float(inp["alpha"]), float(inp["target_epsilon"]), float(inp["target_delta"])
        cap = residual_budget(alpha, eps, dlt)
    except (KeyError, TypeError, ValueError, InvalidConfigError) as exc:
        return [f"the certificate lacks the budget inputs: {exc}"]
    if cert.budget_unit != "gradient_residual":
        problems.append(f"budget unit is {cert.budget_unit!r}, expected 'gradient_residual'")
    if not _close(cap, cert.budget_cap):
        problems.append(f"budget cap recomputes to {cap}, certificate says {cert.budget_cap}")
    if cert.budget_spent > cert.budget_cap * (1 + 1e-12):
        problems.append(f"spent {cert.budget_spent} exceeds the cap {cert.budget_cap}")
    if not _close(cert.bound, cert.budget_spent):
        problems.append("the bound must equal the accumulated residual bound (budget_spent)")
    if cert.release_mode == "certified":
        if cert.guarantee != "certified" or cert.epsilon is None or cert.delta is None:
            problems.append("a certified release must state guarantee 'certified' with epsilon and delta")
        if not _close(cert.sigma, alpha):
            problems.append(f"sigma {cert.sigma} differs from the objective-perturbation std alpha {alpha}")
    else:
        if cert.guarantee != "empirical" or cert.epsilon is not None or cert.sigma != 0.0:
            problems.append("an audited release adds no noise: guarantee 'empirical', sigma 0, no epsilon")
    kind = inp.get("kind")
    if kind == "opening":
        if not _close(cert.budget_spent, float(inp["optimizer_residual"])) or cert.charge != 0.0:
            problems.append("an epoch's opening release must spend exactly the optimiser residual, charge 0")
        return problems
    if kind != "removal":
        return problems + [f"unknown certificate kind {kind!r}"]
    try:
        bounds, slack = step_terms(
            inp["bound_variant"], op_norm=inp["op_norm_bound"], max_row_norm=float(inp["max_row_norm"]),
            u4sq=list(inp["u4sq"]), row_weighted_u2=list(inp["row_weighted_u2"]), u_norm=list(inp["u_norm"]),
            v_norm=list(inp["v_norm"]), path_norm=list(inp["path_norm"]), delta_norm=list(inp["delta_norm"]),
            rows=int(inp["design_rows"]), dim=int(inp["design_dim"]), iterations=int(inp["iterations"]),
            count=float(inp["count"]), lam=float(inp["lam"]),
        )
        charge = charge_from(bounds, list(inp["solver_residual"]), slack)
    except (KeyError, TypeError, ValueError, InvalidConfigError) as exc:
        return problems + [f"the charge cannot be recomputed: {exc}"]
    if not _close(charge, cert.charge):
        problems.append(f"the charge recomputes to {charge}, certificate says {cert.charge}")
    if not _close(float(inp["spent_before"]) + cert.charge, cert.budget_spent):
        problems.append(f"spent_before {inp['spent_before']} + charge {cert.charge} != spent {cert.budget_spent}")
    return problems


@dataclass(frozen=True)
class NewtonModelSpec:
    """``MethodState.model`` of the Newton methods: a linear one-vs-rest model on a named feature map.

    ``weights`` are ``W`` (dim x columns) flattened row-major; ``columns`` is 1 for two classes (the
    logit of class 1 is ``z^T w``) and ``num_classes`` otherwise.
    """

    family: str
    feature_map: dict[str, Any]
    dim: int
    columns: int
    num_classes: int

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "feature_map": dict(self.feature_map), "dim": self.dim,
                "columns": self.columns, "num_classes": self.num_classes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NewtonModelSpec:
        return cls(str(data["family"]), dict(data["feature_map"]), int(data["dim"]),
                   int(data["columns"]), int(data["num_classes"]))

    def weight_matrix(self, flat: torch.Tensor) -> torch.Tensor:
        if flat.numel() != self.dim * self.columns:
            raise DimensionMismatchError(f"weights have {flat.numel()} entries, the model needs "
                                         f"{self.dim} x {self.columns}")
        return flat.reshape(self.dim, self.columns)


def columns_for(num_classes: int) -> int:
    return 1 if num_classes == 2 else num_classes


def released_weight_matrix(state: Any) -> torch.Tensor:
    """The released ``W`` (dim x columns, float64) of a Newton method's state: what predictions use."""
    return state.model.weight_matrix(state.released_weights.to(torch.float64))


def one_source(instances: Any | None, item_ids: Sequence[str], items: str) -> None:
    """A prediction names raw rows or items of the model's data, not both and not neither."""
    if (instances is None) == (not item_ids):
        raise UnsupportedRequestError(f"give either feature rows (instances) or {items} (sample_ids), not both")


def predict_labels(W: torch.Tensor, features: torch.Tensor) -> np.ndarray:
    """Class predictions of the one-vs-rest model ``W`` on feature rows (argmax; sign for one column)."""
    logits = features.to(W.dtype).to(W.device) @ W
    if W.shape[1] == 1:
        return (logits[:, 0] > 0).long().cpu().numpy()
    return logits.argmax(1).cpu().numpy()


class NewtonMethodBase(ABC):
    """The protocol functions every Newton method shares (budget, retrain policy, verification).

    Subclasses implement ``name``, ``request_kinds``, ``default_config``, ``hyperparameters``, ``fit`` and
    ``forget``.
    """

    needs_training_data: ClassVar[bool] = True
    name: ClassVar[str] = "newton_base"

    @abstractmethod
    def default_config(self) -> dict[str, Any]:
        """Every configuration key the method accepts, with its default."""

    @abstractmethod
    def hyperparameters(self) -> tuple[HyperParameter, ...]:
        """One declaration per key of :meth:`default_config`: :func:`newton_hyperparameters` and the method's own."""

    def families(self) -> tuple[str, ...]:
        return FAMILIES

    def release_modes(self) -> tuple[ReleaseMode, ...]:
        """Both: ``certified`` trains with the objective perturbation, ``audited`` without it."""
        return ("certified", "audited")

    def check_config(self, config: Mapping[str, Any]) -> None:
        self._configs(config)

    def _configs(self, config: Mapping[str, Any]) -> tuple[dict[str, Any], NewtonConfig]:
        """The defaults overlaid with ``config`` (the service's ``family`` key checked and dropped), and
        the Newton settings they hold; unknown keys are an error naming them."""
        merged = {**self.default_config(), **dict(config)}
        family = merged.pop("family", "logistic_regression")  # the service passes the model family along
        if family not in FAMILIES:
            raise InvalidConfigError(f"{self.name} trains a (one-vs-rest) logistic regression, not family {family!r}")
        unknown = sorted(set(merged) - set(self.default_config()))
        if unknown:
            raise InvalidConfigError(f"unknown config keys for {self.name}: {unknown}")
        return merged, NewtonConfig.from_mapping(merged)

    def restore_model(self, data: Mapping[str, Any]) -> NewtonModelSpec:
        """``MethodState.model`` from its ``to_dict()``."""
        return NewtonModelSpec.from_dict(dict(data))

    def budget_cap(self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget) -> float:
        """The gradient-residual budget alpha * epsilon / sqrt(2 ln(1.5/delta)) (one, for all classes)."""
        return residual_budget(float(state.accounting["config"]["alpha"]), privacy.epsilon, privacy.delta)

    def must_retrain(
        self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget, pending_deletions: int = 0
    ) -> str | None:
        """Retrain when the policy's deletion limits would be crossed, or when the residual budget would be:
        the next charge is predicted as ``pending x`` the largest charge per deleted item seen in this
        epoch (``forget`` itself retrains with fresh noise when an actual charge would cross the cap)."""
        acc = state.accounting
        after = int(acc["deleted_count"]) + pending_deletions
        train_size = int(acc["train_size"])
        max_deletions, fraction = policy.max_deletions, policy.max_deletion_fraction
        if pending_deletions > 0 and max_deletions is not None and after > max_deletions:
            return f"forgetting {pending_deletions} more item(s) would exceed the policy's max_deletions {max_deletions}"
        if pending_deletions > 0 and fraction is not None and after > math.floor(fraction * train_size):
            return (f"forgetting {pending_deletions} more item(s) would bring this budget epoch to {after} deletions, "
                    f"above the policy's max_deletion_fraction {fraction} of {train_size}")
        cap = self.budget_cap(state, policy, privacy)
        spent = float(acc["spent"])
        predicted = spent + pending_deletions * float(acc["max_charge_per_item"])
        if pending_deletions > 0 and predicted > cap:
            return (f"the gradient-residual budget would be exceeded: spent {spent:.4g} + predicted "
                    f"{predicted - spent:.4g} > cap {cap:.4g}")
        return None

    def verify_certificate(self, certificate: Certificate) -> list[str]:
        return verify_newton_certificate(certificate)
