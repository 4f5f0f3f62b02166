"""After a version commits: serve it, delete the garbage it left, then complete its requests.

A request is ``completed`` only once the version that excludes its subject is the one Redis serves and
the subject's rows are gone from every store (DESIGN.md, invariants). This module does those steps in
that order and is idempotent, so the reconciler can run it again after a crash.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from service import metrics
from service.db.base import utcnow
from service.db.tables import ModelVersion
from service.jobs.completion_repository import Completion, PendingCompletion, complete_version
from service.jobs.context import CompletionContext
from service.states import RequestState
from service.storage.artifacts import ArtifactStore

if TYPE_CHECKING:
    from psycopg import Connection

    from service.uow import UnitOfWork

log = logging.getLogger(__name__)

_NextRound = TypeVar("_NextRound")

_UNLINKERS = 4
_PARALLEL_FROM = 32  # fewer blobs than this: a thread pool costs more than it saves


def publish(rt: CompletionContext, model_id: int, version: ModelVersion) -> None:
    """Point Redis at ``version`` (never backwards: the hot store compares sequence numbers)."""
    if version.released_blob is None:
        return  # purged: a newer version exists and is (or will be) published by its own job
    rt.hot.set_serving(
        model_id, version.id, version.seq, version.spec, rt.cache.weights(version.released_blob)
    )


def delete_blobs(artifacts: ArtifactStore, blobs: Collection[str]) -> None:
    """Unlink the blobs, a few at a time when many (each unlink waits on the file system, not on Python)."""
    if len(blobs) < _PARALLEL_FROM:
        for digest in blobs:
            artifacts.delete(digest)
        return
    with ThreadPoolExecutor(max_workers=_UNLINKERS) as pool:
        list(pool.map(artifacts.delete, blobs))


def collect_garbage(uow: UnitOfWork, rt: CompletionContext, blobs: Collection[str]) -> None:
    """Delete those of ``blobs`` no row references, from the artifact store and this process's cache. The
    collection lock keeps new references from committing until ``uow`` ends (service.storage.refs): a
    writer relying on a blob either shows it referenced here or finds it gone at its commit and rewrites
    it. End ``uow`` soon after, so that writers' commits do not wait."""
    if not blobs:
        return
    uow.refs.lock_for_collection()
    _unlink(rt, uow.refs.unreferenced(blobs))


def _unlink(rt: CompletionContext, blobs: Collection[str]) -> None:
    """Delete unreferenced ``blobs`` (under the collection lock) from the artifact store and the cache."""
    delete_blobs(rt.artifacts, blobs)
    rt.cache.forget(blobs)


def finish(
    rt: CompletionContext, model_id: int, version_id: int, committed: ModelVersion | None = None
) -> None:
    """Serve the model's current version, delete the version's garbage blobs, complete its requests.
    ``committed``: the version's row as just committed as current (published at once, not read again).

    One transaction: publish; lock the applied requests and the completions chain's head; take the
    collection lock and unlink the garbage; mark the requests completed, stamped after the unlinks (no
    signed ``completed_at`` names a time the subject's blobs still existed); commit. The collection lock
    comes after every row lock, so no deadlock: a writer holding it (shared) is inside its commit,
    waiting on no row lock, while a row lock this waits for belongs to a writer not yet at that lock.
    """
    with rt.uow() as uow:
        version = committed if committed is not None else uow.models.version(version_id)
        if version is None:
            return
        done: Completion[None] | None = _complete(
            uow.postgres_connection(), uow, rt, model_id, version, committed=committed is not None
        )
        _commit_completion(uow, done)


def complete_in_round_transaction(
    rt: CompletionContext,
    uow: UnitOfWork,
    model_id: int,
    version: ModelVersion,
    pending: PendingCompletion,
    next_round: Callable[[Connection[Any]], _NextRound] | None = None,
) -> _NextRound | None:
    """:func:`finish` in ``uow``, whose transaction the round's COMMIT began with the completion's reads
    started (``pending``); commits it. ``next_round``: started in the transaction the completion's COMMIT
    begins; returns what it started, ``uow`` left in that transaction (None: committed as usual)."""
    conn = uow.postgres_connection()
    done = _complete(conn, uow, rt, model_id, version, committed=True, pending=pending, next_round=next_round)
    if done is not None and done.next_round is not None:
        _observe(done)  # committed with its writes; the transaction now is the next round's
        return done.next_round
    _commit_completion(uow, done)
    return None


def _complete(
    conn: Connection[Any],
    uow: UnitOfWork,
    rt: CompletionContext,
    model_id: int,
    version: ModelVersion,
    *,
    committed: bool,
    pending: PendingCompletion | None = None,
    next_round: Callable[[Connection[Any]], _NextRound] | None = None,
) -> Completion[_NextRound] | None:
    """:func:`~service.jobs.completion_repository.complete_version` on ``rt``'s stores."""
    return complete_version(
        conn,
        uow,
        lambda current: publish(rt, model_id, current),
        lambda blobs: _unlink(rt, blobs),
        model_id,
        version,
        committed=committed,
        pending=pending,
        next_round=next_round,
    )


def _commit_completion(uow: UnitOfWork, done: Completion[Any] | None) -> None:
    if done is None:
        return
    uow.commit()
    _observe(done)


def _observe(done: Completion[Any]) -> None:
    for request in done.requests:
        metrics.observe_completed(request.created_at, done.at)


def finish_stalled(rt: CompletionContext, model_id: int, older_than_seconds: float) -> None:
    """Finish versions whose requests were left ``applied`` (a worker died between the two steps)."""
    cutoff = utcnow() - timedelta(seconds=older_than_seconds)
    with rt.uow() as uow:
        stalled = {
            r.version_id
            for r in uow.deletions.in_states(model_id, [RequestState.APPLIED], lock=False)
            if r.version_id is not None and r.updated_at < cutoff
        }
    for version_id in sorted(stalled):
        log.info("finishing stalled version %s of model %s", version_id, model_id)
        finish(rt, model_id, version_id)
