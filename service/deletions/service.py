"""Accepting, reading and canceling deletion requests."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from service import metrics
from service.audit.service import requests_chain
from service.db.base import utcnow
from service.db.tables import DeletionRequest, Model
from service.deletions.schemas import (
    BulkItem,
    BulkOut,
    CallbackOut,
    DatasetDeletionItem,
    DatasetDeletionOut,
    DeletionAccepted,
    DeletionIn,
    DeletionOut,
    HistoryEntry,
    VersionRef,
)
from service.errors import ApiError, Conflict, NotFound, Unprocessable
from service.graphs.requests import check_submissions, graph_hashes, graph_subjects, submit_checked
from service.idempotency.service import Outcome
from service.models.service import require_live
from service.states import ModelState, RequestState
from service.subjects import SubjectHasher
from service.uow import UnitOfWork

if TYPE_CHECKING:
    from service.jobs.state import BlobCache

_SHOWN = 5  # ids named in one error message

_ACCEPTED_HISTORY = (RequestState.RECEIVED, RequestState.QUEUED)
_FITTING = (ModelState.QUEUED, ModelState.TRAINING, ModelState.RETRAINING)  # their ETA adds to expected_by
CANCELABLE = (RequestState.QUEUED, RequestState.AWAITING_RETRAIN)
_COPIED = ("id", "model_id", "state", "num_samples", "expected_by", "created_at", "completed_at")


def bulk_report(results: list[DeletionAccepted | ApiError]) -> tuple[int, dict[str, Any]]:
    """A bulk submission's answer: every item's outcome; 202 when all were accepted, 207 otherwise."""
    items = [
        BulkItem(index=i, status=r.status, error=r.body()["error"])
        if isinstance(r, ApiError)
        else BulkItem(index=i, status=202, id=r.id, expected_by=r.expected_by)
        for i, r in enumerate(results)
    ]
    accepted = sum(1 for item in items if item.status == 202)
    report = BulkOut(accepted=accepted, rejected=len(items) - accepted, results=items)
    return (202 if accepted == len(items) else 207), report.model_dump(mode="json")


FAN_OUT_STATUSES = (ModelState.QUEUED, ModelState.TRAINING, ModelState.READY, ModelState.RETRAINING)
"""Model states a dataset-wide deletion goes to."""


def fan_out_models(uow: UnitOfWork, dataset_id: int) -> list[int]:
    """The models a deletion on ``dataset_id`` goes to; 404 for an unknown dataset."""
    if uow.datasets.get(dataset_id) is None:
        raise NotFound(f"dataset {dataset_id} does not exist")
    return uow.models.on_dataset(dataset_id, FAN_OUT_STATUSES)


def as_outcome(answer: Outcome | BaseException) -> Outcome:
    """One model's answer to a dataset-wide deletion as an outcome (an ApiError too); others raised."""
    if isinstance(answer, ApiError):
        return Outcome(answer.status, answer.body(), replayed=False)
    if isinstance(answer, BaseException):
        raise answer
    return answer


KEY_MISUSE = ("idempotency_key_reused", "idempotency_key_in_flight")


def key_misuse(outcomes: list[Outcome]) -> Outcome | None:
    """If every model refused the Idempotency-Key (reused: 422, in flight: 409), that refusal; else None."""
    refused = [
        o for o in outcomes if o.status != 202 and (o.body.get("error") or {}).get("code") in KEY_MISUSE
    ]
    if not outcomes or len(refused) < len(outcomes):
        return None
    return min(refused, key=lambda o: KEY_MISUSE.index(o.body["error"]["code"]))


def fan_out_report(dataset_id: int, models: list[int], outcomes: list[Outcome]) -> tuple[int, dict[str, Any]]:
    """A dataset-wide deletion's answer: each model's outcome; 202 when every model accepted, 207 otherwise."""
    items = [
        DatasetDeletionItem(model_id=m, status=o.status, id=o.body["id"], expected_by=o.body["expected_by"])
        if o.status == 202
        else DatasetDeletionItem(model_id=m, status=o.status, error=o.body.get("error"))
        for m, o in zip(models, outcomes)
    ]
    accepted = sum(1 for item in items if item.status == 202)
    report = DatasetDeletionOut(
        dataset_id=dataset_id, accepted=accepted, rejected=len(items) - accepted, results=items
    )
    return (202 if accepted == len(items) else 207), report.model_dump(mode="json")


def accept_many(
    uow: UnitOfWork,
    cache: BlobCache,
    hasher: SubjectHasher,
    model_id: int,
    bodies: list[DeletionIn],
    sla_seconds: float,
) -> list[DeletionAccepted | ApiError]:
    """:func:`check_submissions`, then :func:`submit_many` on the requests that passed; results in order."""
    return submit_checked(
        check_submissions(uow, cache, hasher, model_id, bodies),
        bodies,
        lambda items: submit_many(uow, hasher, model_id, items, sla_seconds),
    )


