"""Which failures are the platform's (:func:`is_transient`); naming one at rest (:func:`short_cause`)."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator

import psycopg
import redis.exceptions
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy import exc as sa_exc

from service.storage.artifacts import BlobVanished
from service.storage.statistics import HotStoreLost

MAX_CAUSE_CHARS = 160

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
TRANSIENT_ERRNOS = DISK_FULL_ERRNOS | {errno.EIO, errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNREFUSED}

# SQLSTATEs worth a retry: connection, resources, serialization, deadlock, lock not available, shutdown
_TRANSIENT_SQLSTATE_CLASSES = ("08", "53")
_TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03", "57P01", "57P02", "57P03"})

_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    sa_exc.DisconnectionError,
    redis.exceptions.ConnectionError,  # BusyLoadingError is one
    redis.exceptions.TimeoutError,
    KombuOperationalError,
    HotStoreLost,  # Redis was flushed under an update: the next attempt rebuilds the statistics
    BlobVanished,  # a blob collected under a write: the next attempt writes it again
)
with contextlib.suppress(ImportError):  # the AMQP transport is optional (the broker is Redis by default)
    import amqp.exceptions

    _TRANSIENT_TYPES += (amqp.exceptions.RecoverableConnectionError, amqp.exceptions.ConnectionError)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the errors it was raised from or while handling, each once."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked = (current.__context__, current.__cause__, getattr(current, "orig", None))
        pending.extend(e for e in linked if isinstance(e, BaseException))


def _psycopg_transient(exc: psycopg.Error) -> bool:
    """A psycopg error worth a retry: by SQLSTATE, or an OperationalError without one."""
    state = exc.sqlstate
    if state is None:
        return isinstance(exc, psycopg.OperationalError)
    return state[:2] in _TRANSIENT_SQLSTATE_CLASSES or state in _TRANSIENT_SQLSTATES


def _transient_here(exc: BaseException) -> bool:
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        if isinstance(exc.orig, psycopg.Error):
            return _psycopg_transient(exc.orig)
        return isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError)
    if isinstance(exc, psycopg.Error):
        return _psycopg_transient(exc)
    if isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS:
        return True
    return isinstance(exc, _TRANSIENT_TYPES)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` or an error in its chain is a fault a later attempt can get past."""
    return any(_transient_here(e) for e in _chain(exc))


def disk_full(exc: BaseException) -> OSError | None:
    """The ``ENOSPC``/``EDQUOT`` error in ``exc``'s chain, if any."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS:
            return e
    return None


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line if len(line) <= MAX_CAUSE_CHARS else line[: MAX_CAUSE_CHARS - 3] + "..."


def short_cause(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most :data:`MAX_CAUSE_CHARS`), never a statement's SQL or
    parameters (the driver's error for a SQLAlchemy one); an OSError named by its errno symbol."""
    if isinstance(exc, sa_exc.StatementError) and exc.orig is not None:
        orig = exc.orig
        return f"{type(orig).__name__}: {_first_line(_sql_free(str(orig)))}".rstrip(": ")
    if isinstance(exc, OSError) and exc.errno is not None:
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        return f"{type(exc).__name__}: [{name}] {_first_line(exc.strerror or '')}".rstrip()
    return f"{type(exc).__name__}: {_first_line(_sql_free(str(exc)))}".rstrip(": ")


def _sql_free(text: str) -> str:
    """``text`` up to SQLAlchemy's ``[SQL: ...]`` / ``[parameters: ...]`` suffix, if it carries one."""
    for marker in ("[SQL:", "[parameters:", "(Background on this error"):
        at = text.find(marker)
        if at >= 0:
            text = text[:at]
    return text
