"""service.faults: which real errors are transient, and the short cause kept at rest (no SQL, no parameters)."""

from __future__ import annotations

import errno
import socket

import psycopg
import pytest
import redis.exceptions
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy import exc as sa_exc

from service.faults import MAX_CAUSE_CHARS, disk_full, is_transient, short_cause
from service.storage.statistics import HotStoreLost
from unlearning.errors import UnlearningError

_SQL = "INSERT INTO deletion_requests (model_id, subjects) VALUES (%(model_id)s, %(subjects)s)"
_PARAMS = {"model_id": 7, "subjects": "alice@example.com"}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens there


@pytest.fixture(scope="module")
def refused() -> psycopg.OperationalError:
    """A real psycopg OperationalError: a connection to a port nothing listens on."""
    try:
        psycopg.connect(f"postgresql://postgres@127.0.0.1:{_closed_port()}/x", connect_timeout=5)
    except psycopg.OperationalError as exc:
        return exc
    raise AssertionError("a connection to a closed port succeeded")


def _wrapped(orig: BaseException, kind: type[sa_exc.DBAPIError] = sa_exc.OperationalError) -> BaseException:
    """``orig`` wrapped by SQLAlchemy as its execution would (statement and parameters attached)."""
    try:
        try:
            raise orig
        except Exception as inner:
            raise kind(_SQL, _PARAMS, inner) from inner
    except sa_exc.DBAPIError as exc:
        return exc


def test_a_refused_database_connection_is_transient_raw_and_wrapped(
    refused: psycopg.OperationalError,
) -> None:
    assert is_transient(refused)
    assert is_transient(_wrapped(refused))


def test_an_error_raised_while_handling_a_transient_one_is_transient(
    refused: psycopg.OperationalError,
) -> None:
    try:
        try:
            raise _wrapped(refused)
        except sa_exc.OperationalError as exc:
            raise RuntimeError("could not record the progress") from exc
    except RuntimeError as outer:
        assert is_transient(outer)


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.SerializationFailure("could not serialize access"),
        psycopg.errors.DeadlockDetected("deadlock detected"),
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.errors.CrashShutdown("terminating connection because of crash of another server process"),
        psycopg.errors.CannotConnectNow("the database system is starting up"),
        psycopg.errors.TooManyConnections("sorry, too many clients already"),
        psycopg.errors.DiskFull("could not extend file"),
    ],
)
def test_database_states_worth_a_retry_are_transient(error: psycopg.Error) -> None:
    assert is_transient(error)
    assert is_transient(_wrapped(error, sa_exc.OperationalError))


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (
            psycopg.errors.UniqueViolation('duplicate key value violates unique constraint "pk"'),
            sa_exc.IntegrityError,
        ),
        (
            psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
            sa_exc.OperationalError,
        ),
        (psycopg.errors.UndefinedColumn('column "x" does not exist'), sa_exc.ProgrammingError),
    ],
)
def test_deterministic_database_errors_are_not_transient(
    error: psycopg.Error, kind: type[sa_exc.DBAPIError]
) -> None:
    assert not is_transient(_wrapped(error, kind))


def test_an_invalidated_connection_is_transient_whatever_its_class() -> None:
    error = sa_exc.DBAPIError(
        _SQL, _PARAMS, Exception("server closed the connection"), connection_invalidated=True
    )
    assert is_transient(error)
    assert is_transient(sa_exc.DisconnectionError("lost"))


@pytest.mark.parametrize(
    "error",
    [
        redis.exceptions.ConnectionError("Connection refused"),
        redis.exceptions.TimeoutError("Timeout reading from socket"),
        redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"),
        KombuOperationalError("[Errno 111] Connection refused"),
        HotStoreLost("statistics of model 3 are no longer in Redis"),
        *(OSError(code, "os error") for code in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ECONNRESET)),
    ],
)
def test_broker_redis_and_disk_faults_are_transient(error: BaseException) -> None:
    assert is_transient(error)


@pytest.mark.parametrize(
    "error",
    [
        ValueError("bad input"),
        UnlearningError("these deletions would leave no training data"),
        OSError(errno.ENOENT, "No such file or directory"),
        PermissionError(errno.EACCES, "Permission denied"),
        redis.exceptions.ResponseError("WRONGTYPE"),
    ],
)
def test_errors_of_the_work_itself_are_not_transient(error: BaseException) -> None:
    assert not is_transient(error)


def test_disk_full_is_found_in_the_chain() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as exc:
            raise RuntimeError("could not write the version") from exc
    except RuntimeError as outer:
        found = disk_full(outer)
    assert found is not None and found.errno == errno.ENOSPC
    assert disk_full(OSError(errno.EIO, "I/O error")) is None


def test_the_short_cause_of_a_statement_error_names_the_driver_error_without_sql_or_parameters() -> None:
    unique = psycopg.errors.UniqueViolation(
        'duplicate key value violates unique constraint "pk"\nDETAIL:  Key (subject)=(alice@example.com) already exists.'
    )
    error = _wrapped(unique, sa_exc.IntegrityError)
    assert "INSERT" in str(error) and "alice@example.com" in str(error)  # what SQLAlchemy's message carries

    cause = short_cause(error)

    assert cause == 'UniqueViolation: duplicate key value violates unique constraint "pk"'
    assert "INSERT" not in cause and "alice" not in cause and "\n" not in cause


def test_the_short_cause_of_a_lost_connection(refused: psycopg.OperationalError) -> None:
    cause = short_cause(_wrapped(refused))
    assert cause.startswith("OperationalError: connection failed: connection to server at")
    assert "\n" not in cause and "SQL" not in cause and "deletion_requests" not in cause


def test_the_short_cause_of_other_errors_is_their_type_and_first_line_truncated() -> None:
    assert short_cause(OSError(errno.ENOSPC, "No space left on device")) == (
        "OSError: [ENOSPC] No space left on device"
    )
    long = short_cause(RuntimeError("x" * 1000 + "\nsecond line"))
    assert long.startswith("RuntimeError: xxx") and long.endswith("...")
    assert len(long) <= len("RuntimeError: ") + MAX_CAUSE_CHARS
    assert short_cause(KeyError()) == "KeyError"
    statement_only = sa_exc.StatementError(
        "bind failed", "SELECT secret FROM t WHERE id = %(id)s", {"id": 1}, None
    )
    assert "SELECT" not in short_cause(statement_only) and "secret" not in short_cause(statement_only)
