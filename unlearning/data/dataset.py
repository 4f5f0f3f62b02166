"""The Dataset every method trains on: stable string sample ids, owner ids, features and labels."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from unlearning.errors import InvalidDatasetError, UnknownSampleError


@dataclass(frozen=True)
class Dataset:
    """A labelled classification dataset whose rows are addressed by stable string ids.

    ``sample_ids[i]`` names row i for its whole life (deletion requests use it); ``owner_ids[i]`` is the
    user the row belongs to, so forgetting a user means forgetting every row they own. ``features`` is
    float32 of shape (n, *feature_shape) and ``labels`` int64 in [0, num_classes).
    """

    sample_ids: tuple[str, ...]
    owner_ids: tuple[str, ...]
    features: np.ndarray
    labels: np.ndarray
    num_classes: int
    name: str = "dataset"
    # What each class index stands for, when the labels were names ("cat" -> 0, "dog" -> 1); None for
    # integer labels, which are their own indices.
    class_names: tuple[str, ...] | None = None
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        raw_features = self.features
        with np.errstate(over="ignore"):  # a value beyond float32 becomes inf; _validate says which
            features = np.ascontiguousarray(raw_features, dtype=np.float32)
        labels = np.ascontiguousarray(self.labels).astype(np.int64, copy=False)
        object.__setattr__(self, "features", features)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "sample_ids", tuple(str(s) for s in self.sample_ids))
        object.__setattr__(self, "owner_ids", tuple(str(o) for o in self.owner_ids))
        if self.class_names is not None:
            object.__setattr__(self, "class_names", tuple(str(c) for c in self.class_names))
        self._validate(raw_features)
        object.__setattr__(self, "_index", {sid: i for i, sid in enumerate(self.sample_ids)})

    def _validate(self, raw_features: np.ndarray) -> None:
        """Check the converted fields; ``raw_features`` (as given) tells float32 overflow from NaN/inf."""
        n = len(self.sample_ids)
        if n == 0:
            raise InvalidDatasetError("the dataset has no rows")
        if len(self.owner_ids) != n:
            raise InvalidDatasetError(
                f"{len(self.owner_ids)} owner ids for {n} sample ids: give one owner per row"
            )
        if self.features.shape[0] != n or self.labels.shape != (n,):
            raise InvalidDatasetError(
                f"features have {self.features.shape[0]} rows and labels shape {self.labels.shape}, "
                f"expected {n} rows and labels of shape ({n},)"
            )
        if len(set(self.sample_ids)) != n:
            seen: set[str] = set()
            dup = next(s for s in self.sample_ids if s in seen or seen.add(s))  # type: ignore[func-returns-value]
            raise InvalidDatasetError(f"sample id {dup!r} appears more than once: sample ids must be unique")
        for what, ids in (("sample id", self.sample_ids), ("owner id", self.owner_ids)):
            if "" in ids:
                row = ids.index("")
                raise InvalidDatasetError(f"the {what} of row {row} (0-based) is empty: every row needs one")
        finite = np.isfinite(self.features)
        if not finite.all():
            first = tuple(int(i) for i in np.argwhere(~finite)[0])
            row, value = first[0], float(np.asarray(raw_features)[first])
            if math.isfinite(value):
                raise InvalidDatasetError(
                    f"features of sample {self.sample_ids[row]!r} (row {row}) overflow float32: {value!r} is "
                    "beyond its range (largest magnitude about 3.4e38); rescale the features"
                )
            raise InvalidDatasetError(
                f"features of sample {self.sample_ids[row]!r} (row {row}) contain NaN or infinite values"
            )
        if self.num_classes < 2:
            raise InvalidDatasetError(f"num_classes is {self.num_classes}: a classifier needs at least 2")
        if self.class_names is not None and (
            len(self.class_names) > self.num_classes or len(set(self.class_names)) != len(self.class_names)
        ):
            raise InvalidDatasetError(
                f"{len(self.class_names)} class names for {self.num_classes} classes: give at most one distinct "
                "name per class"
            )
        bad = (self.labels < 0) | (self.labels >= self.num_classes)
        if bad.any():
            row = int(np.argmax(bad))
            raise InvalidDatasetError(
                f"label {int(self.labels[row])} of sample {self.sample_ids[row]!r} is outside "
                f"[0, {self.num_classes - 1}]"
            )

    def __len__(self) -> int:
        return len(self.sample_ids)

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.features.shape[1:])

    @property
    def num_features(self) -> int:
        return int(np.prod(self.feature_shape))

    def indices_of(self, sample_ids: Iterable[str]) -> np.ndarray:
        """Row indices of ``sample_ids``; raises :class:`UnknownSampleError` naming the first unknown id."""
        out = []
        for sid in sample_ids:
            try:
                out.append(self._index[sid])
            except KeyError:
                raise UnknownSampleError(f"sample id {sid!r} is not in dataset {self.name!r}") from None
        return np.asarray(out, dtype=np.int64)

    def contains(self, sample_id: str) -> bool:
        return sample_id in self._index

    def samples_of_owners(self, owner_ids: Iterable[str]) -> tuple[str, ...]:
        """Every sample id owned by one of ``owner_ids``; an owner with no rows is an error."""
        wanted = set(owner_ids)
        found = {o: False for o in wanted}
        out = []
        for sid, owner in zip(self.sample_ids, self.owner_ids):
            if owner in wanted:
                out.append(sid)
                found[owner] = True
        missing = sorted(o for o, ok in found.items() if not ok)
        if missing:
            raise UnknownSampleError(f"owner {missing[0]!r} has no samples in dataset {self.name!r}")
        return tuple(out)

    def take(self, indices: Sequence[int] | np.ndarray, name: str | None = None) -> Dataset:
        """The rows at ``indices`` (in that order) as a new Dataset."""
        idx = np.asarray(indices, dtype=np.int64)
        return Dataset(
            sample_ids=tuple(self.sample_ids[i] for i in idx),
            owner_ids=tuple(self.owner_ids[i] for i in idx),
            features=self.features[idx],
            labels=self.labels[idx],
            num_classes=self.num_classes,
            name=name or self.name,
            class_names=self.class_names,
        )

    def with_features(self, features: np.ndarray) -> Dataset:
        """The same rows (ids, owners, labels, index) with other feature values of the same row count:
        a row-wise transform's output. Only the features are checked (finite, float32)."""
        converted = np.ascontiguousarray(features, dtype=np.float32)
        if converted.shape[0] != len(self):
            raise InvalidDatasetError(f"{converted.shape[0]} feature rows for {len(self)} samples")
        if not np.isfinite(converted).all():
            raise InvalidDatasetError(
                "the transformed features contain NaN or infinite values: the declared feature statistics "
                "map some value beyond float32's range"
            )
        copy = object.__new__(Dataset)
        for name in ("sample_ids", "owner_ids", "labels", "num_classes", "name", "class_names", "_index"):
            object.__setattr__(copy, name, getattr(self, name))
        object.__setattr__(copy, "features", converted)
        return copy

    def without(self, sample_ids: Iterable[str]) -> Dataset:
        """This dataset with ``sample_ids`` removed (order of the rest kept); unknown ids are an error."""
        drop = set(self.indices_of(sample_ids).tolist())
        keep = [i for i in range(len(self)) if i not in drop]
        if not keep:
            raise InvalidDatasetError("removing these samples would leave the dataset empty")
        return self.take(keep)
