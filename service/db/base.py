"""Declarative base, portable column types and the constraint naming convention.

The naming convention makes constraint names deterministic, so Alembic migrations and the ORM agree
on them (the drift test compares the two).

Statements built once: the statements every deletion runs (its submission, its update round, its
completion) are built at import, on the Core tables (:func:`table`), with their values as bound
parameters, and executed through the session (which still autoflushes before them). Building an ORM
statement per call (the query objects, their cache key, the ORM's compile state) cost about as much
CPU as executing it: 410 microseconds for an ORM UPDATE built per call against 190 for the same UPDATE
built once on the table.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import JSON, DateTime, MetaData, Table, Text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.types import TypeDecorator

from service.db import jsoncodec

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# JSONB (indexable, compact).
JSONType = JSON().with_variant(JSONB(), "postgresql")


def manifest_text(value: dict[str, Any] | None) -> str | None:
    """A bucket manifest as the text its column (:class:`ManifestJSON`) stores: JSON made by
    :mod:`service.db.jsoncodec` (None: SQL NULL). The plain statements of the hot path send it as it is."""
    return None if value is None else jsoncodec.dumps_text(value)


class ManifestJSON(TypeDecorator[dict[str, Any]]):
    """A bucket manifest (``models.training``, ``models.statistics``, ``datasets.arrays``): a JSON document
    stored as TEXT (migration 0008), encoded and decoded by :mod:`service.db.jsoncodec`; None is SQL NULL.

    Nothing queries inside a manifest, and every update round writes three of them (about 84 KB each on
    a thousand owners). As JSONB Postgres parsed each into its binary form on the way in and printed it
    on the way out (migration 0007,); as JSON it still checked every byte on the
    way in, 0.3 ms of the server's CPU per manifest written (item 33). The service writes these columns
    only through this type or :func:`manifest_text`, so the text is always a JSON
    document, and a JSON ``null`` written by the earlier types reads as None too."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: dict[str, Any] | None, dialect: Any) -> str | None:
        return manifest_text(value)

    def process_result_value(self, value: str | None, dialect: Any) -> dict[str, Any] | None:
        return None if value is None else cast(dict[str, Any] | None, jsoncodec.loads(value))


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp: stored as UTC and always returned aware, so code never mixes
    naive and aware datetimes."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column; use service.db.base.utcnow()")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    # SQLAlchemy's own (mutable) class attribute.
    type_annotation_map = {dict[str, Any]: JSONType, list[Any]: JSONType, datetime: UTCDateTime}  # noqa: RUF012


def table(entity: type[Base]) -> Table:
    """The Core table of a mapped class. Bulk statements go to it rather than to the class: a statement on
    the class runs the ORM's bulk path, which processes every row through the mapper and evaluates the
    session's objects for DELETEs, and a burst's update writes hundreds of rows per statement (its
    rows are plain column -> value dicts, and loaded objects are never read back in the same
    transaction)."""
    return cast(Table, entity.__table__)
