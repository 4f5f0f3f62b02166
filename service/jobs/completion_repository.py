"""A version's completion on Postgres, pipelined: reads in one round trip, writes and COMMIT in another."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from psycopg import Connection, Cursor

from service.audit.service import completions_chain, request_version_events
from service.audit.statements import append_events, chain_head, lock_chain_head
from service.db.base import utcnow
from service.db.postgres import array_literal, insert_history
from service.db.tables import ModelVersion
from service.deletions.repository import Completed
from service.states import CallbackState, RequestState
from service.storage.refs import COLLECTION_LOCK_KEY

if TYPE_CHECKING:
    from service.uow import UnitOfWork

_NextRound = TypeVar("_NextRound")

_CURRENT_VERSION = "SELECT current_version_id FROM models WHERE id = %s"
_LOCK_APPLIED = f"""
SELECT id, callback_url, created_at FROM deletion_requests
WHERE model_id = %s AND state = '{RequestState.APPLIED.value}' AND version_id = %s
ORDER BY id
FOR UPDATE
"""
_COLLECTION_LOCK = "SELECT pg_advisory_xact_lock(%s)"
_STILL_HELD = "SELECT DISTINCT blob FROM artifact_refs WHERE blob = ANY(%s::varchar[])"
_MARK_COMPLETED = f"""
UPDATE deletion_requests
SET state = '{RequestState.COMPLETED.value}', completed_at = %s, subjects = NULL, updated_at = %s
WHERE id = ANY(%s::int[])
"""
_CALLBACKS_PENDING = (
    f"UPDATE deletion_requests SET callback_state = '{CallbackState.PENDING.value}' WHERE id = ANY(%s::int[])"
)


@dataclass
class Completion(Generic[_NextRound]):
    """The requests completed (oldest first), when, and what ``next_round`` started (None: not started)."""

    requests: list[Completed]
    at: datetime
    next_round: _NextRound | None = None


@dataclass
class PendingCompletion:
    """A completion's reads and locks, sent in a pipeline (:func:`start_completion`)."""

    current: Cursor[Any]
    applied: Cursor[Any]  # locked
    head: Cursor[Any]  # locked
    held: Cursor[Any] | None  # which garbage blobs a reference holds (None: no garbage)


def start_completion(conn: Connection[Any], model_id: int, version: ModelVersion) -> PendingCompletion:
    """Send :func:`complete_version`'s reads and locks (requests, chain head, collection) in the pipeline."""
    current = conn.execute(_CURRENT_VERSION, (model_id,))
    applied = conn.execute(_LOCK_APPLIED, (model_id, version.id))
    head = lock_chain_head(conn, completions_chain(model_id))
    held = None
    if version.garbage:
        conn.execute(_COLLECTION_LOCK, (COLLECTION_LOCK_KEY,))
        held = conn.execute(_STILL_HELD, (array_literal(version.garbage),))
    return PendingCompletion(current, applied, head, held)


def complete_version(
    conn: Connection[Any],
    uow: UnitOfWork,
    serve: Callable[[ModelVersion], None],
    collect: Callable[[set[str]], None],
    model_id: int,
    version: ModelVersion,
    committed: bool = False,
    pending: PendingCompletion | None = None,
    next_round: Callable[[Connection[Any]], _NextRound] | None = None,
) -> Completion[_NextRound] | None:
    """``serve`` and ``collect``, then the requests ``completed`` (None: no model); the caller commits."""
    if pending is None:
        with conn.pipeline():
            pending = start_completion(conn, model_id, version)
            if committed:
                serve(version)  # while Postgres answers
    elif committed:
        serve(version)
    current_row = pending.current.fetchone()
    if current_row is None or current_row[0] is None:
        return None
    current_id = int(current_row[0])
    requests = [Completed(*row) for row in pending.applied.fetchall()]
    head = chain_head(completions_chain(model_id), pending.head.fetchone())
    if not committed or current_id != version.id:
        serve(version if current_id == version.id else uow.models.version(current_id) or version)
    if pending.held is not None:
        collect(set(version.garbage) - {row[0] for row in pending.held.fetchall()})
    now = utcnow()
    if not requests:
        return Completion(requests, now)
    ids = [r.id for r in requests]
    called = [r.id for r in requests if r.callback_url]
    for request_id in called:
        uow.outbox.add("deliver_callback", {"request_id": request_id, "attempt": 1})
    with conn.pipeline():
        conn.execute(_MARK_COMPLETED, (now, now, array_literal(ids)))
        insert_history(conn, [(rid, RequestState.COMPLETED, now, None) for rid in ids])
        if called:
            conn.execute(_CALLBACKS_PENDING, (array_literal(called),))
        events = request_version_events("deletion.completed", model_id, version.id, version.seq, ids)
        append_events(conn, head, events, now)
        sent = uow.send_commit(conn, begin_next=next_round is not None)
        started = next_round(conn) if sent and next_round is not None else None
    return Completion(requests, now, started)
