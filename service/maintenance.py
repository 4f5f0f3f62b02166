"""Scheduled maintenance in every process (safe in each at any time): reconcile, purge, sweep orphans."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from service import metrics
from service.db.base import utcnow
from service.jobs.completion import finish_stalled
from service.jobs.context import UpdateContext
from service.models.retirement import WAITING, erase_retired
from service.periodic import RepeatingPass
from service.states import ModelState, RequestState
from service.uow import UnitOfWork

log = logging.getLogger(__name__)

_PRUNE_SECONDS = 5.0  # how often expired values leave the blob cache (service.jobs.state.BlobCache)


def reconcile(rt: UpdateContext) -> None:
    """Re-queue stalled work and finish what a dead process left half done."""
    now = utcnow()
    settled = now - timedelta(seconds=rt.settings.reconcile_after_seconds)
    stale = now - timedelta(seconds=rt.settings.stale_job_seconds)
    silent = now - timedelta(seconds=rt.settings.job_heartbeat_timeout_seconds)
    with rt.uow() as uow:
        # queued deletions of a ready model; unclaimed jobs (re-sent at most every stale_job_seconds) and
        # those whose heartbeat stopped
        for model_id in uow.models.models_with_requests(
            [RequestState.QUEUED], before=settled, model_status=ModelState.READY
        ):
            uow.outbox.add("apply_deletions", {"model_id": model_id}, dedupe_key=f"apply:{model_id}")
        unclaimed = uow.models.unclaimed_jobs(before=stale)
        for model in unclaimed:
            model.updated_at = now  # the re-send's mark
        trainings = [m for m in unclaimed if m.status == ModelState.QUEUED]
        trainings += uow.models.silent_jobs(ModelState.TRAINING, before=silent)
        for model in trainings:
            uow.outbox.add("train_model", {"model_id": model.id}, dedupe_key=f"train:{model.id}")
        retrains = [m for m in unclaimed if m.status == ModelState.RETRAINING]
        retrains += uow.models.silent_jobs(ModelState.RETRAINING, before=silent)
        for model in retrains:
            uow.outbox.add("retrain_model", {"model_id": model.id}, dedupe_key=f"retrain:{model.id}")
        stalled = uow.models.models_with_requests([RequestState.APPLIED], before=settled, model_status=None)
        deleted = uow.models.models_with_requests(WAITING, before=settled, model_status=ModelState.DELETED)
        uow.commit()
    for model_id in deleted:  # a process died between a model's deletion and the erasure of its data
        erase_retired(rt, model_id)
    for model_id in sorted(set(stalled) - set(deleted)):  # a version committed, its requests not completed
        finish_stalled(rt, model_id, rt.settings.reconcile_after_seconds)


def purge_expired(uow: UnitOfWork) -> None:
    """Expired idempotency keys, and outbox messages published more than a day ago, leave the database."""
    now = utcnow()
    uow.idempotency.purge_expired(now)
    uow.outbox.purge_dispatched(now - timedelta(days=1))


def sweep_orphans(rt: UpdateContext) -> list[str]:
    """Delete and return the unheld blobs not put for ``orphan_grace_seconds``."""

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


class _Every:
    """A task due every ``seconds``, and at once the first time."""

    def __init__(self, seconds: float, task: Callable[[], object]) -> None:
        self.seconds = seconds
        self.task = task
        self.last: float | None = None

    def run_if_due(self) -> None:
        if self.last is None or time.monotonic() - self.last >= self.seconds:
            self.last = time.monotonic()
            self.task()


class Maintenance:
    """The daemon thread that runs the repairs on their schedules."""

    def __init__(self, rt: UpdateContext) -> None:
        self._rt = rt
        settings = rt.settings
        self._schedule = [
            _Every(settings.reconcile_after_seconds, self.repair),
            _Every(_PRUNE_SECONDS, rt.cache.prune_expired),
            _Every(settings.orphan_sweep_seconds, self._sweep_orphans_aside),
        ]
        self._passes = RepeatingPass("maintenance", settings.dispatcher_interval_seconds, self._run_due, log)
        self._orphan_sweeper: threading.Thread | None = None

    def repair(self) -> None:
        """One reconciliation and purge pass."""
        reconcile(self._rt)
        with self._rt.uow() as uow:
            purge_expired(uow)
            uow.commit()

    def sweep_orphans(self) -> None:
        try:
            sweep_orphans(self._rt)
        except Exception:
            log.warning("orphan sweep failed; the next one retries", exc_info=True)

    def _sweep_orphans_aside(self) -> None:
        if self._orphan_sweeper is None or not self._orphan_sweeper.is_alive():
            self._orphan_sweeper = threading.Thread(
                target=self.sweep_orphans, name="lethe-orphan-sweep", daemon=True
            )
            self._orphan_sweeper.start()

    def start(self) -> None:
        self._passes.start()

    def stop(self) -> None:
        self._passes.stop()

    def _run_due(self) -> None:
        for task in self._schedule:
            task.run_if_due()
