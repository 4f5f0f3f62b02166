"""Forgetting subjects in a table dataset no model uses, in one idempotent transaction under its lock."""

from __future__ import annotations

from typing import Any

from service.audit.service import SYSTEM_CHAIN
from service.db.tables import SUBJECTS_ERASED_EVENT, Dataset
from service.deletions.schemas import DatasetDeletionOut, DeletionIn
from service.deletions.service import FAN_OUT_STATUSES, missing_subjects_error
from service.errors import Conflict, Unprocessable
from service.graphs.requests import has_graph_items
from service.idempotency import service as idempotency
from service.jobs.completion import collect_garbage
from service.jobs.context import UpdateContext
from service.jobs.versions import drop_dataset_rows, replace_dataset_arrays
from service.states import ModelState
from service.uow import UnitOfWork


def erase_subjects(
    rt: UpdateContext, dataset_id: int, key: str | None, body: DeletionIn
) -> idempotency.Outcome:
    """Erase the rows ``body`` names from the dataset (200, with ``erased_rows``); replayed for the same key."""
    released: set[str] = set()

    def handler(uow: UnitOfWork) -> tuple[int, dict[str, Any]]:
        row = _locked_table(uow, dataset_id, body)
        arrays = row.arrays
        assert arrays is not None  # _locked_table refuses a dataset without rows
        forgotten = _forgotten(rt, uow, dataset_id, arrays, body)
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
    if has_graph_items(body):
        raise Unprocessable(
            f"dataset {dataset_id} is a table: name owner_ids or sample_ids", code="not_a_graph"
        )
    return row


_PAGE = 1000


def _forgotten(
    rt: UpdateContext, uow: UnitOfWork, dataset_id: int, arrays: dict[str, Any], body: DeletionIn
) -> dict[str, str]:
    """sample id -> owner id of the rows the request names; 409 if every missing id was erased, else 422."""
    data = rt.cache.dataset(arrays)
    owners, samples = list(dict.fromkeys(body.owner_ids)), list(dict.fromkeys(body.sample_ids))
    present = set(data.owner_ids)
    lost_owners = [o for o in owners if o not in present]
    lost_samples = [s for s in samples if not data.contains(s)]
    if lost_owners or lost_samples:
        hashed = {rt.hasher.owner(o): ("owner", o) for o in lost_owners} | {
            rt.hasher.sample(s): ("sample id", s) for s in lost_samples
        }
        erased = _erased_among(uow, dataset_id, hashed)
        raise missing_subjects_error(rt.hasher, lost_owners, lost_samples, erased, f"dataset {dataset_id}")
    wanted = set(owners)
    named = {sid for sid, owner in zip(data.sample_ids, data.owner_ids, strict=True) if owner in wanted}
    named |= set(samples)
    owner_of = dict(zip(data.sample_ids, data.owner_ids, strict=True))
    return {sid: owner_of[sid] for sid in sorted(named)}


def _erased_among(uow: UnitOfWork, dataset_id: int, hashed: dict[str, tuple[str, str]]) -> dict[str, str]:
    """subject hash -> message suffix, for those erased before by the dataset or by a model on it."""
    found: dict[str, str] = {}
    after: int | None = None
    while True:
        events = uow.audit.query(
            subject_hashes=list(hashed), event_type=SUBJECTS_ERASED_EVENT, after_id=after, limit=_PAGE
        )
        for event in events:
            payload = event.payload
            if event.chain != SYSTEM_CHAIN or payload.get("dataset_id") != dataset_id:
                continue
            listed = {"owner": set(payload.get("owners", [])), "sample id": set(payload.get("samples", []))}
            for h, (kind, _) in hashed.items():
                if h in listed[kind]:
                    found.setdefault(h, f" from dataset {dataset_id} (audit event {event.id})")
        if len(events) < _PAGE:
            break
        after = events[-1].id
    for model_id in uow.models.on_dataset(dataset_id, statuses=list(ModelState)):
        rest = [h for h in hashed if h not in found]
        if not rest:
            break
        for h, request in uow.models.erased_among(model_id, rest).items():
            found[h] = f" by request {request} to model {model_id}" if request else f" by model {model_id}"
    return found
