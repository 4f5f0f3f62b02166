"""The NS and IJ baselines (paper Eq. 15 and 16) and the Hessian sums they are built on."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bench.baselines.newton_jackknife import (
    InfluenceJackknife,
    NewtonStep,
    _solve_spd,
    gradient_sum,
    hessian_sum,
)
from unlearning.data import Dataset
from unlearning.errors import (
    DimensionMismatchError,
    InvalidConfigError,
    InvalidDatasetError,
    UnknownSampleError,
    UnlearningError,
)
from unlearning.forward_mode import hessian
from unlearning.models import FlatModel, ModelSpec, build_model

F64 = torch.float64


def _dataset(n: int, features: int = 3, classes: int = 3, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    centers = 1.5 * rng.normal(size=(classes, features))
    y = rng.integers(0, classes, n)
    x = centers[y] + rng.normal(size=(n, features))
    return Dataset(
        sample_ids=tuple(f"s{i}" for i in range(n)),
        owner_ids=tuple(f"o{i}" for i in range(n)),
        features=x,
        labels=y,
        num_classes=classes,
    )


def _tensors(data: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.as_tensor(data.features).to(F64), torch.as_tensor(data.labels)


def _lr(data: Dataset) -> FlatModel:
    return build_model(ModelSpec("logistic_regression", data.feature_shape, data.num_classes))


def _summed_loss(
    model: FlatModel, x: torch.Tensor, y: torch.Tensor, l2: float
) -> Callable[[torch.Tensor], torch.Tensor]:
    def f(w: torch.Tensor) -> torch.Tensor:
        ce = F.cross_entropy(model.logits(w, x), y, reduction="sum")
        return ce + 0.5 * l2 * x.shape[0] * (w * w).sum()

    return f


def _minimise(model: FlatModel, data: Dataset, l2: float, keep: np.ndarray | None = None) -> torch.Tensor:
    """The exact minimiser of sum_i l(w; z_i) over the kept rows for logistic regression, by damped Newton.

    Written with plain tensor algebra (theta = w.view(C, D+1), logits = [x, 1] theta^T) and autograd
    derivatives, independently of the code under test.
    """
    x, y = _tensors(data)
    if keep is not None:
        x, y = x[keep], y[keep]
    xt = torch.cat([x, torch.ones(x.shape[0], 1, dtype=F64)], dim=1)
    classes = model.spec.num_classes

    def f(w: torch.Tensor) -> torch.Tensor:
        ce = F.cross_entropy(xt @ w.view(classes, -1).T, y, reduction="sum")
        return ce + 0.5 * l2 * x.shape[0] * (w * w).sum()

    w = torch.zeros(model.dim, dtype=F64)
    for _ in range(30):
        g = torch.func.grad(f)(w)
        if g.norm() < 1e-10 * x.shape[0]:
            break
        step = torch.linalg.solve(hessian(f)(w), g)
        t, f_w = 1.0, f(w)
        while f(w - t * step) > f_w and t > 1e-3:
            t *= 0.5
        w = w - t * step
    assert torch.func.grad(f)(w).norm() < 1e-8 * x.shape[0]
    return w


@pytest.mark.parametrize("l2", [0.0, 0.3])
def test_closed_form_hessian_sum_equals_autograd_hessian(l2: float) -> None:
    data = _dataset(11, features=4, classes=3, seed=1)
    model = _lr(data)
    x, y = _tensors(data)
    w = torch.randn(model.dim, dtype=F64, generator=torch.Generator().manual_seed(2))
    expected = hessian(_summed_loss(model, x, y, l2))(w)
    torch.testing.assert_close(hessian_sum(model, w, x, y, l2), expected)
    torch.testing.assert_close(hessian_sum(model, w, x, y, l2, closed_form=False, column_chunk=5), expected)


def test_autograd_hessian_sum_for_an_mlp() -> None:
    data = _dataset(9, features=3, classes=3, seed=4)
    model = build_model(ModelSpec("mlp", (3,), 3, {"hidden": [4]}))
    x, y = _tensors(data)
    w = model.initial_weights(0, F64)
    expected = hessian(_summed_loss(model, x, y, 0.1))(w)
    got = hessian_sum(model, w, x, y, 0.1, sample_chunk=4, column_chunk=7)
    torch.testing.assert_close(got, expected)


def test_gradient_sum_closed_form_equals_autograd() -> None:
    data = _dataset(8, seed=5)
    model = _lr(data)
    x, y = _tensors(data)
    w = torch.randn(model.dim, dtype=F64, generator=torch.Generator().manual_seed(3))
    expected = torch.func.grad(_summed_loss(model, x, y, 0.2))(w)
    torch.testing.assert_close(gradient_sum(model, w, x, y, 0.2), expected)
    torch.testing.assert_close(gradient_sum(model, w, x, y, 0.2, closed_form=False), expected)
    assert torch.equal(gradient_sum(model, w, x[:0], y[:0], 0.2), torch.zeros_like(w))


@pytest.mark.parametrize("hessian_l2", [True, False])
def test_ns_and_ij_match_equations_15_and_16(hessian_l2: bool) -> None:
    data = _dataset(30, seed=6)
    model = _lr(data)
    x, y = _tensors(data)
    l2, damping = 0.2, 0.01
    w = torch.randn(model.dim, dtype=F64, generator=torch.Generator().manual_seed(7))
    ids = ["s3", "s17", "s21"]
    rows = data.indices_of(ids)
    n, m = len(data), len(ids)
    h_l2 = l2 if hessian_l2 else 0.0
    h_s = hessian(_summed_loss(model, x, y, h_l2))(w)
    h_u = hessian(_summed_loss(model, x[rows], y[rows], h_l2))(w)
    g_u = torch.func.grad(_summed_loss(model, x[rows], y[rows], l2))(w)
    eye = torch.eye(model.dim, dtype=F64)
    ns_expected = w + torch.linalg.solve((h_s - h_u) / (n - m) + damping * eye, g_u) / (n - m)
    ij_expected = w + torch.linalg.solve(h_s / n + damping * eye, g_u) / n

    ns = NewtonStep(l2, damping=damping, hessian_l2=hessian_l2).precompute(model, data, w)
    ij = InfluenceJackknife(l2, damping=damping, hessian_l2=hessian_l2).precompute(model, data, w)
    torch.testing.assert_close(ns.forget(ids), ns_expected)
    torch.testing.assert_close(ij.forget(ids), ij_expected)
    assert ns.solver == "cholesky" and ij.solver == "cholesky"
    assert set(ns.seconds) == {"precompute", "forget"} and set(ij.seconds) == {"precompute", "forget"}


def test_empty_request_returns_the_trained_weights() -> None:
    data = _dataset(20, seed=8)
    model = _lr(data)
    w = torch.randn(model.dim, generator=torch.Generator().manual_seed(0))  # float32 in, float32 out
    for baseline in (NewtonStep(0.5), InfluenceJackknife(0.5)):
        out = baseline.precompute(model, data, w).forget([])
        assert out.dtype == torch.float32
        assert torch.equal(out, w)


def test_newton_step_approaches_the_exact_minimiser_of_the_remaining_objective() -> None:
    data = _dataset(60, seed=9)
    model = _lr(data)
    l2 = 0.5
    w_hat = _minimise(model, data, l2)
    forgotten = ["s0", "s7", "s13", "s29", "s41"]
    keep = np.setdiff1d(np.arange(len(data)), data.indices_of(forgotten))
    w_star = _minimise(model, data, l2, keep)
    baseline_err = float((w_hat - w_star).norm())
    exact = NewtonStep(l2, damping=0.0).precompute(model, data, w_hat).forget(forgotten)
    damped = NewtonStep(l2).precompute(model, data, w_hat).forget(forgotten)
    assert float((exact - w_star).norm()) < 0.05 * baseline_err  # a Newton step: second-order error
    assert float((damped - w_star).norm()) < 0.2 * baseline_err


def test_ij_equals_ns_to_first_order_for_a_small_deletion() -> None:
    data = _dataset(200, seed=10)
    model = _lr(data)
    l2 = 0.5
    w_hat = _minimise(model, data, l2)
    ns = NewtonStep(l2, damping=0.0).precompute(model, data, w_hat)
    ij = InfluenceJackknife(l2, damping=0.0).precompute(model, data, w_hat)
    for ids in (["s5"], ["s5", "s77"]):
        d_ns, d_ij = ns.forget(ids) - w_hat, ij.forget(ids) - w_hat
        cos = float(d_ns @ d_ij / (d_ns.norm() * d_ij.norm()))
        assert cos > 0.99
        assert float((d_ns - d_ij).norm()) < 0.05 * float(d_ns.norm())  # differ at O(m/n)


def test_solver_falls_back_to_lu_when_not_positive_definite() -> None:
    a = torch.diag(torch.tensor([2.0, -1.0], dtype=F64))
    b = torch.tensor([1.0, 1.0], dtype=F64)
    x, solver = _solve_spd(a, b)
    assert solver == "lu"
    torch.testing.assert_close(x, torch.tensor([0.5, -1.0], dtype=F64))
    x, solver = _solve_spd(torch.eye(2, dtype=F64) * 4, b)
    assert solver == "cholesky"
    torch.testing.assert_close(x, b / 4)


def test_baselines_run_through_autograd_on_an_mlp() -> None:
    """A nonconvex model: the Hessian may be indefinite, so the solver may fall back to LU."""
    data = _dataset(10, seed=11)
    mlp = build_model(ModelSpec("mlp", (3,), 3, {"hidden": [3]}))
    w = mlp.initial_weights(1, F64)
    ij = InfluenceJackknife(0.0, damping=0.0).precompute(mlp, data, w)
    ns = NewtonStep(0.0, damping=0.0).precompute(mlp, data, w)
    assert torch.isfinite(ij.forget(["s1", "s2"])).all() and torch.isfinite(ns.forget(["s1"])).all()
    assert ij.solver in ("cholesky", "lu") and ns.solver in ("cholesky", "lu")


def test_bad_requests_raise_clear_errors() -> None:
    data = _dataset(10, seed=12)
    model = _lr(data)
    w = torch.zeros(model.dim, dtype=F64)
    ns = NewtonStep(0.5)
    with pytest.raises(RuntimeError, match="precompute"):
        ns.forget(["s1"])
    ns.precompute(model, data, w)
    with pytest.raises(UnknownSampleError, match="nope"):
        ns.forget(["s1", "nope"])
    with pytest.raises(UnlearningError, match="more than once"):
        ns.forget(["s1", "s1"])
    with pytest.raises(InvalidDatasetError):
        ns.forget(list(data.sample_ids))
    ij = InfluenceJackknife(0.5).precompute(model, data, w)
    with pytest.raises(UnknownSampleError):
        ij.forget(["missing"])


def test_dimension_and_config_errors() -> None:
    data = _dataset(10, seed=13)
    model = _lr(data)
    with pytest.raises(DimensionMismatchError):
        NewtonStep(0.5).precompute(model, data, torch.zeros(model.dim + 1, dtype=F64))
    wrong = build_model(ModelSpec("logistic_regression", (5,), 3))
    with pytest.raises(DimensionMismatchError):
        InfluenceJackknife(0.5).precompute(wrong, data, torch.zeros(wrong.dim, dtype=F64))
    with pytest.raises(InvalidConfigError, match="d <= 5"):
        NewtonStep(0.5, max_dim=5).precompute(model, data, torch.zeros(model.dim, dtype=F64))
    x, y = _tensors(data)
    with pytest.raises(InvalidConfigError):
        hessian_sum(model, torch.zeros(model.dim, dtype=F64), x, y, 0.5, max_dim=3)
    with pytest.raises(InvalidConfigError):
        NewtonStep(0.5, damping=-1.0)
    with pytest.raises(InvalidConfigError):
        InfluenceJackknife(-0.1)
