"""The ``langevin`` method (projected noisy SGD, K noisy epochs per request) and the Descent-to-Delete
baseline on tiny data: the loss is the paper's, projection holds, seeds reproduce, forgetting trains on
the remaining samples only, certificates recompute, the budget rules fire, and bad input fails clearly."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from bench.baselines.descent_to_delete import DescentToDelete, request_iterations
from unlearning.data import Dataset, make_synthetic
from unlearning.errors import (
    AlreadyDeletedError,
    DimensionMismatchError,
    EmptyRequestError,
    InvalidConfigError,
    InvalidDatasetError,
    UnknownSampleError,
    UnsupportedRequestError,
)
from unlearning.methods.langevin.accounting import LangevinAccounting
from unlearning.methods.langevin.method import Langevin
from unlearning.methods.langevin.noisy_sgd import project
from unlearning.methods.langevin.problem import LogisticProblem
from unlearning.methods.protocol import BudgetPolicy, ForgetRequest, MethodState, PrivacyTarget
from unlearning.methods.registry import get_method
from unlearning.methods.table_model import TableModel
from unlearning.models import build_model
from unlearning.privacy.langevin.constants import PNSGDConstants
from unlearning.privacy.langevin.distance import epochs_to_converge, stationarity_gap, z_single
from unlearning.privacy.langevin.sequential import charge_request

PRIVACY = PrivacyTarget(epsilon=1.0, delta=1e-3, release_mode="certified")
CONFIG = {"batch_size": 16, "l2": 0.05, "sigma": 0.02, "intercept": False}


def _unit_rows(data: Dataset) -> Dataset:
    x = data.features / np.linalg.norm(data.features, axis=1, keepdims=True)
    return Dataset(data.sample_ids, data.owner_ids, x, data.labels, data.num_classes, name=data.name)


@pytest.fixture(scope="module")
def binary() -> Dataset:
    return _unit_rows(make_synthetic(n=96, num_features=6, num_classes=2, seed=0, samples_per_owner=3))


@pytest.fixture(scope="module")
def method() -> Langevin:
    """The method itself, as the registry wraps it for tables (unlearning.methods.table_model.TableModel)."""
    m = get_method("langevin")
    assert isinstance(m, TableModel) and isinstance(m.inner, Langevin)
    return m.inner


@pytest.fixture(scope="module")
def fitted(method: Langevin, binary: Dataset) -> MethodState:
    return method.fit(binary, CONFIG, PRIVACY, seed=3)[0]


def _forget(method: Langevin, state: MethodState, data: Dataset, *ids: str, seed: int = 11):
    return method.forget(state, ForgetRequest(sample_ids=ids), seed, PRIVACY, remaining=data)


# ------------------------------------------------------------------------------------------ the loss
def test_binary_gradient_is_the_papers_clipped_logistic_gradient() -> None:
    """App. K.3 eq. 72: Pi_{C_M}((sigmoid(y w.x) - 1) y x) + lam w with y in {-1, +1}."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(20, 5, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 2, (20,), generator=gen)
    w = torch.randn(1, 5, generator=gen, dtype=torch.float64)
    for clip in (0.3, 10.0):
        problem = LogisticProblem(2, 5, False, 0.1, clip, 5.0)
        y = labels.to(torch.float64) * 2 - 1
        raw = (torch.sigmoid(y * (x @ w[0])) - 1).unsqueeze(1) * y.unsqueeze(1) * x
        clipped = raw * torch.clamp(clip / raw.norm(dim=1), max=1.0).unsqueeze(1)
        expected = clipped.sum(0) / 20 + 0.1 * w[0]
        torch.testing.assert_close(problem.objective_gradient(w, x, labels, 20.0)[0], expected)


