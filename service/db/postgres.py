"""Plain statements on the psycopg connection of a unit of work, pipelined; arrays as one parameter each."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from psycopg import Connection
from psycopg.types.json import Jsonb
from sqlalchemy import JSON
from sqlalchemy.orm import Session, make_transient_to_detached
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key

from service.db import jsoncodec
from service.db.base import Base, ManifestJSON, manifest_text, table
from service.states import RequestState

_Row = TypeVar("_Row", bound=Base)

# WITH ORDINALITY ... ORDER BY: the rows take their serial ids in the order given.
_HISTORY = """
INSERT INTO request_events (request_id, state, at, detail)
SELECT t.request_id, t.state, t.at, t.detail
FROM unnest(%s::int[], %s::varchar[], %s::timestamptz[], %s::text[]) WITH ORDINALITY
    AS t(request_id, state, at, detail, n)
ORDER BY t.n
"""


def session_connection(session: Session) -> Connection[Any]:
    """The psycopg connection under ``session``'s transaction, after flushing what the session holds."""
    session.flush()
    return cast(Connection[Any], session.connection().connection.driver_connection)


def select_list(entity: type[Base], unless_known: Mapping[str, str] | None = None) -> str:
    """Every column of ``entity``'s table in order, JSON as text (decoded by :func:`adopt`);
    ``unless_known``: column -> a SQL condition under which it is read as NULL (known to the reader)."""
    known = unless_known or {}

    def selected(column: Any) -> str:
        read = f"{column.name}::text" if isinstance(column.type, JSON) else column.name
        condition = known.get(column.name)
        return read if condition is None else f"CASE WHEN {condition} THEN NULL ELSE {read} END"

    return ", ".join(selected(c) for c in table(entity).c)


def adopt(
    session: Session, entity: type[_Row], row: Sequence[Any], known: Mapping[str, Any] | None = None
) -> _Row:
    """The persistent object of ``session`` whose columns are ``row`` (as :func:`select_list` lists them),
    decoded as the engine decodes them (one held is refreshed). ``known``: column -> value, read as NULL."""
    values: dict[str, Any] = {}
    for column, value in zip(table(entity).c, row, strict=True):
        if known is not None and column.name in known:
            value = known[column.name]
        elif value is not None and isinstance(column.type, (JSON, ManifestJSON)):
            value = jsoncodec.loads(value)
        elif isinstance(value, datetime):
            value = value.astimezone(UTC)
        values[column.name] = value
    held = session.identity_map.get(identity_key(entity, values["id"]))
    if held is not None:
        for name, value in values.items():
            set_committed_value(held, name, value)
        return cast(_Row, held)
    obj = entity(**values)
    make_transient_to_detached(obj)
    session.add(obj)
    return obj


def insert_row(obj: Base) -> tuple[str, dict[str, Any]]:
    """``conn.execute(*insert_row(obj))``: the INSERT of a new object's every column, engine-encoded."""
    columns = table(type(obj)).c
    names = ", ".join(c.name for c in columns)
    values = ", ".join(f"%({c.name})s" for c in columns)
    params = {c.name: _parameter(c, getattr(obj, c.name)) for c in columns}
    return f"INSERT INTO {table(type(obj)).name} ({names}) VALUES ({values})", params


def _parameter(column: Any, value: Any) -> Any:
    if isinstance(column.type, JSON):
        return Jsonb(value, dumps=jsoncodec.dumps_bytes)
    if isinstance(column.type, ManifestJSON):
        return manifest_text(value)
    return value


ArrayElement = int | str | datetime | None


def array_literal(values: Iterable[ArrayElement]) -> str:
    """``values`` as a Postgres array literal, ``{1,"a b",NULL}``, for a parameter the statement casts
    (``%s::int[]``): strings and ISO 8601 timestamps quoted and escaped, integers bare, None as NULL."""
    return "{" + ",".join(map(_array_element, values)) + "}"


def _array_element(value: ArrayElement) -> str:
    if value is None:
        return "NULL"
    if type(value) is int:
        return str(value)
    text = value.isoformat() if isinstance(value, datetime) else value
    if not isinstance(text, str):
        raise TypeError(
            f"an array element must be an int, a str, a datetime or None, not {type(value).__name__}"
        )
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def jsonb_element(value: Any) -> str:
    """A JSON value as an element of a ``jsonb[]`` :func:`array_literal`, encoded as the engine encodes it."""
    return jsoncodec.dumps_text(value)


def array_columns(rows: Sequence[Sequence[ArrayElement]]) -> list[str]:
    """Rows of equal length as their columns, one :func:`array_literal` each (what a statement unnests)."""
    return [array_literal(column) for column in zip(*rows, strict=True)]


def insert_history(
    conn: Connection[Any], rows: Sequence[tuple[int, RequestState, datetime, str | None]]
) -> None:
    """(request id, state, at, detail) rows of requests' state history, in this order."""
    if rows:
        conn.execute(_HISTORY, array_columns(rows))
