"""Dialect-portable INSERT ... ON CONFLICT DO NOTHING (Postgres and SQLite both support it)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.db.base import Base, table


def insert_ignore(
    session: Session, entity: type[Base], rows: list[dict[str, Any]] | dict[str, Any], returning: Any = None
) -> Any:
    """Insert, skipping rows that violate a unique constraint; with ``returning`` (a column, or a tuple of
    columns), the inserted values (rows of a tuple for a tuple). Several rows go as one executemany of a
    cached statement, not a statement compiled for that many VALUES tuples."""
    dialect = session.get_bind().dialect.name
    module = postgresql if dialect == "postgresql" else sqlite
    stmt = module.insert(table(entity)).on_conflict_do_nothing()
    if returning is not None:
        columns = returning if isinstance(returning, tuple) else (returning,)
        result = session.execute(stmt.returning(*columns), rows)
        return result.all() if isinstance(returning, tuple) else result.scalars().all()
    if rows:
        session.execute(stmt, rows if isinstance(rows, list) else [rows])
    return None
