"""The closed-form softmax step map equals torch.func autograd on the same map, in every clip mode."""

from __future__ import annotations

import pytest
import torch
from torch.func import jacrev

from unlearning.models import ModelSpec, build_model
from unlearning.steps import AutogradStepMap, BatchObjective, SGDConfig, SoftmaxStepMap, sgd_direction


def _problem(clip_norm: float, clip_mode: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    model = build_model(ModelSpec("logistic_regression", (6,), 4))
    model.to("cpu", torch.float64)
    w = torch.randn(model.dim, generator=gen, dtype=torch.float64)
    x = torch.randn(9, 6, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 4, (9,), generator=gen)
    cfg = SGDConfig(l2=0.3, clip_norm=clip_norm, clip_mode=clip_mode)  # type: ignore[arg-type]
    return model, w, x, y, cfg


# clip norms chosen so that the clip is inactive (100), active on the batch / some samples (0.5, 2.0)
CASES = [("none", 1.0), ("batch", 100.0), ("batch", 0.5), ("per_sample", 100.0), ("per_sample", 2.0)]


@pytest.mark.parametrize("clip_mode,clip_norm", CASES)
def test_closed_form_matches_autograd(clip_mode: str, clip_norm: float) -> None:
    model, w, x, y, cfg = _problem(clip_norm, clip_mode)
    closed = SoftmaxStepMap(w, x, y, 4, cfg)
    auto = AutogradStepMap(model, w, x, y, cfg)
    v = torch.randn(5, model.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(closed.direction, auto.direction)
    torch.testing.assert_close(closed.grad_norms, auto.grad_norms)
    torch.testing.assert_close(closed.jvp(v), auto.jvp(v))
    torch.testing.assert_close(closed.vjp(v), auto.vjp(v))
    torch.testing.assert_close(closed.injections(), auto.injections())
    assert closed.clip_active == auto.clip_active


@pytest.mark.parametrize("clip_mode,clip_norm", CASES)
def test_jvp_is_the_jacobian_of_the_training_map(clip_mode: str, clip_norm: float) -> None:
    model, w, x, y, cfg = _problem(clip_norm, clip_mode, seed=3)
    jac = jacrev(BatchObjective(model, x, y, cfg, float(x.shape[0])).direction)(w)
    closed = SoftmaxStepMap(w, x, y, 4, cfg)
    eye = torch.eye(model.dim, dtype=torch.float64)
    torch.testing.assert_close(closed.jvp(eye), jac.T)
    torch.testing.assert_close(closed.vjp(eye), jac)


@pytest.mark.parametrize("clip_mode,clip_norm", CASES)
def test_injection_is_the_derivative_in_the_sample_weight(clip_mode: str, clip_norm: float) -> None:
    """Row i of injections() is N * dD/ds_i: compare with a finite difference of dropping weight."""
    model, w, x, y, cfg = _problem(clip_norm, clip_mode, seed=5)
    n = x.shape[0]
    closed = SoftmaxStepMap(w, x, y, 4, cfg)
    inj = closed.injections()
    h = 1e-6
    gs = BatchObjective(model, x, y, cfg, float(n)).per_sample_grads(w)

    def d_of(s: torch.Tensor) -> torch.Tensor:
        """D as a function of the sample weights s (1 = in the batch, 0 = dropped)."""
        if cfg.clip_mode == "per_sample":
            c = torch.clamp(cfg.clip / gs.norm(dim=1), max=1.0)
            return (s[:, None] * c[:, None] * gs).sum(0) / n
        g = (s[:, None] * gs).sum(0) / n
        if cfg.clip_mode == "batch":
            return torch.clamp(cfg.clip / g.norm(), max=1.0) * g
        return g

    for i in (0, 4):
        s1 = torch.ones(n, dtype=torch.float64)
        s0 = s1.clone()
        s0[i] -= h
        fd = (d_of(s1) - d_of(s0)) / h * n
        torch.testing.assert_close(inj[i], fd, atol=1e-5, rtol=1e-4)


def test_sgd_direction_matches_step_map_and_handles_empty_batch() -> None:
    model, w, x, y, cfg = _problem(0.5, "batch")
    torch.testing.assert_close(
        sgd_direction(model, w, x, y, cfg, 9), SoftmaxStepMap(w, x, y, 4, cfg).direction
    )
    assert torch.count_nonzero(sgd_direction(model, w, x[:0], y[:0], cfg, 9)) == 0


def test_autograd_step_map_runs_on_a_cnn() -> None:
    model = build_model(ModelSpec("cnn", (1, 28, 28), 10)).to("cpu", torch.float64)
    w = model.initial_weights(0, torch.float64)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 1, 28, 28, generator=gen, dtype=torch.float64)
    y = torch.tensor([0, 1, 2])
    cfg = SGDConfig(l2=1e-3, clip_norm=10.0, clip_mode="batch")
    step = AutogradStepMap(model, w, x, y, cfg)
    v = torch.randn(2, model.dim, generator=gen, dtype=torch.float64)
    jv = step.jvp(v)
    # symmetric when the clip is inactive: <u, J v> == <J u, v>
    assert not step.clip_active
    torch.testing.assert_close((v[0] * jv[1]).sum(), (jv[0] * v[1]).sum())
    torch.testing.assert_close(step.vjp(v), jv)


@pytest.mark.parametrize("clip_mode,clip_norm", CASES)
def test_propagate_in_place_equals_identity_minus_eta_jvp(clip_mode: str, clip_norm: float) -> None:
    model, w, x, y, cfg = _problem(clip_norm, clip_mode, seed=7)
    v = torch.randn(7, model.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    for step in (SoftmaxStepMap(w, x, y, 4, cfg), AutogradStepMap(model, w, x, y, cfg, chunk_size=3)):
        expected = v - 0.1 * step.jvp(v)
        got = v.clone()
        if isinstance(step, SoftmaxStepMap):
            step.propagate_(got, 0.1, chunk_rows=3)
        else:
            step.propagate_(got, 0.1)
        torch.testing.assert_close(got, expected)
