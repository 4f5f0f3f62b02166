"""The Hessian-free method on tiny data: additivity, closeness to the exact replay-retrain,
certificates that recompute, and clear errors on bad input."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from unlearning.data import Dataset, make_synthetic
from unlearning.errors import (
    AlreadyDeletedError,
    DimensionMismatchError,
    EmptyRequestError,
    InvalidDatasetError,
    UnknownSampleError,
    UnsupportedRequestError,
)
from unlearning.methods.protocol import BudgetPolicy, ForgetRequest, PrivacyTarget
from unlearning.methods.registry import get_method
from unlearning.models import ModelSpec, build_model
from unlearning.steps import SGDConfig
from unlearning.training import replay_retrain, train_recorded

AUDITED = PrivacyTarget(epsilon=1.0, delta=1e-3, release_mode="audited")
CERTIFIED = PrivacyTarget(epsilon=1.0, delta=1e-3, release_mode="certified")
TINY = {"epochs": 3, "batch_size": 8, "lr": 0.05, "lr_decay": 0.99, "l2": 0.5, "clip_norm": 5.0}
EQ56 = {**TINY, "certified_bound": "eq56"}  # the paper's bound, kept as an option (the default is the residual)


@pytest.fixture(scope="module")
def data() -> Dataset:
    return make_synthetic(n=120, num_features=5, num_classes=3, seed=0, samples_per_owner=4)


@pytest.fixture()
def fitted(data: Dataset):
    method = get_method("hessian_free")
    state, cert = method.fit(data, TINY, AUDITED, seed=1)
    return method, state, cert


def _convex_problem(clip_mode: str = "batch"):
    data = make_synthetic(n=200, num_features=6, num_classes=3, seed=3)
    model = build_model(ModelSpec("logistic_regression", (6,), 3))
    cfg = SGDConfig(
        epochs=10, batch_size=10, lr=0.02, lr_decay=0.999, l2=0.5, clip_norm=5.0,
        clip_mode=clip_mode,  # type: ignore[arg-type]
    )
    return data, model, cfg


def test_additivity_sum_of_sample_vectors_equals_the_set_vector_computed_directly() -> None:
    data, model, cfg = _convex_problem()
    rec = train_recorded(model, data, cfg, seed=4, dtype=torch.float64)
    chosen = np.random.default_rng(0).permutation(len(data))[:30]
    groups = np.ones(len(data), dtype=np.int64)
    groups[chosen] = 0  # group 0 = the deletion set U, group 1 = everyone else
    grouped = train_recorded(model, data, cfg, seed=4, dtype=torch.float64, groups=groups)
    assert rec.vectors is not None and grouped.vectors is not None
    torch.testing.assert_close(
        grouped.vectors[0], rec.vectors[torch.as_tensor(chosen)].sum(0), rtol=1e-12, atol=1e-14
    )
    torch.testing.assert_close(grouped.weights, rec.weights, rtol=0, atol=0)


@pytest.mark.parametrize("clip_mode", ["none", "batch", "per_sample"])
@pytest.mark.parametrize("fraction", [0.01, 0.05, 0.1, 0.2, 0.3])
def test_unlearned_model_is_closer_to_the_replay_retrain_than_the_original(
    fraction: float, clip_mode: str
) -> None:
    data, model, cfg = _convex_problem(clip_mode)
    rec = train_recorded(model, data, cfg, seed=5, dtype=torch.float64)
    assert rec.vectors is not None
    m = max(1, int(fraction * len(data)))
    rows = np.random.default_rng(int(fraction * 100)).permutation(len(data))[:m]
    ids = [data.sample_ids[i] for i in rows]
    retrained = replay_retrain(model, data, rec, ids)
    unlearned = rec.weights + rec.vectors[torch.as_tensor(rows)].sum(0)
    err_unlearned = float((unlearned - retrained).norm())
    err_original = float((rec.weights - retrained).norm())
    assert err_unlearned < 0.5 * err_original, (err_unlearned, err_original)


def test_replay_retrain_without_deletions_reproduces_training_exactly() -> None:
    data, model, cfg = _convex_problem()
    rec = train_recorded(model, data, cfg, seed=6, with_vectors=False, dtype=torch.float64)
    torch.testing.assert_close(replay_retrain(model, data, rec, []), rec.weights, rtol=1e-12, atol=1e-12)


def test_training_is_deterministic_for_a_seed(data: Dataset) -> None:
    model = build_model(ModelSpec("logistic_regression", (5,), 3))
    cfg = SGDConfig(epochs=2, batch_size=8)
    a = train_recorded(model, data, cfg, seed=9)
    b = train_recorded(model, data, cfg, seed=9)
    c = train_recorded(model, data, cfg, seed=10)
    assert torch.equal(a.weights, b.weights) and a.vectors is not None and b.vectors is not None
    assert torch.equal(a.vectors, b.vectors)
    assert not torch.equal(a.weights, c.weights)


def test_forget_adds_the_vectors_and_forgetting_an_owner_equals_forgetting_its_samples(data: Dataset) -> None:
    method = get_method("hessian_free")
    state_a, _ = method.fit(data, TINY, AUDITED, seed=1)
    state_b, _ = method.fit(data, TINY, AUDITED, seed=1)
    owner = data.owner_ids[0]
    samples = data.samples_of_owners([owner])
    assert state_a.statistics is not None
    expected = state_a.clean_weights + state_a.statistics.sum_samples(list(samples))
    out_owner = method.forget(state_a, ForgetRequest(owner_ids=(owner,)), noise_seed=0, privacy=AUDITED)
    out_samples = method.forget(state_b, ForgetRequest(sample_ids=samples), noise_seed=0, privacy=AUDITED)
    torch.testing.assert_close(out_owner.state.clean_weights, expected)
    torch.testing.assert_close(out_owner.state.clean_weights, out_samples.state.clean_weights)
    assert set(out_owner.forgotten_ids) == set(samples)
    assert out_owner.certificate.guarantee == "empirical" and out_owner.certificate.sigma == 0.0
    assert torch.equal(out_owner.state.released_weights, out_owner.state.clean_weights)


def test_owner_sum_excludes_samples_forgotten_earlier(fitted) -> None:
    method, state, _ = fitted
    owner = state.statistics.owner_of("syn-00000")
    rest = [s for s in state.statistics.remaining_of_owner(owner) if s != "syn-00000"]
    expected = state.statistics.sum_samples(rest)
    state = method.forget(state, ForgetRequest(sample_ids=("syn-00000",)), 0, AUDITED).state
    torch.testing.assert_close(state.statistics.sum_owner(owner), expected)
    out = method.forget(state, ForgetRequest(owner_ids=(owner,)), 0, AUDITED)
    assert set(out.forgotten_ids) == set(rest)


def test_eq56_certified_release_adds_calibrated_seeded_noise_and_its_certificate_recomputes(data: Dataset) -> None:
    method = get_method("hessian_free")
    state, cert0 = method.fit(data, EQ56, CERTIFIED, seed=2)
    assert method.verify_certificate(cert0) == []
    out = method.forget(
        state, ForgetRequest(sample_ids=data.sample_ids[:3]), noise_seed=11, privacy=CERTIFIED
    )
    cert = out.certificate
    assert (
        cert.guarantee == "certified" and cert.calibration == "classical" and cert.cumulative_deletions == 3
    )
    assert cert.bound == pytest.approx(3 * cert.inputs["per_sample_bound"])
    assert cert.sigma == pytest.approx(cert.bound * np.sqrt(2 * np.log(1.25 / 1e-3)) / 1.0)
    assert method.verify_certificate(cert) == []
    noise = out.state.released_weights - out.state.clean_weights
    gen = torch.Generator().manual_seed(11)
    torch.testing.assert_close(noise, cert.sigma * torch.randn(noise.shape, generator=gen, dtype=noise.dtype))
    # the certificate survives a JSON round trip and still recomputes
    from unlearning.privacy.certificate import Certificate

    assert method.verify_certificate(Certificate.from_dict(cert.to_dict())) == []


def test_tampered_eq56_certificate_is_detected(data: Dataset) -> None:
    method = get_method("hessian_free")
    state, _ = method.fit(data, EQ56, CERTIFIED, seed=2)
    cert = method.forget(state, ForgetRequest(sample_ids=data.sample_ids[:2]), 1, CERTIFIED).certificate
    assert method.verify_certificate(replace(cert, sigma=cert.sigma / 10))
    assert method.verify_certificate(replace(cert, inputs={**cert.inputs, "rho": cert.inputs["rho"] * 0.5}))
    assert method.verify_certificate(replace(cert, cumulative_deletions=1))


def test_analytic_calibration_above_epsilon_one(data: Dataset) -> None:
    method = get_method("hessian_free")
    privacy = PrivacyTarget(epsilon=100.0, delta=0.1, release_mode="certified")
    state, _ = method.fit(data, EQ56, privacy, seed=2)
    cert = method.forget(state, ForgetRequest(sample_ids=data.sample_ids[:1]), 1, privacy).certificate
    assert cert.calibration == "analytic" and method.verify_certificate(cert) == []


def test_budget_policy_triggers_retrain(fitted) -> None:
    method, state, _ = fitted
    policy = BudgetPolicy(max_deletions=10, max_deletion_fraction=None)
    assert method.must_retrain(state, policy, AUDITED, pending_deletions=10) is None
    reason = method.must_retrain(state, policy, AUDITED, pending_deletions=11)
    assert reason is not None and "max_deletions" in reason
    sigma_policy = BudgetPolicy(max_sigma=1e-9, max_deletion_fraction=None)
    assert method.must_retrain(state, sigma_policy, CERTIFIED, pending_deletions=1) is not None
    assert method.must_retrain(state, sigma_policy, AUDITED, pending_deletions=1) is None  # no noise to cap


def test_bad_requests_raise_clear_errors(fitted) -> None:
    method, state, _ = fitted
    with pytest.raises(UnknownSampleError, match="nope"):
        method.forget(state, ForgetRequest(sample_ids=("nope",)), 0, AUDITED)
    with pytest.raises(UnknownSampleError, match="ghost"):
        method.forget(state, ForgetRequest(owner_ids=("ghost",)), 0, AUDITED)
    with pytest.raises(EmptyRequestError):
        method.forget(state, ForgetRequest(), 0, AUDITED)
    with pytest.raises(UnsupportedRequestError, match="edge"):
        method.forget(state, ForgetRequest(edges=(("a", "b"),)), 0, AUDITED)
    with pytest.raises(AlreadyDeletedError, match="twice"):
        method.forget(state, ForgetRequest(sample_ids=("syn-00001", "syn-00001")), 0, AUDITED)
    state = method.forget(state, ForgetRequest(sample_ids=("syn-00001",)), 0, AUDITED).state
    with pytest.raises(AlreadyDeletedError, match="syn-00001"):
        method.forget(state, ForgetRequest(sample_ids=("syn-00001",)), 0, AUDITED)
    wrong = replace(state, clean_weights=torch.zeros(state.clean_weights.shape[0] + 1))
    with pytest.raises(DimensionMismatchError):
        method.forget(wrong, ForgetRequest(sample_ids=("syn-00002",)), 0, AUDITED)


def test_bad_datasets_raise_clear_errors() -> None:
    x = np.zeros((3, 2), dtype=np.float32)
    with pytest.raises(InvalidDatasetError, match="NaN"):
        Dataset(
            ("a", "b", "c"), ("o", "o", "o"), np.array([[0, 1], [np.nan, 0], [1, 1]]), np.array([0, 1, 0]), 2
        )
    with pytest.raises(InvalidDatasetError, match="outside"):
        Dataset(("a", "b", "c"), ("o", "o", "o"), x, np.array([0, 2, 0]), 2)
    with pytest.raises(InvalidDatasetError, match="more than once"):
        Dataset(("a", "b", "a"), ("o", "o", "o"), x, np.array([0, 1, 0]), 2)


def test_dataset_shape_must_match_the_model(data: Dataset) -> None:
    model = build_model(ModelSpec("logistic_regression", (7,), 3))
    with pytest.raises(DimensionMismatchError):
        train_recorded(model, data, SGDConfig(epochs=1), seed=0)


def test_repair_is_labelled_uncertified_and_keeps_forgetting_consistent(data: Dataset) -> None:
    method = get_method("hessian_free")
    state, _ = method.fit(data, EQ56, CERTIFIED, seed=3)
    out = method.forget(state, ForgetRequest(sample_ids=data.sample_ids[:12]), 1, CERTIFIED)
    remaining = data.without(out.forgotten_ids)
    repaired, cert = method.repair(out.state, remaining, epochs=1, seed=4, privacy=CERTIFIED)  # type: ignore[attr-defined]
    assert cert.guarantee == "none" and cert.sigma == 0.0 and cert.epsilon is None
    assert method.verify_certificate(cert) == []
    assert not torch.equal(repaired.clean_weights, out.state.clean_weights)  # it did fine-tune
    later = method.forget(repaired, ForgetRequest(sample_ids=remaining.sample_ids[:2]), 2, CERTIFIED)
    assert later.certificate.guarantee == "none" and later.certificate.sigma == 0.0
    assert torch.equal(later.state.released_weights, later.state.clean_weights)
    with pytest.raises(Exception, match="remaining samples"):
        method.repair(out.state, data, epochs=1, seed=4, privacy=CERTIFIED)  # type: ignore[attr-defined]


def test_a_certificate_s_dict_is_asdict_made_json_safe_and_shares_nothing_with_it(data: Dataset) -> None:
    from dataclasses import asdict

    from unlearning.serialization import json_safe

    method = get_method("hessian_free")
    state, _ = method.fit(data, EQ56, CERTIFIED, seed=2)
    cert = method.forget(
        state, ForgetRequest(sample_ids=data.sample_ids[:2]), noise_seed=3, privacy=CERTIFIED
    ).certificate
    cert = replace(
        cert, budget_cap=float("inf"), inputs={**cert.inputs, "nested": {"xs": (1.0, float("-inf"))}}
    )
    as_dict = cert.to_dict()
    assert as_dict == json_safe(asdict(cert))
    assert as_dict["budget_cap"] == "inf" and as_dict["inputs"]["nested"]["xs"] == [1.0, "-inf"]
    as_dict["inputs"]["nested"]["xs"].append(0.0)
    assert cert.inputs["nested"]["xs"] == (1.0, float("-inf"))
