"""Deleting a model: every copy of its training data, vectors and weights goes; its history stays.

``DELETE /v1/models/{id}`` is for an app that no longer needs a model. What goes: the model's training
arrays and statistics (artifact store and Redis), the weights of every version, its ``samples`` rows and
its Redis keys. What stays, append-only as ever: the version rows and their certificates (with the
weights' digests), the ledger, the audit log (keyed hashes only), the tombstones and the deletion
requests' histories. The dataset the model was trained on keeps its own arrays (blobs it shares with the
model stay, since the dataset still holds them); delete subjects from it through any other model.

Two transactions, in the order :func:`service.jobs.completion.finish` uses, so that no request counts as
completed while its subject's bytes are still on disk:

1. :func:`retire` (under the model lock): status ``deleted``, every artifact reference of the model
   released, its ``samples`` rows deleted, an audit event; commit. From here on no job touches the model
   (each checks the status under the same lock).
2. :func:`erase_retired`: clear Redis (with a tombstone serving pointer that keeps a racing writer from
   publishing weights again), unlink the blobs nothing else holds (under the collection lock), clear the
   model's and its versions' blob pointers, and complete the requests that were still waiting (their
   subject is gone with the model); commit. It is idempotent, and the reconciler runs it again for a
   deleted model that still has waiting requests (a process that died between the two steps); blobs
   such a crash leaves are unreferenced, so the orphan sweep removes them in any case.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import func, literal, update

from service import metrics
from service.audit.repository import ChainHead
from service.audit.service import model_chain
from service.db.base import utcnow
from service.db.tables import DeletionRequest, Model, ModelVersion
from service.errors import NotFound
from service.jobs.completion import collect_garbage
from service.jobs.versions import model_holder, version_blobs
from service.states import CallbackState, ModelState, RequestState
from service.storage.buckets import digests

if TYPE_CHECKING:
    from service.db.uow import UnitOfWork
    from service.runtime import Runtime

WAITING = (RequestState.QUEUED, RequestState.AWAITING_RETRAIN, RequestState.RETRAINING, RequestState.APPLIED)
"""Request states that a deleted model answers: the subject is gone with the model."""


def delete_model(rt: Runtime, model_id: int) -> None:
    """Both steps; deleting a deleted model again is a no-op (the erase step runs again, harmlessly)."""
    retire(rt, model_id)
    erase_retired(rt, model_id)


def retire(rt: Runtime, model_id: int) -> None:
    with rt.uow() as uow:
        model = uow.models.lock(model_id)
        if model is None:
            raise NotFound(f"model {model_id} does not exist")
        if model.status == ModelState.DELETED:
            return
        previous = model.status
        model.status = model.phase = ModelState.DELETED
        model.eta_seconds, model.finished_at = None, utcnow()
        model.retrain_reason = None  # a retrain asked for and not yet run will not run
        released = uow.refs.release(model_holder(model_id))
        uow.models.delete_all_samples(model_id)
        uow.audit.append(
            model_chain(model_id),
            "model.deleted",
            model_id=model_id,
            payload={"previous_status": previous, "blobs_released": len(released)},
        )
        uow.commit()
    metrics.MODELS_DELETED.inc()


def erase_retired(rt: Runtime, model_id: int) -> None:
    with rt.uow() as uow:
        model = uow.models.lock(model_id)
        if model is None or model.status != ModelState.DELETED:
            return
        rt.hot.retire(model_id)  # under the lock, before the waiting requests can count as completed
        blobs = _named_blobs(uow, model)
        purged = utcnow()
        waiting = uow.deletions.in_states(model_id, WAITING)
        # every row lock before the collection lock
        head = uow.audit.lock_chain(model_chain(model_id)) if waiting else None
        received = [request.created_at for request in waiting]
        model.training, model.statistics = None, None
        uow.session.execute(
            update(ModelVersion)
            .where(ModelVersion.model_id == model_id)
            .values(
                released_blob=None,
                clean_blob=None,
                artifacts={},
                garbage=[],
                # superseded versions keep the time their weights went
                weights_purged_at=func.coalesce(
                    ModelVersion.weights_purged_at, literal(purged, ModelVersion.weights_purged_at.type)
                ),
            )
        )
        collect_garbage(uow, rt, blobs)  # after every row lock: held only for the unlinks and the rest
        now = utcnow()  # completed once the blobs are gone: no completed_at precedes the unlinks
        _complete(uow, model_id, waiting, now, head)
        uow.commit()
    for at in received:
        metrics.observe_completed(at, now)


def _named_blobs(uow: UnitOfWork, model: Model) -> set[str]:
    """Every blob the model's row and its versions' rows still name (released in step 1)."""
    names = digests(model.training) | digests(model.statistics)
    for version in uow.models.versions(model.id, limit=1_000_000):
        names |= version_blobs(version) | set(version.garbage or [])
    return names


def _complete(
    uow: UnitOfWork, model_id: int, requests: list[DeletionRequest], now: datetime, head: ChainHead | None
) -> None:
    detail = "the model was deleted: every copy of its data is gone"
    for request in requests:
        request.state, request.completed_at, request.subjects = RequestState.COMPLETED, now, None
        if request.callback_url:
            request.callback_state = CallbackState.PENDING
            uow.outbox.add("deliver_callback", {"request_id": request.id, "attempt": 1})
    uow.deletions.add_events([(r.id, RequestState.COMPLETED, now, detail) for r in requests])
    uow.audit.append_many(
        model_chain(model_id),
        [
            {"event_type": "deletion.completed", "model_id": model_id, "request_id": r.id, "version_id": None,
             "payload": {"reason": "model_deleted"}}
            for r in requests
        ],
        head,
    )
