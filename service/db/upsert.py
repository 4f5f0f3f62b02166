"""INSERT ... ON CONFLICT DO NOTHING."""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session
from sqlalchemy.sql.dml import Insert

from service.db.base import Base, table


def insert_ignore(
    session: Session, entity: type[Base], rows: list[dict[str, Any]] | dict[str, Any], returning: Any = None
) -> Any:
    """Insert, skipping rows a unique constraint refuses; ``returning`` (a column): the inserted values."""
    if returning is not None:
        return session.execute(_statement(entity, returning.key), rows).scalars().all()
    if rows:
        session.execute(_statement(entity, None), rows if isinstance(rows, list) else [rows])
    return None


@cache
def _statement(entity: type[Base], returning: str | None) -> Insert:
    stmt = insert(table(entity)).on_conflict_do_nothing()
    return stmt.returning(table(entity).c[returning]) if returning else stmt
