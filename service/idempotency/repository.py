"""SQL for idempotency keys: the one place keys are claimed and answers stored."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import Connection, Cursor
from sqlalchemy import and_, delete, or_
from sqlalchemy.orm import Session

from service.db.base import utcnow
from service.db.postgres import array_columns, jsonb_element, session_connection
from service.db.tables import IdempotencyKey

_CLAIM = """
INSERT INTO idempotency_keys (scope, key, fingerprint, status, created_at, expires_at)
SELECT t.scope, t.key, t.fingerprint, 'in_flight', %s, %s
FROM unnest(%s::varchar[], %s::varchar[], %s::varchar[]) AS t(scope, key, fingerprint)
ON CONFLICT DO NOTHING
RETURNING scope, key
"""
_STORE = """
UPDATE idempotency_keys SET status = 'done', response_status = t.status, response_body = t.body
FROM unnest(%s::varchar[], %s::varchar[], %s::int[], %s::jsonb[]) AS t(scope, key, status, body)
WHERE idempotency_keys.scope = t.scope AND idempotency_keys.key = t.key
"""


def claim_keys(
    conn: Connection[Any], keys: Sequence[tuple[str, str, str]], created_at: datetime, expires_at: datetime
) -> Cursor[Any]:
    """Insert ``(scope, key, fingerprint)`` rows as in flight; the cursor's rows are the pairs inserted."""
    return conn.execute(_CLAIM, (created_at, expires_at, *array_columns(keys)))


def store_answers(conn: Connection[Any], answers: Sequence[tuple[str, str, int, dict[str, Any]]]) -> None:
    """Mark keys done with their answers ``(scope, key, status, body)``."""
    if answers:
        rows = [(scope, key, status, jsonb_element(body)) for scope, key, status, body in answers]
        conn.execute(_STORE, array_columns(rows))


class IdempotencyRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def claim(self, scope: str, key: str, fingerprint: str, expires_at: datetime) -> bool:
        """Insert the key as in flight; False when it already exists (the caller then reads it)."""
        return bool(self.claim_many([(scope, key, fingerprint)], expires_at))

    def claim_many(self, keys: list[tuple[str, str, str]], expires_at: datetime) -> set[tuple[str, str]]:
        """Insert ``(scope, key, fingerprint)`` rows as in flight; returns the (scope, key) pairs inserted."""
        if not keys:
            return set()
        claimed = claim_keys(session_connection(self.session), keys, utcnow(), expires_at)
        return {(scope, key) for scope, key in claimed.fetchall()}

    def get(self, scope: str, key: str) -> IdempotencyKey | None:
        return self.session.get(IdempotencyKey, (scope, key), populate_existing=True)

    def complete_many(self, answers: list[tuple[str, str, int, dict[str, Any]]]) -> None:
        store_answers(session_connection(self.session), answers)

    def release_abandoned(self, scope: str, key: str, now: datetime, in_flight_before: datetime) -> bool:
        """Delete the key if expired, or in flight since before ``in_flight_before``; whether it was."""
        result = self.session.execute(
            delete(IdempotencyKey).where(
                IdempotencyKey.scope == scope,
                IdempotencyKey.key == key,
                or_(
                    IdempotencyKey.expires_at < now,
                    and_(IdempotencyKey.status == "in_flight", IdempotencyKey.created_at < in_flight_before),
                ),
            )
        )
        return bool(getattr(result, "rowcount", 0))

    def purge_expired(self, now: datetime) -> int:
        result = self.session.execute(delete(IdempotencyKey).where(IdempotencyKey.expires_at < now))
        return int(getattr(result, "rowcount", 0) or 0)
