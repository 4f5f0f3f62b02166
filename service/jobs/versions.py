"""Writing a model version: blobs before the transaction, rows and references inside it (garbage listed)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from service.db.base import utcnow
from service.db.tables import Dataset, Model, ModelVersion
from service.graphs.erasure import forget_graph, graph_after_erasure
from service.graphs.storage import is_graph
from service.jobs.state import BlobCache, json_safe, write_statistics
from service.states import VersionKind
from service.storage.artifacts import ArtifactStore
from service.storage.buckets import digests
from service.storage.tensors import encode_artifact, encode_weights
from service.uow import UnitOfWork
from unlearning.methods.protocol import ForgetRequest, MethodState, StatisticsSnapshot
from unlearning.privacy.certificate import Certificate


@dataclass
class Release:
    """Everything a new version consists of, already written to the artifact store."""

    released_blob: str
    clean_blob: str
    spec: dict[str, Any]
    accounting: dict[str, Any]
    certificate: dict[str, Any]
    training: dict[str, Any] | None
    train_size: int
    statistics: dict[str, Any] | None
    artifacts: dict[str, str]  # MethodState.artifacts: name -> blob
    snapshot: StatisticsSnapshot | None = None  # the statistics written, to fill Redis without a read-back


def model_holder(model_id: int) -> str:
    return f"model:{model_id}"


def dataset_holder(dataset_id: int) -> str:
    return f"dataset:{dataset_id}"


def write_state(
    artifacts: ArtifactStore,
    state: MethodState,
    stored: Callable[[str, torch.Tensor], str | None] | None = None,
) -> tuple[str, str, dict[str, Any], dict[str, str]]:
    """Write (released, clean, spec, artifacts); ``stored(name, tensor)``: a blob holding it already."""
    spec = state.model.to_dict() if hasattr(state.model, "to_dict") else dict(state.model)
    released = artifacts.put(encode_weights(state.released_weights, spec))
    # A release without noise (sigma 0, the audited mode) is the clean tensor itself: one blob, encoded once.
    same = state.clean_weights is state.released_weights
    clean = released if same else artifacts.put(encode_weights(state.clean_weights, spec))
    own = {}
    for name, tensor in sorted(state.artifacts.items()):
        found = stored(name, tensor) if stored is not None else None
        own[name] = found if found is not None else artifacts.put(encode_artifact(name, tensor))
    return released, clean, spec, own


def release_after_fit(
    artifacts: ArtifactStore,
    state: MethodState,
    certificate: Certificate,
    training: dict[str, Any],
    train_size: int,
    max_buckets: int,
) -> Release:
    released, clean, spec, own = write_state(artifacts, state)
    snapshot = state.statistics.export() if state.statistics is not None else None
    statistics = write_statistics(artifacts, snapshot, max_buckets) if snapshot is not None else None
    accounting, cert = json_safe(state.accounting), certificate.to_dict()
    return Release(released, clean, spec, accounting, cert, training, train_size, statistics, own, snapshot)


def release_after_forget(
    artifacts: ArtifactStore,
    cache: BlobCache,
    model: Model,
    state: MethodState,
    certificate: Certificate,
    forgotten: Mapping[str, str],
    max_buckets: int,
    staged: bool,
    request: ForgetRequest | None = None,
    whole_owners: Collection[str] = (),
    previous_artifacts: Mapping[str, str] | None = None,
) -> Release:
    """The release after forgetting ``forgotten`` (``staged``: only the buckets touched are rewritten)."""
    previous = previous_artifacts or {}

    def stored(name: str, tensor: torch.Tensor) -> str | None:  # unchanged by the forget: not stored again
        digest = previous.get(name)
        return digest if digest is not None and cache.holds_artifact(digest, tensor) else None

    released, clean, spec, own = write_state(artifacts, state, stored)
    cache.remember_weights(released, state.released_weights)
    train_size = model.train_size - len(forgotten)
    training: dict[str, Any] | None
    if is_graph(model.training):  # graph datasets (service.graphs): the remaining graph, rewritten whole
        training, train_size = forget_graph(artifacts, cache, model.training, request)
    else:
        training = cache.drop_rows(model.training, forgotten, whole_owners)[0] if model.training else None
    statistics, snapshot = model.statistics, None
    if state.statistics is not None and model.statistics is not None and staged:
        statistics = cache.drop_rows(model.statistics, forgotten, whole_owners)[0]
    elif state.statistics is not None:
        snapshot = state.statistics.export()
        statistics = write_statistics(artifacts, snapshot, max_buckets)
    training = training if training and training["buckets"] else None
    accounting, cert = json_safe(state.accounting), certificate.to_dict()
    return Release(released, clean, spec, accounting, cert, training, train_size, statistics, own, snapshot)


def blobs_of(release: Release) -> set[str]:
    """Every blob a release names: its weights, the method's tensors, the training and statistics buckets."""
    return (
        digests(release.training)
        | digests(release.statistics)
        | {release.released_blob, release.clean_blob}
        | set(release.artifacts.values())
    )


def version_blobs(version: ModelVersion) -> set[str]:
    """The blobs a version row names for its state: its weights and the method's tensors."""
    return {b for b in (version.released_blob, version.clean_blob) if b} | set(version.artifacts.values())


