"""A version's completion on Postgres (:func:`complete_version`): serve it, delete its garbage, complete
its requests, in the caller's unit of work. Pipelined (:mod:`service.db.postgres`): the reads in one round
trip (which an update round may start with its COMMIT: :func:`start_completion`), the writes and the COMMIT
in another (which may begin the next transaction and start its reads: ``next_round``).
"""

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
from service.jobs.versions import serving_version
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
    """What a completion did: the requests it completed (oldest first), when, and what ``next_round``
    started in the transaction its COMMIT began (None: not started)."""

    requests: list[Completed]
    at: datetime
    next_round: _NextRound | None = None


@dataclass
class PendingCompletion:
    """A completion's reads and locks, sent in a pipeline (:func:`start_completion`)."""

    current: Cursor[Any]  # the model's current version
    applied: Cursor[Any]  # the version's applied requests, locked
    head: Cursor[Any]  # the completions chain's head, locked
    held: Cursor[Any] | None  # which of the version's garbage blobs a reference holds (None: no garbage)


def start_completion(conn: Connection[Any], model_id: int, version: ModelVersion) -> PendingCompletion:
    """Send :func:`complete_version`'s reads in the caller's pipeline, locking in this order: the version's
    applied requests, the completions chain's head, the collection lock (only with garbage)."""
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
    """Complete ``version`` in ``uow``'s transaction: ``serve`` publishes the model's current version and
    ``collect`` deletes the garbage no reference holds, after the locks and before the requests are
    stamped ``completed``, with their history, callbacks and audit events. None: the model is gone or has
    no version. The caller then commits ``uow``, unless ``next_round`` ran.

    ``committed``: the caller just committed ``version`` as current; it is published while Postgres
    answers, again only if the model moved on (safe: the hot store never moves the pointer back, nor past
    a deleted model's tombstone). ``pending``: the reads, started (:func:`start_completion`) and answered.
    ``next_round``: when the COMMIT goes with the writes, it starts the next round's reads in the
    transaction that COMMIT begins; its result is in the :class:`Completion`, and ``uow`` is left in that
    transaction for the next round."""
    chain = completions_chain(model_id)
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
    head = chain_head(chain, pending.head.fetchone())
    if not committed or current_id != version.id:
        serve(serving_version(uow, version, current_id))
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
        # Not with callbacks: their outbox rows are flushed at the commit.
        sent = uow.send_commit(conn, begin_next=next_round is not None)
        started = next_round(conn) if sent and next_round is not None else None
    return Completion(requests, now, started)
