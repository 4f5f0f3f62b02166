"""Table models: feature scaling applied identically at fit, update and prediction; certified mode refuses
data-fitted statistics; the held-out quality report and its flag."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from unlearning.data import Dataset
from unlearning.errors import DimensionMismatchError, InvalidConfigError
from unlearning.methods.protocol import ForgetRequest, PrivacyTarget
from unlearning.methods.registry import get_method
from unlearning.methods.table_model import TableModel, transform_of
from unlearning.tables.quality import QualityReport, Verdict, judge, quality_problem
from unlearning.tables.transform import FeatureTransform, Scaling, StatisticsSource, plan_scaling

AUDITED = PrivacyTarget(release_mode="audited")
CERTIFIED = PrivacyTarget(epsilon=1.0, delta=1e-3, release_mode="certified")


def _table(n: int = 240, seed: int = 0, signal: bool = True) -> Dataset:
    """Three columns on wildly different scales and offsets; the label is a linear rule of the columns
    (or, without ``signal``, a coin toss)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 3))
    labels = (z @ np.array([1.0, -1.0, 0.5]) > 0).astype(int) if signal else rng.integers(0, 2, n)
    raw = z * np.array([1e-3, 1.0, 1e4]) + np.array([5.0, -100.0, 1e5])
    ids = tuple(f"s{i}" for i in range(n))
    return Dataset(ids, tuple(f"o{i // 2}" for i in range(n)), raw, labels, 2)


def test_auto_scaling_standardises_audited_and_takes_columns_as_they_come_when_certified() -> None:
    assert plan_scaling({}, "audited").scaling == Scaling.STANDARDIZE
    assert plan_scaling({}, "audited").source == StatisticsSource.FITTED
    assert plan_scaling({}, "certified").scaling == Scaling.NONE
    declared = plan_scaling({"feature_statistics": {"min": [0, 0], "max": [1, 4]}}, "certified")
    assert declared.scaling == Scaling.MINMAX and declared.source == StatisticsSource.DECLARED


