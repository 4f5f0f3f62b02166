"""Per-column feature scaling that is part of a table model.

A model's ``feature_scaling`` maps every raw feature column ``x_j`` to ``(x_j - offset_j) / scale_j``:

- ``standardize``: offset = the column's mean, scale = its standard deviation (1 for a constant column);
- ``minmax``: offset = the column's minimum, scale = max - min (1 for a constant column);
- ``none``: the columns are taken as they come;
- ``auto`` (the default): ``standardize`` in ``audited`` mode; in ``certified`` mode the declared
  statistics' kind, else ``none``.

The statistics are either *declared* at registration (``feature_statistics``: ``{"mean": [...], "std":
[...]}`` or ``{"min": [...], "max": [...]}``, one value per column) or *fitted* on the training rows of
the budget epoch. A fitted transform depends on every row present at fit time, deleted rows included, so a
``certified`` release may only use declared statistics or none: the certificate of a model whose rows
moved its scaling would not bound the distance to a retrain that never saw them. The same transform is
applied at training, to the remaining rows a deletion update reads, and at prediction.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from unlearning.errors import DimensionMismatchError, InvalidConfigError

OFFSET_ARTIFACT = "feature_offset"
SCALE_ARTIFACT = "feature_scale"
_DECLARED_KEYS = {"standardize": ("mean", "std"), "minmax": ("min", "max")}


class Scaling(enum.StrEnum):
    AUTO = "auto"
    STANDARDIZE = "standardize"
    MINMAX = "minmax"
    NONE = "none"


class StatisticsSource(enum.StrEnum):
    """Where a transform's statistics came from: declared at registration, fitted on the epoch's
    training rows, or no statistics at all (``none`` scaling)."""

    DECLARED = "declared"
    FITTED = "fitted"
    NONE = "none"


@dataclass(frozen=True)
class ScalingPlan:
    """What registration asked for, resolved against the release mode (no data seen yet)."""

    scaling: Scaling
    declared: tuple[np.ndarray, np.ndarray] | None  # (offset, scale) from feature_statistics

    @property
    def source(self) -> StatisticsSource:
        if self.scaling == Scaling.NONE:
            return StatisticsSource.NONE
        return StatisticsSource.DECLARED if self.declared is not None else StatisticsSource.FITTED


def plan_scaling(config: Mapping[str, Any], release_mode: str) -> ScalingPlan:
    """The scaling a model's ``feature_scaling`` / ``feature_statistics`` ask for in ``release_mode``.

    Raises :class:`InvalidConfigError` for an unknown scaling, malformed statistics, statistics of the
    other kind, or a data-fitted scaling in ``certified`` mode (with what to declare instead)."""
    raw = config.get("feature_scaling", Scaling.AUTO.value)
    try:
        scaling = Scaling(raw)
    except ValueError:
        raise InvalidConfigError(
            f"feature_scaling must be one of {[s.value for s in Scaling]}, got {raw!r}"
        ) from None
    declared_kind, declared = _declared(config.get("feature_statistics"))
    if scaling == Scaling.AUTO:
        if declared_kind is not None:
            scaling = declared_kind
        else:
            scaling = Scaling.STANDARDIZE if release_mode == "audited" else Scaling.NONE
    if scaling == Scaling.NONE:
        if declared is not None:
            raise InvalidConfigError(
                "feature_statistics were given but feature_scaling is 'none': drop the statistics or choose "
                f"{declared_kind!s}"
            )
        return ScalingPlan(scaling, None)
    if declared_kind is not None and declared_kind != scaling:
        keys = _DECLARED_KEYS[scaling.value]
        raise InvalidConfigError(
            f"feature_scaling {scaling.value!r} takes feature_statistics with keys {list(keys)}, "
            f"not {list(_DECLARED_KEYS[declared_kind.value])}"
        )
    if declared is None and release_mode == "certified":
        keys = _DECLARED_KEYS[scaling.value]
        raise InvalidConfigError(
            f"a certified model cannot scale its features with statistics fitted on the rows it may have to "
            f"forget: declare them in hyperparameters.feature_statistics as {{{keys[0]!r}: [...], "
            f"{keys[1]!r}: [...]}} (one value per feature column, fixed before the data is seen), or set "
            "feature_scaling to 'none' to take the columns as they come"
        )
    return ScalingPlan(scaling, declared)


def _declared(raw: Any) -> tuple[Scaling | None, tuple[np.ndarray, np.ndarray] | None]:
    if raw is None:
        return None, None
    if not isinstance(raw, Mapping):
        raise InvalidConfigError(
            'feature_statistics must be an object {"mean": [...], "std": [...]} or {"min": [...], "max": [...]}'
        )
    for kind, (first, second) in _DECLARED_KEYS.items():
        if set(raw) == {first, second}:
            a, b = _column_values(first, raw[first]), _column_values(second, raw[second])
            if len(a) != len(b):
                raise InvalidConfigError(
                    f"feature_statistics.{first} has {len(a)} values and .{second} {len(b)}: give one per column"
                )
            if kind == "standardize":
                if (b <= 0).any():
                    j = int(np.argmax(b <= 0))
                    raise InvalidConfigError(f"feature_statistics.std[{j}] is {float(b[j])!r}: every std must be > 0")
                return Scaling.STANDARDIZE, (a, b)
            if (b <= a).any():
                j = int(np.argmax(b <= a))
                raise InvalidConfigError(
                    f"feature_statistics.max[{j}] ({float(b[j])!r}) must be above .min[{j}] ({float(a[j])!r})"
                )
            return Scaling.MINMAX, (a, b - a)
    raise InvalidConfigError(
        f'feature_statistics must have the keys ["mean", "std"] or ["min", "max"], got {sorted(raw)}'
    )


def _column_values(name: str, raw: Any) -> np.ndarray:
    if not isinstance(raw, list | tuple) or not raw:
        raise InvalidConfigError(f"feature_statistics.{name} must be a non-empty list of numbers")
    if any(isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) for v in raw):
        raise InvalidConfigError(f"feature_statistics.{name} must hold finite numbers only")
    return np.asarray(raw, dtype=np.float64)


@dataclass(frozen=True)
class FeatureTransform:
    """``(x - offset) / scale`` per column (identity when both are None); see the module docstring."""

    scaling: Scaling
    source: StatisticsSource
    offset: np.ndarray | None = None
    scale: np.ndarray | None = None

    @staticmethod
    def identity() -> FeatureTransform:
        return FeatureTransform(Scaling.NONE, StatisticsSource.NONE)

    @staticmethod
    def for_rows(plan: ScalingPlan, features: np.ndarray) -> FeatureTransform:
        """The plan's transform, its statistics fitted on ``features`` (n, ...) when not declared."""
        width = int(np.prod(features.shape[1:]))
        if plan.scaling == Scaling.NONE:
            return FeatureTransform.identity()
        if plan.declared is not None:
            offset, scale = plan.declared
            if len(offset) != width:
                raise DimensionMismatchError(
                    f"feature_statistics give {len(offset)} values per statistic, the data has {width} columns"
                )
            return FeatureTransform(plan.scaling, StatisticsSource.DECLARED, offset, scale)
        x = np.asarray(features, dtype=np.float64).reshape(len(features), width)
        if plan.scaling == Scaling.STANDARDIZE:
            offset, spread = x.mean(0), x.std(0)
        else:
            offset = x.min(0)
            spread = x.max(0) - offset
        scale = np.where(spread > 1e-12 * np.maximum(np.abs(offset), 1.0), spread, 1.0)
        return FeatureTransform(plan.scaling, StatisticsSource.FITTED, offset, scale)

    @property
    def is_identity(self) -> bool:
        return self.offset is None

    def apply(self, features: np.ndarray) -> np.ndarray:
        """The transformed rows, float32, in the input's shape; a row of the wrong width is an error."""
        x = np.asarray(features, dtype=np.float64)
        if self.is_identity:
            return x.astype(np.float32)
        assert self.offset is not None and self.scale is not None
        flat = x.reshape(len(x), -1)
        if flat.shape[1] != len(self.offset):
            raise DimensionMismatchError(
                f"each row needs {len(self.offset)} features, got {flat.shape[1]}"
            )
        return ((flat - self.offset) / self.scale).reshape(x.shape).astype(np.float32)

    def describe(self) -> dict[str, str]:
        """What the accounting and certificates record (the statistics themselves are artifacts)."""
        return {"scaling": self.scaling.value, "statistics": self.source.value}

    def artifacts(self) -> dict[str, torch.Tensor]:
        if self.offset is None or self.scale is None:
            return {}
        return {OFFSET_ARTIFACT: torch.from_numpy(self.offset.copy()), SCALE_ARTIFACT: torch.from_numpy(self.scale.copy())}

    @staticmethod
    def restore(described: Mapping[str, Any] | None, artifacts: Mapping[str, torch.Tensor]) -> FeatureTransform:
        """The transform recorded by :meth:`describe` and :meth:`artifacts` (identity when none was)."""
        if not described or OFFSET_ARTIFACT not in artifacts:
            return FeatureTransform.identity()
        return FeatureTransform(
            Scaling(described["scaling"]),
            StatisticsSource(described["statistics"]),
            artifacts[OFFSET_ARTIFACT].cpu().numpy().astype(np.float64),
            artifacts[SCALE_ARTIFACT].cpu().numpy().astype(np.float64),
        )
