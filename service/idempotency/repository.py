"""SQL for idempotency keys."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, update
from sqlalchemy.orm import Session

from service.db.base import table, utcnow
from service.db.tables import IdempotencyKey
from service.db.upsert import insert_ignore

_keys = table(IdempotencyKey).c
_COMPLETE = (
    update(table(IdempotencyKey))
    .where(_keys.scope == bindparam("b_scope"), _keys.key == bindparam("b_key"))
    .values(status="done", response_status=bindparam("b_status"), response_body=bindparam("b_body"))
)


class IdempotencyRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def claim(self, scope: str, key: str, fingerprint: str, expires_at: datetime) -> bool:
        """Insert the key as in flight; False when it already exists (the caller then reads it)."""
        return bool(self.claim_many([(scope, key, fingerprint)], expires_at))

    def claim_many(self, keys: list[tuple[str, str, str]], expires_at: datetime) -> set[tuple[str, str]]:
        """Insert ``(scope, key, fingerprint)`` rows as in flight in one statement; returns the (scope, key)
        pairs inserted (a key that already exists is left as it is)."""
        if not keys:
            return set()
        now = utcnow()
        rows = [
            {
                "scope": scope,
                "key": key,
                "fingerprint": digest,
                "status": "in_flight",
                "created_at": now,
                "expires_at": expires_at,
            }
            for scope, key, digest in keys
        ]
        inserted = insert_ignore(
            self.session, IdempotencyKey, rows, returning=(IdempotencyKey.scope, IdempotencyKey.key)
        )
        return {(scope, key) for scope, key in inserted}

    def get(self, scope: str, key: str) -> IdempotencyKey | None:
        return self.session.get(IdempotencyKey, (scope, key), populate_existing=True)

    def complete(self, scope: str, key: str, status: int, body: dict[str, Any]) -> None:
        self.complete_many([(scope, key, status, body)])

    def complete_many(self, answers: list[tuple[str, str, int, dict[str, Any]]]) -> None:
        """:meth:`complete` for many ``(scope, key, status, body)`` at once (one executemany of a Core
        UPDATE: the ORM's bulk update by primary key costs more than the statement itself)."""
        if answers:
            self.session.execute(
                _COMPLETE,
                [
                    {"b_scope": scope, "b_key": key, "b_status": status, "b_body": body}
                    for scope, key, status, body in answers
                ],
            )

    def release(self, scope: str, key: str) -> None:
        self.session.execute(
            delete(IdempotencyKey).where(IdempotencyKey.scope == scope, IdempotencyKey.key == key)
        )

    def purge_expired(self, now: datetime) -> int:
        result = self.session.execute(delete(IdempotencyKey).where(IdempotencyKey.expires_at < now))
        return int(getattr(result, "rowcount", 0) or 0)
