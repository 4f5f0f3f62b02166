"""The L2-regularised softmax objective over every row of a dataset, in float64, and Newton-CG on it.

For multinomial logistic regression with weights theta of shape (C, D+1) (bias column last, so the bias
is inside the penalty) the training objective on rows D is

    F_D(theta) = (1/|D|) sum_{i in D} CE(theta x̃_i, y_i) + (l2/2) ||theta||_F^2,      x̃_i = [x_i, 1]

It is l2-strongly convex, so for ANY theta its distance to the exact minimiser theta*_D is at most
``||grad F_D(theta)|| / l2`` (strong convexity: <grad F(a) - grad F(b), a - b> >= l2 ||a - b||^2 with
b = theta*, grad F(theta*) = 0, then Cauchy-Schwarz; Guo et al. 2020, Sekhari et al. 2021). That is the
gradient-residual bound of the certified Hessian-free release (:mod:`.certified`).

Rounding. The gradient is computed in float64 and its norm is raised by a slack before it is compared
with anything: a first-order bound on the float64 error of the computation (Higham, Accuracy and
Stability of Numerical Algorithms, 2nd ed., section 3.1: a length-k sum or dot product has error at most
gamma_k times the sum of the absolute terms, gamma_k = k u / (1 - k u), u = 2^-53), whatever the summation
order inside the BLAS (so on any CPU or GPU)::

    logits:   |dz_ic|  <= gamma_{D+1} ||theta_c|| ||x̃_i||                (dot products of length D+1)
    residual: ||dr_i|| <= 2 max_c |dz_ic| + 8 u                           (softmax is 2-Lipschitz from the
              logits' max-norm to the probabilities' 1-norm; 8 u covers exp and the normalisation)
    gradient: R^T X̃ / n is summed in blocks of at most ROW_BLOCK rows, each block by the BLAS and the
              blocks in order, so its error is at most gamma_k (1/n) sum_i ||r_i|| ||x̃_i|| with
              k = min(n, ROW_BLOCK) + ceil(n / ROW_BLOCK); the penalty adds gamma_2 l2 ||theta||

so, with ||r_i|| <= sqrt(2) and m_1, m_2 the means of ||x̃_i|| and ||x̃_i||^2 over the rows,

    slack = 4 [ gamma_k sqrt(2) m_1 + 2 gamma_{D+1} ||theta||_F m_2 + 8 u m_1 + gamma_2 l2 ||theta||_F ]

(the factor 4 covers the second-order terms and the rounding of the norm itself). Features and weights
are exact in float64 (float32 rows and float64 weights convert exactly), so no input rounding enters. On
the benchmarks' data the slack is about 1e-9, far below any useful sensitivity cap times l2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from unlearning.errors import DimensionMismatchError, InvalidConfigError

_U = 2.0**-53  # unit roundoff of float64
_ARMIJO = 1e-4
_MAX_HALVINGS = 40
ROW_BLOCK = 4096  # rows per block of the certified gradient sum (see the slack above)


def _gamma(k: int) -> float:
    """gamma_k = k u / (1 - k u) (Higham, Lemma 3.1)."""
    ku = k * _U
    return ku / (1.0 - ku)


@dataclass(frozen=True)
class Evaluation:
    """F and its gradient at one point, with what a Hessian-vector product there needs."""

    weights: torch.Tensor  # (C*(D+1),) float64, the point
    loss: float
    gradient: torch.Tensor  # (C*(D+1),) float64
    gradient_norm: float  # ||gradient|| as computed
    slack: float  # the rounding slack: the exact norm is at most gradient_norm + slack
    probabilities: torch.Tensor  # (n, C) softmax at the point

    @property
    def certified_gradient_norm(self) -> float:
        """An upper bound on the exact ||grad F(w)||: the computed norm plus the rounding slack."""
        return self.gradient_norm + self.slack


class SoftmaxObjective:
    """F_D of the module docstring on one set of rows; counts its passes over the rows.

    A *pass* is one sweep over every row: a gradient evaluation (:meth:`evaluate`, which also gives F and
    the softmax) or one Hessian-vector product (:meth:`hvp`). ``features`` are the model's input rows,
    already through the model's feature transform.
    """

    def __init__(
        self, features: np.ndarray | torch.Tensor, labels: np.ndarray | torch.Tensor, num_classes: int,
        l2: float, device: torch.device | None = None,
    ) -> None:
        if not (l2 > 0 and math.isfinite(l2)):
            raise InvalidConfigError(f"the gradient-residual bound needs an L2 coefficient l2 > 0, got {l2!r}")
        device = device or torch.device("cpu")
        x = torch.as_tensor(features).to(device=device, dtype=torch.float64)
        self.x = x.reshape(x.shape[0], -1)
        self.y = torch.as_tensor(labels).to(device=device, dtype=torch.long)
        self.n, self.num_features = int(self.x.shape[0]), int(self.x.shape[1])
        if self.n == 0:
            raise InvalidConfigError("the objective needs at least one row")
        self.num_classes = int(num_classes)
        self.dim = self.num_classes * (self.num_features + 1)
        self.l2 = float(l2)
        self.device = device
        self.onehot = F.one_hot(self.y, self.num_classes).to(torch.float64)
        row_norms = torch.sqrt(torch.linalg.vector_norm(self.x, dim=1) ** 2 + 1.0)  # ||x̃_i||, no (n, D) temporary
        self._mean_norm = float(row_norms.mean())
        self._mean_sq_norm = float((row_norms * row_norms).mean())
        self._gamma_sum = _gamma(min(self.n, ROW_BLOCK) + -(-self.n // ROW_BLOCK))
        self._gamma_dot = _gamma(self.num_features + 1)
        self.passes = 0

    # ------------------------------------------------------------------------------- evaluations
    def _theta(self, w: torch.Tensor) -> torch.Tensor:
        if w.ndim != 1 or w.shape[0] != self.dim:
            raise DimensionMismatchError(
                f"weights have shape {tuple(w.shape)}, the objective needs ({self.dim},) "
                f"= {self.num_classes} classes x ({self.num_features} features + bias)"
            )
        return w.to(device=self.device, dtype=torch.float64).view(self.num_classes, self.num_features + 1)

    def _apply(self, theta: torch.Tensor) -> torch.Tensor:
        """X̃ theta^T without forming X̃: (n, C)."""
        return torch.addmm(theta[:, -1], self.x, theta[:, :-1].T)

    def _apply_transposed(self, s: torch.Tensor) -> torch.Tensor:
        """S^T X̃ / n for S of shape (n, C): (C, D+1), summed in blocks of ROW_BLOCK rows."""
        total = torch.zeros(self.num_classes, self.num_features + 1, dtype=torch.float64, device=self.device)
        for start in range(0, self.n, ROW_BLOCK):
            block = s[start : start + ROW_BLOCK]
            total[:, :-1] += block.T @ self.x[start : start + ROW_BLOCK]
            total[:, -1] += block.sum(0)
        return total / self.n

    def slack(self, theta_norm: float) -> float:
        """The rounding slack of the module docstring at weights of Frobenius norm ``theta_norm``."""
        return 4.0 * (
            self._gamma_sum * math.sqrt(2.0) * self._mean_norm
            + 2.0 * self._gamma_dot * theta_norm * self._mean_sq_norm
            + 8.0 * _U * self._mean_norm
            + _gamma(2) * self.l2 * theta_norm
        )

    def evaluate(self, w: torch.Tensor) -> Evaluation:
        """F(w), grad F(w) = (1/n) (P - Y)^T X̃ + l2 theta and the rounding slack (one pass)."""
        theta = self._theta(w)
        logits = self._apply(theta)
        log_p = torch.log_softmax(logits, dim=1)
        p = log_p.exp()
        theta_sq = float((theta * theta).sum())
        loss = float(-(log_p * self.onehot).sum()) / self.n + 0.5 * self.l2 * theta_sq
        grad = (self._apply_transposed(p - self.onehot) + self.l2 * theta).reshape(-1)
        self.passes += 1
        theta_norm = math.sqrt(theta_sq)
        point = theta.reshape(-1)
        return Evaluation(point, loss, grad, float(grad.norm()), self.slack(theta_norm), p)

    def hvp(self, at: Evaluation, v: torch.Tensor) -> torch.Tensor:
        """grad^2 F(w) v = (1/n) sum_i (diag(p_i) - p_i p_i^T)(V x̃_i) x̃_i^T + l2 V (one pass)."""
        vm = self._theta(v)
        m = self._apply(vm)  # (n, C): V x̃_i
        p = at.probabilities
        s = p * m
        s = s - p * s.sum(1, keepdim=True)
        self.passes += 1
        return (self._apply_transposed(s) + self.l2 * vm).reshape(-1)


# ------------------------------------------------------------------------------------ Newton-CG


def _conjugate_gradient(
    objective: SoftmaxObjective, at: Evaluation, tolerance: float, max_iterations: int
) -> torch.Tensor:
    """CG for H d = -g from d = 0, stopped once ||H d + g|| <= tolerance or after ``max_iterations``
    Hessian-vector products (Nocedal & Wright, Algorithm 5.2). A Jacobi preconditioner measured no
    fewer products on MNIST and more on scikit-learn's digits, so there is none."""
    d = torch.zeros_like(at.gradient)
    r = -at.gradient.clone()  # residual of H d = -g at d = 0
    p = r.clone()
    rr = float(r @ r)
    for _ in range(max_iterations):
        if math.sqrt(rr) <= tolerance:
            break
        hp = objective.hvp(at, p)
        curvature = float(p @ hp)
        if curvature <= 0.0:  # cannot happen for l2 > 0 but for rounding; stop with what we have
            break
        alpha = rr / curvature
        d = d + alpha * p
        r = r - alpha * hp
        rr_next = float(r @ r)
        p = r + (rr_next / rr) * p
        rr = rr_next
    return d


