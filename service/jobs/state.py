"""Storing a ``MethodState``'s parts and putting them back together: weights as blobs and accounting as JSON
(version row); statistics in Redis and owner-hashed buckets, training arrays in buckets (model row)."""

from __future__ import annotations

import hashlib
import inspect
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from service.db.tables import Model, ModelVersion
from service.graphs.storage import decode_graph, graph_digest, graph_nbytes, is_graph
from service.storage.artifacts import ArtifactStore
from service.storage.buckets import (
    Bucket,
    bucket_count,
    decode_bucket,
    drop_rows,
    manifest_digest,
    read_rows,
    write_buckets,
)
from service.storage.hot import HotStore
from service.storage.statistics import RedisSampleStatistics
from service.storage.tensors import (
    TORCH_DTYPES,
    array_of,
    decode_artifact,
    decode_weights,
    dtype_name,
    tensor_of,
)
from service.subjects import HashedIdSet, SubjectHasher
from service.uow import UnitOfWork
from unlearning.data import Dataset
from unlearning.methods.protocol import BudgetPolicy, MethodState, PrivacyTarget, StatisticsSnapshot
from unlearning.serialization import json_restore, json_safe  # noqa: F401  (re-exported for the jobs)

_BLOB_KINDS = ("artifact", "weights", "bucket", "graph")
_ASSEMBLED_KINDS = ("dataset", "graph")  # whole training sets: each deletion round supersedes the last
MAX_ASSEMBLED = 4  # whole datasets and graphs a BlobCache holds: a worker's jobs read theirs again


