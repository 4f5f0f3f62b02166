"""The loss of the Newton methods: L2-regularised one-vs-rest logistic regression on a design matrix.

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
:func:`~unlearning.newton.solvers.train_perturbed` minimises ``L_B`` by Newton-CG with an Armijo line search to a gradient norm
below ``tol`` (1e-9 by default; the loss is lam m-strongly convex and smooth, so a few Newton
iterations reach it) and reports the remaining joint gradient norm ``||grad L_B(W)||``, which the
certificate counts: Theorem 4.1 (Guo et al., Thm 3) assumes the exact minimiser, and the public code
ignores the optimiser's residual (digest 001 section 4.4).

This module holds the data side: the signed targets, the objective-perturbation noise ``B``, the design
matrix as a linear operator (:class:`Design`, :class:`DenseDesign`), a rigorous bound on its operator
norm, and :class:`Objective` (loss, gradient, curvature, Hessian-vector products).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import torch

from unlearning.errors import DimensionMismatchError, InvalidConfigError

__all__ = [
    "DTYPE",
    "EPS",
    "DenseDesign",
    "Design",
    "Objective",
    "draw_noise",
    "operator_norm_upper",
    "signed_targets",
]

EPS = float(np.finfo(np.float64).eps)
DTYPE = torch.float64


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
