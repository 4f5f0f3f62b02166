"""Every table method with its feature scaling and quality report.

:class:`TableModel` wraps a method that trains on tables (:func:`trains_on_tables`) and adds three
hyperparameters of its own, the same for every such method:

- ``feature_scaling`` / ``feature_statistics``: the per-column transform of :mod:`unlearning.tables.transform`,
  applied to the rows at fit, to the remaining rows a deletion update reads, and to the rows of a
  prediction (raw instances or rows named by id). Its statistics are stored with every version as the
  artifacts ``feature_offset`` / ``feature_scale``; the accounting and certificates say which scaling and
  where its statistics came from.
- ``min_quality``: what the service checks after a first training (:func:`unlearning.tables.quality.quality_problem`).

At every ``fit`` (training and retrain) the quality probe of :mod:`unlearning.tables.quality` runs first;
its report is kept in the accounting (``quality``) and in every certificate's ``measured``
(``quality_*``). The wrapped method sees only its own hyperparameters and already-transformed rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from unlearning.data import Dataset
from unlearning.errors import DimensionMismatchError, InvalidConfigError, InvalidDatasetError
from unlearning.methods.hyperparameters import HyperParameter
from unlearning.methods.job_estimate import FLOAT64, DataShape, JobEstimate, data_bytes, estimate, in_sequence
from unlearning.methods.protocol import (
    TABLE,
    BudgetPolicy,
    ChecksRegistration,
    ForgetOutcome,
    ForgetRequest,
    MethodState,
    PredictsOwnData,
    PrivacyTarget,
    ProgressCallback,
    UnlearningMethod,
    dataset_kind,
    needs_remaining_data,
)
from unlearning.models import ModelSpec
from unlearning.models.flat import shared_model
from unlearning.newton import one_source
from unlearning.privacy.certificate import Certificate
from unlearning.tables.quality import (
    HOLDOUT_FRACTION,
    MAX_HOLDOUT_ROWS,
    MAX_PROBE_TRAIN_ROWS,
    MIN_ROWS,
    QualityReport,
    baseline_accuracy,
    holdout_split,
    judge,
    majority_rate,
    not_measured,
)
from unlearning.tables.transform import (
    OFFSET_ARTIFACT,
    SCALE_ARTIFACT,
    FeatureTransform,
    Scaling,
    ScalingPlan,
    StatisticsSource,
    plan_scaling,
)

OWN_DEFAULTS: dict[str, Any] = {"feature_scaling": "auto", "feature_statistics": None, "min_quality": None}


def trains_on_tables(method: UnlearningMethod) -> bool:
    return dataset_kind(method) == TABLE


def check_min_quality(value: Any) -> None:
    if value is None or value == "above_majority":
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InvalidConfigError(
            f'min_quality must be null, "above_majority" or a held-out accuracy in [0, 1], got {value!r}'
        )


OWN_HYPERPARAMETERS = (
    HyperParameter("feature_scaling", "string", "Per-column feature transform: standardize, minmax, none, or auto "
                   "(standardize in audited mode; in certified mode the declared statistics' kind, else none)",
                   choices=tuple(s.value for s in Scaling)),
    HyperParameter("feature_statistics", "object", 'Declared column statistics, {"mean": [...], "std": [...]} or '
                   '{"min": [...], "max": [...]}, one value per feature column', nullable=True,
                   null_means="none declared: the scaling's statistics are fitted on each budget epoch's training "
                   "rows (audited mode only)"),
    HyperParameter("min_quality", "number", 'Held-out accuracy the first training must reach, or "above_majority" '
                   "(better than always answering the majority class)", minimum=0, maximum=1,
                   choices=("above_majority",), nullable=True, null_means="no quality requirement"),
)
"""The declarations of :data:`OWN_DEFAULTS`, as :func:`plan_scaling` and :func:`check_min_quality` check them."""


class TableModel:
    """A table method with feature scaling and a quality report; see the module docstring.

    Every attribute it does not define (``name``, ``request_kinds``, a method's own extras) is the
    wrapped method's."""

    def __init__(self, inner: UnlearningMethod) -> None:
        self.inner = inner

    def __getattr__(self, item: str) -> Any:
        return getattr(self.inner, item)

    # ---------------------------------------------------------------------------- configuration
    def default_config(self) -> dict[str, Any]:
        return {**self.inner.default_config(), **OWN_DEFAULTS}

    def hyperparameters(self) -> tuple[HyperParameter, ...]:
        return (*self.inner.hyperparameters(), *OWN_HYPERPARAMETERS)

    def check_config(self, config: Mapping[str, Any]) -> None:
        own, inner = _split(config)
        plan_scaling(own, "audited")  # the form of the scaling keys; the release mode is checked at registration
        check_min_quality(own.get("min_quality"))
        self.inner.check_config(inner)

    def check_registration(self, config: Mapping[str, Any], privacy: PrivacyTarget, num_features: int) -> None:
        """What needs the release mode and the data's width: a fitted scaling in certified mode, and
        declared statistics of another width, are refused before anything trains; then the wrapped
        method's own registration checks, if it has any."""
        own, inner = _split(config)
        plan = plan_scaling(own, privacy.release_mode)
        if plan.declared is not None and len(plan.declared[0]) != num_features:
            raise DimensionMismatchError(
                f"feature_statistics give {len(plan.declared[0])} values per statistic, the dataset has "
                f"{num_features} feature columns"
            )
        if isinstance(self.inner, ChecksRegistration):
            self.inner.check_registration(inner, privacy, num_features)

    def needs_remaining_data(self, config: Mapping[str, Any], privacy: PrivacyTarget) -> bool:
        """The wrapped method's answer (:func:`unlearning.methods.protocol.needs_remaining_data`)."""
        return needs_remaining_data(self.inner, _split(config)[1], privacy)

    def restore_model(self, data: Mapping[str, Any]) -> Any:
        return self.inner.restore_model(data)

    def estimate_job(self, config: Mapping[str, Any], shape: DataShape) -> JobEstimate:
        """The wrapped method's estimate on every row after the quality probe's (:func:`probe_estimate`),
        with the scaled copies of the rows (float64: the raw rows, the scaled ones and the probe's split)
        held throughout."""
        _, inner = _split(config)
        both = in_sequence(probe_estimate(self.inner, inner, shape), self.inner.estimate_job(inner, shape))
        return replace(both, memory_bytes=both.memory_bytes + 3 * data_bytes(shape))

    # -------------------------------------------------------------------------------------- fit
    def fit(
        self,
        dataset: Dataset,
        config: Mapping[str, Any],
        privacy: PrivacyTarget,
        seed: int,
        progress: ProgressCallback | None = None,
        policy: BudgetPolicy | None = None,
    ) -> tuple[MethodState, Certificate]:
        own, inner_config = _split(config)
        plan = plan_scaling(own, privacy.release_mode)
        if not isinstance(dataset, Dataset):  # not a table: the wrapped method says what it takes
            return self.inner.fit(dataset, inner_config, privacy, seed, progress, policy=policy)
        report = self._probe(dataset, plan, inner_config, privacy, seed, policy, _part(progress, 0.0, _PROBE_SHARE))
        transform = FeatureTransform.for_rows(plan, dataset.features)
        state, certificate = self.inner.fit(
            _transformed(dataset, transform), inner_config, privacy, seed,
            _part(progress, _PROBE_SHARE, 1.0 - _PROBE_SHARE), policy=policy,
        )
        return _decorated(state, transform, report), _certified(certificate, transform, report)

    def _probe(
        self, dataset: Dataset, plan: ScalingPlan, config: Mapping[str, Any], privacy: PrivacyTarget,
        seed: int, policy: BudgetPolicy | None, progress: ProgressCallback | None = None,
    ) -> QualityReport:
        """Fit the method on the probe's rows and score it on the holdout (module docstring of
        :mod:`unlearning.tables.quality`). A configuration the probe's smaller data cannot take is
        reported, not raised: the real fit decides. ``progress`` hears the probe's fit (whose callback may
        raise to stop the job, e.g. when the model was deleted)."""
        split = holdout_split(dataset, seed)
        if split is None:
            return not_measured(f"too few rows ({len(dataset)}) for a held-out measurement")
        train, test = dataset.take(split[0]), dataset.take(split[1])
        transform = FeatureTransform.for_rows(plan, train.features)
        try:
            state, _ = self.inner.fit(_transformed(train, transform), config, privacy, seed, progress, policy=policy)
            predicted = self.predict(_decorated(state, transform, None), None, instances=test.features)
        except (InvalidConfigError, InvalidDatasetError) as exc:
            return not_measured(f"the probe on {len(train)} rows could not train: {exc}")
        accuracy = float(np.mean(predicted == test.labels))
        return judge(accuracy, majority_rate(train.labels, test.labels), baseline_accuracy(train, test, seed),
                     len(test), len(train))

    # ----------------------------------------------------------------------------------- forget
    def forget(
        self,
        state: MethodState,
        request: ForgetRequest,
        noise_seed: int,
        privacy: PrivacyTarget,
        remaining: Dataset | None = None,
        policy: BudgetPolicy | None = None,
    ) -> ForgetOutcome:
        transform = transform_of(state)
        data = None if remaining is None else _transformed(remaining, transform)
        outcome = self.inner.forget(state, request, noise_seed, privacy, data, policy)
        report = QualityReport.from_dict(state.accounting.get("quality"))
        scaling = {k: state.artifacts[k] for k in (OFFSET_ARTIFACT, SCALE_ARTIFACT) if k in state.artifacts}
        return ForgetOutcome(
            _decorated(outcome.state, transform, report, scaling),
            _certified(outcome.certificate, transform, report),
            outcome.forgotten_ids,
        )

    def must_retrain(
        self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget, pending_deletions: int = 0
    ) -> str | None:
        return self.inner.must_retrain(state, policy, privacy, pending_deletions)

    def budget_cap(self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget) -> float:
        return self.inner.budget_cap(state, policy, privacy)

    def verify_certificate(self, certificate: Certificate) -> list[str]:
        return self.inner.verify_certificate(certificate)

    # ------------------------------------------------------------------------------ predictions
    def predict(
        self, state: MethodState, data: Any, *, instances: Any | None = None, item_ids: Sequence[str] = ()
    ) -> np.ndarray:
        """Class labels of raw rows ``instances``, or of ``data``'s rows named by ``item_ids``, through
        the version's feature scaling."""
        rows = self._rows(state, data, instances, item_ids)
        if isinstance(self.inner, PredictsOwnData):
            return np.asarray(self.inner.predict(state, None, instances=rows))
        return self._probabilities(state, rows).argmax(axis=1)

    def predict_probabilities(
        self, state: MethodState, data: Any, *, instances: Any | None = None, item_ids: Sequence[str] = ()
    ) -> np.ndarray | None:
        """Class probabilities (n, classes) like :meth:`predict`, or None when the model gives none."""
        if isinstance(self.inner, PredictsOwnData):
            return None
        return self._probabilities(state, self._rows(state, data, instances, item_ids))

    @staticmethod
    def _rows(state: MethodState, data: Any, instances: Any | None, item_ids: Sequence[str]) -> np.ndarray:
        one_source(instances, item_ids, "sample ids of the model's remaining rows")
        if item_ids:
            if not isinstance(data, Dataset):
                raise InvalidDatasetError(f"this model predicts by id on a tabular Dataset, got {type(data).__name__}")
            raw = data.features[data.indices_of(item_ids)]
        else:
            raw = np.asarray(instances, dtype=np.float64)
        return transform_of(state).apply(raw.reshape(len(raw), -1))

    @staticmethod
    def _probabilities(state: MethodState, rows: np.ndarray) -> np.ndarray:
        spec: ModelSpec = state.model
        width = int(np.prod(spec.input_shape))
        if rows.shape[1] != width:
            raise DimensionMismatchError(
                f"each row needs {width} features (input shape {list(spec.input_shape)}, flattened row-major), "
                f"got {rows.shape[1]}"
            )
        weights = state.released_weights
        x = torch.as_tensor(rows, dtype=weights.dtype).reshape(len(rows), *spec.input_shape)
        with torch.no_grad():
            probabilities = torch.softmax(shared_model(spec).logits(weights, x), 1)
        if not torch.isfinite(probabilities).all():
            raise InvalidDatasetError(
                "the features are too large for the model's arithmetic (the scores overflowed): send values of "
                "the scale the model was trained on"
            )
        return probabilities.cpu().numpy()


BASELINE_ITERATIONS = 300  # the baseline's max_iter (unlearning.tables.quality.baseline_accuracy)
BASELINE_IMPORT_SECONDS = 2.0  # importing scikit-learn for the baseline (1.6 s of CPU in a fresh process)


def probe_estimate(inner: UnlearningMethod, config: Mapping[str, Any], shape: DataShape) -> JobEstimate:
    """The quality probe of :meth:`TableModel.fit` on data of ``shape``: the method fitted on the probe's
    training rows (:func:`unlearning.tables.quality.holdout_split`), then the baseline on the same rows, at
    most ``BASELINE_ITERATIONS`` L-BFGS iterations of a few passes of (features + 1) x classes flops per row."""
    if shape.rows < MIN_ROWS:
        return JobEstimate(0, 0.0, "no quality probe")
    holdout = min(max(math.ceil(HOLDOUT_FRACTION * shape.rows), 10), MAX_HOLDOUT_ROWS)
    rows = min(shape.rows - holdout, MAX_PROBE_TRAIN_ROWS)
    columns = 1 if shape.classes == 2 else shape.classes
    weights = (shape.features + 1) * columns
    baseline = estimate(
        {"the baseline's probabilities and L-BFGS history": 6.0 * rows * columns * FLOAT64 + 25.0 * weights * FLOAT64},
        {"the quality probe's baseline logistic regression": BASELINE_ITERATIONS * 8.0 * rows * weights},
        {"importing scikit-learn": BASELINE_IMPORT_SECONDS},
        hot_store=0,  # the baseline keeps nothing
    )
    return in_sequence(inner.estimate_job(config, replace(shape, rows=rows)), baseline)


def transform_of(state: MethodState) -> FeatureTransform:
    """The feature scaling a state was trained with (identity for a state recorded without one)."""
    return FeatureTransform.restore(state.accounting.get("feature_transform"), state.artifacts)


def _split(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    own = {k: v for k, v in config.items() if k in OWN_DEFAULTS}
    return own, {k: v for k, v in config.items() if k not in OWN_DEFAULTS}


_PROBE_SHARE = 0.45
"""The part of a table fit's progress that is the quality probe's (it fits on four fifths of the rows)."""


def _part(progress: ProgressCallback | None, start: float, span: float) -> ProgressCallback | None:
    """``progress`` for one part of a fit: its fractions mapped to ``[start, start + span]``, its phase
    kept, and the part's end not reported as the whole fit's end."""
    if progress is None:
        return None

    def report(phase: str, fraction: float) -> None:
        progress(phase, min(start + span * float(fraction), 0.999 if start + span < 1.0 else 1.0))

    return report


def _transformed(dataset: Dataset, transform: FeatureTransform) -> Dataset:
    """The rows through ``transform``; anything but a table goes to the wrapped method as it is, which
    refuses it in its own words."""
    if transform.is_identity or not isinstance(dataset, Dataset):
        return dataset
    return dataset.with_features(transform.apply(dataset.features))


def _decorated(
    state: MethodState,
    transform: FeatureTransform,
    report: QualityReport | None,
    scaling: Mapping[str, torch.Tensor] | None = None,
) -> MethodState:
    """``state`` with the transform and quality report recorded. ``scaling``: the statistics' tensors the
    state before a forget held, carried over as they are (new copies would be stored again each round)."""
    accounting = {**state.accounting, "feature_transform": transform.describe()}
    if report is not None:
        accounting["quality"] = report.to_dict()
    if transform.is_identity or OFFSET_ARTIFACT in state.artifacts:  # carried over by the wrapped method
        return replace(state, accounting=accounting)
    own = dict(scaling) if scaling else transform.artifacts()
    return replace(state, accounting=accounting, artifacts={**state.artifacts, **own})


def _certified(certificate: Certificate, transform: FeatureTransform, report: QualityReport | None) -> Certificate:
    described = transform.describe()
    note = _NOTES[transform.source]
    return replace(
        certificate,
        inputs={**certificate.inputs, "feature_scaling": described["scaling"],
                "feature_statistics": described["statistics"]},
        measured={**certificate.measured, **(report.measured() if report else {})},
        notes=f"{certificate.notes} {note}".strip(),
    )


_NOTES = {
    StatisticsSource.NONE: "Features were taken as they come (no scaling).",
    StatisticsSource.DECLARED: "Features were scaled with statistics declared at registration.",
    StatisticsSource.FITTED: (
        "Features were scaled with statistics fitted on this budget epoch's training rows (audited mode "
        "only): rows deleted within the epoch still moved them until the next retrain."
    ),
}
