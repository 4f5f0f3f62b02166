"""After a version commits: serve it, delete its garbage, complete its requests (in order, idempotent)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from service import metrics
from service.db.base import utcnow
from service.db.tables import ModelVersion
from service.jobs.completion_repository import PendingCompletion, complete_version
from service.jobs.context import CompletionContext
from service.states import RequestState

if TYPE_CHECKING:
    from psycopg import Connection

    from service.uow import UnitOfWork

log = logging.getLogger(__name__)

_NextRound = TypeVar("_NextRound")


def publish(rt: CompletionContext, model_id: int, version: ModelVersion) -> None:
    """Point Redis at ``version`` (never backwards: the hot store compares sequence numbers)."""
    if version.released_blob is None:
        return  # purged: a newer version exists and is (or will be) published by its own job
    rt.hot.set_serving(
        model_id, version.id, version.seq, version.spec, rt.cache.weights(version.released_blob)
    )


def collect_garbage(uow: UnitOfWork, rt: CompletionContext, blobs: Collection[str]) -> None:
    """Delete those of ``blobs`` no row references, under the collection lock until ``uow`` ends (soon)."""
    if not blobs:
        return
    uow.refs.lock_for_collection()
    _unlink(rt, uow.refs.unreferenced(blobs))


def _unlink(rt: CompletionContext, blobs: Collection[str]) -> None:
    """Delete ``blobs`` from the artifact store and the cache."""
    rt.artifacts.delete_many(blobs)
    rt.cache.forget(blobs)


def finish(
    rt: CompletionContext, model_id: int, version_id: int, committed: ModelVersion | None = None
) -> None:
    """Serve, collect and complete ``version_id`` in one transaction (``committed``: its row, as written)."""
    with rt.uow() as uow:
        version = committed if committed is not None else uow.models.version(version_id)
        if version is not None:
            _complete(uow, rt, model_id, version, committed=committed is not None)


def complete_in_round_transaction(
    rt: CompletionContext,
    uow: UnitOfWork,
    model_id: int,
    version: ModelVersion,
    pending: PendingCompletion,
    next_round: Callable[[Connection[Any]], _NextRound] | None = None,
) -> _NextRound | None:
    """:func:`finish` in the round's ``uow`` (reads ``pending``); returns what ``next_round`` started."""
    return _complete(uow, rt, model_id, version, committed=True, pending=pending, next_round=next_round)


def _complete(
    uow: UnitOfWork,
    rt: CompletionContext,
    model_id: int,
    version: ModelVersion,
    *,
    committed: bool,
    pending: PendingCompletion | None = None,
    next_round: Callable[[Connection[Any]], _NextRound] | None = None,
) -> _NextRound | None:
    """:func:`complete_version`, committed unless ``next_round`` ran; what ``next_round`` started."""
    done = complete_version(
        uow.postgres_connection(),
        uow,
        lambda current: publish(rt, model_id, current),
        lambda blobs: _unlink(rt, blobs),
        model_id,
        version,
        committed=committed,
        pending=pending,
        next_round=next_round,
    )
    if done is None:
        return None
    if done.next_round is None:
        uow.commit()
    for request in done.requests:
        metrics.observe_completed(request.created_at, done.at)
    return done.next_round


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
