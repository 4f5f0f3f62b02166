"""Which failures are faults of the platform (retried, never the request's failure) and how to name one.

:func:`is_transient`: the error (or one it was raised from) is a dropped or refused database, Redis or
broker connection, a serialization failure or deadlock, a server shutting down or out of resources, a
full disk or a failing device, or a hot store flushed under an update. Retrying the same work later can
succeed, so no request and no model is failed for it.

:func:`short_cause`: a short description safe to keep at rest (a failure reason, an audit event, a
callback): the error's class and the first line of its message, without the SQL statement or the
parameters a database error carries.
"""

from __future__ import annotations

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

# SQLSTATEs worth a retry: 08 connection exceptions, 53 insufficient resources (disk full, out of memory,
# too many connections), serialization failure, deadlock, lock not available, and the server shutting
# down (admin shutdown, crash shutdown, cannot connect now).
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
try:  # the AMQP transport is optional (the broker is Redis by default)
    import amqp.exceptions

    _TRANSIENT_TYPES += (amqp.exceptions.RecoverableConnectionError, amqp.exceptions.ConnectionError)
except ImportError:  # pragma: no cover - amqp not installed
    pass


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
        pending.extend(e for e in (current.__context__, current.__cause__) if e is not None)
        orig = getattr(current, "orig", None)
        if isinstance(orig, BaseException):
            pending.append(orig)


def _psycopg_transient(exc: psycopg.Error) -> bool:
    """A psycopg error worth a retry: by SQLSTATE, or an OperationalError without one (the connection
    failed or was lost before the server said why)."""
    state = exc.sqlstate
    if state is None:
        return isinstance(exc, psycopg.OperationalError)
    return state[:2] in _TRANSIENT_SQLSTATE_CLASSES or state in _TRANSIENT_SQLSTATES


def _transient_here(exc: BaseException) -> bool:
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        if isinstance(exc.orig, psycopg.Error):
            return _psycopg_transient(exc.orig)  # the driver's error says more than the wrapper's class
        return isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError)
    if isinstance(exc, psycopg.Error):
        return _psycopg_transient(exc)
    if isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS:
        return True
    return isinstance(exc, _TRANSIENT_TYPES)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc``, or an error in its ``__cause__``/``__context__`` chain, is a platform fault that
    a later attempt of the same work can get past (see the module docstring)."""
    return any(_transient_here(e) for e in _chain(exc))


def disk_full(exc: BaseException) -> OSError | None:
    """The ``ENOSPC``/``EDQUOT`` error in ``exc``'s chain, if any (the artifact store cannot write)."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS:
            return e
    return None


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line if len(line) <= MAX_CAUSE_CHARS else line[: MAX_CAUSE_CHARS - 3] + "..."


def short_cause(exc: BaseException) -> str:
    """``Type: first line of the message``, at most ~160 characters of message. For a SQLAlchemy statement
    error, the driver's error (``exc.orig``) and its message's first line: never the SQL or parameters
    (SQLAlchemy appends them on later lines; the driver's DETAIL lines, which quote values, are dropped
    too). An OSError is named by its errno symbol."""
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
