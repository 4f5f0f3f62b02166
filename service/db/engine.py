"""Engine and session factory for Postgres (in every mode: embedded mode starts its own, service.db.embedded)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.orm import Session, sessionmaker

from service.db import jsoncodec

PING_AFTER_IDLE_SECONDS = 1.0  # a pooled connection idle longer is pinged before it is handed out


def normalise_url(url: str) -> str:
    """Use the psycopg 3 driver for plain ``postgresql://`` URLs (the only Postgres driver installed)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def make_engine(url: str, *, pool_size: int = 40) -> Engine:
    """An engine pooled as the API's thread pool, JSON through :mod:`service.db.jsoncodec`."""
    url = normalise_url(url)
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=20,
        future=True,
        hide_parameters=True,  # an error logged or kept names no subject id a statement was given
        json_serializer=jsoncodec.dumps_bytes,  # psycopg sends the bytes as they are
        json_deserializer=jsoncodec.loads,
    )
    _ping_when_idle(engine)
    return engine


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection at checkout only if idle ``PING_AFTER_IDLE_SECONDS`` (lost: invalidated)."""

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("idle_since")  # None: a fresh connection, just opened
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except engine.dialect.loaded_dbapi.Error as err:
            if engine.dialect.is_disconnect(err, dbapi_conn, None):
                raise exc.InvalidatePoolError(f"a pooled connection was lost while idle: {err}") from err
            raise


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False, autoflush=True)
