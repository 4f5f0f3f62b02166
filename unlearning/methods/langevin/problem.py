"""The model SGLU trains: L2-regularised (multinomial) logistic regression with per-sample gradient
clipping (digest 003, section 1.3; App. K.3).

Binary classification is the paper's model exactly: w . x with l(w; x, y) = -log sigmoid(y w . x),
per-sample data gradients clipped to norm M, plus lam/2 ||w||^2, smoothness L = ||x||^2/4 + lam, strong
convexity m = lam. More classes use the reference-class multinomial logit (class 0's logit pinned to 0,
so two classes give exactly the binary model): its data Hessian (diag(p) - p p^T) (x) x x^T has norm
<= ||x||^2/2 (Gershgorin), so L = ||x||^2/2 + lam, and its data gradient (p - e_y) (x) x has norm
<= sqrt(2) ||x||. The released weights live in the ``logistic_regression`` family's layout theta
(C, D+1) (bias last, row 0 zero), so ``build_model(spec).logits`` serves them. Clipping: for two classes
a clipped gradient is the gradient of a Huberised logistic loss, still convex with the same L, so any
clip norm M is sound; for more classes clipping a vector residual is not the gradient of a convex loss,
so M must be at least sqrt(2) * the feature bound (clipping never active) or the configuration is
refused (:func:`unlearning.methods.langevin.config.resolve_problem`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from unlearning.errors import DimensionMismatchError


@dataclass(frozen=True)
class LogisticProblem:
    """L2-regularised (reference-class multinomial) logistic regression with per-sample clipping.

    The trained parameter is W of shape (C - 1, D + intercept): row k scores class k + 1 against the
    reference class 0. ``feature_bound`` bounds ||[x, 1]|| (or ||x||) over the data universe. With
    ``row_clip`` every row is first scaled onto that bound when it lies outside it (x <- x min(1, B_x/||x||),
    B_x = sqrt(feature_bound^2 - 1) with the intercept, feature_bound without): a fixed row-local map, so
    the algorithm is PNSGD on the clipped rows and every constant holds for them.
    """

    num_classes: int
    num_features: int
    intercept: bool
    l2: float
    clip: float
    feature_bound: float
    row_clip: bool = False

    @property
    def shape(self) -> tuple[int, int]:
        """(C - 1, D + intercept), the shape of the trained parameter W."""
        return self.num_classes - 1, self.num_features + int(self.intercept)

    @property
    def curvature(self) -> float:
        """The data Hessian's norm per unit ||x||^2: p(1-p) <= 1/4 (binary), diag(p) - pp^T <= 1/2."""
        return 0.25 if self.num_classes == 2 else 0.5

    @property
    def smoothness(self) -> float:
        """L = curvature * feature_bound^2 + lam (digest 1.3: 1/4 + lam for unit-norm features)."""
        return self.curvature * self.feature_bound**2 + self.l2

    @property
    def natural_gradient_bound(self) -> float:
        """max ||data gradient||: |sigmoid - 1| ||x|| <= B (binary); ||p - e_y|| ||x|| <= sqrt(2) B."""
        return (1.0 if self.num_classes == 2 else math.sqrt(2.0)) * self.feature_bound

    def augment(self, x: torch.Tensor) -> torch.Tensor:
        """The rows the chain trains on: flattened, clipped onto the feature bound with ``row_clip``, then
        with a constant 1 appended with the intercept."""
        x = x.reshape(x.shape[0], -1)
        if self.row_clip:
            limit = math.sqrt(max(self.feature_bound**2 - float(self.intercept), 0.0))
            x = x * torch.clamp(limit / x.norm(dim=1, keepdim=True).clamp_min(1e-300), max=1.0)
        if self.intercept:
            x = torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)], dim=1)
        return x

    def residuals(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Clipped per-sample data gradients in factored form: grad_i = r_i (x) x_i, r_i of shape (C-1,),
        r_i = s_i (p_i - e_{y_i}) with p the softmax over [0, W x] without class 0 and
        s_i = min(1, M / ||grad_i||) (Pi_{C_M} of App. K.3, eq. 72)."""
        logits = torch.cat([torch.zeros(x.shape[0], 1, dtype=x.dtype, device=x.device), x @ w.T], dim=1)
        r = torch.softmax(logits, dim=1)[:, 1:] - F.one_hot(y, self.num_classes)[:, 1:]
        norms = r.norm(dim=1) * x.norm(dim=1)
        scale = torch.clamp(self.clip / norms.clamp_min(1e-300), max=1.0)
        return r * scale.unsqueeze(1)

    def data_gradient_sum(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """sum_i clip(grad l_i(W)) over the rows of x (the regulariser not included)."""
        return self.residuals(w, x, y).T @ x

    def objective_gradient(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, normaliser: float) -> torch.Tensor:
        """(1/normaliser) sum_i clip(grad l_i(W)) + lam W."""
        return self.data_gradient_sum(w, x, y) / normaliser + self.l2 * w

    def to_flat(self, w: torch.Tensor) -> torch.Tensor:
        """W (C-1, D+intercept) -> the ``logistic_regression`` family's flat theta (C, D+1)."""
        theta = torch.zeros(self.num_classes, self.num_features + 1, dtype=w.dtype, device=w.device)
        theta[1:, : w.shape[1]] = w
        return theta.reshape(-1)

    def from_flat(self, flat: torch.Tensor) -> torch.Tensor:
        """The family's flat theta (C, D+1) -> W (C-1, D+intercept); DimensionMismatchError on another size."""
        C, D = self.num_classes, self.num_features
        if flat.ndim != 1 or flat.shape[0] != C * (D + 1):
            raise DimensionMismatchError(
                f"weights have shape {tuple(flat.shape)}, a {C}-class logistic regression on {D} features "
                f"needs ({C * (D + 1)},)"
            )
        theta = flat.reshape(C, D + 1)
        return theta[1:, : self.shape[1]].clone()

    def to_dict(self) -> dict[str, Any]:
        """The problem's keys of a stored accounting."""
        return {"num_classes": self.num_classes, "num_features": self.num_features, "intercept": self.intercept,
                "l2": self.l2, "clip": self.clip, "feature_bound": self.feature_bound, "row_clip": self.row_clip}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LogisticProblem:
        """The problem of a stored accounting; a version recorded without ``row_clip`` did not clip rows."""
        return cls(int(d["num_classes"]), int(d["num_features"]), bool(d["intercept"]), float(d["l2"]),
                   float(d["clip"]), float(d["feature_bound"]), bool(d.get("row_clip", False)))