def newton_step(
    objective: SoftmaxObjective, at: Evaluation, target_norm: float, max_cg: int
) -> Evaluation:
    """One inexact Newton step from ``at`` aiming at ``||grad F|| <= target_norm``.

    CG stops once the linear residual ||H d + g|| is at most ``min(max(target_norm, eta ||g||), ||g||) / 2``
    with the forcing term ``eta = min(0.5, sqrt(||g||))`` (Eisenstat & Walker): no tighter than the target
    needs, looser far from the minimiser. The full step is taken when it lowers F or the gradient norm
    (near the minimiser a decrease of F is below float64 resolution), else it is halved (Armijo
    backtracking). Returns the evaluation at the new point (``at`` itself when no halving helped).
    """
    forcing = min(0.5, math.sqrt(at.gradient_norm)) * at.gradient_norm
    tolerance = 0.5 * min(max(target_norm, forcing), at.gradient_norm)
    direction = _conjugate_gradient(objective, at, tolerance, max_cg)
    slope = float(at.gradient @ direction)
    step = 1.0
    for _ in range(_MAX_HALVINGS):
        trial = objective.evaluate(at.weights + step * direction)
        if trial.gradient_norm < at.gradient_norm or trial.loss <= at.loss + _ARMIJO * step * slope:
            return trial
        step *= 0.5
    return at


def minimise(
    objective: SoftmaxObjective, start: Evaluation, target_norm: float, max_steps: int, max_cg: int
) -> tuple[Evaluation, int]:
    """Newton-CG steps from ``start`` while the certified gradient norm exceeds ``target_norm``, at most
    ``max_steps``, stopping early at the rounding floor (a computed norm within twice the slack); returns
    the last evaluation and the number of steps taken."""
    at, steps = start, 0
    while at.certified_gradient_norm > target_norm and steps < max_steps:
        if at.gradient_norm <= 2.0 * at.slack:  # the rounding floor: no step can certify a smaller norm
            break
        nxt = newton_step(objective, at, max(target_norm - at.slack, at.slack), max_cg)
        steps += 1
        if nxt is at:  # no step lowered F or the gradient: rounding floor reached
            break
        at = nxt
    return at, steps
