"""Start-up checks of the database, Redis and directories the settings name: one line per problem."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import redis
from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.engine import make_url

from service.db.engine import make_engine, normalise_url
from service.settings import Settings

_TIMEOUT_SECONDS = 5.0


def problems(settings: Settings) -> list[str]:
    """One line per setting whose target cannot be used now (empty: all can), naming the variable."""
    checks: list[tuple[str, Callable[[], None]]] = []
    if settings.mode == "embedded":  # its home: the embedded Postgres, generated keys, artifacts by default
        checks.append(("LETHE_VAR_DIR", lambda: _directory(settings.var_dir)))
    if settings.artifact_url is None:
        artifacts = "LETHE_ARTIFACT_DIR" if settings.artifact_dir else "LETHE_VAR_DIR"
        checks.append((artifacts, lambda: _directory(settings.effective_artifact_dir)))
    checks.append(("LETHE_DATABASE_URL", lambda: _database(settings.effective_database_url)))
    if settings.redis_url:
        checks.append(("LETHE_REDIS_URL", lambda: _redis(settings.redis_url or "")))
    if settings.broker_url and settings.broker_url != settings.redis_url:
        checks.append(("LETHE_BROKER_URL", lambda: _redis(settings.broker_url or "")))
    found: dict[str, str] = {}  # variable -> its first problem (a bad LETHE_VAR_DIR fails several checks)
    for variable, check in checks:
        if variable in found:
            continue
        try:
            check()
        except (ValueError, OSError, sa_exc.SQLAlchemyError, redis.RedisError) as exc:
            found[variable] = _first_line(exc)
    return [f"{variable}: {problem}" for variable, problem in found.items()]


def refuse(program: str, found: Iterable[str]) -> int:
    """Print each problem as one line ``<program>: <problem>`` on stderr; the exit status to return (2)."""
    for line in found:
        print(f"{program}: {line}", file=sys.stderr)
    return 2


def _directory(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot use {str(path)!r} as a directory: {exc.strerror or exc}") from None


def _database(url: str) -> None:
    try:
        shown = make_url(normalise_url(url)).render_as_string(hide_password=True)
    except sa_exc.ArgumentError:
        raise ValueError(f"{url!r} is not a database URL (postgresql://user@host:5432/name)") from None
    try:
        engine = make_engine(url, pool_size=1)
    except sa_exc.NoSuchModuleError:
        raise ValueError(f"{shown}: unsupported database (use postgresql://)") from None
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except sa_exc.DBAPIError as exc:
        raise ValueError(f"cannot connect to {shown}: {_first_line(exc.orig or exc)}") from None
    finally:
        engine.dispose()


def _redis(url: str) -> None:
    try:
        client = redis.Redis.from_url(
            url, socket_connect_timeout=_TIMEOUT_SECONDS, socket_timeout=_TIMEOUT_SECONDS
        )
    except ValueError as exc:
        raise ValueError(f"not a Redis URL (redis://host:6379/0): {exc}") from None
    pool = client.connection_pool.connection_kwargs
    where = f"{pool.get('host', pool.get('path', '?'))}:{pool.get('port', '')}".rstrip(":")
    try:
        client.ping()
    except redis.RedisError as exc:
        raise ValueError(f"cannot reach Redis at {where}: {_first_line(exc)}") from None
    finally:
        client.close()


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