class BlobCache:
    """Decoded blobs, LRU, thread-safe, bounded by ``max_bytes`` and ``max_assembled`` whole datasets; a value
    expires ``ttl_seconds`` after loading, or at once when its blob is deleted (:meth:`forget`)."""

    def __init__(
        self,
        artifacts: ArtifactStore,
        max_bytes: int = 512 * 1024 * 1024,
        ttl_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        max_assembled: int = MAX_ASSEMBLED,
    ) -> None:
        if max_assembled < 1:
            raise ValueError("max_assembled must be at least 1")
        self._artifacts = artifacts
        self._max = max_bytes
        self._max_assembled = max_assembled
        self._ttl = ttl_seconds
        self._clock = clock
        # (kind, key) -> (value, bytes, expiry); key: a blob's digest, or a dataset's manifest_digest (parts in _parts)
        self._items: OrderedDict[tuple[str, str], tuple[Any, int, float]] = OrderedDict()
        self._parts: dict[str, frozenset[str]] = {}
        self._size = 0
        self._lock = threading.Lock()

    def _get(
        self,
        kind: str,
        key: str,
        load: Callable[[], Any],
        size: Callable[[Any], int],
        parts: frozenset[str] = frozenset(),
    ) -> Any:
        with self._lock:
            hit = self._items.get((kind, key))
            if hit is not None and hit[2] > self._clock():
                self._items.move_to_end((kind, key))
                return hit[0]
            if hit is not None:
                self._drop((kind, key))
        value = load()
        nbytes = size(value)
        with self._lock:
            if (kind, key) not in self._items:
                self._items[(kind, key)] = (value, nbytes, self._clock() + self._ttl)
                self._size += nbytes
                if parts:
                    self._parts[key] = parts
            while self._size > self._max and len(self._items) > 1:
                self._drop(next(iter(self._items)))
            if kind in _ASSEMBLED_KINDS:
                self._drop_least_recent_assembled()
        return value

    def _drop_least_recent_assembled(self) -> None:
        """Keep the ``max_assembled`` most recently used datasets and graphs (caller holds the lock)."""
        assembled = [item for item in self._items if item[0] in _ASSEMBLED_KINDS]  # least recent first
        for item in assembled[: max(len(assembled) - self._max_assembled, 0)]:
            self._drop(item)

    def _drop(self, item: tuple[str, str]) -> None:
        self._size -= self._items.pop(item)[1]
        if item[0] == "dataset":
            self._parts.pop(item[1], None)

    def prune_expired(self) -> int:
        """Drop every value older than the TTL; returns how many."""
        now = self._clock()
        with self._lock:
            expired = [item for item, (_, _, expiry) in self._items.items() if expiry <= now]
            for item in expired:
                self._drop(item)
        return len(expired)

    def forget(self, digests: Iterable[str]) -> None:
        """Drop the values of deleted blobs, and the assembled datasets that contain any of them."""
        gone = set(digests)
        if not gone:
            return
        with self._lock:
            doomed = [(kind, d) for d in gone for kind in _BLOB_KINDS if (kind, d) in self._items]
            doomed += [("dataset", key) for key, parts in self._parts.items() if parts & gone]
            for item in doomed:
                self._drop(item)

    def cached(self) -> set[tuple[str, str]]:
        with self._lock:
            return set(self._items)

    def artifact(self, digest: str) -> torch.Tensor:
        load = lambda: decode_artifact(self._artifacts.get(digest))
        return self._get("artifact", digest, load, lambda t: t.nbytes).clone()

    def holds_artifact(self, digest: str, tensor: torch.Tensor) -> bool:
        """Whether ``digest``'s artifact is in memory here and equal to ``tensor``."""
        with self._lock:
            item = self._items.get(("artifact", digest))
        if item is None:
            return False
        cached: torch.Tensor = item[0]
        same_kind = cached.dtype == tensor.dtype and cached.shape == tensor.shape
        return same_kind and bool(torch.equal(cached, tensor.detach().cpu()))

    def weights(self, digest: str) -> torch.Tensor:
        load = lambda: decode_weights(self._artifacts.get(digest))
        return self._get("weights", digest, load, lambda t: t.nbytes).clone()

    def bucket(self, digest: str) -> Bucket:
        load = lambda: decode_bucket(self._artifacts.get(digest))
        return self._get("bucket", digest, load, bucket_nbytes)

    def remember_weights(self, digest: str, weights: torch.Tensor) -> None:
        """Weights just written under ``digest``: the completion publishes them without a read."""
        self._get("weights", digest, lambda: weights.detach().contiguous().cpu().clone(), lambda t: t.nbytes)

    def remember_bucket(self, digest: str, bucket: Bucket) -> None:
        self._get("bucket", digest, lambda: bucket, bucket_nbytes)

    def drop_rows(
        self, manifest: Mapping[str, Any], removed: Mapping[str, str], whole_owners: Collection[str] = ()
    ) -> tuple[dict[str, Any], set[str]]:
        """:func:`service.storage.buckets.drop_rows` reading and remembering buckets through this cache."""
        return drop_rows(self._artifacts, self.bucket, manifest, removed, self.remember_bucket, whole_owners)

    @property
    def store(self) -> ArtifactStore:
        """The artifact store this cache reads (graph erasure writes through it)."""
        return self._artifacts

    def dataset(self, manifest: Mapping[str, Any]) -> Any:
        """The Dataset (original row order) or graph a training manifest names."""
        if is_graph(manifest):
            digest = graph_digest(manifest)
            return self._get("graph", digest, lambda: decode_graph(self._artifacts.get(digest)), graph_nbytes)
        key = manifest_digest(manifest)
        load = lambda: _assemble(read_rows(self.bucket, manifest), manifest)
        parts = frozenset(manifest["buckets"].values())
        size = lambda d: dataset_nbytes(d) + sys.getsizeof(parts) + sum(sys.getsizeof(p) for p in parts)
        return self._get("dataset", key, load, size, parts)


def bucket_nbytes(bucket: Bucket) -> int:
    """About how much memory a decoded bucket takes: its arrays, and its id lists with their strings."""
    ids = (bucket.sample_ids, bucket.owner_ids)
    strings = sum(sys.getsizeof(s) for column in ids for s in column)
    return sum(a.nbytes for a in bucket.arrays.values()) + sum(sys.getsizeof(c) for c in ids) + strings


