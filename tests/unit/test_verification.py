"""Verification metrics of digest 002, 5.4: distance, accuracy, per-sample losses, loss-change correlation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from unlearning.audit.membership import loss_attack
from unlearning.audit.verification import (
    accuracy,
    distance,
    loss_change_correlation,
    per_sample_losses,
    report,
)
from unlearning.data import Dataset
from unlearning.errors import DimensionMismatchError, EmptyRequestError, UnknownSampleError
from unlearning.models import FlatModel, ModelSpec, build_model

F64 = torch.float64


def _separable(n: int = 40, seed: int = 0) -> Dataset:
    """Two features; the label is 1 exactly when the first feature is positive (margin >= 0.5)."""
    rng = np.random.default_rng(seed)
    x0 = rng.uniform(0.5, 2.0, n) * rng.choice([-1.0, 1.0], n)
    x = np.stack([x0, rng.normal(size=n)], axis=1)
    return Dataset(
        sample_ids=tuple(f"s{i}" for i in range(n)),
        owner_ids=tuple(f"o{i}" for i in range(n)),
        features=x,
        labels=(x0 > 0).astype(np.int64),
        num_classes=2,
        name="toy",
    )


def _model() -> FlatModel:
    return build_model(ModelSpec("logistic_regression", (2,), 2))


# theta rows are (w_x0, w_x1, bias) for class 0 and class 1: logit_1 - logit_0 = 10 * x0
W_PERFECT = torch.tensor([-5.0, 0.0, 0.0, 5.0, 0.0, 0.0], dtype=F64)


def test_distance() -> None:
    a = torch.tensor([1.0, 2.0, 2.0])
    assert distance(a, torch.zeros(3, dtype=F64)) == pytest.approx(3.0)
    assert distance(a, a) == 0.0
    with pytest.raises(DimensionMismatchError):
        distance(a, torch.zeros(4))


def test_accuracy_on_a_separable_set_and_on_subsets() -> None:
    data, model = _separable(), _model()
    assert accuracy(model, W_PERFECT, data) == 1.0
    assert accuracy(model, W_PERFECT.float(), data, batch_size=7) == 1.0
    assert accuracy(model, -W_PERFECT, data) == 0.0
    assert accuracy(model, -W_PERFECT, data, ids=["s1", "s2"]) == 0.0
    with pytest.raises(UnknownSampleError, match="nope"):
        accuracy(model, W_PERFECT, data, ids=["s1", "nope"])
    with pytest.raises(EmptyRequestError):
        accuracy(model, W_PERFECT, data, ids=[])
    with pytest.raises(DimensionMismatchError):
        accuracy(model, torch.zeros(5, dtype=F64), data)
    with pytest.raises(DimensionMismatchError):
        accuracy(build_model(ModelSpec("logistic_regression", (3,), 2)), torch.zeros(8, dtype=F64), data)


def test_per_sample_losses_are_cross_entropy_plus_optional_regulariser() -> None:
    data, model = _separable(), _model()
    w = torch.randn(6, dtype=F64, generator=torch.Generator().manual_seed(0))
    ids = ["s5", "s0", "s9"]
    rows = data.indices_of(ids)
    x = torch.as_tensor(data.features[rows]).to(F64)
    expected = F.cross_entropy(model.logits(w, x), torch.as_tensor(data.labels[rows]), reduction="none")
    got = per_sample_losses(model, w, data, ids)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-12)
    with_reg = per_sample_losses(model, w, data, ids, l2=0.5)
    np.testing.assert_allclose(with_reg - got, 0.25 * float((w * w).sum()), rtol=1e-12)
    assert per_sample_losses(model, w, data).shape == (len(data),)


def test_correlation_is_perfect_when_unlearned_equals_retrained() -> None:
    data, model = _separable(), _model()
    gen = torch.Generator().manual_seed(1)
    w_orig = torch.randn(6, dtype=F64, generator=gen)
    w_ret = w_orig + 0.3 * torch.randn(6, dtype=F64, generator=gen)
    ids = [f"s{i}" for i in range(0, 40, 3)]
    corr = loss_change_correlation(model, w_orig, w_ret.clone(), w_ret, data, ids)
    assert corr["pearson"] == pytest.approx(1.0)
    assert corr["spearman"] == pytest.approx(1.0)
    # the regulariser shifts each change by a constant: the correlations do not move
    w_unl = w_orig + 0.3 * torch.randn(6, dtype=F64, generator=gen)
    plain = loss_change_correlation(model, w_orig, w_unl, w_ret, data, ids)
    reg = loss_change_correlation(model, w_orig, w_unl, w_ret, data, ids, l2=0.7)
    assert reg["pearson"] == pytest.approx(plain["pearson"])
    assert reg["spearman"] == pytest.approx(plain["spearman"])
    assert -1.0 <= plain["pearson"] <= 1.0


def test_correlation_is_nan_when_undefined() -> None:
    data, model = _separable(), _model()
    w = W_PERFECT
    # unlearned == original: the approximate change is constant (zero)
    corr = loss_change_correlation(model, w, w, 1.1 * w, data, ["s1", "s2", "s3"])
    assert math.isnan(corr["pearson"]) and math.isnan(corr["spearman"])
    corr = loss_change_correlation(model, w, 0.9 * w, 1.1 * w, data, ["s1"])
    assert math.isnan(corr["pearson"])
    with pytest.raises(DimensionMismatchError):
        loss_change_correlation(model, w, w[:5], w, data, ["s1", "s2"])
    with pytest.raises(UnknownSampleError):
        loss_change_correlation(model, w, 0.9 * w, 1.1 * w, data, ["s1", "zz"])


def test_report() -> None:
    train, model = _separable(40, seed=2), _model()
    test = _separable(20, seed=3)
    w_orig = W_PERFECT
    w_ret = W_PERFECT + torch.tensor([0.0, 0.1, 0.0, 0.0, -0.1, 0.2], dtype=F64)
    w_unl = 0.5 * (w_orig + w_ret)
    forgotten = ["s0", "s4", "s8", "s12"]
    out = report(model, w_orig, w_unl, w_ret, train, test, forgotten)
    assert out["distance_unlearned_retrained"] == pytest.approx(distance(w_unl, w_ret))
    assert out["distance_original_retrained"] == pytest.approx(distance(w_orig, w_ret))
    assert out["distance_ratio"] == pytest.approx(0.5)
    assert out["num_forgotten"] == 4 and out["num_retained"] == 36
    for name in ("original", "unlearned", "retrained"):
        for kind in ("test", "retained", "forgotten"):
            assert 0.0 <= out[f"{kind}_accuracy_{name}"] <= 1.0
    assert out["test_accuracy_original"] == 1.0 and out["forgotten_accuracy_original"] == 1.0
    assert {"pearson", "spearman"} <= set(out)
    for name, w in (("original", w_orig), ("unlearned", w_unl), ("retrained", w_ret)):
        attack = loss_attack(per_sample_losses(model, w, train, forgotten), per_sample_losses(model, w, test))
        assert out[f"mia_auc_{name}"] == pytest.approx(attack.auc)
        assert out[f"mia_advantage_{name}"] == pytest.approx(attack.advantage)
    with pytest.raises(EmptyRequestError):
        report(model, w_orig, w_unl, w_ret, train, test, [])
    with pytest.raises(UnknownSampleError):
        report(model, w_orig, w_unl, w_ret, train, test, ["nope"])
