"""SQL for the outbox."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.orm import Session

from service.db.base import utcnow
from service.db.tables import OutboxMessage
from service.db.upsert import insert_ignore
from service.logs import X_REQUEST_ID, current_request_id


@dataclass(frozen=True)
class Message:
    id: int
    task: str
    payload: dict[str, Any]


class OutboxRepository:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.added: list[Message] = []  # due now: published right after the commit (service.uow)

    def add(
        self,
        task: str,
        payload: dict[str, Any],
        *,
        dedupe_key: str | None = None,
        available_at: datetime | None = None,
    ) -> None:
        """Queue ``task`` once this transaction commits (dropped while one with its ``dedupe_key`` waits)."""
        now = utcnow()
        if (request_id := current_request_id()) is not None:
            payload = {**payload, X_REQUEST_ID: request_id}  # the job's log lines name the API request
        row = {"task": task, "payload": payload, "dedupe_key": dedupe_key, "created_at": now}
        row["available_at"] = available_at or now
        ids = insert_ignore(self.session, OutboxMessage, row, returning=OutboxMessage.id)
        if ids and (available_at is None or available_at <= now):
            self.added.append(Message(ids[0], task, payload))

    def skip_wal_flush(self) -> None:
        """``synchronous_commit = off``: only for marks a crash may lose harmlessly."""
        self.session.execute(text("SET LOCAL synchronous_commit = off"))

    def claim_due(self, now: datetime, limit: int) -> list[OutboxMessage]:
        # SKIP LOCKED: the dispatchers of every process share the outbox, never sending a message twice
        stmt = (
            select(OutboxMessage)
            .where(OutboxMessage.dispatched_at.is_(None), OutboxMessage.available_at <= now)
            .order_by(OutboxMessage.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return list(self.session.scalars(stmt))

    def claim(self, ids: Iterable[int]) -> list[OutboxMessage]:
        """The undispatched messages among ``ids``, locked; those another dispatcher holds are skipped."""
        stmt = (
            select(OutboxMessage)
            .where(OutboxMessage.id.in_(list(ids)), OutboxMessage.dispatched_at.is_(None))
            .order_by(OutboxMessage.id)
            .with_for_update(skip_locked=True)
        )
        return list(self.session.scalars(stmt))

    def mark_dispatched(self, ids: list[int], at: datetime) -> None:
        if ids:
            self.session.execute(
                update(OutboxMessage)
                .where(OutboxMessage.id.in_(ids), OutboxMessage.dispatched_at.is_(None))
                .values(dispatched_at=at)
            )

    def pending_count(self) -> int:
        stmt = select(func.count()).select_from(OutboxMessage).where(OutboxMessage.dispatched_at.is_(None))
        return int(self.session.scalar(stmt) or 0)

    def purge_dispatched(self, before: datetime) -> None:
        dispatched = OutboxMessage.dispatched_at
        self.session.execute(delete(OutboxMessage).where(dispatched.is_not(None), dispatched < before))
