"""Array parameters as literals (service.db.postgres.array_literal): Postgres reads back exactly the
values given, whatever characters a string holds, for each array type the hot path's statements cast to."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from service.db.postgres import array_columns, array_literal, jsonb_element

pytestmark = pytest.mark.integration

AWKWARD = [
    "",
    "NULL",
    "null",
    "a,b",
    "{x}",
    'say "hi"',
    "back\\slash",
    "\\",
    '\\"',
    " padded ",
    "tab\tand\nnewline",
    "Zoë, 東京",
    "owner-00007",
]


@pytest.fixture(scope="module")
def conn(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as c:
        yield c


def _read_back(conn: psycopg.Connection[Any], literal: str, cast: str) -> Any:
    # Twice in a pipeline and enough times for psycopg to prepare the statement: the prepared form types
    # the parameter from the cast as well.
    for _ in range(6):
        with conn.pipeline():
            cur = conn.execute(f"SELECT %s::{cast}", (literal,))
        value = cur.fetchone()
    assert value is not None
    return value[0]


def test_strings_read_back_exactly_whatever_they_hold(conn: psycopg.Connection[Any]) -> None:
    values: list[str | None] = [*AWKWARD, None]
    assert _read_back(conn, array_literal(values), "varchar[]") == values
    assert _read_back(conn, array_literal(values), "text[]") == values


def test_integers_nulls_and_an_empty_array(conn: psycopg.Connection[Any]) -> None:
    assert _read_back(conn, array_literal([1, -2, 2**31 - 1, None]), "int[]") == [1, -2, 2**31 - 1, None]
    assert _read_back(conn, array_literal([]), "int[]") == []
    assert _read_back(conn, array_literal(iter(range(3))), "bigint[]") == [0, 1, 2]


def test_timestamps_keep_their_instant_to_the_microsecond(conn: psycopg.Connection[Any]) -> None:
    at = datetime(2026, 11, 26, 23, 0, 0, 123456, tzinfo=UTC)
    elsewhere = at.astimezone(timezone(timedelta(hours=-5, minutes=-30)))
    read = _read_back(conn, array_literal([at, elsewhere, None]), "timestamptz[]")
    assert read[:2] == [at, at] and read[2] is None


def test_json_documents_as_jsonb_elements(conn: psycopg.Connection[Any]) -> None:
    docs = [{"reason": 'a "quoted" \\ reason', "ids": [1, 2]}, {"text": "Zoë"}, []]
    assert _read_back(conn, array_literal(map(jsonb_element, docs)), "jsonb[]") == docs


def test_columns_unnest_back_into_the_rows(conn: psycopg.Connection[Any]) -> None:
    rows = [(1, "a,b", None), (2, 'q"', "x"), (3, "\\", "NULL")]
    ints, texts, more = array_columns(rows)
    cur = conn.execute(
        "SELECT * FROM unnest(%s::int[], %s::varchar[], %s::text[]) WITH ORDINALITY AS t(i, s, m, n) ORDER BY n",
        (ints, texts, more),
    )
    assert [tuple(r[:3]) for r in cur.fetchall()] == rows


def test_anything_else_is_refused_before_it_reaches_postgres() -> None:
    with pytest.raises(TypeError, match="float"):
        array_literal([1.5])
    with pytest.raises(TypeError, match="bool"):
        array_literal([True])
    with pytest.raises(TypeError, match="bytes"):
        array_literal([b"raw"])  # type: ignore[list-item]