def dataset_nbytes(dataset: Dataset) -> int:
    """About how much memory an assembled dataset adds to its buckets': arrays, id tuples, sample-id index."""
    containers = (dataset.sample_ids, dataset.owner_ids, dataset._index)
    return int(dataset.features.nbytes + dataset.labels.nbytes) + sum(sys.getsizeof(c) for c in containers)


class KnownManifests:
    """Per model, the ``models.training``/``statistics`` this process last wrote, keyed by the row version's
    ``xmin`` (docs/decisions.md); LRU, thread-safe. The manifests are kept decoded and handed out shared:
    the service never changes a manifest in place (a new version's is a new dict)."""

    def __init__(self, capacity: int = 128) -> None:
        self._lock = threading.Lock()
        self._rows: OrderedDict[int, KnownRow] = OrderedDict()
        self._capacity = capacity

    def known(self, model_id: int) -> KnownRow | None:
        with self._lock:
            return self._rows.get(model_id)

    def note(self, model_id: int, xmin: str, manifests: Mapping[str, Mapping[str, Any] | None]) -> None:
        """The row version ``xmin`` of the model holds these columns' ``manifests``."""
        with self._lock:
            self._rows[model_id] = KnownRow(xmin, dict(manifests))
            self._rows.move_to_end(model_id)
            while len(self._rows) > self._capacity:
                self._rows.popitem(last=False)


@dataclass(frozen=True)
class KnownRow:
    xmin: str
    manifests: Mapping[str, Mapping[str, Any] | None]

    def values(self) -> dict[str, Any]:
        return dict(self.manifests)


def _assemble(rows: Bucket, manifest: Mapping[str, Any]) -> Dataset:
    order = np.argsort(rows.arrays["rows"], kind="stable")
    return Dataset(
        sample_ids=tuple(rows.sample_ids[i] for i in order),
        owner_ids=tuple(rows.owner_ids[i] for i in order),
        features=rows.arrays["features"][order],
        labels=rows.arrays["labels"][order],
        num_classes=int(manifest["num_classes"]),
        name=str(manifest.get("name", "dataset")),
    )


def write_training(artifacts: ArtifactStore, dataset: Dataset, max_buckets: int) -> dict[str, Any]:
    """Store a dataset's arrays as buckets; ``rows`` keeps the original order for reassembly."""
    rows = np.arange(len(dataset), dtype=np.int64)
    arrays = {"features": dataset.features, "labels": dataset.labels, "rows": rows}
    return write_buckets(
        artifacts,
        dataset.sample_ids,
        dataset.owner_ids,
        arrays,
        bucket_count(dataset.owner_ids, max_buckets, sum(a.nbytes for a in arrays.values())),
        num_classes=dataset.num_classes,
        feature_shape=list(dataset.feature_shape),
        name=dataset.name,
    )


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from its parts: reproducible (a retried job draws the same noise) and distinct per use."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


def privacy_of(model: Model) -> PrivacyTarget:
    return PrivacyTarget(epsilon=model.epsilon, delta=model.delta, release_mode=model.release_mode)  # type: ignore[arg-type]


def policy_of(model: Model) -> BudgetPolicy:
    return BudgetPolicy(**model.policy)


def policy_kwargs(fn: Callable[..., Any], policy: BudgetPolicy) -> dict[str, Any]:
    """``{"policy": policy}`` if ``fn`` takes a ``policy`` parameter (optional in the protocol), else ``{}``."""
    try:
        return {"policy": policy} if "policy" in inspect.signature(fn).parameters else {}
    except (TypeError, ValueError):
        return {}


