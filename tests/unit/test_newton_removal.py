"""The Newton-removal core: budget arithmetic, tight training, the Newton step against the exact minimiser
of the new perturbed objective, and the data-dependent bound against the true gradient residual."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from unlearning.errors import DimensionMismatchError, InvalidConfigError
from unlearning.newton import (
    GAMMA_LOGISTIC,
    DenseDesign,
    NewtonConfig,
    Objective,
    c0,
    conjugate_gradient,
    draw_noise,
    gradient_difference,
    newton_step,
    operator_norm_upper,
    residual_budget,
    signed_targets,
    train_perturbed,
)


def _problem(seed: int, m: int = 120, d: int = 12, classes: int = 3, lam: float = 1e-2, scale: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, d, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, classes, (m,), generator=gen)
    X = centers[labels] + torch.randn(m, d, generator=gen, dtype=torch.float64)
    X = scale * X / X.norm(dim=1, keepdim=True).max()
    targets = signed_targets(labels.numpy(), classes)
    objective = Objective(DenseDesign(X), targets, torch.ones(m, dtype=torch.float64), lam)
    return objective, targets


def _grad_with_noise(objective: Objective, W: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    return objective.gradient(W, objective.margins(W)) + noise


# ------------------------------------------------------------------------------------------- budget


def test_budget_matches_the_digest_numbers_and_round_trips_delta() -> None:
    assert c0(1e-4) == pytest.approx(4.38539, abs=1e-5)
    assert residual_budget(0.1, 1.0, 1e-4) == pytest.approx(0.022803, abs=1e-6)
    assert residual_budget(10.0, 1.0, 1e-4) == pytest.approx(2.280301, abs=1e-6)
    assert 1.5 * math.exp(-(c0(1e-5) ** 2) / 2) == pytest.approx(1e-5, rel=1e-12)


def test_budget_is_one_for_the_joint_model_whatever_the_number_of_classes() -> None:
    # The public code compares the summed per-class bounds with C * budget (about C * epsilon); here the
    # cap is alpha * epsilon / c0 for the whole model and a step's charge is the joint norm.
    from unlearning.data import make_synthetic
    from unlearning.methods.protocol import BudgetPolicy, ForgetRequest, PrivacyTarget
    from unlearning.methods.registry import get_method

    privacy = PrivacyTarget(1.0, 1e-4, "certified")
    method = get_method("newton_removal")
    for classes in (2, 7):
        data = make_synthetic(n=140, num_features=5, num_classes=classes, seed=classes)
        state, _ = method.fit(data, {"alpha": 1.0}, privacy, seed=0)
        assert state.model.columns == (1 if classes == 2 else classes)
        assert method.budget_cap(state, BudgetPolicy(), privacy) == pytest.approx(1.0 / c0(1e-4), rel=1e-12)
        cert = method.forget(
            state, ForgetRequest(sample_ids=(data.sample_ids[0],)), 1, privacy, remaining=data
        ).certificate
        parts = [
            b + r + s
            for b, r, s in zip(
                cert.inputs["per_class_bound"], cert.inputs["solver_residual"], cert.inputs["slack"]
            )
        ]
        assert len(parts) == state.model.columns
        assert cert.charge == pytest.approx(math.sqrt(sum(p * p for p in parts)), rel=1e-12)
        assert cert.budget_cap == pytest.approx(1.0 / c0(1e-4), rel=1e-12)


def test_bad_configs_are_rejected() -> None:
    with pytest.raises(InvalidConfigError, match="lam"):
        NewtonConfig(lam=0.0)
    with pytest.raises(InvalidConfigError, match="bound"):
        NewtonConfig(bound="loose")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="paper bound needs"):
        NewtonConfig(bound="paper", op_norm="none")
    with pytest.raises(InvalidConfigError, match="delta"):
        residual_budget(0.1, 1.0, 2.0)


def test_noise_is_reproducible_from_its_seed() -> None:
    assert torch.equal(draw_noise(5, 3, 0.1, 42), draw_noise(5, 3, 0.1, 42))
    assert not torch.equal(draw_noise(5, 3, 0.1, 42), draw_noise(5, 3, 0.1, 43))
    assert draw_noise(4000, 1, 0.1, 1).std().item() == pytest.approx(0.1, rel=0.05)


# ----------------------------------------------------------------------------------------- training


@pytest.mark.parametrize("solver", ["cg", "cholesky", "woodbury"])
def test_training_reaches_tight_optimality_and_reports_the_residual(solver: str) -> None:
    objective, _ = _problem(1)
    noise = draw_noise(objective.design.dim, objective.columns, 0.1, 7)
    result = train_perturbed(objective, noise, tol=1e-10, solver=solver)  # type: ignore[arg-type]
    true = float(_grad_with_noise(objective, result.weights, noise).norm())
    assert result.converged and result.residual_norm <= 1e-10
    assert true == pytest.approx(result.residual_norm, rel=1e-6, abs=1e-13)


def test_solvers_agree_and_cg_stops_at_its_tolerance() -> None:
    objective, _ = _problem(2, m=40, d=60)  # fewer rows than columns: Woodbury's case
    W = torch.zeros(objective.design.dim, objective.columns, dtype=torch.float64)
    S = objective.curvature(objective.margins(W))
    rhs = torch.randn(objective.design.dim, objective.columns, dtype=torch.float64)
    from unlearning.newton.solvers import solve_hessian

    exact, _ = solve_hessian(objective, S, rhs, "cholesky", 0.0, 0)
    for solver in ("cg", "woodbury"):
        got, _ = solve_hessian(objective, S, rhs, solver, 1e-12, 500)
        torch.testing.assert_close(got, exact, rtol=1e-9, atol=1e-11)
    approx, iters = conjugate_gradient(lambda V: objective.hvp(V, S), rhs, rtol=1e-3)
    residual = (objective.hvp(approx, S) - rhs).norm(dim=0) / rhs.norm(dim=0)
    assert iters >= 1 and bool((residual <= 1.01e-3).all())


@pytest.mark.parametrize(
    ("rows", "dim", "expected"),
    [
        (40, 400, "woodbury"),
        (100_000, 55, "cholesky"),
        (1_000, 128, "cholesky"),
        (1_000, 785, "cg"),
        (64, 129, "cg"),
    ],
)
def test_auto_solves_by_the_designs_shape(rows: int, dim: int, expected: str) -> None:
    """Few rows against the columns: Woodbury; at most CHOLESKY_MAX_DIM columns: the explicit Hessian
    (its cost is linear in the rows whatever lam, where CG's iterations grow as lam shrinks); else CG."""
    from unlearning.newton.solvers import auto_solver

    assert auto_solver(rows, dim) == expected


def test_auto_on_a_small_design_lands_at_rounding_where_cg_stops_at_its_tolerance() -> None:
    """The same removal step by ``auto`` (Cholesky, 12 columns) and by CG with a loose tolerance: the
    factorised solve's charged residual is at rounding, far below CG's."""
    objective, _ = _problem(3, m=200, d=12)
    W = train_perturbed(
        objective, torch.zeros(objective.design.dim, objective.columns, dtype=torch.float64)
    ).weights
    _, auto = _remove(objective, [0, 1], W, solver="auto")
    _, cg = _remove(objective, [0, 1], W, solver="cg", rtol=1e-6)
    assert max(auto.solver_residual) < 1e-12 < max(cg.solver_residual)
    torch.testing.assert_close(auto.weights, cg.weights, rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------------------------ removal


def _remove(objective: Objective, rows: list[int], W: torch.Tensor, **kw):
    weight = objective.weight.clone()
    weight[rows] = 0.0
    after = objective.with_weight(weight)
    idx = torch.as_tensor(rows)
    block = objective.design.take(idx)
    delta = gradient_difference(
        W,
        objective.targets[idx],
        block,
        torch.ones(len(rows), dtype=torch.float64),
        block,
        torch.zeros(len(rows), dtype=torch.float64),
        objective.lam,
        objective.count,
        after.count,
    )
    full = objective.gradient(W, objective.margins(W)) - after.gradient(W, after.margins(W))
    torch.testing.assert_close(delta, full, rtol=1e-10, atol=1e-12)  # local Delta = explicit difference
    op = operator_norm_upper(objective.design.materialize()[weight > 0])
    return after, newton_step(after, W, delta, op_norm=op, **kw)


@pytest.mark.parametrize("variant", ["tight", "paper"])
@pytest.mark.parametrize("solver", ["cg", "cholesky", "woodbury"])
def test_newton_step_lands_within_the_certified_bound_of_the_exact_new_minimiser(
    variant: str, solver: str
) -> None:
    for trial in range(6):
        objective, _ = _problem(10 + trial, classes=2 + trial % 3)
        noise = draw_noise(objective.design.dim, objective.columns, 0.1, trial)
        start = train_perturbed(objective, noise, tol=1e-11)
        rows = list(
            np.random.default_rng(trial).choice(objective.design.rows, size=1 + trial % 3, replace=False)
        )
        after, step = _remove(objective, rows, start.weights, variant=variant, solver=solver)
        true = float(_grad_with_noise(after, step.weights, noise).norm())
        total = start.residual_norm + step.charge
        assert true <= total, f"trial {trial}: true residual {true} above the bound {total}"
        exact = train_perturbed(after, noise, tol=1e-12, init=step.weights).weights
        distance = float((step.weights - exact).norm())
        assert distance <= total / (after.lam * after.count) + 1e-12
        assert distance < float((start.weights - exact).norm())  # the step moved towards the new minimiser


def test_data_dependent_bound_is_above_the_true_residual_in_every_trial_and_tight_is_tighter() -> None:
    ratios = []
    for trial in range(25):
        objective, _ = _problem(100 + trial, m=80, d=8, classes=2 + trial % 4, lam=3e-3)
        noise = draw_noise(objective.design.dim, objective.columns, 0.1, trial)
        start = train_perturbed(objective, noise, tol=1e-12)
        rows = [int(r) for r in np.random.default_rng(trial).choice(80, size=1 + trial % 4, replace=False)]
        _, tight = _remove(objective, rows, start.weights, variant="tight")
        after, paper = _remove(objective, rows, start.weights, variant="paper")
        # The exact change of the perturbed gradient made by this step (B cancels in the difference):
        # grad L_B(W + V; D') - grad L_B(W; D) = grad L(W + V; D') - grad L(W; D).
        W = start.weights
        increment = after.gradient(tight.weights, after.margins(tight.weights)) - objective.gradient(
            W, objective.margins(W)
        )
        true = float(increment.norm())
        assert true <= tight.charge and true <= paper.charge
        # ... and so the residual after the step is below the accumulated bound.
        assert (
            float(_grad_with_noise(after, tight.weights, noise).norm()) <= start.residual_norm + tight.charge
        )
        assert tight.charge <= paper.charge
        ratios.append(tight.charge / max(true, 1e-300))
    assert min(ratios) >= 1.0


def test_sequential_removals_keep_the_accumulated_bound_above_the_residual() -> None:
    objective, _ = _problem(7, m=150, d=10, classes=4, lam=5e-3)
    noise = draw_noise(objective.design.dim, objective.columns, 0.1, 3)
    start = train_perturbed(objective, noise, tol=1e-11)
    W, spent = start.weights, start.residual_norm
    for k in range(15):
        objective, step = _remove(objective, [k * 3, k * 3 + 1], W)
        W, spent = step.weights, spent + step.charge
        assert float(_grad_with_noise(objective, W, noise).norm()) <= spent


def test_the_tight_bound_uses_the_exact_lipschitz_constant_of_the_logistic_curvature() -> None:
    t = torch.linspace(-12, 12, 200_001, dtype=torch.float64)
    s = torch.sigmoid(t)
    assert float((s * (1 - s) * (1 - 2 * s)).abs().max()) == pytest.approx(GAMMA_LOGISTIC, rel=1e-8)


def test_operator_norm_bound_is_an_upper_bound_and_nearly_exact() -> None:
    X = torch.randn(50, 30, dtype=torch.float64)
    exact = float(torch.linalg.matrix_norm(X, ord=2))
    bound = operator_norm_upper(X)
    assert exact <= bound <= exact * (1 + 1e-9)
    assert operator_norm_upper(X.T) >= exact


def test_shape_errors_are_clear() -> None:
    objective, _ = _problem(0)
    with pytest.raises(DimensionMismatchError, match="noise"):
        train_perturbed(objective, torch.zeros(3, 1, dtype=torch.float64))
    with pytest.raises(DimensionMismatchError, match="Delta"):
        newton_step(
            objective,
            torch.zeros(objective.design.dim, 3, dtype=torch.float64),
            torch.zeros(2, 3, dtype=torch.float64),
            op_norm=1.0,
        )
    with pytest.raises(DimensionMismatchError):
        replace(objective, weight=torch.ones(3, dtype=torch.float64))


# ----------------------------------------------------------------------------- cheaper removal path


def test_dense_design_products_match_torch_matmul() -> None:
    objective, _ = _problem(11, m=50, d=9)
    Z = objective.design.materialize()
    V = torch.randn(9, 4, dtype=torch.float64)
    T = torch.randn(50, 4, dtype=torch.float64)
    assert torch.allclose(objective.design.mm(V), Z @ V, rtol=1e-13, atol=1e-13)
    assert torch.allclose(objective.design.tmm(T), Z.T @ T, rtol=1e-13, atol=1e-13)
    assert torch.allclose(objective.design.mm(V[:, 1:3]), Z @ V[:, 1:3], rtol=1e-13, atol=1e-13)  # strided


def test_first_cg_product_from_the_margins_pass_changes_nothing() -> None:
    from unlearning.newton.solvers import tracked_cg

    objective, _ = _problem(12)
    W = torch.randn(objective.design.dim, objective.columns, dtype=torch.float64) * 0.3
    delta = torch.randn_like(W) * 0.1
    S = objective.curvature(objective.margins(W))
    plain = tracked_cg(objective, S, delta, 1e-10, 100)
    fused = tracked_cg(objective, S, delta, 1e-10, 100, first_product=objective.design.mm(delta))
    for a, b in zip(plain[:4], fused[:4]):
        assert torch.equal(a, b)
    assert plain[4] == fused[4]
    # newton_step computes Z [W, Delta] in one product: the same step as a solve from scratch.
    step = newton_step(objective, W, delta, op_norm=None, solver="cg", rtol=1e-12)
    exact = newton_step(objective, W, delta, op_norm=None, solver="cholesky")
    assert torch.allclose(step.weights, exact.weights, rtol=0, atol=1e-11)
    assert max(step.solver_residual) <= 1e-10


def test_dropping_rows_of_weight_zero_leaves_the_step_and_its_charge_unchanged() -> None:
    # graph_node_newton drops a node's row when the node leaves the training set; a row of weight 0 adds
    # nothing to the loss, its gradient or its Hessian, so the step and every summary of its charge agree.
    objective, targets = _problem(13, m=90, d=10)
    W = torch.randn(10, objective.columns, dtype=torch.float64) * 0.5
    delta = torch.randn_like(W) * 0.05
    weight = torch.ones(90, dtype=torch.float64)
    weight[[3, 17, 40, 41, 88]] = 0.0
    masked = objective.with_weight(weight)
    keep = torch.nonzero(weight > 0).squeeze(1)
    compact = Objective(
        DenseDesign(objective.design.materialize()[keep]), targets[keep], weight[keep], objective.lam
    )
    for solver in ("cg", "cholesky"):
        a = newton_step(masked, W, delta, op_norm=3.0, solver=solver, rtol=1e-12)
        b = newton_step(compact, W, delta, op_norm=3.0, solver=solver, rtol=1e-12)
        assert torch.allclose(a.weights, b.weights, rtol=0, atol=1e-12)
        assert a.bound == pytest.approx(b.bound, rel=1e-9)
        # Fewer rows: a smaller floating-point allowance, the same bound.
        assert b.charge <= a.charge and b.charge == pytest.approx(a.charge, rel=1e-6)
