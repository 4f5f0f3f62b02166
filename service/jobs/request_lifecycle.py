"""A deletion request's states past ``queued`` (row, history, audit event), in the caller's unit of work."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from service import metrics
from service.audit.service import model_chain, request_version_events
from service.db.base import utcnow
from service.db.tables import DeletionRequest, Model
from service.jobs.context import UpdateContext
from service.jobs.plans import Batch, tombstones
from service.states import CallbackState, ModelState, RequestState
from service.subjects import ID_FIELDS, PAIR_FIELDS, Redactor, hashed_names
from service.uow import UnitOfWork


def record_erasure(
    rt: UpdateContext,
    uow: UnitOfWork,
    model: Model,
    batch: Batch,
    forgotten: dict[str, str],
    *,
    budget_epoch: int,
) -> None:
    """Tombstones for the forgotten samples and for owners with nothing left; the sample rows go."""
    uow.models.delete_samples(model.id, list(forgotten))
    emptied = emptied_owners(batch, forgotten)
    owners = {o for o in forgotten.values() if o}
    left = uow.models.samples_of_owners(model.id, sorted(owners - emptied))
    uow.models.add_erased(tombstones(rt.hasher, model.id, batch, forgotten, set(left), budget_epoch))


def emptied_owners(batch: Batch, forgotten: Mapping[str, str]) -> set[str]:
    """Owners a request named whole whose samples were all forgotten (the plan holds all they had)."""
    named = set(batch.owners)
    kept = {owner for sid, owner in batch.samples.items() if owner in named and sid not in forgotten}
    return named - kept


def mark_applied(
    uow: UnitOfWork,
    model_id: int,
    requests: list[DeletionRequest],
    version_id: int,
    claimed_at: Any,
    seq: int,
    *first_events: dict[str, Any],
) -> None:
    """The requests are in version ``seq`` (``first_events`` logged first; ``claimed_at``: applying)."""
    now = utcnow()
    ids = [r.id for r in requests]
    uow.deletions.set_state(ids, state=RequestState.APPLIED, version_id=version_id)
    applying = (
        [(rid, RequestState.APPLYING, claimed_at, None) for rid in ids] if claimed_at is not None else []
    )
    applied = [(rid, RequestState.APPLIED, now, f"version {seq}") for rid in ids]
    uow.deletions.add_events([*applying, *applied])
    uow.audit.append_many(
        model_chain(model_id),
        [*first_events, *request_version_events("deletion.applied", model_id, version_id, seq, ids)],
    )


def fail_request(
    uow: UnitOfWork, model_id: int, request: DeletionRequest, reason: str, claimed_at: Any = None
) -> None:
    """The request failed for ``reason`` (:func:`reason_at_rest`); ``claimed_at``: its ``applying`` state."""
    now = utcnow()
    reason = reason_at_rest(uow, model_id, request, reason)
    request.state = RequestState.FAILED
    request.failure_reason = reason
    request.subjects = None
    if claimed_at is not None:
        uow.deletions.add_event(request.id, RequestState.APPLYING, claimed_at)
    uow.deletions.add_event(request.id, RequestState.FAILED, now, reason)
    chain = model_chain(model_id)
    uow.audit.append(
        chain, "deletion.failed", model_id=model_id, request_id=request.id, payload={"reason": reason}
    )
    if request.callback_url:
        request.callback_state = CallbackState.PENDING
        uow.outbox.add("deliver_callback", {"request_id": request.id, "attempt": 1})
    uow.after_commit(metrics.DELETIONS_FAILED.inc)


UNNAMED = "<a subject of the request>"


def reason_at_rest(uow: UnitOfWork, model_id: int, request: DeletionRequest, reason: str) -> str:
    """``reason`` with every id the request names (and its owners' samples) shown by keyed hash."""
    subjects = request.subjects or {}

    def names() -> dict[str, str]:
        owners = [str(o) for o in subjects.get("owner_ids", [])]
        samples = [str(s) for field in ID_FIELDS if field != "owner_ids" for s in subjects.get(field, [])]
        samples += [str(s) for field in PAIR_FIELDS for pair in subjects.get(field, []) for s in pair]
        if owners:
            samples += [s for held in uow.models.samples_of_owners(model_id, owners).values() for s in held]
        if uow.hasher is None:  # no name at all
            return dict.fromkeys([*owners, *samples], UNNAMED)
        return hashed_names(uow.hasher, owners, samples)

    return Redactor(names).text(reason)


def await_retrain(
    uow: UnitOfWork, model: Model, requests: list[DeletionRequest], reason: str, at: Any
) -> None:
    """Park ``requests`` until a retrain excludes them; schedule that retrain (a new budget epoch)."""
    for request in requests:
        request.state = RequestState.AWAITING_RETRAIN
        uow.deletions.add_event(request.id, RequestState.AWAITING_RETRAIN, at, reason)
    schedule_retrain(uow, model, reason, requests)


def schedule_retrain(
    uow: UnitOfWork, model: Model, reason: str, waiting: Sequence[DeletionRequest] = ()
) -> None:
    """Put the (locked) model in ``retraining``, its retrain job queued and ``retrain.scheduled`` logged."""
    model.status, model.phase = ModelState.RETRAINING, "waiting"
    model.progress, model.eta_seconds = 0.0, None
    payload = {"reason": reason, "requests": [r.id for r in waiting], "budget_epoch": model.budget_epoch}
    uow.audit.append(model_chain(model.id), "retrain.scheduled", model_id=model.id, payload=payload)
    uow.outbox.add(
        "retrain_model", {"model_id": model.id, "reason": reason}, dedupe_key=f"retrain:{model.id}"
    )