def submit_many(
    uow: UnitOfWork, hasher: SubjectHasher, model_id: int, bodies: list[DeletionIn], sla_seconds: float
) -> list[DeletionAccepted | ApiError]:
    """Queue each request valid against the model's training set: per request, accepted or its error."""
    model = uow.models.get(model_id)
    check_accepting(model, model_id)
    assert model is not None
    owners, samples = named_subjects(bodies)
    plan = plan_submissions(
        hasher,
        model,
        bodies,
        uow.models.samples_of_owners(model_id, owners),
        uow.models.owners_of(model_id, samples),
        lambda hashes: uow.models.erased_among(model_id, hashes),
        sla_seconds,
    )
    if not plan.accepted:
        return plan.results()
    ids = uow.deletions.insert_many(plan.rows())
    uow.deletions.add_subjects(plan.subjects(ids))
    uow.deletions.add_events(plan.history(ids))
    # last: the chain head stays locked until the commit
    uow.audit.append_many(requests_chain(model_id), plan.events(ids))
    uow.after_commit(partial(metrics.DELETIONS_RECEIVED.inc, len(plan.accepted)))
    return plan.results(ids)


def check_accepting(model: Model | Any, model_id: int) -> None:
    """404 for an unknown model, 410 for a deleted one, 409 for one that failed to train."""
    if model is None:
        raise NotFound(f"model {model_id} does not exist")
    require_live(model)
    if model.status == ModelState.FAILED:
        raise Conflict(
            f"model {model_id} failed to train ({model.error}); register it again", code="model_failed"
        )


def named_subjects(bodies: Sequence[DeletionIn]) -> tuple[list[str], list[str]]:
    """Every owner and every sample id the requests name, each once."""
    owners = list(dict.fromkeys(o for b in bodies for o in b.owner_ids))
    samples = list(dict.fromkeys(s for b in bodies for s in b.sample_ids))
    return owners, samples


@dataclass
class SubmissionPlan:
    """Accepted rows with their subject hashes, and each request's outcome (an error, or None: accepted)."""

    model_id: int
    now: datetime
    expected_by: datetime
    outcomes: list[ApiError | None]
    accepted: list[tuple[dict[str, Any], dict[str, str]]]  # (request row, subject hash -> kind)

    def rows(self) -> list[dict[str, Any]]:
        return [row for row, _ in self.accepted]

    def subjects(self, ids: Sequence[int]) -> list[tuple[int, str, str]]:
        return [(rid, h, kind) for rid, (_, hashes) in zip(ids, self.accepted) for h, kind in hashes.items()]

    def history(self, ids: Sequence[int]) -> list[tuple[int, RequestState, datetime, str | None]]:
        return [(rid, state, self.now, None) for rid in ids for state in _ACCEPTED_HISTORY]

    def events(self, ids: Sequence[int]) -> list[dict[str, Any]]:
        """The ``deletion.received`` audit event of each accepted request."""
        return [
            {
                "event_type": "deletion.received",
                "model_id": self.model_id,
                "request_id": rid,
                "version_id": None,
                "payload": {"subject_hashes": sorted(hashes), "num_samples": row["num_samples"]},
            }
            for rid, (row, hashes) in zip(ids, self.accepted)
        ]

    def results(self, ids: Sequence[int] = ()) -> list[DeletionAccepted | ApiError]:
        """Each request's answer, in order; ``ids``: the accepted requests' ids, in order."""
        next_id = iter(ids)
        return [
            r
            if r is not None
            else DeletionAccepted(
                id=next(next_id),
                model_id=self.model_id,
                state=RequestState.QUEUED,
                expected_by=self.expected_by,
                created_at=self.now,
            )
            for r in self.outcomes
        ]


