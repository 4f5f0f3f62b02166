"""Moves committed outbox messages to the task queue, and periodically repairs lost work.

Runs as a daemon thread in every API and worker process. A commit that wrote outbox messages calls
:meth:`Dispatcher.kick`, so work is published within milliseconds; the periodic pass catches
everything else (a crash between commit and publish, a broker that lost its queue when Redis was
flushed). Messages are published at least once; every job is idempotent.

Most messages never wait for this thread: the unit of work that commits them publishes them at once
(:meth:`Dispatcher.publish`).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from service.db.base import utcnow
from service.outbox.repository import Message

if TYPE_CHECKING:
    from service.runtime import Runtime

log = logging.getLogger(__name__)

_BATCH = 200
_PRUNE_SECONDS = 5.0  # how often expired values leave the blob cache (service.jobs.state.BlobCache)


def _due(last: float | None, every_seconds: float) -> bool:
    return last is None or time.monotonic() - last >= every_seconds


class Dispatcher:
    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # None: never, so the first pass after start-up runs both (a crash may precede it). Not 0.0:
        # the monotonic clock counts from boot, and a machine up for less than the interval would wait.
        self._last_sweep: float | None = None
        self._last_orphan_sweep: float | None = None
        self._last_prune: float | None = None
        self._orphan_sweeper: threading.Thread | None = None
        self._last_failure: str | None = None  # the failing passes' error, logged in full once

    def kick(self) -> None:
        self._wake.set()

    def publish(self, messages: list[Message]) -> None:
        """Publish just-committed messages now, then mark them dispatched.

        Called in the committing thread: a deletion's update job is on the broker before the API answers.
        The rows are locked (SKIP LOCKED) while they are sent, so the periodic pass never sends them a
        second time. If the broker is down they stay pending and the periodic pass publishes them later.
        """
        with self._rt.uow() as uow:
            uow.bookkeeping()
            sent = []
            for message in uow.outbox.claim(m.id for m in messages):
                try:
                    self._rt.queue.send(message.task, dict(message.payload))
                except Exception:
                    log.warning(
                        "could not publish %s; the dispatcher will retry", message.task, exc_info=True
                    )
                    self.kick()
                    break
                sent.append(message.id)
            uow.outbox.mark_dispatched(sent, utcnow())
            uow.commit()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="lethe-dispatcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def dispatch_due(self) -> int:
        """Publish due messages; returns how many were published."""
        sent: list[int] = []
        with self._rt.uow() as uow:
            now = utcnow()
            for message in uow.outbox.claim_due(now, _BATCH):
                try:
                    self._rt.queue.send(message.task, dict(message.payload))
                except Exception:
                    log.warning("could not publish %s; will retry", message.task, exc_info=True)
                    break
                sent.append(message.id)
            uow.outbox.mark_dispatched(sent, now)
            uow.commit()
        return len(sent)

    def sweep(self) -> None:
        """The periodic repairs: re-queue stalled work, purge expired keys and old outbox rows. (The orphan
        blobs have a pass of their own, less often: it lists the whole artifact store.)"""
        from service.jobs.reconcile import reconcile

        reconcile(self._rt)
        with self._rt.uow() as uow:
            now = utcnow()
            uow.idempotency.purge_expired(now)
            uow.outbox.purge_dispatched(now - timedelta(days=1))
            uow.commit()

    def sweep_orphans(self) -> None:
        """Blobs no row holds leave the artifact store (:func:`service.jobs.reconcile.sweep_orphans`)."""
        from service.jobs.reconcile import sweep_orphans

        try:
            sweep_orphans(self._rt)
        except Exception:
            log.warning("orphan sweep failed; the next one retries", exc_info=True)

    def _sweep_orphans_aside(self) -> None:
        """On a thread of its own: it lists the whole artifact store, and the outbox must not wait."""
        if self._orphan_sweeper is None or not self._orphan_sweeper.is_alive():
            self._orphan_sweeper = threading.Thread(
                target=self.sweep_orphans, name="lethe-orphan-sweep", daemon=True
            )
            self._orphan_sweeper.start()

    def _loop(self) -> None:
        interval = self._rt.settings.dispatcher_interval_seconds
        while not self._stop.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                while self.dispatch_due() == _BATCH:
                    pass
                if _due(self._last_sweep, self._rt.settings.reconcile_after_seconds):
                    self._last_sweep = time.monotonic()
                    self.sweep()
                if _due(self._last_prune, _PRUNE_SECONDS):
                    self._last_prune = time.monotonic()
                    self._rt.cache.prune_expired()
                if _due(self._last_orphan_sweep, self._rt.settings.orphan_sweep_seconds):
                    self._last_orphan_sweep = time.monotonic()
                    self._sweep_orphans_aside()
            except Exception as exc:
                # A database or broker that is down fails every pass (twice a second): the traceback once
                # per kind of failure, then one line each, so the log says what is wrong without drowning.
                failure = f"{type(exc).__name__}: {exc}".splitlines()[0]
                log.warning("dispatcher pass failed: %s", failure, exc_info=failure != self._last_failure)
                self._last_failure = failure
            else:
                if self._last_failure is not None:
                    log.info("dispatcher passes succeed again after: %s", self._last_failure)
                    self._last_failure = None