@pytest.mark.parametrize("scaling", ["standardize", "minmax"])
def test_certified_mode_refuses_statistics_fitted_on_the_rows(scaling: str) -> None:
    with pytest.raises(InvalidConfigError, match="feature_statistics"):
        plan_scaling({"feature_scaling": scaling}, "certified")
    with pytest.raises(InvalidConfigError, match="feature_statistics"):
        get_method("newton_removal").fit(_table(), {"feature_scaling": scaling}, CERTIFIED, 0)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"feature_scaling": "zscore"}, "feature_scaling must be one of"),
        ({"feature_statistics": {"mean": [0.0]}}, "keys"),
        ({"feature_statistics": {"mean": [0.0, 1.0], "std": [1.0]}}, "one per column"),
        ({"feature_statistics": {"mean": [0.0], "std": [0.0]}}, "std.0. is 0.0"),
        ({"feature_statistics": {"min": [1.0], "max": [1.0]}}, "must be above"),
        ({"feature_statistics": {"mean": ["a"], "std": [1.0]}}, "finite numbers"),
        ({"feature_scaling": "minmax", "feature_statistics": {"mean": [0.0], "std": [1.0]}}, "takes feature_statistics"),
        ({"feature_scaling": "none", "feature_statistics": {"mean": [0.0], "std": [1.0]}}, "drop the statistics"),
    ],
)
def test_malformed_scaling_settings_say_what_to_fix(config: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        get_method("hessian_free").check_config(config)


def test_declared_statistics_of_another_width_are_refused_at_registration() -> None:
    method = get_method("hessian_free")
    assert isinstance(method, TableModel)
    config = {"feature_statistics": {"mean": [0.0, 0.0], "std": [1.0, 1.0]}}
    with pytest.raises(DimensionMismatchError, match="3 feature columns"):
        method.check_registration(config, CERTIFIED, 3)
    method.check_registration(config, CERTIFIED, 2)


def test_min_quality_takes_above_majority_or_an_accuracy() -> None:
    method = get_method("hessian_free")
    method.check_config({"min_quality": "above_majority"})
    method.check_config({"min_quality": 0.8})
    for bad in (1.5, "good", True):
        with pytest.raises(InvalidConfigError, match="min_quality"):
            method.check_config({"min_quality": bad})


def test_fitted_scaling_is_the_training_rows_statistics() -> None:
    data = _table()
    state, certificate = get_method("hessian_free").fit(data, {"epochs": 2}, AUDITED, 0)
    transform = transform_of(state)
    x = data.features.astype(np.float64)
    assert transform.offset is not None and transform.scale is not None
    np.testing.assert_allclose(transform.offset, x.mean(0), rtol=1e-6)
    np.testing.assert_allclose(transform.scale, x.std(0), rtol=1e-5)
    assert state.accounting["feature_transform"] == {"scaling": "standardize", "statistics": "fitted"}
    assert certificate.inputs["feature_scaling"] == "standardize"
    assert certificate.inputs["feature_statistics"] == "fitted"
    assert "fitted on this budget epoch" in certificate.notes


@pytest.mark.parametrize("name", ["hessian_free", "mini_unlearning", "newton_removal"])
def test_the_same_scaling_serves_fit_prediction_by_row_and_by_id(name: str) -> None:
    """What the wrapped method sees at fit is the transformed table; a prediction of raw rows and of the
    same rows named by id agree, and agree with the wrapped method on rows transformed by hand."""
    data = _table()
    method = get_method(name)
    assert isinstance(method, TableModel)
    state, _ = method.fit(data, {"epochs": 20, "l2": 0.001, "lr": 0.05, "batch_size": 32} if name != "newton_removal" else {}, AUDITED, 0)
    ids = list(data.sample_ids[:50])
    by_rows = method.predict(state, None, instances=data.features[:50])
    by_id = method.predict(state, data, item_ids=ids)
    np.testing.assert_array_equal(by_rows, by_id)
    by_hand = FeatureTransform.restore(state.accounting["feature_transform"], state.artifacts).apply(data.features[:50])
    inner = method.inner
    if hasattr(inner, "predict"):
        expected = inner.predict(state, None, instances=by_hand)
    else:
        from unlearning.models import build_model

        logits = build_model(state.model).logits(state.released_weights, torch.as_tensor(by_hand))
        expected = logits.argmax(1).numpy()
    np.testing.assert_array_equal(by_rows, expected)
    assert float(np.mean(by_rows == data.labels[:50])) > 0.85  # unscaled, these columns defeat SGD


def test_a_deletion_update_reads_the_remaining_rows_through_the_fit_scaling() -> None:
    """newton_removal's update recomputes its design from the remaining rows: given raw rows, the wrapper
    transforms them with the epoch's statistics, so the result equals the wrapped method fed by hand."""
    data = _table()
    method = get_method("newton_removal")
    assert isinstance(method, TableModel)
    state, _ = method.fit(data, {}, AUDITED, 0)
    request = ForgetRequest(owner_ids=("o3",))
    outcome = method.forget(state, request, 5, AUDITED, remaining=data)
    by_hand = data.with_features(transform_of(state).apply(data.features))
    expected = method.inner.forget(state, request, 5, AUDITED, remaining=by_hand)
    torch.testing.assert_close(outcome.state.released_weights, expected.state.released_weights)
    # The scaling and the quality report carry over to the new state and certificate.
    assert outcome.state.accounting["feature_transform"] == state.accounting["feature_transform"]
    assert outcome.state.accounting["quality"] == state.accounting["quality"]
    assert outcome.certificate.measured["quality_accuracy"] == state.accounting["quality"]["accuracy"]
    np.testing.assert_array_equal(transform_of(outcome.state).offset, transform_of(state).offset)


def test_a_model_with_signal_is_not_flagged_and_one_without_is() -> None:
    method = get_method("hessian_free")
    good, certificate = method.fit(_table(signal=True), {"epochs": 3}, AUDITED, 0)
    report = QualityReport.from_dict(good.accounting["quality"])
    assert report is not None and not report.flagged
    assert report.accuracy is not None and report.baseline_accuracy is not None
    assert report.accuracy > report.majority_rate + 0.2 and report.baseline_accuracy > 0.85
    assert 46 <= report.holdout_rows <= 48 and report.holdout_rows + report.probe_train_rows == 240
    assert certificate.measured["quality_flagged"] == 0.0
    noise, _ = method.fit(_table(n=300, seed=3, signal=False), {"epochs": 3, "l2": 0.5}, AUDITED, 0)
    flagged = QualityReport.from_dict(noise.accounting["quality"])
    assert flagged is not None and flagged.flagged and flagged.verdict == Verdict.NO_BETTER_THAN_MAJORITY
    assert "majority class" in flagged.note
    assert quality_problem(flagged, "above_majority") is not None
    assert quality_problem(report, "above_majority") is None
    assert quality_problem(report, 0.99) is not None and quality_problem(report, 0.5) is None


def test_verdicts() -> None:
    assert judge(0.60, 0.60, 0.9, 100, 400).verdict == Verdict.NO_BETTER_THAN_MAJORITY
    assert judge(0.70, 0.60, 0.9, 100, 400).verdict == Verdict.BELOW_BASELINE
    assert judge(0.88, 0.60, 0.9, 100, 400).verdict == Verdict.OK


def test_a_tiny_table_is_not_measured_and_passes_above_majority() -> None:
    state, _ = get_method("hessian_free").fit(_table(n=20), {"epochs": 1}, AUDITED, 0)
    report = QualityReport.from_dict(state.accounting["quality"])
    assert report is not None and report.verdict == Verdict.NOT_MEASURED and not report.flagged
    assert quality_problem(report, "above_majority") is None
    assert "could not be checked" in (quality_problem(report, 0.5) or "")


def test_graph_methods_are_not_wrapped() -> None:
    assert not isinstance(get_method("graph_node_newton"), TableModel)
