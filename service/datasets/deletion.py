"""Deleting a dataset no live model uses (409 otherwise): its blobs go, its record and audit log stay."""

from __future__ import annotations

from service.audit.service import SYSTEM_CHAIN
from service.db.base import utcnow
from service.errors import Conflict, NotFound
from service.jobs.completion import collect_garbage
from service.jobs.context import CompletionContext
from service.jobs.versions import dataset_holder
from service.storage.buckets import digests


def delete_dataset(rt: CompletionContext, dataset_id: int) -> None:
    _mark_deleted(rt, dataset_id)
    _erase(rt, dataset_id)


def _mark_deleted(rt: CompletionContext, dataset_id: int) -> None:
    with rt.uow() as uow:
        row = uow.datasets.lock(dataset_id)
        if row is None:
            raise NotFound(f"dataset {dataset_id} does not exist")
        if row.deleted_at is not None:
            return
        live = uow.models.on_dataset(dataset_id)
        if live:
            raise Conflict(
                f"dataset {dataset_id} is used by model(s) {live}, which hold copies of its rows: delete "
                "them first (DELETE /v1/models/{id}), then the dataset",
                code="dataset_in_use",
            )
        released = uow.refs.release(dataset_holder(dataset_id))
        row.deleted_at = utcnow()
        uow.audit.append(
            SYSTEM_CHAIN,
            "dataset.deleted",
            payload={"dataset_id": dataset_id, "rows": row.num_rows, "blobs_released": len(released)},
        )
        uow.commit()


def _erase(rt: CompletionContext, dataset_id: int) -> None:
    with rt.uow() as uow:
        row = uow.datasets.lock(dataset_id)
        if row is None or row.deleted_at is None:
            return
        blobs = digests(row.arrays)
        row.erased_rows += row.num_rows
        row.num_rows, row.arrays = 0, None
        collect_garbage(uow, rt, blobs)  # last: the collection lock is held only for the unlinks
        uow.commit()
