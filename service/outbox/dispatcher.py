"""Moves committed outbox messages to the task queue, at least once: at the commit, or by a periodic pass."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from sqlalchemy.orm import Session, sessionmaker

from service.db.base import utcnow
from service.db.tables import OutboxMessage
from service.outbox.repository import Message, OutboxRepository
from service.periodic import RepeatingPass
from service.queue import TaskQueue

log = logging.getLogger(__name__)

_BATCH = 200


class Dispatcher:
    def __init__(self, sessions: sessionmaker[Session], queue: TaskQueue, interval_seconds: float) -> None:
        self._sessions = sessions
        self._queue = queue
        self._passes = RepeatingPass("dispatcher", interval_seconds, self._dispatch_all_due, log)

    def publish(self, messages: list[Message]) -> None:
        """Publish just-committed messages now; if the broker is down they stay pending."""
        self._send(lambda outbox: outbox.claim(m.id for m in messages), from_commit=True)

    def dispatch_due(self) -> int:
        """Publish up to one batch of due messages; returns how many were published."""
        now = utcnow()
        return self._send(lambda outbox: outbox.claim_due(now, _BATCH), from_commit=False)

    def _send(
        self, claim: Callable[[OutboxRepository], Iterable[OutboxMessage]], *, from_commit: bool
    ) -> int:
        """Send what ``claim`` locks up to a failure, and mark those sent dispatched; returns how many."""
        with self._sessions() as session:
            outbox = OutboxRepository(session)
            if from_commit:
                outbox.skip_wal_flush()
            sent: list[int] = []
            for message in claim(outbox):
                try:
                    self._queue.send(message.task, dict(message.payload))
                except Exception:
                    log.warning(
                        "could not publish %s; the dispatcher will retry", message.task, exc_info=True
                    )
                    if from_commit:
                        self._passes.wake()
                    break
                sent.append(message.id)
            outbox.mark_dispatched(sent, utcnow())
            session.commit()
        return len(sent)

    def start(self) -> None:
        self._passes.start()

    def stop(self) -> None:
        self._passes.stop()

    def _dispatch_all_due(self) -> None:
        while self.dispatch_due() == _BATCH:
            pass