def plan_submissions(
    hasher: SubjectHasher,
    model: Model | Any,
    bodies: Sequence[DeletionIn],
    owner_samples: Mapping[str, Sequence[str]],
    sample_owner: Mapping[str, str],
    erased_among: Callable[[list[str]], dict[str, int | None]],
    sla_seconds: float,
) -> SubmissionPlan:
    """Check each request against the named subjects still there (``erased_among``: if an id is missing)."""
    items = [(list(dict.fromkeys(b.owner_ids)), list(dict.fromkeys(b.sample_ids))) for b in bodies]
    missing = [
        ([o for o in owners if o not in owner_samples], [s for s in samples if s not in sample_owner])
        for owners, samples in items
    ]
    lost = [hasher.owner(o) for mo, _ in missing for o in mo] + [
        hasher.sample(s) for _, ms in missing for s in ms
    ]
    erased = erased_among(lost) if lost else {}
    erased_by = {h: f" by request {r}" if r else "" for h, r in erased.items()}
    now = utcnow()
    eta = model.eta_seconds if model.status in _FITTING and model.eta_seconds else 0.0
    plan = SubmissionPlan(model.id, now, now + timedelta(seconds=sla_seconds + eta), [], [])
    for body, (owners, samples), (lost_owners, lost_samples) in zip(bodies, items, missing):
        if lost_owners or lost_samples:
            holder = f"model {model.id}'s training set"
            plan.outcomes.append(missing_subjects_error(hasher, lost_owners, lost_samples, erased_by, holder))
            continue
        covered = {s for o in owners for s in owner_samples[o]} | set(samples)
        row = {
            "model_id": model.id,
            "state": RequestState.QUEUED,
            "subjects": {"owner_ids": owners, "sample_ids": samples, **graph_subjects(body)},
            "num_samples": len(covered),
            "callback_url": str(body.callback_url) if body.callback_url else None,
            "callback_attempts": 0,
            "expected_by": plan.expected_by,
            "created_at": now,
            "updated_at": now,
        }
        hashes = {hasher.owner(o): "owner" for o in owners} | {hasher.sample(s): "sample" for s in samples}
        hashes |= graph_hashes(hasher, body)
        plan.accepted.append((row, hashes))
        plan.outcomes.append(None)  # the DeletionAccepted, once the row has its id
    return plan


def missing_subjects_error(
    hasher: SubjectHasher, owners: list[str], samples: list[str], erased: Mapping[str, str], holder: str
) -> ApiError:
    """422 naming the ids ``holder`` never held; 409 if all were forgotten (``erased``: hash -> suffix)."""
    hashed = {hasher.owner(o): ("owner", o) for o in owners} | {
        hasher.sample(s): ("sample id", s) for s in samples
    }
    unknown = [hashed[h] for h in hashed if h not in erased]
    if unknown:
        names = ", ".join(f"{kind} {value!r}" for kind, value in unknown[:_SHOWN])
        more = f" and {len(unknown) - _SHOWN} more" if len(unknown) > _SHOWN else ""
        return Unprocessable(
            f"{names}{more} not in {holder}: check the ids (sample ids and owner ids are the values of the "
            "dataset's id and owner columns)",
            code="unknown_subject",
        )
    first = next(iter(hashed))
    kind, value = hashed[first]
    more = f" ({len(hashed) - 1} more named ids too)" if len(hashed) > 1 else ""
    return Conflict(
        f"{kind} {value!r} was already forgotten{erased[first]}{more}: remove the forgotten ids and submit again",
        code="already_forgotten",
    )


def get_request(uow: UnitOfWork, request_id: int, *, lock: bool = False) -> DeletionRequest:
    """The request (``lock``: locked until the transaction ends); 404 if there is none."""
    request = uow.deletions.lock(request_id) if lock else uow.deletions.get(request_id)
    if request is None:
        raise NotFound(f"deletion request {request_id} does not exist")
    return request


def request_out(uow: UnitOfWork, request: DeletionRequest, history: list | None = None) -> DeletionOut:
    events = history if history is not None else uow.deletions.events(request.id)
    version = uow.models.version(request.version_id) if request.version_id else None
    ref = VersionRef(seq=version.seq, kind=version.kind, certificate=version.certificate) if version else None
    subjects = request.subjects
    return DeletionOut(
        **{k: getattr(request, k) for k in _COPIED},
        num_owner_ids=len(subjects.get("owner_ids", [])) if subjects else None,
        num_sample_ids=len(subjects.get("sample_ids", [])) if subjects else None,
        history=[HistoryEntry(state=e.state, at=e.at, detail=e.detail) for e in events],
        version=ref,
        failure_reason=request.failure_reason,
        callback=(
            CallbackOut(
                url=request.callback_url, state=request.callback_state, attempts=request.callback_attempts
            )
            if request.callback_url
            else None
        ),
    )


def cancel(uow: UnitOfWork, request_id: int) -> DeletionRequest:
    request = get_request(uow, request_id, lock=True)
    if request.state not in CANCELABLE:
        raise Conflict(
            f"deletion request {request_id} is {request.state}: only a request still waiting (queued or "
            "awaiting_retrain) can be canceled",
            code="not_cancelable",
        )
    request.state = RequestState.CANCELED
    request.subjects = None
    uow.deletions.add_event(request.id, RequestState.CANCELED, utcnow())
    chain = requests_chain(request.model_id)
    uow.audit.append(chain, "deletion.canceled", model_id=request.model_id, request_id=request.id)
    return request
