"""Hyperparameter defaults derived from the data: the rules' values for a small and a large table, user
values winning, ``check_config`` accepting the None defaults, the resolved values recorded where forget and
repair read them back, and each table method landing near scikit-learn's ``LogisticRegression()`` on a
standardised table with no hyperparameter given."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from unlearning.data import Dataset
from unlearning.device import default_device
from unlearning.methods import hessian_free, newton_tabular
from unlearning.methods.langevin.batching import gather_batches
from unlearning.methods.langevin.defaults import burn_in_step_budget, derived_feature_bound, derived_l2
from unlearning.methods.langevin.problem import LogisticProblem
from unlearning.methods.mini_unlearning import method as mini_method
from unlearning.methods.protocol import ForgetRequest, PrivacyTarget
from unlearning.methods.registry import get_method
from unlearning.models import build_model
from unlearning.privacy.langevin.constants import PNSGDConstants
from unlearning.privacy.langevin.distance import epochs_to_converge
from unlearning.sgd_defaults import SGDRule, mean_squared_row_norm, resolve_sgd

AUDITED = PrivacyTarget(epsilon=1.0, delta=1e-5, release_mode="audited")
CERTIFIED = PrivacyTarget(epsilon=1.0, delta=1e-5, release_mode="certified")
TABLE_METHODS = ("hessian_free", "langevin", "mini_unlearning", "newton_removal")


def _table(n: int, d: int, classes: int = 2, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.integers(0, classes, n)
    y[:classes] = np.arange(classes)
    return Dataset(tuple(f"s{i}" for i in range(n)), tuple(f"o{i}" for i in range(n)), x, y, classes)


def _inner(name: str) -> Any:
    method = get_method(name)
    return getattr(method, "inner", method)  # the method itself, not the table wrapper


SMALL, LARGE = _table(112, 4), _table(100_000, 4)


# ------------------------------------------------------------------------------------------ SGD rules
def test_hessian_free_rule_for_a_small_and_a_large_table() -> None:
    rule = hessian_free.SGD_RULE
    small = resolve_sgd(hessian_free.HessianFree().default_config(), SMALL, rule)
    assert small["l2"] == pytest.approx(1 / 112)
    assert small["batch_size"] == 32
    assert small["epochs"] == 200  # ceil(1000 / 4) = 250 steps' worth of epochs, capped at E = 200
    assert small["lr"] == pytest.approx(4.0 / mean_squared_row_norm(SMALL))
    assert small["lr_decay"] == pytest.approx(0.3 ** (1 / (200 * 4)))
    large = resolve_sgd(hessian_free.HessianFree().default_config(), LARGE, rule)
    assert large["l2"] == pytest.approx(1e-5)
    assert (large["batch_size"], large["epochs"]) == (32, 1)  # one epoch already has 3125 >= 1000 steps
    assert large["lr_decay"] == pytest.approx(0.3 ** (1 / 3125))
    assert mean_squared_row_norm(LARGE) == pytest.approx(5.0, rel=0.01)  # 4 unit-variance columns + the 1


def test_mini_unlearning_rule_for_a_small_and_a_large_table() -> None:
    defaults = mini_method.MiniUnlearning().default_config()
    small = resolve_sgd(defaults, SMALL, mini_method.SGD_RULE)
    assert (small["batch_size"], small["epochs"], small["lr_decay"]) == (112, 1000, 1.0)
    large = resolve_sgd(defaults, LARGE, mini_method.SGD_RULE)
    assert (large["batch_size"], large["epochs"]) == (256, math.ceil(2000 / math.ceil(100_000 / 256)))
    assert large["l2"] == pytest.approx(1e-5) and large["lr_decay"] == 1.0


def test_given_values_win_and_lr_decay_follows_the_given_epochs() -> None:
    rule = SGDRule(batch_size=32, min_steps=1000, max_epochs=200, final_lr_fraction=0.3)
    given = {"epochs": 3, "batch_size": 16, "lr": 0.5, "lr_decay": None, "l2": 0.2}
    out = resolve_sgd(given, SMALL, rule)
    assert {k: out[k] for k in ("epochs", "batch_size", "lr", "l2")} == {"epochs": 3, "batch_size": 16, "lr": 0.5,
                                                                        "l2": 0.2}
    assert out["lr_decay"] == pytest.approx(0.3 ** (1 / (3 * 7)))
    assert resolve_sgd({**given, "lr_decay": 0.99}, SMALL, rule)["lr_decay"] == 0.99


@pytest.mark.parametrize("name", TABLE_METHODS)
def test_check_config_accepts_the_none_defaults(name: str) -> None:
    method = get_method(name)
    defaults = method.default_config()
    nones = [k for k, v in defaults.items() if v is None]
    assert nones, f"{name} derives nothing from the data"
    method.check_config(defaults)
    for key in nones:
        method.check_config({key: None})


def test_hessian_free_records_and_reuses_the_resolved_values() -> None:
    method = _inner("hessian_free")
    state, _ = method.fit(SMALL, {"audit_probe_fraction": 0.0, "epochs": 2}, AUDITED, seed=0)
    config = state.accounting["config"]
    assert all(config[k] is not None for k in ("epochs", "batch_size", "lr", "lr_decay", "l2"))
    assert config["epochs"] == 2 and state.accounting["epochs"] == 2  # the user's value
    assert config["l2"] == pytest.approx(1 / 112) and state.accounting["eta"] == config["lr"]
    repaired, _ = method.repair(state, SMALL, 1, 0, AUDITED)  # reads the recorded config back
    assert repaired.accounting["config"] == config


def test_mini_unlearning_records_the_resolved_values_and_forgets_with_them() -> None:
    method = _inner("mini_unlearning")
    state, cert = method.fit(SMALL, {"epochs": 5}, AUDITED, seed=0)
    config = state.accounting["config"]
    assert (config["epochs"], config["batch_size"], config["lr_decay"]) == (5, 112, 1.0)
    assert cert.inputs["lr"] == pytest.approx(4.0 / mean_squared_row_norm(SMALL))
    out = method.forget(state, ForgetRequest(sample_ids=("s3",)), 0, AUDITED, remaining=SMALL)
    assert out.certificate.inputs["l2"] == config["l2"]


# ------------------------------------------------------------------------------------------ Langevin
def test_langevin_feature_bound_is_the_90_percent_quantile_and_clips_the_rest() -> None:
    norms = np.arange(1.0, 11.0)
    assert derived_feature_bound(norms, False) == pytest.approx(np.quantile(norms, 0.9))
    assert derived_feature_bound(norms, True) == pytest.approx(math.sqrt(np.quantile(norms, 0.9) ** 2 + 1))
    assert derived_feature_bound(np.array([0.0] * 19 + [5.0]), False) == 5.0  # quantile 0: the max
    data = _table(200, 3)
    big = Dataset(data.sample_ids, data.owner_ids, data.features * np.float32(10), data.labels, 2)
    state, _ = _inner("langevin").fit(big, {"epochs": 2}, CERTIFIED, seed=0)
    problem = LogisticProblem.from_dict(state.accounting)
    assert problem.row_clip and problem.intercept
    rows = gather_batches(big, [np.arange(len(big))], problem, default_device())[0][0]
    assert float(rows.norm(dim=1).max()) == pytest.approx(problem.feature_bound, rel=1e-9)


def test_langevin_step_budget_and_l2_rule() -> None:
    assert [burn_in_step_budget(n) for n in (100, 8_000, 10**6)] == [50_000, 80_000, 200_000]
    # A small table at a modest smoothness fits its burn-in at lam = 1/n ...
    assert derived_l2(112, 2.0, 3.0, 112, 112, 100.0, 1e-3) == pytest.approx(1 / 112)
    # ... a large one does not: lam rises until the burn-in takes at most S noisy steps.
    n, b, smooth = 70_000, 128, 40.0
    slots = math.ceil(n / b) * b
    lam = derived_l2(n, smooth, 13.0, slots, b, 100.0, 1e-3)
    assert lam > 1 / n

    def steps(m: float) -> int:
        const = PNSGDConstants(slots, b, 1 / (smooth + m), m, 13.0, 100.0, smooth + m)
        return const.batches * epochs_to_converge(const, 1e-3)

    assert steps(lam) <= burn_in_step_budget(n) < steps(lam * 0.99)


def test_langevin_small_table_trains_in_seconds_and_records_what_it_derived() -> None:
    """The old rule lam = 1e-6 n refused a few hundred rows ("needs 48,952,871 epochs")."""
    data = _table(300, 10, classes=3)
    method = _inner("langevin")
    state, cert = method.fit(data, {}, CERTIFIED, seed=0)
    account = state.accounting
    assert account["l2"] == pytest.approx(1 / 300) and account["row_clip"] is True
    assert account["burn_in_epochs"] * account["batches"] <= burn_in_step_budget(300)
    assert method.verify_certificate(cert) == []
    given, _ = method.fit(data, {"l2": 0.05, "feature_bound": 10.0}, CERTIFIED, seed=0)
    assert given.accounting["l2"] == 0.05 and given.accounting["feature_bound"] == 10.0
    assert given.accounting["row_clip"] is False


def test_langevin_certified_accounting_on_the_derived_defaults() -> None:
    from unlearning.methods.protocol import BudgetPolicy

    data = _table(600, 4, seed=4)
    method = _inner("langevin")
    state, _ = method.fit(data, {}, CERTIFIED, seed=0)
    remaining = data
    for i, sid in enumerate(("s5", "s17")):
        assert method.must_retrain(state, BudgetPolicy(), CERTIFIED, pending_deletions=1) is None
        out = method.forget(state, ForgetRequest(sample_ids=(sid,)), 10 + i, CERTIFIED, remaining=remaining)
        assert method.verify_certificate(out.certificate) == []
        assert out.certificate.epsilon is not None and out.certificate.epsilon <= 1.0
        assert out.certificate.inputs["epochs"] < state.accounting["burn_in_epochs"]
        state, remaining = out.state, remaining.without([sid])


# ------------------------------------------------------------------------------------------ newton_removal
def test_newton_lam_rule_and_the_scaled_clip_transform() -> None:
    assert newton_tabular.derived_lam(100, 25, "audited") == pytest.approx(1 / (10 * 100 * 25))
    assert newton_tabular.derived_lam(100_000, 25, "certified") == pytest.approx(1 / (100_000 * 25))
    fmap = newton_tabular.TabularFeatureMap.fit(np.zeros((1, 4)), "scaled_clip", 1.0)
    z = fmap.transform(np.array([[1.0, 1.0, 0.0, 0.0], [6.0, 8.0, 0.0, 0.0]]))
    np.testing.assert_allclose(z, [[0.5, 0.5, 0, 0, 1], [0.6, 0.8, 0, 0, 1]])  # / max(sqrt(4), ||x||)


def test_newton_records_the_derived_lam_and_forgets_with_it() -> None:
    method = _inner("newton_removal")
    state, _ = method.fit(SMALL, {}, CERTIFIED, seed=0)
    assert state.accounting["config"]["lam"] == pytest.approx(1 / (112 * 4))
    out = method.forget(state, ForgetRequest(sample_ids=("s1",)), 5, CERTIFIED, remaining=SMALL)
    assert out.state.accounting["config"]["lam"] == state.accounting["config"]["lam"]
    assert method.verify_certificate(out.certificate) == []
    audited, _ = method.fit(SMALL, {}, AUDITED, seed=0)
    assert audited.accounting["config"]["lam"] == pytest.approx(1 / (10 * 112 * 4))
    given, _ = method.fit(SMALL, {"lam": 0.01}, AUDITED, seed=0)
    assert given.accounting["config"]["lam"] == 0.01


# ------------------------------------------------------------------------------------------ accuracy
@pytest.fixture(scope="module")
def breast_cancer() -> tuple[Dataset, np.ndarray, np.ndarray, float]:
    """sklearn's breast_cancer, seeded 75/25 split, standardised on the training rows, and the held-out
    accuracy of ``LogisticRegression()`` (C = 1, lbfgs) on it."""
    x, y = load_breast_cancer(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    scaler = StandardScaler().fit(x_tr)
    x_tr, x_te = scaler.transform(x_tr).astype(np.float32), scaler.transform(x_te).astype(np.float32)
    reference = LogisticRegression(max_iter=1000).fit(x_tr, y_tr).score(x_te, y_te)
    n = len(y_tr)
    data = Dataset(tuple(f"s{i}" for i in range(n)), tuple(f"o{i}" for i in range(n)), x_tr, y_tr, 2)
    return data, x_te, y_te, float(reference)


@pytest.mark.parametrize(
    ("name", "points"), [("hessian_free", 3), ("langevin", 3), ("mini_unlearning", 5), ("newton_removal", 3)]
)
def test_defaults_land_near_scikit_learn_on_a_standardised_table(name: str, points: int, breast_cancer) -> None:
    data, x_test, y_test, reference = breast_cancer
    method = _inner(name)
    state, _ = method.fit(data, {}, AUDITED, seed=0)
    if name == "newton_removal":
        predicted = method.predict(state, None, instances=x_test)
    else:
        import torch

        logits = build_model(state.model).logits(state.released_weights.float(), torch.as_tensor(x_test))
        predicted = logits.argmax(1).numpy()
    accuracy = float((np.asarray(predicted) == y_test).mean())
    assert reference > 0.94
    assert accuracy >= reference - points / 100, f"{name}: {accuracy:.3f} against scikit-learn's {reference:.3f}"
