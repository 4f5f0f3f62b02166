"""Declarative base, column types and the constraint naming convention (names Alembic agrees with)."""

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

JSONType = JSON().with_variant(JSONB(), "postgresql")


def manifest_text(value: dict[str, Any] | None) -> str | None:
    """A bucket manifest as :class:`ManifestJSON` stores it (None: SQL NULL)."""
    return None if value is None else jsoncodec.dumps_text(value)


class ManifestJSON(TypeDecorator[dict[str, Any]]):
    """A bucket manifest as JSON in a TEXT column (None: NULL), written here or by :func:`manifest_text`."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: dict[str, Any] | None, dialect: Any) -> str | None:
        return manifest_text(value)

    def process_result_value(self, value: str | None, dialect: Any) -> dict[str, Any] | None:
        return None if value is None else cast(dict[str, Any] | None, jsoncodec.loads(value))


class UTCDateTime(TypeDecorator[datetime]):
    """A UTC timestamp, always returned timezone-aware; binding a naive datetime raises ValueError."""

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
    type_annotation_map = {dict[str, Any]: JSONType, list[Any]: JSONType, datetime: UTCDateTime}  # noqa: RUF012


def table(entity: type[Base]) -> Table:
    """The Core table of a mapped class, for statements built once at import (docs/decisions.md)."""
    return cast(Table, entity.__table__)
