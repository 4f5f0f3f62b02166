"""Deleting a model in two transactions, so no request completes while its subject's bytes remain."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from service import metrics
from service.audit.repository import ChainHead
from service.audit.service import model_chain
from service.db.base import utcnow
from service.db.tables import DeletionRequest
from service.errors import NotFound
from service.jobs.completion import collect_garbage
from service.jobs.context import CompletionContext
from service.jobs.versions import model_holder, version_blobs
from service.states import CallbackState, ModelState, RequestState
from service.storage.buckets import digests

if TYPE_CHECKING:
    from service.uow import UnitOfWork

WAITING = (RequestState.QUEUED, RequestState.AWAITING_RETRAIN, RequestState.RETRAINING, RequestState.APPLIED)
"""Request states that a deleted model answers: the subject is gone with the model."""


def delete_model(rt: CompletionContext, model_id: int) -> None:
    """Both steps; deleting a deleted model again is a no-op (the erase step runs again, harmlessly)."""
    retire(rt, model_id)
    erase_retired(rt, model_id)


def retire(rt: CompletionContext, model_id: int) -> None:
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


def erase_retired(rt: CompletionContext, model_id: int) -> None:
    with rt.uow() as uow:
        model = uow.models.lock(model_id)
        if model is None or model.status != ModelState.DELETED:
            return
        rt.hot.retire(model_id)  # under the lock, before the waiting requests can count as completed
        blobs = digests(model.training) | digests(model.statistics)  # every blob its rows still name
        for version in uow.models.versions(model.id, limit=1_000_000):
            blobs |= version_blobs(version) | set(version.garbage or [])
        purged = utcnow()
        waiting = uow.deletions.in_states(model_id, WAITING)
        # every row lock before the collection lock
        head = uow.audit.lock_chain(model_chain(model_id)) if waiting else None
        received = [request.created_at for request in waiting]
        model.training, model.statistics = None, None
        uow.models.purge_all_versions(model_id, purged)
        collect_garbage(uow, rt, blobs)  # after every row lock: held only for the unlinks and the rest
        now = utcnow()  # completed once the blobs are gone: no completed_at precedes the unlinks
        _complete(uow, model_id, waiting, now, head)
        uow.commit()
    for at in received:
        metrics.observe_completed(at, now)


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
    done = {"event_type": "deletion.completed", "model_id": model_id, "version_id": None}
    events = [{**done, "request_id": r.id, "payload": {"reason": "model_deleted"}} for r in requests]
    uow.audit.append_many(model_chain(model_id), events, head)
