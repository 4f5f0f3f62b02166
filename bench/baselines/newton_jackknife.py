"""The Hessian-based baselines of the Hessian-free paper: Newton step (NS) and infinitesimal jackknife (IJ).

These exist for the benchmark (digest 002, section 5), not as service methods: they need the explicit
d x d Hessian of the training objective, O(d^2) memory and an O(d^3) factorisation.

Loss convention. ``l(w; z) = CE(f(w, x), y) + (l2/2) ||w||^2``, the per-sample loss training actually
minimises (:class:`unlearning.steps.BatchObjective`), so every per-sample Hessian carries ``l2 * I`` and
every per-sample gradient carries ``l2 * w``. This is what the paper states for LR (digest 002, 1.1: "l
includes the regulariser"). The authors' code builds the Hessian from CE only (no L2 term) and relies
on the damping 0.01 * I for invertibility; pass ``hessian_l2=False`` to reproduce that (the gradients
keep the L2 term either way, since they must be gradients of the trained objective). The code also
averages the forget-set gradient instead of summing it as Eq. 15 does; we follow the equations.

Definitions, with n the training-set size, U the forgotten set (m = |U|) and w_hat the trained weights:

    H_S = sum_{i=1}^n  grad^2 l(w_hat; z_i)          H_U = sum_{j in U} grad^2 l(w_hat; u_j)
    g_U = sum_{j in U} grad   l(w_hat; u_j)

- NS (Sekhari et al. 2021; paper Eq. 15), damped:
      w_bar = w_hat + 1/(n-m) * [ (H_S - H_U)/(n-m) + damping * I ]^{-1} g_U
- IJ (Suriyakumar & Wilson 2022; paper Eq. 16), damped:
      w_bar = w_hat + 1/n * [ H_S/n + damping * I ]^{-1} g_U

Both are a Newton step on the remaining objective (1/(n-m)) sum_{S \\ U} l from w_hat, assuming w_hat
minimises the full objective; IJ evaluates the Hessian on all n samples, so it can factor it once.
With damping 0 and m/n -> 0 the two coincide (IJ is NS to first order in m/n).

Costs. Building H_S is O(n d^2) and stores d^2 float64 numbers (d = 7,850 for MNIST LR: 493 MB).
NS factors a fresh d x d matrix per request (O(m d^2 + d^3), peak about 3 d^2 float64: H_S, the
per-request matrix and its Cholesky factor); IJ factors once in :meth:`precompute` and then pays
O(m d + d^2) per request. For families without a closed form the Hessian is assembled from d
Hessian-vector products per sample chunk (forward-over-reverse autograd), which is only attempted for
d <= 25,000 (a 25,000^2 float64 matrix is 5 GB; the paper's CNN, d = 21,840, needs 3.8 GB per copy,
so NS peaks near 11 GB). That path costs d Hessian-vector products per sample: measured on a loaded
2-core CPU, the CNN's H_S for n = 1,000 would take hours (tune ``sample_chunk`` / ``column_chunk``,
or run on a GPU). Logistic regression on MNIST (d = 7,850, n = 1,000) on the same CPU: H_S in about
2 s, one NS request deleting 30% in about 12 s, IJ precompute about 8 s and IJ per request 0.3 s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import grad, vmap

from unlearning.data import Dataset
from unlearning.errors import (
    DimensionMismatchError,
    InvalidConfigError,
    InvalidDatasetError,
    UnlearningError,
)
from unlearning.forward_mode import jvp  # torch.func.jvp, one thread at a time
from unlearning.models.flat import FlatModel

MAX_HESSIAN_DIM = 25_000
"""Largest parameter count for which an explicit d x d Hessian is built (5 GB in float64)."""

CLOSED_FORM_FAMILIES = frozenset({"logistic_regression"})

_ROW_CHUNK = 4096


# --------------------------------------------------------------------------------------------------
# Hessian and gradient sums
# --------------------------------------------------------------------------------------------------


def hessian_sum(
    model: FlatModel,
    w: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    l2: float,
    *,
    closed_form: bool = True,
    max_dim: int = MAX_HESSIAN_DIM,
    sample_chunk: int = 64,
    column_chunk: int = 64,
) -> torch.Tensor:
    """``sum_i grad^2 l(w; z_i)`` over the rows of (x, y) with l = CE + (l2/2)||w||^2, as a (d, d) float64.

    The L2 part contributes ``n * l2 * I``. For the ``logistic_regression`` family (theta of shape
    (C, D+1), w = theta.flatten(), x~ = [x, 1], p_i = softmax(theta x~_i)) it is the closed form

        H = sum_i (diag(p_i) - p_i p_i^T) kron (x~_i x~_i^T) + n * l2 * I,

    built as the C(C+1)/2 distinct (D+1) x (D+1) blocks  X~^T diag(delta_cc' p_c - p_c p_c') X~,
    in row chunks (matrix products only, no per-sample loop). Any other family goes through autograd:
    for each chunk of ``sample_chunk`` rows, ``vmap`` over forward-over-reverse Hessian-vector
    products with ``column_chunk`` basis vectors at a time (d / column_chunk calls per sample chunk;
    the activation memory of one call is about column_chunk * sample_chunk times that of one sample).

    Computation is in float64 on ``w``'s device. Raises :class:`InvalidConfigError` when
    ``model.dim > max_dim`` and :class:`DimensionMismatchError` on inconsistent shapes.
    """
    _check_weights(model, w)
    if model.dim > max_dim:
        raise InvalidConfigError(
            f"an explicit Hessian of model {model.spec.family!r} has {model.dim}^2 entries "
            f"({model.dim**2 * 8 / 2**30:.1f} GiB in float64); the NS/IJ baselines are limited to "
            f"d <= {max_dim}"
        )
    if x.shape[0] != y.shape[0]:
        raise DimensionMismatchError(f"{x.shape[0]} feature rows but {y.shape[0]} labels")
    w64 = w.detach().to(torch.float64)
    x64 = x.to(device=w.device, dtype=torch.float64)
    y = y.to(w.device)
    if closed_form and model.spec.family in CLOSED_FORM_FAMILIES:
        h = _softmax_hessian_sum(w64, x64, model.spec.num_classes)
    else:
        h = _autograd_hessian_sum(model, w64, x64, y, sample_chunk, column_chunk)
    h.diagonal().add_(float(x.shape[0]) * l2)
    return h


def gradient_sum(
    model: FlatModel,
    w: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    l2: float,
    *,
    closed_form: bool = True,
) -> torch.Tensor:
    """``sum_i grad l(w; z_i)`` with l = CE + (l2/2)||w||^2, float64 of shape (d,); zero for no rows.

    Closed form for ``logistic_regression``: (P - Y)^T X~ + m * l2 * theta, flattened.
    """
    _check_weights(model, w)
    w64 = w.detach().to(torch.float64)
    m = x.shape[0]
    if m == 0:
        return torch.zeros_like(w64)
    x64 = x.to(device=w.device, dtype=torch.float64)
    y = y.to(w.device)
    if closed_form and model.spec.family in CLOSED_FORM_FAMILIES:
        theta = w64.view(model.spec.num_classes, -1)
        xt = _augment(x64)
        r = torch.softmax(xt @ theta.T, dim=1) - F.one_hot(y, model.spec.num_classes).to(torch.float64)
        ce = (r.T @ xt).reshape(-1)
    else:
        ce = torch.zeros_like(w64)
        x64 = x64.reshape(m, *model.spec.input_shape)
        for s in range(0, m, _ROW_CHUNK):
            xb, yb = x64[s : s + _ROW_CHUNK], y[s : s + _ROW_CHUNK]
            ce += grad(_ce_sum)(w64, model, xb, yb)
    return ce + (m * l2) * w64


def _ce_sum(w: torch.Tensor, model: FlatModel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model.logits(w, x), y, reduction="sum")


def _augment(x: torch.Tensor) -> torch.Tensor:
    b = x.shape[0]
    return torch.cat([x.reshape(b, -1), torch.ones(b, 1, dtype=x.dtype, device=x.device)], dim=1)


def _softmax_hessian_sum(w: torch.Tensor, x: torch.Tensor, num_classes: int) -> torch.Tensor:
    theta = w.view(num_classes, -1)
    k = theta.shape[1]
    h = torch.zeros(num_classes, k, num_classes, k, dtype=w.dtype, device=w.device)
    for s in range(0, x.shape[0], _ROW_CHUNK):
        xt = _augment(x[s : s + _ROW_CHUNK])
        p = torch.softmax(xt @ theta.T, dim=1)
        for c in range(num_classes):
            for c2 in range(c, num_classes):
                coef = -p[:, c] * p[:, c2]
                if c == c2:
                    coef = coef + p[:, c]
                block = (xt * coef[:, None]).T @ xt  # symmetric, and block (c2, c) equals block (c, c2)
                h[c, :, c2, :] += block
                if c2 != c:
                    h[c2, :, c, :] += block
    return h.view(num_classes * k, num_classes * k)


def _hvp_fn(
    model: FlatModel, w: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor
) -> Callable[[torch.Tensor], torch.Tensor]:
    """v -> (sum over the chunk of grad^2 CE at w) v, forward-over-reverse."""

    def g(v: torch.Tensor) -> torch.Tensor:
        return grad(_ce_sum)(v, model, xb, yb)

    def hvp(v: torch.Tensor) -> torch.Tensor:
        return jvp(g, (w,), (v,))[1]

    return hvp


def _autograd_hessian_sum(
    model: FlatModel, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, sample_chunk: int, column_chunk: int
) -> torch.Tensor:
    d = w.numel()
    h = torch.zeros(d, d, dtype=w.dtype, device=w.device)
    inputs = x.reshape(x.shape[0], *model.spec.input_shape)
    for s in range(0, x.shape[0], sample_chunk):
        hvp = _hvp_fn(model, w, inputs[s : s + sample_chunk], y[s : s + sample_chunk])
        for c in range(0, d, column_chunk):
            cols = torch.arange(c, min(c + column_chunk, d), device=w.device)
            basis = torch.zeros(cols.numel(), d, dtype=w.dtype, device=w.device)
            basis[torch.arange(cols.numel(), device=w.device), cols] = 1.0
            h[c : c + cols.numel()] += vmap(hvp)(basis)  # rows of a symmetric matrix = its columns
    return h


# --------------------------------------------------------------------------------------------------
# Baselines
# --------------------------------------------------------------------------------------------------


def _check_weights(model: FlatModel, w: torch.Tensor) -> None:
    if w.ndim != 1 or w.shape[0] != model.dim:
        raise DimensionMismatchError(
            f"weights have shape {tuple(w.shape)}, model {model.spec.family!r} needs ({model.dim},)"
        )


def _check_data(model: FlatModel, data: Dataset) -> None:
    if data.num_features != int(np.prod(model.spec.input_shape)):
        raise DimensionMismatchError(
            f"dataset features have shape {data.feature_shape}, model expects {tuple(model.spec.input_shape)}"
        )
    if data.num_classes != model.spec.num_classes:
        raise DimensionMismatchError(
            f"dataset has {data.num_classes} classes, model was built for {model.spec.num_classes}"
        )


def _solve_spd(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, str]:
    """Solve a x = b by Cholesky; fall back to LU when ``a`` is not positive definite (nonconvex models)."""
    factor, info = torch.linalg.cholesky_ex(a)
    if int(info) == 0:
        return torch.cholesky_solve(b[:, None], factor).squeeze(1), "cholesky"
    return torch.linalg.solve(a, b), "lu"


class _HessianBaseline:
    """Shared state: the model, training rows, trained weights and the configuration."""

    def __init__(
        self,
        l2: float,
        *,
        damping: float = 0.01,
        hessian_l2: bool = True,
        closed_form: bool = True,
        max_dim: int = MAX_HESSIAN_DIM,
        sample_chunk: int = 64,
        column_chunk: int = 64,
    ) -> None:
        if not l2 >= 0:
            raise InvalidConfigError(f"l2 must be >= 0, got {l2}")
        if not damping >= 0:
            raise InvalidConfigError(f"damping must be >= 0, got {damping}")
        self.l2 = float(l2)
        self.damping = float(damping)
        self.hessian_l2 = hessian_l2
        self.closed_form = closed_form
        if sample_chunk < 1 or column_chunk < 1:
            raise InvalidConfigError(f"chunk sizes must be >= 1, got {sample_chunk}, {column_chunk}")
        self.max_dim = max_dim
        self.sample_chunk = sample_chunk
        self.column_chunk = column_chunk
        self.seconds: dict[str, float] = {}
        self.solver: str | None = None  # "cholesky" or "lu" (fallback when not positive definite)
        self._model: FlatModel | None = None
        self._data: Dataset | None = None
        self._w: torch.Tensor | None = None
        self._x: torch.Tensor | None = None
        self._y: torch.Tensor | None = None

    @property
    def hessian_l2_coef(self) -> float:
        return self.l2 if self.hessian_l2 else 0.0

    def _setup(self, model: FlatModel, data: Dataset, w: torch.Tensor) -> None:
        _check_weights(model, w)
        _check_data(model, data)
        if model.dim > self.max_dim:
            raise InvalidConfigError(
                f"the {type(self).__name__} baseline needs an explicit {model.dim} x {model.dim} Hessian "
                f"({model.dim**2 * 8 / 2**30:.1f} GiB in float64); it is limited to d <= {self.max_dim}"
            )
        self._model, self._data, self._w = model, data, w.detach().clone()
        x = torch.as_tensor(data.features, device=w.device).to(torch.float64)
        self._x = x.reshape(len(data), *model.spec.input_shape)
        self._y = torch.as_tensor(data.labels, device=w.device)

    def _rows(self, deleted_ids: Sequence[str]) -> torch.Tensor:
        if self._data is None or self._x is None:
            raise RuntimeError(f"{type(self).__name__}.forget called before precompute")
        ids = list(deleted_ids)
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            dup = next(s for s in ids if s in seen or seen.add(s))  # type: ignore[func-returns-value]
            raise UnlearningError(f"sample id {dup!r} appears more than once in the request")
        rows = self._data.indices_of(ids)  # UnknownSampleError on an unknown id
        if len(rows) >= len(self._data):
            raise InvalidDatasetError("removing these samples would leave the training set empty")
        return torch.as_tensor(rows, device=self._x.device)

    def _state(self) -> tuple[FlatModel, torch.Tensor, torch.Tensor, torch.Tensor]:
        assert self._model is not None and self._w is not None and self._x is not None and self._y is not None
        return self._model, self._w, self._x, self._y

    def _gradient(self, rows: torch.Tensor) -> torch.Tensor:
        model, w, x, y = self._state()
        return gradient_sum(model, w, x[rows], y[rows], self.l2, closed_form=self.closed_form)

    def _hessian(self, rows: torch.Tensor | None) -> torch.Tensor:
        model, w, x, y = self._state()
        xs, ys = (x, y) if rows is None else (x[rows], y[rows])
        return hessian_sum(
            model,
            w,
            xs,
            ys,
            self.hessian_l2_coef,
            closed_form=self.closed_form,
            max_dim=self.max_dim,
            sample_chunk=self.sample_chunk,
            column_chunk=self.column_chunk,
        )


class NewtonStep(_HessianBaseline):
    """NS baseline (Sekhari et al. 2021; paper Eq. 15), with damping as in the paper's experiments:

        w_bar = w_hat + 1/(n-m) * [ (H_S - H_U)/(n-m) + damping * I ]^{-1} g_U

    with H_S, H_U, g_U the sums of per-sample Hessians / gradients of l = CE + (l2/2)||w||^2 at w_hat
    (see the module docstring; ``hessian_l2=False`` drops the L2 term from the Hessians as the
    authors' code does, damping default 0.01 as there). :meth:`precompute` stores H_S (d^2 float64);
    each :meth:`forget` builds H_U (O(m d^2)) and factors the damped matrix by Cholesky (O(d^3)),
    falling back to an LU solve when it is not positive definite (``self.solver`` says which).
    No explicit inverse is formed. Every call is relative to the precomputed (w_hat, S): for a
    sequence of requests pass the cumulative forgotten set.
    """

    hessian: torch.Tensor | None = None  # H_S, set by precompute

    def precompute(self, model: FlatModel, data: Dataset, w: torch.Tensor) -> NewtonStep:
        """Store H_S = sum over the n training rows of grad^2 l(w; z_i); timed in ``seconds["precompute"]``."""
        started = time.perf_counter()
        self._setup(model, data, w)
        self.hessian = self._hessian(None)
        self.seconds["precompute"] = time.perf_counter() - started
        return self

    def forget(self, deleted_ids: Sequence[str]) -> torch.Tensor:
        """Weights after removing ``deleted_ids`` by Eq. 15 (w_hat itself for an empty request), in w_hat's
        dtype; timed in ``seconds["forget"]``."""
        started = time.perf_counter()
        rows = self._rows(deleted_ids)
        _, w, _, _ = self._state()
        assert self.hessian is not None and self._data is not None
        m = rows.numel()
        if m == 0:
            self.seconds["forget"] = time.perf_counter() - started
            return w.clone()
        remaining = len(self._data) - m
        g = self._gradient(rows)
        a = self._hessian(rows)  # H_U, turned in place into (H_S - H_U)/(n-m) + damping I
        a.neg_().add_(self.hessian).div_(remaining)
        a.diagonal().add_(self.damping)
        step, self.solver = _solve_spd(a, g)
        del a
        out = (w.to(torch.float64) + step / remaining).to(w.dtype)
        self.seconds["forget"] = time.perf_counter() - started
        return out


class InfluenceJackknife(_HessianBaseline):
    """IJ baseline (Suriyakumar & Wilson 2022; paper Eq. 16), damped:

        w_bar = w_hat + 1/n * [ H_S/n + damping * I ]^{-1} g_U

    :meth:`precompute` builds H_S and keeps only the Cholesky factor of H_S/n + damping * I (d^2
    float64; an LU factorisation when the matrix is not positive definite, ``self.solver`` says
    which), so each :meth:`forget` costs the gradient sum O(m d) plus two triangular solves O(d^2).
    The paper's original IJ uses a proximal step with a non-smooth regulariser; like the paper's
    experiments we use the smooth damped form. Loss convention and ``hessian_l2`` as for
    :class:`NewtonStep`.
    """

    factor: torch.Tensor | None = None  # set by precompute
    pivots: torch.Tensor | None = None  # only with the LU fallback

    def precompute(self, model: FlatModel, data: Dataset, w: torch.Tensor) -> InfluenceJackknife:
        """Factor H_S/n + damping * I once; timed in ``seconds["precompute"]``."""
        started = time.perf_counter()
        self._setup(model, data, w)
        a = self._hessian(None)
        a.div_(len(data))
        a.diagonal().add_(self.damping)
        factor, info = torch.linalg.cholesky_ex(a)
        if int(info) == 0:
            self.factor, self.pivots, self.solver = factor, None, "cholesky"
        else:
            del factor
            self.factor, self.pivots = torch.linalg.lu_factor(a)
            self.solver = "lu"
        del a
        self.seconds["precompute"] = time.perf_counter() - started
        return self

    def forget(self, deleted_ids: Sequence[str]) -> torch.Tensor:
        """Weights after removing ``deleted_ids`` by Eq. 16 (w_hat itself for an empty request), in w_hat's
        dtype; timed in ``seconds["forget"]``."""
        started = time.perf_counter()
        rows = self._rows(deleted_ids)
        _, w, _, _ = self._state()
        assert self.factor is not None and self._data is not None
        if rows.numel() == 0:
            self.seconds["forget"] = time.perf_counter() - started
            return w.clone()
        g = self._gradient(rows)[:, None]
        if self.pivots is None:
            step = torch.cholesky_solve(g, self.factor)
        else:
            step = torch.linalg.lu_solve(self.factor, self.pivots, g)
        out = (w.to(torch.float64) + step.squeeze(1) / len(self._data)).to(w.dtype)
        self.seconds["forget"] = time.perf_counter() - started
        return out


__all__ = [
    "CLOSED_FORM_FAMILIES",
    "MAX_HESSIAN_DIM",
    "InfluenceJackknife",
    "NewtonStep",
    "gradient_sum",
    "hessian_sum",
]
