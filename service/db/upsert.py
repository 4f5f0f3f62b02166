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
    """Insert, skipping rows that violate a unique constraint (one executemany); with ``returning`` (a
    column, or a tuple of columns), the inserted values (rows of a tuple for a tuple)."""
    if returning is not None:
        columns = returning if isinstance(returning, tuple) else (returning,)
        result = session.execute(_statement(entity, tuple(c.key for c in columns)), rows)
        return result.all() if isinstance(returning, tuple) else result.scalars().all()
    if rows:
        session.execute(_statement(entity, ()), rows if isinstance(rows, list) else [rows])
    return None


@cache
def _statement(entity: type[Base], returning: tuple[str, ...]) -> Insert:
    stmt = insert(table(entity)).on_conflict_do_nothing()
    columns = table(entity).c
    return stmt.returning(*(columns[name] for name in returning)) if returning else stmt
