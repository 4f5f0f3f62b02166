"""/v1/audit: query the append-only log and verify its hash chains."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import RuntimeDep
from service.audit.schemas import AuditEventOut, AuditPage, ChainOut, VerifyOut
from service.audit.service import verify as verify_chains
from service.errors import Unprocessable
from service.schemas import MAX_DB_INT, SubjectId, error_responses

router = APIRouter(prefix="/v1/audit", tags=["audit"])
_ROW_FIELDS = ("id", "chain", "at", "model_id", "request_id", "version_id", "payload", "prev_hash", "hash")


def _utc(value: datetime | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00+14:00 is before year 1 in UTC
        raise Unprocessable(
            f"{name} is out of range: give a time between years 1 and 9999 UTC", code="validation_error"
        ) from None


@router.get(
    "/events", response_model=AuditPage, summary="Query the audit log", responses=error_responses(422)
)
def query_events(
    rt: RuntimeDep,
    model_id: Annotated[int | None, Query(ge=1, le=MAX_DB_INT)] = None,
    request_id: Annotated[int | None, Query(ge=1, le=MAX_DB_INT)] = None,
    chain: Annotated[
        str | None,
        Query(
            max_length=64,
            description="One chain (model:<id>, model:<id>:requests, model:<id>:completions or system), in order",
        ),
    ] = None,
    owner_id: Annotated[
        SubjectId | None, Query(description="Events of requests naming this owner (hashed server-side)")
    ] = None,
    sample_id: Annotated[
        SubjectId | None, Query(description="Events of requests naming this sample (hashed server-side)")
    ] = None,
    event_type: Annotated[str | None, Query(max_length=64, description="e.g. deletion.completed")] = None,
    since: Annotated[datetime | None, Query(description="Inclusive; UTC if no offset is given")] = None,
    until: Annotated[datetime | None, Query(description="Exclusive; UTC if no offset is given")] = None,
    after_id: Annotated[int | None, Query(ge=0, le=MAX_DB_INT)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> AuditPage:
    """Subjects are stored only as keyed hashes: pass the plain id, the server hashes it to search."""
    start, end = _utc(since, "since"), _utc(until, "until")
    if start is not None and end is not None and start >= end:
        raise Unprocessable(
            f"since ({start.isoformat()}) must be before until ({end.isoformat()}): since is inclusive, "
            "until exclusive",
            code="validation_error",
        )
    hashes = None
    if owner_id is not None or sample_id is not None:
        hashes = [rt.hasher.owner(owner_id)] if owner_id is not None else []
        hashes += [rt.hasher.sample(sample_id)] if sample_id is not None else []
    with rt.snapshot() as uow:
        events = uow.audit.query(
            model_id=model_id,
            request_id=request_id,
            chain=chain,
            subject_hashes=hashes,
            event_type=event_type,
            since=start,
            until=end,
            after_id=after_id,
            limit=limit,
        )
    return AuditPage(
        events=[
            AuditEventOut(**{k: getattr(e, k) for k in _ROW_FIELDS}, seq=e.chain_seq, type=e.event_type)
            for e in events
        ],
        next_after_id=events[-1].id if len(events) == limit else None,
    )


@router.get(
    "/verify", response_model=VerifyOut, summary="Recompute the hash chains", responses=error_responses(404)
)
def verify(
    rt: RuntimeDep,
    model_id: Annotated[
        int | None, Query(ge=1, le=MAX_DB_INT, description="The chains of this model")
    ] = None,
    chain: Annotated[
        str | None,
        Query(
            max_length=64,
            description="One chain: model:<id>, model:<id>:requests, model:<id>:completions or system",
        ),
    ] = None,
) -> VerifyOut:
    """Every chain by default; ``model_id`` selects the model's three chains, ``chain`` one chain. A chain
    that must exist but has no head (a registered model's ``model:<id>``, a chain whose events remain) is
    reported as missing (``ok: false``). 404 for a model neither the database nor the log knows (a deleted
    model keeps its chains) and for a chain name that has no events."""
    with rt.snapshot() as uow:
        # one snapshot: an event committed between the reads would look like tampering
        reports = verify_chains(uow.audit, chain=chain, model_id=model_id)
    return VerifyOut(ok=all(r.ok for r in reports), chains=[ChainOut(**r.__dict__) for r in reports])