def record_version(
    uow: UnitOfWork,
    model: Model,
    release: Release,
    *,
    kind: VersionKind,
    budget_epoch: int,
    num_forgotten: int,
    request_count: int,
    garbage: set[str] = frozenset(),  # type: ignore[assignment]
) -> ModelVersion:
    """Insert the version, point the model at it, purge superseded weights; what it drops is garbage."""
    previous = uow.models.version(model.current_version_id) if model.current_version_id is not None else None
    old = (
        digests(model.training) | digests(model.statistics) | (version_blobs(previous) if previous else set())
    )
    new = blobs_of(release)
    released = uow.refs.release(model_holder(model.id), old - new)
    uow.refs.hold(model_holder(model.id), new - old)
    version = uow.models.add_version(
        version_of(
            model.id,
            release,
            previous,
            kind=kind,
            budget_epoch=budget_epoch,
            num_forgotten=num_forgotten,
            request_count=request_count,
            garbage=released | set(garbage),
        )
    )
    model.current_version_id = version.id
    model.training = release.training
    model.train_size = release.train_size
    model.statistics = release.statistics
    uow.models.purge_superseded(model.id, version.id, utcnow())
    return version


def version_of(
    model_id: int,
    release: Release,
    previous: ModelVersion | None,
    *,
    kind: VersionKind,
    budget_epoch: int,
    num_forgotten: int,
    request_count: int,
    garbage: Collection[str],
    **columns: Any,
) -> ModelVersion:
    """The row of the version after ``previous`` (None: the first) made of ``release``, plus ``columns``."""
    return ModelVersion(
        model_id=model_id,
        seq=(previous.seq + 1) if previous else 1,
        kind=kind,
        parent_id=previous.id if previous else None,
        budget_epoch=budget_epoch,
        released_blob=release.released_blob,
        clean_blob=release.clean_blob,
        released_sha256=release.released_blob,
        spec=release.spec,
        certificate=release.certificate,
        accounting=release.accounting,
        artifacts=release.artifacts,
        num_forgotten=num_forgotten,
        train_size=release.train_size,
        request_count=request_count,
        garbage=sorted(garbage),
        **columns,
    )


def erase_from_source(
    uow: UnitOfWork,
    cache: BlobCache,
    model: Model,
    forgotten: Mapping[str, str],
    *,
    old_training: Mapping[str, Any] | None,
    new_training: Mapping[str, Any] | None,
    request: ForgetRequest | None = None,
) -> set[str]:
    """Erase the forgotten samples from the model's source dataset (row-locked); the blobs released."""
    dataset_row = uow.datasets.lock(model.dataset_id)
    if dataset_row is None or dataset_row.arrays is None:
        return set()
    arrays = dataset_arrays_after(
        cache,
        dataset_row.arrays,
        forgotten,
        old_training=old_training,
        new_training=new_training,
        request=request,
    )
    if arrays == dataset_row.arrays:
        return set()
    return replace_dataset_arrays(uow, cache, dataset_row, arrays)


def dataset_arrays_after(
    cache: BlobCache,
    arrays: Mapping[str, Any],
    forgotten: Mapping[str, str],
    *,
    old_training: Mapping[str, Any] | None,
    new_training: Mapping[str, Any] | None,
    request: ForgetRequest | None = None,
) -> dict[str, Any] | None:
    """The dataset manifest without ``forgotten`` (None if empty); shared with the model: its new buckets."""
    if is_graph(arrays):  # graph datasets (service.graphs): the graph loses the same items
        return graph_after_erasure(
            cache, arrays, request, old_training=old_training, new_training=new_training
        )
    if old_training is not None and arrays["buckets"] == old_training["buckets"]:
        return dict(new_training) if new_training else None
    return drop_dataset_rows(cache, arrays, forgotten)


def drop_dataset_rows(
    cache: BlobCache, arrays: Mapping[str, Any], forgotten: Mapping[str, str]
) -> dict[str, Any] | None:
    """A table manifest without the ``forgotten`` rows (sample id -> owner id); None when none are left."""
    dropped, _ = cache.drop_rows(arrays, forgotten)
    return dropped if dropped["buckets"] else None


def replace_dataset_arrays(
    uow: UnitOfWork, cache: BlobCache, dataset_row: Dataset, arrays: dict[str, Any] | None
) -> set[str]:
    """Point the locked dataset row at ``arrays`` (references swapped, rows recounted); the blobs released."""
    holder = dataset_holder(dataset_row.id)
    released = uow.refs.release(holder, digests(dataset_row.arrays) - digests(arrays))
    uow.refs.hold(holder, digests(arrays) - digests(dataset_row.arrays))
    remaining = row_count(cache, arrays)
    dataset_row.erased_rows += max(dataset_row.num_rows - remaining, 0)
    dataset_row.num_rows = remaining
    dataset_row.arrays = arrays
    return released


def row_count(cache: BlobCache, manifest: Mapping[str, Any] | None) -> int:
    """Rows (graphs: samples) a manifest names: its ``num_rows``/``num_samples``, else counted per bucket."""
    if manifest is None:
        return 0
    for key in ("num_rows", "num_samples"):
        if key in manifest:
            return int(manifest[key])
    return sum(len(cache.bucket(d).sample_ids) for d in digests(manifest))
