"""Mini-Unlearning on tiny data: the forward loop is Eq. 10, the full-horizon replay approaches the exact
retrain of Eq. 2, sequential requests equal one batched request, the certificate claims nothing, and bad
input raises the protocol's errors."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.func import grad, vmap

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
from unlearning.forward_mode import hessian
from unlearning.lbfgs import bfgs_dense, secant_pairs
from unlearning.methods.hessian_free import sgd_config
from unlearning.methods.mini_unlearning import correction
from unlearning.methods.mini_unlearning.accounting import WindowAccounting
from unlearning.methods.mini_unlearning.method import MiniUnlearning
from unlearning.methods.mini_unlearning.trajectory import exact_replay
from unlearning.methods.protocol import BudgetPolicy, ForgetRequest, MethodState, PrivacyTarget
from unlearning.methods.registry import get_method
from unlearning.methods.table_model import TableModel
from unlearning.models import build_model
from unlearning.training import BatchSchedule

AUDITED = PrivacyTarget(epsilon=1.0, delta=1e-3, release_mode="audited")
CERTIFIED = PrivacyTarget(epsilon=1.0, delta=1e-3, release_mode="certified")
# 40 samples, batch 8: 5 steps per epoch, T = 15 steps; k = 6 replayed, m = 2 older snapshots.
TINY: dict[str, Any] = {
    "epochs": 3,
    "batch_size": 8,
    "lr": 0.3,
    "l2": 0.1,
    "k": 6,
    "m": 2,
    "dtype": "float64",
}


@pytest.fixture(scope="module")
def data() -> Dataset:
    return make_synthetic(n=40, num_features=3, num_classes=3, seed=0, samples_per_owner=4)


@pytest.fixture(scope="module")
def method() -> MiniUnlearning:
    """The method itself, as the registry wraps it for tables (unlearning.methods.table_model.TableModel)."""
    found = get_method("mini_unlearning")
    assert isinstance(found, TableModel) and isinstance(found.inner, MiniUnlearning)
    return found.inner


def _fit(method: MiniUnlearning, data: Dataset, **overrides: Any) -> MethodState:
    state, _ = method.fit(data, {**TINY, **overrides}, AUDITED, seed=3)
    return state


def _window_batches(state: MethodState) -> list[np.ndarray]:
    rows = state.artifacts["batch_rows"]
    k = int(state.accounting["k"])
    return [r[r >= 0].numpy() for r in rows[rows.shape[0] - k :]]


def _ids_in_window(state: MethodState, data: Dataset, per_batch: int) -> list[str]:
    """``per_batch`` samples from every window batch (never a whole batch)."""
    out: list[str] = []
    for batch in _window_batches(state):
        out.extend(data.sample_ids[i] for i in batch[:per_batch] if data.sample_ids[i] not in out)
    return out


def _forget(method: MiniUnlearning, state: MethodState, ids: list[str], remaining: Dataset) -> Any:
    return method.forget(state, ForgetRequest(sample_ids=tuple(ids)), 0, AUDITED, remaining=remaining)


# ------------------------------------------------------------------------------------ Eq. 10 itself
def _eq10_directly(state: MethodState, data: Dataset, deleted: set[str], lbfgs: bool = False) -> torch.Tensor:
    """Eq. 10 with G from Eq. 7's first form and H from Eq. 8, dense Hessians by autograd (no step map).

    With ``lbfgs`` the retained Hessian sum of Eq. 8 is replaced by the explicit BFGS matrix built from
    the retained batch's gradient sums at the m snapshots before w_{l-1} (Algorithm 4's pairs).
    """
    model = build_model(state.model).to("cpu", torch.float64)
    l2 = TINY["l2"]

    def loss(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model.logits(w, x[None]), y[None]) + 0.5 * l2 * (w * w).sum()

    per_sample_grads = vmap(grad(loss), in_dims=(None, 0, 0))
    x_all = torch.as_tensor(data.features, dtype=torch.float64)
    y_all = torch.as_tensor(data.labels)
    snaps, etas = state.artifacts["snapshots"], state.artifacts["step_sizes"]
    k = int(state.accounting["k"])
    history = snaps.shape[0] - 1 - k
    eye = torch.eye(snaps.shape[1], dtype=torch.float64)
    gs, hs = [], []
    for j, batch in enumerate(_window_batches(state)):
        w, eta, size = snaps[history + j], float(etas[j]), len(batch)
        unlearned = [i for i in batch if data.sample_ids[i] in deleted]
        kept = [i for i in batch if data.sample_ids[i] not in deleted]
        assert kept, "the test needs no fully deleted window batch"
        s_u = per_sample_grads(w, x_all[unlearned], y_all[unlearned]).sum(0)
        s_r = per_sample_grads(w, x_all[kept], y_all[kept]).sum(0)
        gamma = -len(unlearned) / size
        gs.append(eta / size * (gamma / (1 + gamma) * s_r + s_u))  # Eq. 7, first form
        if lbfgs:
            points = snaps[history + j - TINY["m"] : history + j + 1]
            sums = torch.stack([per_sample_grads(p, x_all[kept], y_all[kept]).sum(0) for p in points])
            s, yy = secant_pairs(points, sums)
            h_bar = bfgs_dense(s, yy, float(yy[:, -1] @ s[:, -1] / (s[:, -1] @ s[:, -1])))
        else:
            h_bar = vmap(hessian(loss), in_dims=(None, 0, 0))(w, x_all[kept], y_all[kept]).sum(0)
        hs.append(eye - eta / len(kept) * h_bar)  # Eq. 8
    total = gs[k - 1].clone()  # Eq. 10: G(s) + sum_{j=2..k} H(s) H(s-1) .. H(s-j+2) G(s-j+1)
    for j in range(2, k + 1):
        product = eye.clone()
        for i in range(1, j):
            product = product @ hs[k - i]
        total = total + product @ gs[k - j]
    return total


def test_forward_loop_equals_eq10_computed_directly(method: MiniUnlearning, data: Dataset) -> None:
    state = _fit(method, data)
    deleted = _ids_in_window(state, data, per_batch=2)
    out = _forget(method, state, deleted, data)
    delta = out.state.clean_weights - state.artifacts["snapshots"][-1]
    expected = _eq10_directly(state, data, set(deleted))
    assert float(expected.norm()) > 1e-3  # a real correction, not 0 = 0
    torch.testing.assert_close(delta, expected, rtol=1e-10, atol=1e-12)


def test_lbfgs_forward_loop_equals_eq10_with_bfgs_matrices_of_the_same_batch(
    method: MiniUnlearning, data: Dataset
) -> None:
    state = _fit(method, data, hvp="lbfgs")
    deleted = _ids_in_window(state, data, per_batch=2)
    out = _forget(method, state, deleted, data)
    delta = out.state.clean_weights - state.artifacts["snapshots"][-1]
    expected = _eq10_directly(state, data, set(deleted), lbfgs=True)
    torch.testing.assert_close(delta, expected, rtol=1e-9, atol=1e-11)
    assert out.certificate.measured["lbfgs_fallbacks"] == 0
    exact = _eq10_directly(state, data, set(deleted))
    assert float((delta - exact).norm()) > 1e-8  # an approximation, not the exact product again


def test_lbfgs_without_usable_pairs_falls_back_to_exact_products(
    method: MiniUnlearning, data: Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    exact_state = _fit(method, data)
    lbfgs_state = _fit(method, data, hvp="lbfgs")
    deleted = _ids_in_window(exact_state, data, per_batch=2)
    monkeypatch.setattr(correction.CompactLBFGS, "from_pairs", classmethod(lambda cls, s, y: None))
    out = _forget(method, lbfgs_state, deleted, data)
    assert out.certificate.measured["lbfgs_fallbacks"] == out.certificate.measured["hvp_products"] > 0
    reference = _forget(method, exact_state, deleted, data).state.clean_weights
    torch.testing.assert_close(out.state.clean_weights, reference, rtol=1e-12, atol=1e-14)


def test_window_records_the_trajectory_of_the_seeded_schedule(method: MiniUnlearning, data: Dataset) -> None:
    state = _fit(method, data)
    a = state.artifacts
    schedule = BatchSchedule.from_seed(len(data), TINY["batch_size"], TINY["epochs"], seed=3)
    k, m = TINY["k"], TINY["m"]
    assert a["snapshots"].shape == (k + m + 1, state.clean_weights.shape[0])
    assert state.accounting["schedule_seed"] == 3 and state.accounting["total_steps"] == schedule.steps
    for got, want in zip(a["batch_rows"], schedule.batches[-(k + m) :]):
        assert got[got >= 0].tolist() == want.tolist()
    torch.testing.assert_close(a["snapshots"][-1], state.clean_weights, rtol=0, atol=0)
    for j in range(k):  # w_l = w_{l-1} - eta_l D_l on every window step
        before, after = a["snapshots"][m + j], a["snapshots"][m + j + 1]
        torch.testing.assert_close(after, before - float(a["step_sizes"][j]) * a["directions"][j])


STORED_ACCOUNTING_KEYS = {
    "deleted_count", "train_size", "config", "training_seed", "schedule_seed", "total_steps", "batch_size", "k",
    "m", "hvp", "snapshots", "first_window_step", "window_deleted_cumulative", "seconds_fit",
}


def test_accounting_keeps_the_stored_json_keys_and_added_ones(method: MiniUnlearning, data: Dataset) -> None:
    state = _fit(method, data)
    assert set(state.accounting) == STORED_ACCOUNTING_KEYS
    stored = {**state.accounting, "feature_transform": {"scaling": "none"}}  # as the table wrapper adds it
    assert WindowAccounting.from_dict(stored).to_dict() == stored
    after = _forget(method, replace(state, accounting=stored), _ids_in_window(state, data, per_batch=1), data).state
    assert set(after.accounting) == STORED_ACCOUNTING_KEYS | {"feature_transform"}
    assert after.accounting["feature_transform"] == {"scaling": "none"}
    with pytest.raises(InvalidConfigError, match="lacks"):
        WindowAccounting.from_dict({k: v for k, v in state.accounting.items() if k != "m"})


# ------------------------------------------------------------------------------- against the retrain
def _residual(
    state_after: MethodState, state: MethodState, data: Dataset, ids: list[str]
) -> tuple[float, float]:
    cfg = sgd_config({**MiniUnlearning().default_config(), **state.accounting["config"]})
    ref = exact_replay(
        build_model(state.model), data, cfg, int(state.accounting["training_seed"]), ids, dtype=torch.float64
    )
    return float((state_after.clean_weights - ref).norm()), float((state.clean_weights - ref).norm())


def test_replaying_every_step_approaches_the_exact_replay_retrain(method: MiniUnlearning) -> None:
    data = make_synthetic(n=200, num_features=5, num_classes=3, seed=0)
    config = {"epochs": 6, "batch_size": 20, "lr": 0.2, "l2": 0.05}
    ids = [data.sample_ids[i] for i in np.random.default_rng(0).permutation(len(data))[:30]]  # 15%
    errors = {}
    for k in (2, 10, 10_000):  # 10,000 > T = 60: every step is replayed
        state = _fit(method, data, **config, k=k)
        errors[k], original = _residual(_forget(method, state, ids, data).state, state, data, ids)
    assert errors[10_000] < 0.05 * original, (errors, original)
    assert errors[10_000] < 0.1 * errors[2] and errors[10] < errors[2] < original, errors


def test_lbfgs_mode_moves_towards_the_retrain_and_stays_near_exact_products(method: MiniUnlearning) -> None:
    data = make_synthetic(n=300, num_features=5, num_classes=3, seed=0)
    config = {"epochs": 10, "batch_size": 20, "lr": 0.2, "l2": 0.05, "k": 10}
    ids = [data.sample_ids[i] for i in np.random.default_rng(1).permutation(len(data))[:30]]
    exact = _fit(method, data, **config, hvp="exact")
    lbfgs = _fit(method, data, **config, hvp="lbfgs")
    out_exact = _forget(method, exact, ids, data)
    out_lbfgs = _forget(method, lbfgs, ids, data)
    err, original = _residual(out_lbfgs.state, lbfgs, data, ids)
    assert err < original
    d_exact = out_exact.state.clean_weights - exact.clean_weights
    d_lbfgs = out_lbfgs.state.clean_weights - lbfgs.clean_weights
    assert float((d_lbfgs - d_exact).norm()) < 0.3 * float(d_exact.norm())
    assert out_lbfgs.certificate.measured["lbfgs_fallbacks"] == 0
    evaluations = [o.certificate.measured["gradient_evaluations"] for o in (out_lbfgs, out_exact)]
    assert evaluations[0] > evaluations[1]  # L-BFGS needs the gradients at the m older snapshots


def test_deletions_outside_the_window_change_nothing(method: MiniUnlearning, data: Dataset) -> None:
    state = _fit(method, data, k=3)  # the last 3 of 5 batches of the final epoch: 16 samples stay outside
    in_window = {data.sample_ids[i] for b in _window_batches(state) for i in b}
    outside = [s for s in data.sample_ids if s not in in_window][:3]
    assert outside
    out = _forget(method, state, outside, data)
    torch.testing.assert_close(out.state.clean_weights, state.clean_weights, rtol=0, atol=0)
    assert out.certificate.measured["window_deleted_this_request"] == 0
    assert out.certificate.inputs["deleted_per_step"] == [0] * 3


def test_window_counts_are_recorded_per_request(method: MiniUnlearning, data: Dataset) -> None:
    state = _fit(method, data)
    in_window = {data.sample_ids[i] for b in _window_batches(state) for i in b}
    inside = _ids_in_window(state, data, per_batch=1)
    outside = [s for s in data.sample_ids if s not in in_window][:2]
    out = _forget(method, state, inside + outside, data)
    m = out.certificate.measured
    assert m["window_deleted_this_request"] == len(inside)
    assert m["window_deleted_cumulative"] == len(inside)
    assert m["window_coverage_cumulative"] == pytest.approx(len(inside) / (len(inside) + len(outside)))
    per_step = [sum(data.sample_ids[i] in set(inside) for i in b) for b in _window_batches(state)]
    assert out.certificate.inputs["deleted_per_step"] == per_step
    assert m["window_deleted_occurrences"] == sum(per_step)


def test_sequential_requests_equal_one_batched_request(method: MiniUnlearning, data: Dataset) -> None:
    state = _fit(method, data)
    ids = _ids_in_window(state, data, per_batch=2)
    first, second = ids[: len(ids) // 2], ids[len(ids) // 2 :]
    batched = _forget(method, state, ids, data)
    step1 = _forget(method, state, first, data)
    step2 = _forget(method, step1.state, second, data.without(first))
    torch.testing.assert_close(step2.state.clean_weights, batched.state.clean_weights, rtol=1e-13, atol=1e-14)
    assert step2.certificate.cumulative_deletions == len(ids) and step2.certificate.charge == len(second)
    assert step2.certificate.measured["window_deleted_cumulative"] == len(ids)


def test_a_fully_deleted_batch_is_skipped_like_the_retrain(method: MiniUnlearning, data: Dataset) -> None:
    state = _fit(method, data, k=3)  # three batches of one epoch: disjoint
    last = _window_batches(state)[-1]
    ids = [data.sample_ids[i] for i in last]
    out = _forget(method, state, ids, data)
    assert out.certificate.inputs["deleted_per_step"] == [0, 0, len(last)]
    # Only the last step loses its samples, all of them: the retrain skips it, so w* = w_{T-1} exactly.
    before_last = state.artifacts["snapshots"][-2]
    torch.testing.assert_close(out.state.clean_weights, before_last, rtol=1e-12, atol=1e-13)


def test_owner_requests_forget_every_remaining_sample(method: MiniUnlearning, data: Dataset) -> None:
    state = _fit(method, data)
    owner = data.owner_ids[0]
    owned = [s for s, o in zip(data.sample_ids, data.owner_ids) if o == owner]
    by_owner = method.forget(state, ForgetRequest(owner_ids=(owner,)), 0, AUDITED, remaining=data)
    by_samples = _forget(method, state, owned, data)
    assert sorted(by_owner.forgotten_ids) == sorted(owned)
    torch.testing.assert_close(by_owner.state.clean_weights, by_samples.state.clean_weights, rtol=0, atol=0)


def test_forgotten_ids_are_scrubbed_from_the_stored_window(method: MiniUnlearning, data: Dataset) -> None:
    state = _fit(method, data)
    ids = _ids_in_window(state, data, per_batch=1)
    out = _forget(method, state, ids, data)
    stored = bytes(out.state.artifacts["window_sample_ids"].numpy().tobytes())
    before = bytes(state.artifacts["window_sample_ids"].numpy().tobytes())
    for sid in ids:
        assert sid.encode() in before and sid.encode() not in stored
    assert set(ids) <= out.state.deleted_ids and not set(ids) & state.deleted_ids


# ------------------------------------------------------------------------------- certificate, budget
def test_certificate_claims_no_guarantee_and_verifies(method: MiniUnlearning, data: Dataset) -> None:
    state, cert = method.fit(data, TINY, AUDITED, seed=3)
    out = _forget(method, state, _ids_in_window(state, data, per_batch=1), data)
    for c in (cert, out.certificate):
        assert c.guarantee == "none" and c.epsilon is None and c.delta is None and c.sigma == 0.0
        assert "epsilon is infinite" in c.notes and c.budget_unit == "deleted_samples"
        assert method.verify_certificate(c) == []
        assert type(c).from_dict(c.to_dict()) == c  # JSON round trip (bound inf -> "inf" -> inf)
    assert out.certificate.noise_seed is None
    assert method.verify_certificate(replace(out.certificate, epsilon=1.0))
    assert method.verify_certificate(replace(out.certificate, sigma=0.1))
    assert method.verify_certificate(replace(out.certificate, budget_spent=0.0))
    bad_counts = {**out.certificate.measured, "window_deleted_this_request": out.certificate.charge + 1}
    assert method.verify_certificate(replace(out.certificate, measured=bad_counts))


def test_budget_is_a_deletion_ratio(method: MiniUnlearning, data: Dataset) -> None:
    state = _fit(method, data)
    policy = BudgetPolicy(max_deletion_fraction=0.1)  # 4 of 40 samples
    assert method.budget_cap(state, policy, AUDITED) == 4
    assert method.must_retrain(state, policy, AUDITED, pending_deletions=4) is None
    reason = method.must_retrain(state, policy, AUDITED, pending_deletions=5)
    assert reason is not None and "5 deletions" in reason
    assert method.budget_cap(state, BudgetPolicy(max_deletions=2, max_deletion_fraction=None), AUDITED) == 2
    fallback = BudgetPolicy(max_deletion_fraction=None, max_deletions=None)
    assert method.budget_cap(state, fallback, AUDITED) == 6  # the model's own 15%
    request = ForgetRequest(sample_ids=data.sample_ids[:3])
    out = method.forget(state, request, 0, AUDITED, remaining=data, policy=policy)
    assert out.certificate.budget_cap == 4 and out.certificate.budget_spent == 3
    assert method.must_retrain(out.state, policy, AUDITED, pending_deletions=2) is not None


# --------------------------------------------------------------------------------- determinism
def test_fit_and_forget_are_deterministic(method: MiniUnlearning, data: Dataset) -> None:
    a, b = _fit(method, data, dtype="float32"), _fit(method, data, dtype="float32")
    for name, tensor in a.artifacts.items():
        assert torch.equal(tensor, b.artifacts[name]), name
    ids = _ids_in_window(a, data, per_batch=1)
    one, two = _forget(method, a, ids, data), _forget(method, a, ids, data)
    assert torch.equal(one.state.clean_weights, two.state.clean_weights)
    assert one.certificate.measured["correction_norm"] == two.certificate.measured["correction_norm"]
    other = _fit(method, data, dtype="float32")
    other_seed, _ = method.fit(data, {**TINY, "dtype": "float32"}, AUDITED, seed=4)
    assert torch.equal(other.clean_weights, a.clean_weights)
    assert not torch.equal(other_seed.clean_weights, a.clean_weights)


# ------------------------------------------------------------------------------------- bad input
def test_bad_requests_raise_the_protocol_errors(method: MiniUnlearning, data: Dataset) -> None:
    state = _fit(method, data)
    sid = data.sample_ids[0]
    with pytest.raises(EmptyRequestError):
        method.forget(state, ForgetRequest(), 0, AUDITED, remaining=data)
    with pytest.raises(UnsupportedRequestError, match="edge"):
        method.forget(state, ForgetRequest(edges=(("a", "b"),)), 0, AUDITED, remaining=data)
    with pytest.raises(UnknownSampleError, match="nope"):
        method.forget(state, ForgetRequest(sample_ids=("nope",)), 0, AUDITED, remaining=data)
    with pytest.raises(UnknownSampleError, match="ghost"):
        method.forget(state, ForgetRequest(owner_ids=("ghost",)), 0, AUDITED, remaining=data)
    with pytest.raises(AlreadyDeletedError, match="twice"):
        method.forget(state, ForgetRequest(sample_ids=(sid, sid)), 0, AUDITED, remaining=data)
    after = _forget(method, state, [sid], data).state
    with pytest.raises(AlreadyDeletedError, match=sid):
        _forget(method, after, [sid], data)
    with pytest.raises(InvalidDatasetError, match="remaining training data"):
        method.forget(state, ForgetRequest(sample_ids=(sid,)), 0, AUDITED, remaining=None)
    window_sample = data.sample_ids[_window_batches(state)[0][0]]
    other = next(s for s in data.sample_ids if s != window_sample)
    with pytest.raises(InvalidDatasetError, match=window_sample):
        _forget(method, state, [other], data.without([window_sample]))
    narrow = Dataset(data.sample_ids, data.owner_ids, data.features[:, :2], data.labels, data.num_classes)
    with pytest.raises(DimensionMismatchError):
        _forget(method, state, [sid], narrow)
    with pytest.raises(InvalidConfigError, match="artifacts"):
        _forget(method, replace(state, artifacts={}), [sid], data)
    with pytest.raises(InvalidConfigError, match="audited"):
        method.forget(state, ForgetRequest(sample_ids=(sid,)), 0, CERTIFIED, remaining=data)


@pytest.mark.parametrize(
    "override",
    [
        {"k": 0},
        {"m": 0},
        {"k": 2.5},
        {"k": 10_001},
        {"m": 51},
        {"hvp": "newton"},
        {"dtype": "float16"},
        {"max_deletion_fraction": 0},
        {"lr": -1.0},
        {"batch_size": 0},
    ],
)
def test_invalid_config_is_rejected(method: MiniUnlearning, data: Dataset, override: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError):
        method.fit(data, {**TINY, **override}, AUDITED, seed=0)


def test_certified_release_mode_is_refused_at_fit(method: MiniUnlearning, data: Dataset) -> None:
    with pytest.raises(InvalidConfigError, match="no \\(epsilon, delta\\) guarantee"):
        method.fit(data, TINY, CERTIFIED, seed=0)


def test_registered_with_the_protocol_attributes(method: MiniUnlearning) -> None:
    assert method.needs_training_data is True
    assert method.request_kinds == frozenset({"sample", "owner"})
    assert set(method.default_config()) >= {"k", "m", "hvp", "lr", "l2", "max_deletion_fraction"}
