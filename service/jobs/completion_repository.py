"""A version's completion on Postgres: serve it, delete its garbage, complete its requests.

One operation, :func:`complete_version`, in the transaction of the caller's unit of work
(:func:`service.jobs.completion.finish`):

- reads the model's current version; locks, in this order, the version's ``applied`` requests, the
  head of the model's completions chain and, when the version left garbage blobs, the collection lock
  (:data:`service.storage.refs.COLLECTION_LOCK_KEY`, exclusive); reads which of those blobs a reference
  still holds;
- the caller serves the current version and unlinks the blobs no reference holds;
- writes, stamped after the unlinks: the requests' ``completed`` state (their subjects dropped), their
  history, their pending callbacks and their ``deletion.completed`` audit events; the COMMIT goes with
  them when the unit of work has nothing else to flush (:meth:`service.uow.UnitOfWork.send_commit`).

Its statements run on the unit of work's own connection, in the same transaction, in pipeline mode
(:mod:`service.db.postgres`): the reads in one round trip, the writes and the COMMIT in another. The reads
can be started in the pipeline of the transaction before (:func:`start_completion`): an update round
sends them with its COMMIT (:func:`service.jobs.round_repository.record_round`). The completion's COMMIT
can likewise begin the next transaction and start its reads (``next_round``).
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
    """What a completion did: the requests it completed (oldest first) and when."""

    requests: list[Completed]
    at: datetime
    # What ``next_round`` started in the transaction the completion's COMMIT began (None: not started).
    next_round: _NextRound | None = None


@dataclass
class PendingCompletion:
    """A completion's reads and locks (:func:`start_completion`), sent in a pipeline; their answers are
    read once it ends."""

    current: Cursor[Any]  # the model's current version
    applied: Cursor[Any]  # the version's applied requests, locked
    head: Cursor[Any]  # the completions chain's head, locked
    held: Cursor[Any] | None  # which of the version's garbage blobs a reference holds (None: no garbage)


def start_completion(conn: Connection[Any], model_id: int, version: ModelVersion) -> PendingCompletion:
    """Send, in the caller's pipeline, :func:`complete_version`'s reads, with the locks in this order: the
    version's applied requests, the completions chain's head, and the collection lock when the version
    left garbage, then which garbage blobs a reference still holds."""
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
    """Complete ``version`` in ``uow``'s transaction (see the module's docstring): ``serve`` publishes the
    model's current version and ``collect`` deletes the garbage blobs no reference holds, after the locks
    and before the requests are stamped ``completed``. None: the model is gone or has no version (nothing
    written). The caller then commits ``uow`` (:meth:`UnitOfWork.commit`, which finds the transaction
    ended if its COMMIT went with the writes), unless ``next_round`` ran (below).

    ``committed``: the caller committed ``version`` as the model's current version itself, just now
    (an update's drain). It is then published while Postgres answers the reads, and again only if the
    model has moved on meanwhile. Publishing it early is as safe as afterwards: the hot store never moves
    the pointer back to an older version, nor past a deleted model's tombstone
    (:meth:`service.storage.hot.HotStore.set_serving`, :meth:`~service.storage.hot.HotStore.retire`).

    ``pending``: the reads, started already (:func:`start_completion`) and answered: the round that
    committed ``version`` started them with its COMMIT, so the version is published first thing, the
    round's commit being known to have succeeded.

    ``next_round``: when the COMMIT goes with the writes, a new transaction of ``uow`` begins with it and
    ``next_round`` starts the next update round's reads in it
    (:func:`service.jobs.round_repository.start_lock_round`); what it returns is in the
    :class:`Completion`, and ``uow`` is left in that transaction (the caller must not commit it: the next
    round does)."""
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
        append_events(
            conn,
            head,
            request_version_events("deletion.completed", model_id, version.id, version.seq, ids),
            now,
        )
        # Not with callbacks: their outbox rows are flushed at the commit.
        sent = uow.send_commit(conn, begin_next=next_round is not None)
        started = next_round(conn) if sent and next_round is not None else None
    return Completion(requests, now, started)