def test_multiclass_constants_bound_the_gradient_and_its_lipschitz_constant() -> None:
    """||grad_i|| <= sqrt(2) B and the batch gradient map is L-Lipschitz with L = B^2/2 + lam."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(50, 4, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 4, (50,), generator=gen)
    B = float(x.norm(dim=1).max())
    problem = LogisticProblem(4, 4, False, 0.01, math.sqrt(2) * B, B)
    for _ in range(20):
        w1, w2 = (torch.randn(3, 4, generator=gen, dtype=torch.float64) * 3 for _ in range(2))
        grads = problem.residuals(w1, x, y).norm(dim=1) * x.norm(dim=1)
        assert float(grads.max()) <= problem.natural_gradient_bound + 1e-12
        diff = problem.objective_gradient(w1, x, y, 50.0) - problem.objective_gradient(w2, x, y, 50.0)
        assert float(diff.norm()) <= problem.smoothness * float((w1 - w2).norm()) + 1e-12


def test_released_weights_are_served_by_the_logistic_regression_family(
    method: Langevin, fitted: MethodState, binary: Dataset
) -> None:
    model = build_model(fitted.model)
    problem = LogisticProblem.from_dict(fitted.accounting)
    w = problem.from_flat(fitted.released_weights)
    x = torch.as_tensor(binary.features, dtype=torch.float64)
    logits = model.logits(fitted.released_weights.to(torch.float64), x)
    torch.testing.assert_close(logits[:, 1] - logits[:, 0], (x @ w.T)[:, 0])


# ------------------------------------------------------------------------------------------ training
def test_projection_keeps_the_weights_in_the_ball(method: Langevin, binary: Dataset) -> None:
    state = method.fit(binary, {**CONFIG, "radius": 0.25, "sigma": 0.5}, PRIVACY, seed=0)[0]
    assert float(state.released_weights.norm()) <= 0.25 * (1 + 1e-12)
    out = _forget(method, state, binary, binary.sample_ids[0])
    assert float(out.state.released_weights.norm()) <= 0.25 * (1 + 1e-12)
    w = torch.tensor([[3.0, 4.0]], dtype=torch.float64)
    assert float(project(w, 1.0).norm()) == pytest.approx(1.0) and torch.equal(project(w, 10.0), w)


def test_same_seed_gives_identical_weights_and_another_seed_does_not(
    method: Langevin, binary: Dataset, fitted: MethodState
) -> None:
    again = method.fit(binary, CONFIG, PRIVACY, seed=3)[0]
    other = method.fit(binary, CONFIG, PRIVACY, seed=4)[0]
    assert torch.equal(again.released_weights, fitted.released_weights)
    assert not torch.equal(other.released_weights, fitted.released_weights)
    a = _forget(method, fitted, binary, binary.sample_ids[5], seed=9).state.released_weights
    b = _forget(method, fitted, binary, binary.sample_ids[5], seed=9).state.released_weights
    c = _forget(method, fitted, binary, binary.sample_ids[5], seed=10).state.released_weights
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_fit_learns_and_records_the_converged_regime(
    method: Langevin, binary: Dataset, fitted: MethodState
) -> None:
    account = fitted.accounting
    const = PNSGDConstants(
        account["slots"],
        account["batch_size"],
        account["eta"],
        account["l2"],
        account["clip"],
        account["radius"],
        account["smoothness"],
    )
    T = account["burn_in_epochs"]
    assert T == epochs_to_converge(const, 1e-3)
    assert account["z_out"] == pytest.approx(stationarity_gap(const, T))
    assert account["z_out"] <= 1e-3 * z_single(const)
    assert account["eta"] == pytest.approx(1.0 / (0.25 + 0.05))  # unit rows: L = 1/4 + lam, eta = 1/L
    assert account["train_accuracy"] > 0.9
    assert account["slots"] == account["batches"] * account["batch_size"] >= len(binary)


def test_multiclass_fit_learns(method: Langevin) -> None:
    data = _unit_rows(make_synthetic(n=120, num_features=5, num_classes=3, seed=2))
    state, cert = method.fit(data, CONFIG, PRIVACY, seed=0)
    assert cert.measured["train_accuracy"] > 0.8
    assert state.accounting["smoothness"] == pytest.approx(0.5 + 0.05)  # curvature 1/2 for C >= 3


# ------------------------------------------------------------------------------------------ forgetting
def test_forget_trains_on_the_remaining_samples_only(
    method: Langevin, fitted: MethodState, binary: Dataset
) -> None:
    gone = binary.sample_ids[7]
    out = _forget(method, fitted, binary, gone)
    tampered = binary.features.copy()
    tampered[7] = -tampered[7]  # the forgotten sample's features and label must not matter at all
    labels = binary.labels.copy()
    labels[7] = 1 - labels[7]
    altered = Dataset(binary.sample_ids, binary.owner_ids, tampered, labels, 2, name=binary.name)
    assert torch.equal(
        _forget(method, fitted, altered, gone).state.released_weights, out.state.released_weights
    )
    kept = binary.features.copy()
    kept[8] = -kept[8]  # a remaining sample's data does matter: unlearning really trains on it
    changed = Dataset(binary.sample_ids, binary.owner_ids, kept, binary.labels, 2, name=binary.name)
    assert not torch.equal(
        _forget(method, fitted, changed, gone).state.released_weights, out.state.released_weights
    )
    assert out.forgotten_ids == (gone,) and out.state.accounting["deleted_count"] == 1
    assert gone in out.state.deleted_ids and gone not in fitted.deleted_ids


def test_forget_runs_the_accountants_k_from_the_current_weights(
    method: Langevin, fitted: MethodState, binary: Dataset
) -> None:
    out = _forget(method, fitted, binary, binary.sample_ids[0])
    cert = out.certificate
    const = PNSGDConstants(
        cert.inputs["slots"],
        cert.inputs["batch_size"],
        cert.inputs["eta"],
        cert.inputs["l2"],
        cert.inputs["clip"],
        cert.inputs["radius"],
    )
    expected = charge_request(const, 0.02, fitted.accounting["z_out"], 1, 1.0, 1e-3)
    assert cert.inputs["epochs"] == expected.epochs and cert.bound == pytest.approx(expected.z_in)
    assert cert.epsilon == pytest.approx(expected.loss.epsilon) and cert.epsilon <= 1.0
    assert cert.measured["gradient_evaluations"] == expected.epochs * (len(binary) - 1)
    assert cert.guarantee == "certified" and cert.sigma == 0.02 and cert.noise_seed == 11


def test_certificates_recompute_and_tampering_is_detected(method: Langevin, binary: Dataset) -> None:
    state, fit_cert = method.fit(binary, CONFIG, PRIVACY, seed=5)
    assert fit_cert.guarantee == "exact" and method.verify_certificate(fit_cert) == []
    out = _forget(method, state, binary, binary.sample_ids[1], binary.sample_ids[2])
    cert = out.certificate
    assert method.verify_certificate(cert) == []
    assert (
        method.verify_certificate(type(cert).from_dict(cert.to_dict())) == []
    )  # survives the JSON round trip
    bad_k = replace(cert, inputs={**cert.inputs, "epochs": cert.inputs["epochs"] + 1})
    assert any("K recomputes" in p for p in method.verify_certificate(bad_k))
    bad_eps = replace(cert, epsilon=cert.epsilon * 0.5)
    assert any("epsilon recomputes" in p for p in method.verify_certificate(bad_eps))
    bad_z = replace(cert, inputs={**cert.inputs, "z_prev": 0.0})
    assert method.verify_certificate(bad_z)
    bad_eta = replace(cert, inputs={**cert.inputs, "eta": cert.inputs["eta"] * 2})
    assert any("1/L" in p for p in method.verify_certificate(bad_eta))


def test_sequential_requests_follow_the_z_recursion(
    method: Langevin, fitted: MethodState, binary: Dataset
) -> None:
    state, data, certs = fitted, binary, []
    for sid in binary.sample_ids[10:14]:
        out = _forget(method, state, data, sid)
        state, data = out.state, data.without([sid])
        certs.append(out.certificate)
    zb = z_single(
        PNSGDConstants(
            state.accounting["slots"],
            state.accounting["batch_size"],
            state.accounting["eta"],
            state.accounting["l2"],
            state.accounting["clip"],
        )
    )
    for prev, nxt in itertools.pairwise(certs):
        assert nxt.inputs["z_prev"] == prev.inputs["z_out"]
        assert nxt.bound == pytest.approx(prev.inputs["z_out"] + zb)
    assert [c.cumulative_deletions for c in certs] == [1, 2, 3, 4]
    assert all(method.verify_certificate(c) == [] for c in certs)
    with pytest.raises(AlreadyDeletedError, match="already forgotten"):
        _forget(method, state, data, binary.sample_ids[10])


def test_state_survives_the_services_json_storage(
    method: Langevin, fitted: MethodState, binary: Dataset
) -> None:
    """The service stores ``accounting`` as JSON and the weights as blobs; nothing else is kept."""
    assert fitted.artifacts == {} and fitted.statistics is None
    restored = MethodState(
        method=fitted.method,
        model=type(fitted.model).from_dict(fitted.model.to_dict()),
        clean_weights=fitted.clean_weights.clone(),
        released_weights=fitted.released_weights.clone(),
        statistics=None,
        accounting=json.loads(json.dumps(fitted.accounting)),
    )
    a = _forget(method, restored, binary, binary.sample_ids[4])
    b = _forget(method, fitted, binary, binary.sample_ids[4])
    assert torch.equal(a.state.released_weights, b.state.released_weights)
    json.dumps(a.state.accounting)
    assert a.certificate.inputs == b.certificate.inputs and a.certificate.epsilon == b.certificate.epsilon



STORED_KEYS = (
    "num_classes", "num_features", "intercept", "l2", "clip", "feature_bound", "row_clip", "slots", "batch_size",
    "batches", "requested_batch_size", "eta", "smoothness", "radius", "sigma", "sigma_source", "pabi", "conversion",
    "max_unlearning_epochs", "burn_in_epochs", "stationarity_gap", "z_out", "deleted_count", "train_size", "requests",
    "unlearning_epochs_total", "gradient_evaluations_fit", "gradient_evaluations_unlearning", "partition_seed",
    "training_seed", "live_digest", "seconds_fit", "train_accuracy",
)


def test_typed_accounting_reads_and_writes_the_stored_json_keys(
    method: Langevin, fitted: MethodState, binary: Dataset
) -> None:
    """Stored versions keep loading: the typed accounting writes exactly the keys they carry, passes the
    keys of other layers (the table wrapper's) through, and reads a version recorded before ``row_clip``."""
    assert tuple(fitted.accounting) == STORED_KEYS
    stored = {**json.loads(json.dumps(fitted.accounting)), "feature_transform": {"scaling": "none"}, "quality": None}
    account = LangevinAccounting.from_dict(stored)
    assert account.to_dict() == stored and list(account.to_dict()) == list(stored)
    after = _forget(method, replace(fitted, accounting=stored), binary, binary.sample_ids[2]).state.accounting
    assert set(after) == set(stored) and after["feature_transform"] == {"scaling": "none"}
    older = {k: v for k, v in stored.items() if k != "row_clip"}
    assert LangevinAccounting.from_dict(older).problem.row_clip is False

def test_owners_expand_to_their_remaining_samples(
    method: Langevin, fitted: MethodState, binary: Dataset
) -> None:
    owner = binary.owner_ids[0]
    owned = tuple(s for s, o in zip(binary.sample_ids, binary.owner_ids) if o == owner)
    first = _forget(method, fitted, binary, owned[0])
    rest = method.forget(
        first.state, ForgetRequest(owner_ids=(owner,)), 1, PRIVACY, remaining=binary.without([owned[0]])
    )
    assert rest.forgotten_ids == owned[1:] and rest.certificate.charge == len(owned) - 1
    with pytest.raises(UnknownSampleError, match="no remaining samples"):
        method.forget(
            rest.state, ForgetRequest(owner_ids=(owner,)), 1, PRIVACY, remaining=binary.without(owned)
        )


def test_audited_mode_still_releases_certified_noisy_models(
    method: Langevin, fitted: MethodState, binary: Dataset
) -> None:
    audited = PrivacyTarget(1.0, 1e-3, "audited")
    cert = method.forget(
        fitted, ForgetRequest(sample_ids=(binary.sample_ids[3],)), 2, audited, remaining=binary
    ).certificate
    assert cert.release_mode == "audited" and cert.guarantee == "certified" and cert.epsilon is not None
    assert "audited" in cert.notes and method.verify_certificate(cert) == []


def test_automatic_sigma_keeps_every_request_within_target_epochs(method: Langevin, binary: Dataset) -> None:
    state = method.fit(binary, {**CONFIG, "sigma": None, "target_epochs": 2}, PRIVACY, seed=1)[0]
    assert state.accounting["sigma_source"] == "steady_state_2_epochs"
    data = binary
    for sid in binary.sample_ids[:6]:
        out = _forget(method, state, data, sid)
        assert out.certificate.inputs["epochs"] <= 2
        state, data = out.state, data.without([sid])
    capped = method.fit(
        binary, {**CONFIG, "sigma": None}, PRIVACY, seed=1, policy=BudgetPolicy(max_sigma=1e-3)
    )[0]
    assert capped.accounting["sigma"] == 1e-3 and capped.accounting["sigma_source"].startswith(
        "policy_max_sigma"
    )


# ------------------------------------------------------------------------------------------ budget
def test_budget_cap_and_must_retrain_rules(method: Langevin, fitted: MethodState) -> None:
    policy = BudgetPolicy(max_deletions=5, max_deletion_fraction=None)
    assert method.budget_cap(fitted, policy, PRIVACY) == 5
    assert method.budget_cap(fitted, BudgetPolicy(max_deletion_fraction=0.1), PRIVACY) == math.floor(0.1 * 96)
    assert method.must_retrain(fitted, policy, PRIVACY, pending_deletions=5) is None
    assert "above its cap of 5" in (method.must_retrain(fitted, policy, PRIVACY, pending_deletions=6) or "")
    cheap_retrain = replace(fitted, accounting={**fitted.accounting, "burn_in_epochs": 1})
    assert "no fewer than the 1 epochs of retraining" in (
        method.must_retrain(cheap_retrain, policy, PRIVACY, 1) or ""
    )
    tight = replace(fitted, accounting={**fitted.accounting, "max_unlearning_epochs": 1, "sigma": 1e-6})
    assert "cannot reach the privacy target" in (method.must_retrain(tight, policy, PRIVACY, 1) or "")


def test_certificate_budget_fields(method: Langevin, fitted: MethodState, binary: Dataset) -> None:
    policy = BudgetPolicy(max_deletions=10, max_deletion_fraction=None)
    out = method.forget(
        fitted,
        ForgetRequest(sample_ids=tuple(binary.sample_ids[:3])),
        1,
        PRIVACY,
        remaining=binary,
        policy=policy,
    )
    cert = out.certificate
    assert (cert.budget_unit, cert.budget_cap, cert.budget_spent, cert.charge) == (
        "deleted_samples",
        10,
        3,
        3,
    )


# ------------------------------------------------------------------------------------------ bad input
def test_bad_requests_raise_the_protocol_errors(
    method: Langevin, fitted: MethodState, binary: Dataset
) -> None:
    with pytest.raises(EmptyRequestError):
        method.forget(fitted, ForgetRequest(), 0, PRIVACY, remaining=binary)
    with pytest.raises(UnsupportedRequestError, match="samples and owners"):
        method.forget(fitted, ForgetRequest(edges=(("a", "b"),)), 0, PRIVACY, remaining=binary)
    with pytest.raises(UnknownSampleError, match="not in this model"):
        _forget(method, fitted, binary, "nope")
    with pytest.raises(AlreadyDeletedError, match="twice"):
        _forget(method, fitted, binary, binary.sample_ids[0], binary.sample_ids[0])
    with pytest.raises(InvalidConfigError, match="needs the remaining training data"):
        method.forget(fitted, ForgetRequest(sample_ids=(binary.sample_ids[0],)), 0, PRIVACY)


def test_a_remaining_dataset_that_is_not_the_training_data_is_refused(
    method: Langevin, fitted: MethodState, binary: Dataset
) -> None:
    with pytest.raises(InvalidConfigError, match="still holds 96"):
        _forget(method, fitted, binary.without([binary.sample_ids[-1]]), binary.sample_ids[0])
    renamed = Dataset(
        tuple(f"x{s}" for s in binary.sample_ids), binary.owner_ids, binary.features, binary.labels, 2
    )
    with pytest.raises(InvalidConfigError, match="sample ids differ"):
        _forget(method, fitted, renamed, renamed.sample_ids[0])
    wide = Dataset(
        binary.sample_ids, binary.owner_ids, np.hstack([binary.features, binary.features]), binary.labels, 2
    )
    with pytest.raises(DimensionMismatchError, match="12 features"):
        _forget(method, fitted, wide, binary.sample_ids[0])
    big = Dataset(binary.sample_ids, binary.owner_ids, binary.features * 3, binary.labels, 2)
    declared = method.fit(binary, {**CONFIG, "feature_bound": 1.0}, PRIVACY, seed=3)[0]  # a declared bound
    with pytest.raises(InvalidDatasetError, match="above the model's feature bound"):
        _forget(method, declared, big, binary.sample_ids[0])


@pytest.mark.parametrize(
    ("config", "error", "message"),
    [
        ({"lr": 10.0}, InvalidConfigError, r"exceeds 1/L"),
        ({"family": "mlp"}, InvalidConfigError, "trains family 'logistic_regression' only"),
        ({"feature_bound": 0.5}, InvalidDatasetError, "above feature_bound"),
        ({"batch_size": -1}, InvalidConfigError, "batch_size"),
        ({"sigma": -0.1}, InvalidConfigError, "sigma must be"),
        ({"pabi": "loose"}, InvalidConfigError, "pabi must be one of"),
        ({"l2": 0.0}, InvalidConfigError, "l2 must be"),
    ],
)
def test_bad_configurations_are_refused(
    method: Langevin, binary: Dataset, config: dict, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        method.fit(binary, {**CONFIG, **config}, PRIVACY, seed=0)


def test_clipping_a_multiclass_model_is_refused(method: Langevin) -> None:
    data = _unit_rows(make_synthetic(n=30, num_features=3, num_classes=3, seed=0))
    with pytest.raises(InvalidConfigError, match="not the gradient of a convex loss"):
        method.fit(data, {**CONFIG, "clip_norm": 0.5}, PRIVACY, seed=0)


def test_explicit_sigma_above_the_policy_maximum_is_refused(method: Langevin, binary: Dataset) -> None:
    with pytest.raises(InvalidConfigError, match="max_sigma"):
        method.fit(binary, CONFIG, PRIVACY, seed=0, policy=BudgetPolicy(max_sigma=0.01))


# ------------------------------------------------------------------------------------------ D2D baseline
def test_descent_to_delete_counts_gradients_and_follows_theorem_l2(binary: Dataset) -> None:
    problem = LogisticProblem(2, 6, False, 0.05, 1.0, 1.0)
    d2d = DescentToDelete(problem, epsilon=1.0, delta=1e-3)
    d2d.fit(binary, iterations=300)
    assert d2d.weights is not None
    x = torch.as_tensor(binary.features, dtype=torch.float64)
    grad = problem.objective_gradient(d2d.weights, x, torch.as_tensor(binary.labels), float(len(binary)))
    assert float(grad.norm()) < 1e-8  # 300 steps of a gamma-contraction: at the optimum
    data, counted = binary, 300 * len(binary)
    for i in range(1, 4):
        data = data.without([data.sample_ids[0]])
        expected = request_iterations(d2d.const, d2d.base_iterations, i, 1e-3)
        assert d2d.iterations_for_next() == expected
        d2d.forget(data, noise_seed=i)
        counted += expected * len(data)
    assert d2d.gradient_evaluations == counted and d2d.history[-1] >= d2d.history[0]
    assert not torch.equal(d2d.weights, d2d.weights * 0) and d2d.published is d2d.weights


def test_descent_to_delete_with_state_keeps_the_clean_weights(binary: Dataset) -> None:
    problem = LogisticProblem(2, 6, False, 0.05, 1.0, 1.0)
    d2d = DescentToDelete(problem, epsilon=1.0, delta=1e-3, variant="with_state")
    d2d.fit(binary, iterations=100)
    d2d.forget(binary.without([binary.sample_ids[0]]), noise_seed=0)
    assert d2d.published is not None and d2d.weights is not None
    assert not torch.equal(d2d.published, d2d.weights) and d2d.history == [d2d.base_iterations]
