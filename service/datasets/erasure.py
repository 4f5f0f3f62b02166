"""Forgetting subjects in a table dataset that no model uses: the rows leave the dataset's stored arrays
at once (``POST /v1/datasets/{id}/deletions`` when it has no model to send the deletion to).

One transaction (under the dataset's row lock, which registration and models' erasures take too) drops the
rows from the bucket manifest, swaps the dataset's artifact references and appends a
``dataset.subjects_erased`` audit event that names the subjects by keyed hash only; then the blobs nothing
holds any more are unlinked, before the answer goes out. The Idempotency-Key makes a retry replay the
answer (:func:`service.idempotency.service.run`).

Graph datasets are not handled here: a node or graph leaves a stored graph through the graph erasure of a
model's update (:mod:`service.graphs.erasure`); without a model the request is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from service.audit.service import SYSTEM_CHAIN
from service.db.tables import SUBJECTS_ERASED_EVENT, Dataset
from service.db.uow import UnitOfWork
from service.deletions.schemas import DatasetDeletionOut, DeletionIn
from service.deletions.service import FAN_OUT_STATUSES
from service.errors import Conflict, Unprocessable, from_unlearning_error
from service.idempotency import service as idempotency
from service.jobs.completion import collect_garbage
from service.jobs.versions import drop_dataset_rows, replace_dataset_arrays
from unlearning.errors import UnlearningError

if TYPE_CHECKING:
    from service.runtime import Runtime


def erase_subjects(rt: Runtime, dataset_id: int, key: str | None, body: DeletionIn) -> idempotency.Outcome:
    """Erase the rows ``body`` names from the dataset (200, with ``erased_rows``); replayed for the same key."""
    released: set[str] = set()

    def handler(uow: UnitOfWork) -> tuple[int, dict[str, Any]]:
        row = _locked_table(uow, dataset_id, body)
        arrays = row.arrays
        assert arrays is not None  # _locked_table refuses a dataset without rows
        forgotten = _forgotten(rt, arrays, body)
        released.update(
            replace_dataset_arrays(uow, rt.cache, row, drop_dataset_rows(rt.cache, arrays, forgotten))
        )
        uow.audit.append(
            SYSTEM_CHAIN,
            SUBJECTS_ERASED_EVENT,
            payload={
                "dataset_id": dataset_id,
                "rows": len(forgotten),
                "samples": [rt.hasher.sample(s) for s in forgotten],
                "owners": [rt.hasher.owner(o) for o in sorted(set(forgotten.values()))],
            },
        )
        report = DatasetDeletionOut(
            dataset_id=dataset_id, accepted=0, rejected=0, results=[], erased_rows=len(forgotten)
        )
        return 200, report.model_dump(mode="json")

    outcome = idempotency.run(
        rt.uow,
        rt.hasher,
        scope=f"dataset:{dataset_id}:erasure",
        key=key,
        body=body.model_dump(mode="json"),
        ttl_hours=rt.settings.idempotency_ttl_hours,
        handler=handler,
    )
    if released:  # after the commit that released them, before the answer
        with rt.uow() as uow:
            collect_garbage(uow, rt, released)
            uow.commit()
    return outcome


def _locked_table(uow: UnitOfWork, dataset_id: int, body: DeletionIn) -> Dataset:
    """The dataset row, locked, once it is known to be a table with rows and no model to go through."""
    row = uow.datasets.lock(dataset_id)
    if row is None or row.deleted_at is not None or row.arrays is None:
        raise Conflict(f"dataset {dataset_id} has no rows left to erase", code="no_rows")
    if uow.models.on_dataset(dataset_id, FAN_OUT_STATUSES):
        raise Conflict(
            f"a model was registered on dataset {dataset_id} meanwhile: send the request again, it goes to the "
            "model now",
            code="model_registered",
        )
    if row.kind != "table":
        raise Unprocessable(
            f"dataset {dataset_id} is a {row.kind}: its nodes and graphs leave it through a model's deletions "
            "(register a model on it), or delete the whole dataset",
            code="graph_dataset",
        )
    if body.edges or body.node_feature_ids or body.graph_ids or body.graph_nodes:
        raise Unprocessable(
            f"dataset {dataset_id} is a table: name owner_ids or sample_ids", code="not_a_graph"
        )
    return row


def _forgotten(rt: Runtime, arrays: dict[str, Any], body: DeletionIn) -> dict[str, str]:
    """sample id -> owner id of the rows the request names (unknown ids: 422)."""
    data = rt.cache.dataset(arrays)
    try:
        samples = set(data.samples_of_owners(body.owner_ids)) if body.owner_ids else set()
        data.indices_of(body.sample_ids)
    except UnlearningError as exc:
        raise from_unlearning_error(exc) from exc
    samples |= set(body.sample_ids)
    owner_of = dict(zip(data.sample_ids, data.owner_ids))
    return {sid: owner_of[sid] for sid in sorted(samples)}
