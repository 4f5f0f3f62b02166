"""Certified Hessian-free releases by the gradient residual: the bound holds against an exactly solved
minimiser, sigma is fixed by the configuration alone, certificates carry nothing measured and recompute,
nonconvex families are refused, and what an update's work reveals is what the threat model says."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from unlearning.data import Dataset, load_sklearn, make_synthetic
from unlearning.errors import DimensionMismatchError, InvalidConfigError
from unlearning.methods.hessian_free import HessianFree, HFAccounting, audit_residual
from unlearning.methods.hessian_free.certified import NOTES, sigma_for
from unlearning.methods.hessian_free.objective import SoftmaxObjective, minimise
from unlearning.methods.protocol import (
    BudgetPolicy,
    ForgetRequest,
    MethodState,
    PrivacyTarget,
    needs_remaining_data,
)
from unlearning.methods.registry import get_method
from unlearning.privacy.certificate import Certificate

CERTIFIED = PrivacyTarget(epsilon=1.0, delta=1e-3, release_mode="certified")
AUDITED = PrivacyTarget(epsilon=1.0, delta=1e-3, release_mode="audited")
TINY = {"epochs": 4, "batch_size": 8, "lr": 0.05, "lr_decay": 0.99, "l2": 0.5, "clip_norm": 5.0}
NO_CAP = BudgetPolicy(max_deletion_fraction=None)


def _synthetic(n: int, features: int, classes: int, seed: int) -> Dataset:
    return make_synthetic(n=n, num_features=features, num_classes=classes, seed=seed, samples_per_owner=3)


def _exact_distance(state: MethodState, rows: Dataset) -> tuple[float, float]:
    """(||w - w*||, computed bound) of the state's clean weights on ``rows``, w* solved to 1e-10 l2."""
    l2 = HFAccounting.from_dict(state.accounting).l2
    objective = SoftmaxObjective(rows.features, rows.labels, rows.num_classes, l2)
    start = objective.evaluate(state.clean_weights)
    exact, _ = minimise(objective, start, 1e-10 * l2, 60, 1000)
    return float((state.clean_weights.double() - exact.weights).norm()), start.certified_gradient_norm / l2


# ----------------------------------------------------------------------------------- the bound