def write_statistics(
    artifacts: ArtifactStore, snapshot: StatisticsSnapshot, max_buckets: int
) -> dict[str, Any]:
    """Write the per-sample vectors as buckets (in their dtype: bfloat16 as its bits); returns the manifest
    stored in ``models.statistics``."""
    vectors = snapshot.vectors
    return write_buckets(
        artifacts,
        snapshot.sample_ids,
        snapshot.owner_ids,
        {"vectors": array_of(vectors)},
        bucket_count(snapshot.owner_ids, max_buckets, vectors.numel() * vectors.element_size()),
        dim=int(vectors.shape[1]),
        dtype=dtype_name(vectors.dtype),
    )


def read_statistics(cache: BlobCache, manifest: Mapping[str, Any]) -> StatisticsSnapshot:
    rows = read_rows(cache.bucket, manifest)
    vectors = rows.arrays.get("vectors")
    dtype = str(manifest["dtype"])
    if vectors is None:
        tensor = torch.zeros((0, int(manifest["dim"])), dtype=TORCH_DTYPES[dtype])
    else:
        tensor = tensor_of(vectors, dtype)
    return StatisticsSnapshot(tuple(rows.sample_ids), tuple(rows.owner_ids), tensor)


def load_hot_statistics(
    hot: HotStore,
    cache: BlobCache,
    model_id: int,
    seq: int,
    manifest: Mapping[str, Any],
    snapshot: StatisticsSnapshot | None = None,
) -> None:
    """Fill a model's statistics in Redis for version ``seq``: ``snapshot``, else the stored buckets."""
    if snapshot is None:
        snapshot = read_statistics(cache, manifest)
    hot.load_stats(model_id, seq, snapshot.sample_ids, snapshot.owner_ids, snapshot.vectors)


def hot_statistics(
    hot: HotStore, cache: BlobCache, hasher: SubjectHasher, uow: UnitOfWork, model: Model, seq: int
) -> RedisSampleStatistics | None:
    """The model's statistics over Redis (rebuilt unless at version ``seq``); caller holds the model lock."""
    manifest = model.statistics
    if manifest is None:
        return None
    meta = hot.stats_meta(model.id)
    if meta is None or int(meta.get("seq", -1)) != seq:
        load_hot_statistics(hot, cache, model.id, seq, manifest)
    return RedisSampleStatistics(
        hot,
        model.id,
        dim=int(manifest["dim"]),
        dtype=str(manifest["dtype"]),
        erased_samples=_ErasedLookup(uow, model.id, hasher.sample),
        erased_owners=_ErasedLookup(uow, model.id, hasher.owner),
    )


class _ErasedLookup:
    """``id in lookup``: whether the id was erased from this model (one indexed query, error paths only)."""

    def __init__(self, uow: UnitOfWork, model_id: int, hash_fn: Callable[[str], str]) -> None:
        self._uow, self._model_id, self._hash = uow, model_id, hash_fn

    def __contains__(self, subject: object) -> bool:
        return isinstance(subject, str) and bool(
            self._uow.models.erased_among(self._model_id, [self._hash(subject)])
        )


def load_state(
    hot: HotStore,
    cache: BlobCache,
    hasher: SubjectHasher,
    uow: UnitOfWork,
    model: Model,
    version: ModelVersion,
) -> tuple[MethodState, RedisSampleStatistics | None]:
    from unlearning.methods.registry import get_method

    if version.clean_blob is None or version.released_blob is None:
        raise RuntimeError(f"version {version.seq} of model {model.id} has no stored weights")
    stats = hot_statistics(hot, cache, hasher, uow, model, version.seq)
    state = MethodState(
        method=model.method,
        model=get_method(model.method).restore_model(version.spec),
        clean_weights=cache.weights(version.clean_blob),
        released_weights=cache.weights(version.released_blob),
        statistics=stats,
        accounting=json_restore(dict(version.accounting)),
        artifacts={name: cache.artifact(digest) for name, digest in version.artifacts.items()},
        deleted_ids=HashedIdSet(
            hasher, load=lambda: uow.models.erased_hashes(model.id, "sample", model.budget_epoch)
        ),
    )
    return state, stats
