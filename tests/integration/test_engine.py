"""The Postgres connection pool: a connection lost while idle is replaced before use, and a connection in
steady use costs no ping (service.db.engine)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from bench.stack import PG
from service.db import engine as engine_module
from service.db.engine import make_engine

pytestmark = pytest.mark.integration


@pytest.fixture
def engine(pg_url: str) -> Iterator[sa.Engine]:
    engine = make_engine(pg_url, pool_size=1)
    yield engine
    engine.dispose()


@pytest.fixture
def pings(engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The pings the pool sends (the dialect's own)."""
    seen: list[object] = []
    real = engine.dialect.do_ping

    def counting(dbapi_conn: Any) -> bool:
        seen.append(dbapi_conn)
        return real(dbapi_conn)

    monkeypatch.setattr(engine.dialect, "do_ping", counting)
    return seen


def backend_pid(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def test_a_connection_in_steady_use_is_not_pinged(engine: sa.Engine, pings: list[object]) -> None:
    first = backend_pid(engine)  # a fresh connection: no ping
    assert backend_pid(engine) == first  # checked in moments ago: the same connection, no ping
    assert pings == []


def test_a_connection_idle_for_a_while_is_pinged(
    engine: sa.Engine, pings: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = backend_pid(engine)
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_SECONDS", 0.0)
    assert backend_pid(engine) == first
    assert len(pings) == 1


def test_a_connection_the_server_cut_while_idle_is_replaced_before_use(
    engine: sa.Engine, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the ping the first statement on the dead connection fails (OperationalError)."""
    first = backend_pid(engine)
    database = sa.make_url(pg_url).database
    with psycopg.connect(dbname=database, autocommit=True, **PG) as admin:  # type: ignore[arg-type]
        assert admin.execute("SELECT pg_terminate_backend(%s)", (first,)).fetchone() == (True,)
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_SECONDS", 0.0)
    second = backend_pid(engine)  # no error: the pool noticed and connected again
    assert second != first
