"""The quality report of a table model: held-out accuracy against the majority rate and a plain
regularised logistic regression.

At every training and retrain a seeded, stratified holdout of the rows is set aside; the method is fitted
(with the model's own configuration and feature scaling) on the other rows, at most ``MAX_PROBE_TRAIN_ROWS``
of them, and scored on the holdout. The same rows train scikit-learn's ``LogisticRegression`` (C = 1, on
columns standardised with the probe's training rows), the baseline any table model should come close to.
The served model is then fitted on every row, so the report is a measurement of the configuration on
this data, not of the served weights (which saw the holdout rows).

A model is *flagged* when its held-out accuracy is no better than always answering the probe's majority
class: ``accuracy < majority_rate + FLAG_MARGIN``.
"""

from __future__ import annotations

import enum
import math
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from unlearning.data import Dataset

FLAG_MARGIN = 0.01
BELOW_BASELINE = 0.05  # a verdict only: more than 5 points under the baseline is worth a look
HOLDOUT_FRACTION = 0.2
MIN_ROWS = 30  # below this a holdout says nothing
MAX_HOLDOUT_ROWS = 5_000
MAX_PROBE_TRAIN_ROWS = 20_000
_SEED_SALT = 0x9A11


class Verdict(enum.StrEnum):
    OK = "ok"
    BELOW_BASELINE = "below_baseline"
    NO_BETTER_THAN_MAJORITY = "no_better_than_majority"
    NOT_MEASURED = "not_measured"


@dataclass(frozen=True)
class QualityReport:
    """Held-out figures of one (re)training; ``accuracy`` etc. are None when not measured."""

    verdict: Verdict
    accuracy: float | None = None
    majority_rate: float | None = None
    baseline_accuracy: float | None = None
    holdout_rows: int = 0
    probe_train_rows: int = 0
    note: str = ""

    @property
    def flagged(self) -> bool:
        return self.verdict == Verdict.NO_BETTER_THAN_MAJORITY

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict.value, "flagged": self.flagged}

    @staticmethod
    def from_dict(data: Mapping[str, Any] | None) -> QualityReport | None:
        if not data:
            return None
        fields = {k: data[k] for k in QualityReport.__dataclass_fields__ if k in data}
        return QualityReport(**{**fields, "verdict": Verdict(data["verdict"])})

    def measured(self) -> dict[str, float]:
        """The certificate's ``measured`` entries (numbers only; flagged as 0/1)."""
        out: dict[str, float] = {"quality_flagged": float(self.flagged), "quality_holdout_rows": float(self.holdout_rows)}
        for key in ("accuracy", "majority_rate", "baseline_accuracy"):
            value = getattr(self, key)
            if value is not None:
                out[f"quality_{key}"] = float(value)
        return out


def judge(accuracy: float, majority_rate: float, baseline: float, holdout: int, train: int) -> QualityReport:
    """The verdict of held-out figures; see the module docstring."""
    if accuracy < majority_rate + FLAG_MARGIN:
        verdict = Verdict.NO_BETTER_THAN_MAJORITY
        note = (
            f"held-out accuracy {accuracy:.3f} is no better than always answering the majority class "
            f"({majority_rate:.3f}); a plain logistic regression gets {baseline:.3f}"
        )
    elif accuracy < baseline - BELOW_BASELINE:
        verdict = Verdict.BELOW_BASELINE
        note = f"held-out accuracy {accuracy:.3f} is well below a plain logistic regression's {baseline:.3f}"
    else:
        verdict, note = Verdict.OK, ""
    return QualityReport(verdict, accuracy, majority_rate, baseline, holdout, train, note)


def not_measured(reason: str) -> QualityReport:
    return QualityReport(Verdict.NOT_MEASURED, note=reason)


def holdout_split(dataset: Dataset, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Row indices (probe_train, holdout): a seeded stratified holdout of ``HOLDOUT_FRACTION`` (at most
    ``MAX_HOLDOUT_ROWS``), the probe's training rows the rest (at most ``MAX_PROBE_TRAIN_ROWS``, a seeded
    draw). None when the dataset is too small to say anything."""
    n = len(dataset)
    if n < MIN_ROWS:
        return None
    k = min(max(math.ceil(HOLDOUT_FRACTION * n), 10), MAX_HOLDOUT_ROWS)
    rng = np.random.default_rng([seed, _SEED_SALT])
    perm = rng.permutation(n)
    labels = dataset.labels[perm]
    # Stratified: each class contributes its share of the holdout, rounded, at least one row where it
    # has two or more (so the probe's training rows keep every class).
    counts = np.bincount(labels, minlength=dataset.num_classes)
    quota = np.minimum(np.floor(counts * k / n).astype(np.int64), np.maximum(counts - 1, 0))
    picked = np.concatenate([perm[labels == c][: quota[c]] for c in range(dataset.num_classes)])
    if len(picked) == 0:
        return None
    rest = np.setdiff1d(perm, picked, assume_unique=True)
    rest = rest[rng.permutation(len(rest))][:MAX_PROBE_TRAIN_ROWS]
    return np.sort(rest), np.sort(picked)


def majority_rate(train_labels: np.ndarray, test_labels: np.ndarray) -> float:
    """The held-out accuracy of always answering the training rows' most frequent class."""
    majority = int(np.bincount(train_labels).argmax())
    return float(np.mean(test_labels == majority))


def baseline_accuracy(train: Dataset, test: Dataset, seed: int) -> float:
    """scikit-learn ``LogisticRegression`` (C = 1) on columns standardised with ``train``'s statistics."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    x_train = train.features.reshape(len(train), -1).astype(np.float64)
    x_test = test.features.reshape(len(test), -1).astype(np.float64)
    if len(np.unique(train.labels)) < 2:
        return majority_rate(train.labels, test.labels)
    scaler = StandardScaler().fit(x_train)
    model = LogisticRegression(C=1.0, max_iter=300, random_state=seed % 2**32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a ConvergenceWarning at max_iter still gives a usable baseline
        model.fit(scaler.transform(x_train), train.labels)
    return float(np.mean(model.predict(scaler.transform(x_test)) == test.labels))


def quality_problem(report: QualityReport | None, min_quality: Any) -> str | None:
    """Why a model fails its registration's ``min_quality`` (None when it passes or asks nothing):
    ``"above_majority"`` fails a flagged model, a number in [0, 1] a held-out accuracy below it."""
    if min_quality is None or report is None:
        return None
    if report.verdict == Verdict.NOT_MEASURED:
        return None if min_quality == "above_majority" else f"min_quality {min_quality} could not be checked: {report.note}"
    if min_quality == "above_majority":
        return f"the model failed its min_quality: {report.note}" if report.flagged else None
    assert report.accuracy is not None
    if report.accuracy < float(min_quality):
        return (
            f"the model failed its min_quality {float(min_quality):g}: held-out accuracy {report.accuracy:.3f} "
            f"(majority class {report.majority_rate:.3f}, plain logistic regression {report.baseline_accuracy:.3f})"
        )
    return None
