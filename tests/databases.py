"""Fresh Postgres databases on the machine's server (127.0.0.1:5432) for tests that build their own
runtime: one database migrated to the head revision per test process (the template), then a copy of it
per caller (``CREATE DATABASE ... TEMPLATE``, a file copy, much faster than migrating again). Every
database made here is dropped when the process exits."""

from __future__ import annotations

import atexit
import os
import uuid

import psycopg
import pytest

from bench.stack import PG, ServersUnavailable
from service.db.engine import make_engine
from service.db.migrate import upgrade

_made: list[str] = []
_template: str | None = None


def _admin() -> psycopg.Connection[tuple[object, ...]]:
    try:
        return psycopg.connect(dbname="test", autocommit=True, connect_timeout=3, **PG)  # type: ignore[arg-type]
    except psycopg.Error as exc:
        raise ServersUnavailable(f"Postgres at {PG['host']}:5432 (database 'test', user postgres): {exc}") from exc


def _url(name: str) -> str:
    return f"postgresql+psycopg://{PG['user']}@{PG['host']}:{PG['port']}/{name}"


def _create(name: str, template: str | None = None) -> str:
    with _admin() as admin:
        admin.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    if not _made:
        atexit.register(_drop_all)
    _made.append(name)
    return _url(name)


def _drop_all() -> None:
    try:
        with _admin() as admin:
            for name in _made:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except ServersUnavailable:
        pass


def fresh_database_url() -> str:
    """A new, migrated, empty database; skips the test where Postgres is unreachable (fails under CI)."""
    global _template
    try:
        if _template is None:
            name = f"lethe_template_{os.getpid()}_{uuid.uuid4().hex[:8]}"
            engine = make_engine(_create(name), pool_size=1)
            try:
                upgrade(engine)
            finally:
                engine.dispose()  # a template must have no connections when it is copied
            _template = name
        return _create(f"lethe_t_{uuid.uuid4().hex[:16]}", _template)
    except ServersUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc}; these tests need the real Postgres")
        pytest.skip(f"{exc}; these tests need the real Postgres")