def test_objective_gradient_and_hessian_products_match_autograd() -> None:
    data = _synthetic(50, 4, 3, 0)
    objective = SoftmaxObjective(data.features, data.labels, 3, 0.3)
    w = torch.randn(objective.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def loss(v: torch.Tensor) -> torch.Tensor:
        theta = v.view(3, -1)
        x = torch.as_tensor(data.features, dtype=torch.float64)
        logits = x @ theta[:, :-1].T + theta[:, -1]
        return torch.nn.functional.cross_entropy(logits, torch.as_tensor(data.labels)) + 0.15 * (v * v).sum()

    at = objective.evaluate(w)
    torch.testing.assert_close(at.gradient, torch.func.grad(loss)(w))
    assert at.loss == pytest.approx(float(loss(w)), rel=1e-12)
    v = torch.randn_like(w)
    torch.testing.assert_close(objective.hvp(at, v), torch.func.jvp(torch.func.grad(loss), (w,), (v,))[1])
    assert 0 < at.slack < 1e-12 and objective.passes == 2


def test_the_bound_is_above_the_true_distance_to_the_exact_minimiser_in_every_trial() -> None:
    """Several datasets, deletion sizes (1, 3, 10 rows) and orders: after every certified forget, the
    distance of the clean weights to the exactly solved minimiser on the remaining rows is at most the
    computed bound and at most Delta_max."""
    datasets = [_synthetic(90, 5, 3, 1), _synthetic(70, 3, 2, 2), load_sklearn("iris")]
    method = HessianFree()
    trials = 0
    for d, data in enumerate(datasets):
        for order_seed, size in ((0, 1), (1, 3), (2, 10)):
            config = {**TINY, "sensitivity_cap": 0.01 if size == 1 else 0.03}
            state, _ = method.fit(data, config, CERTIFIED, seed=d, policy=NO_CAP)
            current = data
            order = np.random.default_rng([d, order_seed]).permutation(len(data))
            for k in range(0, min(2 * len(data) // 3, 60 * size), size):
                ids = tuple(data.sample_ids[i] for i in order[k : k + size])
                state = method.forget(state, ForgetRequest(sample_ids=ids), k, CERTIFIED, current, NO_CAP).state
                current = current.without(ids)
                distance, bound = _exact_distance(state, current)
                assert distance <= bound <= config["sensitivity_cap"], (d, size, k, distance, bound)
                trials += 1
    assert trials >= 200


def test_the_bound_holds_for_arbitrary_weights_on_random_subsets() -> None:
    """||w - w*|| <= (||grad F(w)|| + slack)/l2 for weights anywhere, not only near the minimiser."""
    gen = np.random.default_rng(3)
    for trial in range(60):
        data = _synthetic(int(gen.integers(20, 80)), int(gen.integers(2, 6)), int(gen.integers(2, 5)), trial)
        keep = np.flatnonzero(gen.random(len(data)) < 0.8)
        objective = SoftmaxObjective(data.features[keep], data.labels[keep], data.num_classes, float(gen.uniform(0.01, 1)))
        exact, _ = minimise(objective, objective.evaluate(torch.zeros(objective.dim, dtype=torch.float64)),
                            1e-11, 80, 2000)
        w = exact.weights + float(gen.choice([1e-4, 1e-2, 1.0])) * torch.randn(objective.dim, dtype=torch.float64)
        at = objective.evaluate(w)
        assert float((w - exact.weights).norm()) <= at.certified_gradient_norm / objective.l2


# ----------------------------------------------------------------------------------- sigma


def test_sigma_is_fixed_by_the_configuration_and_not_by_the_data() -> None:
    method = HessianFree()
    sigmas = set()
    for data in (_synthetic(60, 4, 3, 5), _synthetic(150, 7, 2, 6), load_sklearn("iris")):
        state, cert = method.fit(data, TINY, CERTIFIED, seed=1)
        sigmas.add(cert.sigma)
        for k in range(3):
            sid = data.sample_ids[k]
            out = method.forget(state, ForgetRequest(sample_ids=(sid,)), k, CERTIFIED, data)
            state, data = out.state, data.without([sid])
            sigmas.add(out.certificate.sigma)
    assert sigmas == {sigma_for(0.002, 1.0, 1e-3)}
    assert sigma_for(0.002, 1.0, 1e-3) == pytest.approx(0.002 * 2.5746570186, rel=1e-9)


def test_the_released_weights_are_the_clean_weights_plus_seeded_noise_of_that_sigma() -> None:
    data = _synthetic(60, 4, 3, 7)
    method = HessianFree()
    state, cert = method.fit(data, TINY, CERTIFIED, seed=2)
    assert state.clean_weights.dtype == torch.float64 and cert.noise_seed is not None
    out = method.forget(state, ForgetRequest(sample_ids=(data.sample_ids[0],)), 11, CERTIFIED, data)
    noise = out.state.released_weights - out.state.clean_weights
    gen = torch.Generator().manual_seed(11)
    torch.testing.assert_close(noise, cert.sigma * torch.randn(noise.shape, generator=gen, dtype=torch.float64))


# ----------------------------------------------------------------------------- certificates


def _path(cap: float, max_steps: int = 3) -> tuple[list[Certificate], MethodState, Dataset]:
    data = _synthetic(80, 4, 3, 8)
    method = HessianFree()
    config = {**TINY, "sensitivity_cap": cap, "max_newton_steps": max_steps}
    state, cert = method.fit(data, config, CERTIFIED, seed=3, policy=NO_CAP)
    certs = [cert]
    for k in range(4):
        sid = data.sample_ids[k]
        out = method.forget(state, ForgetRequest(sample_ids=(sid,)), 100 + k, CERTIFIED, data, NO_CAP)
        state, data = out.state, data.without([sid])
        certs.append(out.certificate)
    return certs, state, data


def _without_cap(cert: Certificate) -> dict[str, Any]:
    d = cert.to_dict()
    for key in ("sigma", "bound"):
        d.pop(key)
    d["inputs"] = {k: v for k, v in d["inputs"].items() if k not in ("sensitivity_cap", "gradient_norm_threshold")}
    return d


def test_no_certificate_carries_the_measured_residual_and_the_work_does_not_show_in_it() -> None:
    """The threat model: a path that takes Newton steps at every deletion and one that takes none give
    certificates that differ in nothing but the configured cap (and its sigma); the work is operator
    metadata in the accounting, and the notes say it is not covered."""
    busy_certs, busy, _ = _path(1e-6)  # every deletion needs Newton steps
    idle_certs, idle, _ = _path(10.0)  # no deletion does
    busy_work = HFAccounting.from_dict(busy.accounting).gradient_residual.work  # type: ignore[union-attr]
    idle_work = HFAccounting.from_dict(idle.accounting).gradient_residual.work  # type: ignore[union-attr]
    assert busy_work.newton_steps >= 4 and idle_work.newton_steps == 0 and idle_work.passes == 4
    for busy_cert, idle_cert in zip(busy_certs, idle_certs):
        assert _without_cap(busy_cert) == _without_cap(idle_cert)
        assert busy_cert.bound == 1e-6 and busy_cert.measured == {} and busy_cert.inputs["check"] == "passed"
        flat = str(busy_cert.to_dict())
        assert "residual\"" not in flat and "passes" not in flat and "newton" not in flat
    assert "not covered" in NOTES and busy_certs[-1].notes == NOTES


def test_verify_certificate_recomputes_delta_max_and_catches_tampering() -> None:
    certs, _, _ = _path(0.05)
    method = HessianFree()
    for cert in certs:
        assert method.verify_certificate(cert) == []
        assert method.verify_certificate(Certificate.from_dict(cert.to_dict())) == []
    cert = certs[-1]
    tampered = [
        replace(cert, sigma=cert.sigma / 2),
        replace(cert, bound=cert.bound * 2),
        replace(cert, inputs={**cert.inputs, "sensitivity_cap": cert.inputs["sensitivity_cap"] * 2}),
        replace(cert, inputs={**cert.inputs, "l2": cert.inputs["l2"] * 10}),
        replace(cert, inputs={**cert.inputs, "l2": 0.0}),
        replace(cert, inputs={**cert.inputs, "check": "failed"}),
        replace(cert, epsilon=10.0),
        replace(cert, calibration="classical"),
        replace(cert, measured={"gradient_residual_measured": 1e-4}),
    ]
    for bad in tampered:
        assert method.verify_certificate(bad), bad


def test_an_exact_solve_marks_the_vectors_stale_and_asks_for_a_retrain() -> None:
    certs, state, data = _path(1e-6, max_steps=0)  # no Newton step allowed: the first deletion solves exactly
    acc = HFAccounting.from_dict(state.accounting)
    assert acc.gradient_residual is not None and acc.gradient_residual.vectors_stale
    assert acc.gradient_residual.work.exact_solves >= 1
    reason = HessianFree().must_retrain(state, NO_CAP, CERTIFIED, 1)
    assert reason is not None and "retrain" in reason
    assert all(c.guarantee == "certified" and HessianFree().verify_certificate(c) == [] for c in certs)
    distance, bound = _exact_distance(state, data)
    assert distance <= bound <= 1e-6


# --------------------------------------------------------------------------- registration


@pytest.mark.parametrize("family", ["mlp", "cnn", "lenet5"])
def test_certified_registration_of_a_nonconvex_family_is_refused_pointing_to_audited(family: str) -> None:
    method = get_method("hessian_free")
    with pytest.raises(InvalidConfigError, match="audited"):
        method.check_registration({"family": family}, CERTIFIED, 784)  # type: ignore[attr-defined]
    with pytest.raises(InvalidConfigError, match="audited"):
        method.check_registration({"family": family, "certified_bound": "eq56"}, CERTIFIED, 784)  # type: ignore[attr-defined]
    method.check_registration({"family": family}, AUDITED, 784)  # type: ignore[attr-defined]


def test_certified_registration_needs_l2_and_a_positive_cap() -> None:
    method = HessianFree()
    with pytest.raises(InvalidConfigError, match="l2 > 0"):
        method.check_registration({"l2": 0.0}, CERTIFIED, 4)
    with pytest.raises(InvalidConfigError, match="sensitivity_cap"):
        method.check_config({"sensitivity_cap": 0})
    with pytest.raises(InvalidConfigError, match="certified_bound"):
        method.check_config({"certified_bound": "other"})
    with pytest.raises(InvalidConfigError, match="max_sigma"):
        method.fit(_synthetic(30, 3, 2, 0), TINY, CERTIFIED, seed=0, policy=BudgetPolicy(max_sigma=1e-6))


def test_only_a_certified_gradient_residual_model_needs_the_remaining_rows() -> None:
    wrapped = get_method("hessian_free")
    assert needs_remaining_data(wrapped, {}, CERTIFIED)
    assert not needs_remaining_data(wrapped, {}, AUDITED)
    assert not needs_remaining_data(wrapped, {"certified_bound": "eq56"}, CERTIFIED)
    assert needs_remaining_data(get_method("newton_removal"), {}, AUDITED)  # its ClassVar
    data = _synthetic(40, 3, 2, 4)
    state, _ = HessianFree().fit(data, TINY, CERTIFIED, seed=0)
    with pytest.raises(InvalidConfigError, match="remaining"):
        HessianFree().forget(state, ForgetRequest(sample_ids=(data.sample_ids[0],)), 0, CERTIFIED)


def test_remaining_rows_with_or_without_the_forgotten_ones_give_the_same_release() -> None:
    data = _synthetic(50, 3, 3, 9)
    method = HessianFree()
    ids = data.sample_ids[:2]
    a, _ = method.fit(data, TINY, CERTIFIED, seed=1)
    b, _ = method.fit(data, TINY, CERTIFIED, seed=1)
    with_rows = method.forget(a, ForgetRequest(sample_ids=ids), 5, CERTIFIED, data)
    without_rows = method.forget(b, ForgetRequest(sample_ids=ids), 5, CERTIFIED, data.without(ids))
    assert torch.equal(with_rows.state.released_weights, without_rows.state.released_weights)
    c, _ = method.fit(data, TINY, CERTIFIED, seed=1)
    with pytest.raises(DimensionMismatchError, match="rows"):
        method.forget(c, ForgetRequest(sample_ids=ids), 5, CERTIFIED, data.without(data.sample_ids[:5]))


# ---------------------------------------------------------------------- accounting and audit


def test_the_typed_accounting_reads_and_writes_the_same_keys() -> None:
    data = _synthetic(40, 3, 2, 10)
    audited, _ = HessianFree().fit(data, TINY, AUDITED, seed=0)
    old = {**audited.accounting, "feature_transform": {"scaling": "none", "statistics": "none"},
           "quality": {"verdict": "ok"}, "repaired": True, "repair_epochs": 1, "repair_seed": 3}
    assert HFAccounting.from_dict(old).to_dict() == old
    assert HFAccounting.from_dict(audited.accounting).to_dict() == audited.accounting
    certified_state, _ = HessianFree().fit(data, TINY, CERTIFIED, seed=0)
    assert HFAccounting.from_dict(certified_state.accounting).to_dict() == certified_state.accounting
    assert "gradient_residual" in certified_state.accounting and "gradient_residual" not in audited.accounting


def test_an_auditor_recomputes_the_residual_of_a_stored_version_through_its_feature_scaling() -> None:
    raw = _synthetic(60, 4, 3, 11)
    data = raw.with_features(raw.features * 10.0 + 3.0)
    method = get_method("hessian_free")
    config = {**TINY, "feature_scaling": "standardize",
              "feature_statistics": {"mean": [3.0] * 4, "std": [10.0] * 4}}
    state, _ = method.fit(data, config, CERTIFIED, seed=0)
    out = method.forget(state, ForgetRequest(sample_ids=data.sample_ids[:3]), 1, CERTIFIED, data)
    remaining = data.without(data.sample_ids[:3])
    audit = audit_residual(out.state, remaining)
    assert audit.within_cap and audit.bound <= 0.002 and audit.rows == 57
    tampered = replace(out.state, clean_weights=out.state.clean_weights + 0.01)
    assert audit_residual(tampered, remaining).within_cap is False
