"""Periodic repair: re-queue work whose message was lost (crash, broker flushed with Redis).

Everything here is derived from Postgres, so it is safe to run in every process at any time: the
outbox dedupe keys keep repeated passes from queueing the same job twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING

from service import metrics
from service.db.base import utcnow
from service.jobs.completion import finish_stalled
from service.models.retirement import WAITING, erase_retired
from service.states import ModelState, RequestState

if TYPE_CHECKING:
    from service.runtime import Runtime

log = logging.getLogger(__name__)


def reconcile(rt: Runtime) -> None:
    now = utcnow()
    settled = now - timedelta(seconds=rt.settings.reconcile_after_seconds)
    stale = now - timedelta(seconds=rt.settings.stale_job_seconds)
    with rt.uow() as uow:
        # Deletions of a ready model that nobody is applying: cheap to re-queue (a no-op if in hand).
        for model_id in uow.models.models_with_requests(
            [RequestState.QUEUED], before=settled, model_status=ModelState.READY
        ):
            uow.outbox.add("apply_deletions", {"model_id": model_id}, dedupe_key=f"apply:{model_id}")
        # Training jobs are long and share a lane: re-queue only when nothing has moved for a while.
        for model in uow.models.stale_jobs([ModelState.QUEUED, ModelState.TRAINING], before=stale):
            uow.outbox.add("train_model", {"model_id": model.id}, dedupe_key=f"train:{model.id}")
        for model in uow.models.stale_jobs([ModelState.RETRAINING], before=stale):
            uow.outbox.add("retrain_model", {"model_id": model.id}, dedupe_key=f"retrain:{model.id}")
        stalled = uow.models.models_with_requests([RequestState.APPLIED], before=settled, model_status=None)
        deleted = uow.models.models_with_requests(WAITING, before=settled, model_status=ModelState.DELETED)
        uow.commit()
    # A process died between a model's deletion and the erasure of its data: erase it now.
    for model_id in deleted:
        erase_retired(rt, model_id)
    # A worker died between committing a version and completing its requests: finish them here.
    for model_id in sorted(set(stalled) - set(deleted)):
        finish_stalled(rt, model_id, rt.settings.reconcile_after_seconds)


def sweep_orphans(rt: Runtime) -> list[str]:
    """Delete the blobs of the artifact store that no row holds (``artifact_refs``) and that nobody has
    written or re-put for ``LETHE_ORPHAN_GRACE_SECONDS``; returns their digests.

    They come from attempts that rolled back after writing their blobs, processes that died between
    writing and committing, and unlinks a power cut undid. They may hold rows of subjects erased since,
    so erasure is complete only once they are gone. The grace covers the jobs still between their
    writes and their commit; :meth:`service.storage.artifacts.LocalArtifactStore.sweep` keeps a blob
    that is put again while it is being swept.
    """

    @contextmanager
    def referenced(digests: list[str]) -> Iterator[set[str]]:
        with rt.uow() as uow:
            uow.refs.lock_for_collection()  # held while the store removes what is not referenced
            yield set(digests) - uow.refs.unreferenced(digests)

    removed = rt.artifacts.sweep(rt.settings.orphan_grace_seconds, referenced)
    rt.cache.forget(removed)
    if removed:
        metrics.ORPHAN_BLOBS_REMOVED.inc(len(removed))
        log.info("removed %d blobs no row held", len(removed))
    return removed
