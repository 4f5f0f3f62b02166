"""Unit of work: one transaction, the repositories over it, and hooks that run after it commits.

Services receive a unit of work and never commit; the entrypoint (a router or a job) that opened it
does. Outbox messages written in the transaction are published right after it commits, never before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, Self, cast

from psycopg import Connection
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from service.audit.repository import AuditRepository
from service.datasets.repository import DatasetRepository
from service.deletions.repository import DeletionRepository
from service.idempotency.repository import IdempotencyRepository
from service.ledger.repository import LedgerRepository
from service.models.repository import ModelRepository
from service.outbox.repository import Message, OutboxRepository
from service.storage.artifacts import BlobVanished
from service.storage.refs import ArtifactRefRepository

# The tables filled in bulk when a model is registered and trained (see refresh_planner_statistics).
_BULK_LOADED = ("samples", "artifact_refs")
_ANALYZE_LOCK_TIMEOUT = "2s"


class UnitOfWork:
    session: Session

    def __init__(
        self,
        sessions: sessionmaker[Session],
        publish: Callable[[list[Message]], None] | None = None,
        blob_exists: Callable[[str], bool] | None = None,
        snapshot: bool = False,
    ) -> None:
        self._sessions = sessions
        self._snapshot = snapshot
        self._publish = publish
        self._blob_exists = blob_exists

    def __enter__(self) -> Self:
        self.session = self._sessions()
        self.datasets = DatasetRepository(self.session)
        self.models = ModelRepository(self.session)
        self.deletions = DeletionRepository(self.session)
        self.ledger = LedgerRepository(self.session)
        self.audit = AuditRepository(self.session)
        self.idempotency = IdempotencyRepository(self.session)
        self.outbox = OutboxRepository(self.session)
        self.refs = ArtifactRefRepository(self.session)
        if self._snapshot:
            self.session.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # close() rolls back whatever was not committed and detaches the objects without expiring
        # them (rollback() would expire them), so the caller can still read what it loaded.
        self.session.close()

    def postgres_connection(self) -> Connection[Any]:
        """The psycopg connection under this unit of work's transaction, for the hot path's plain
        statements (service.jobs.postgres_path). Whatever the session holds unflushed is flushed first, so
        that those statements see it and run after it, as the session's own would."""
        self.session.flush()
        return cast(Connection[Any], self.session.connection().connection.driver_connection)

    def bookkeeping(self) -> UnitOfWork:
        """Let this transaction's commit skip waiting for the WAL flush (Postgres).

        Only for records that a crash may lose harmlessly: an idempotency key claimed before any work
        (a later synchronous commit flushes it anyway), a message marked as published (it is published
        again). Never for data a client is told about.
        """
        self.session.execute(text("SET LOCAL synchronous_commit = off"))
        return self

    def refresh_planner_statistics(self) -> None:
        """``ANALYZE`` the tables a model's registration and training fill in bulk (Postgres).

        Registering a model inserts a row per sample, and training a reference per bucket (two per
        owner). Postgres plans the lookups of every deletion (a model's samples by owner, the references
        a round releases) from table statistics, which autovacuum refreshes up to a minute after a bulk
        load. Until then it believes the tables nearly empty and reads every row of the model through
        the leading column of an index: 2,121 references read to release 3 on a thousand owners, 880
        samples to find 2 (``EXPLAIN ANALYZE``). Postgres' own advice after a
        bulk load is to run ``ANALYZE``; it samples a bounded number of rows, so it stays cheap as the
        tables grow. A role that does not own the tables gets a warning from Postgres, not an error.
        Its lock conflicts with a running VACUUM (which an anti-wraparound one does not give up): past
        ``lock_timeout`` this raises instead of waiting for it.
        """
        self.session.execute(text(f"SET LOCAL lock_timeout = '{_ANALYZE_LOCK_TIMEOUT}'"))
        self.session.execute(text(f"ANALYZE {', '.join(_BULK_LOADED)}"))

    def send_commit(self, conn: Connection[Any], begin_next: bool = False) -> bool:
        """In the caller's pipeline on :meth:`postgres_connection`, after its last statement: send the
        COMMIT with them, so that the transaction ends in the pipeline's round trip instead of one of its
        own. Only when the commit has nothing else to do first: nothing
        unflushed in the session, no outbox message, no artifact reference to check (:meth:`commit`);
        otherwise nothing is sent and False returned. Either way the caller then calls :meth:`commit`,
        which finds the transaction ended (psycopg's commit does nothing then) and publishes.

        ``begin_next``: a new transaction begins right after the COMMIT, in the same round trip, and the
        caller's next statements run in it; this unit of work goes on in that transaction (its
        :meth:`commit` commits it). COMMIT and BEGIN are sent as statements: psycopg's own commit would
        end the round trip there. Should a statement before the COMMIT fail, the pipeline skips the rest
        and nothing commits."""
        session = self.session
        if session.new or session.dirty or session.deleted or self.outbox.added or self.refs.held:
            return False
        if begin_next:
            conn.execute("COMMIT")
            conn.execute("BEGIN")
            self.refs.commit_locked = False  # the commit released it
        else:
            conn.commit()
        return True

    def check_stored(self, blobs: Iterable[str]) -> None:
        """Raise :class:`BlobVanished` (nothing commits; the caller writes its blobs again) if one of
        ``blobs`` is no longer stored. Only meaningful under the commit's lock
        (:meth:`ArtifactRefRepository.lock_for_commit`): from then to the commit no collector deletes
        anything, so a blob found here is still stored when the reference to it commits, and a blob put
        after the lock was granted needs no check at all."""
        if self._blob_exists is None:
            return
        missing = sorted(d for d in blobs if not self._blob_exists(d))
        if missing:
            raise BlobVanished(missing)

    def commit(self) -> None:
        """Commit, then publish the outbox messages this transaction wrote (so a job starts within
        milliseconds; the dispatcher's periodic pass covers a crash right here).

        A transaction that added artifact references first checks, under the lock that keeps garbage
        collection out (service.storage.refs), that each of those blobs is still stored: a blob found
        already stored when it was put may have been garbage that a completion has deleted since.
        Then it raises :class:`BlobVanished` and commits nothing; the caller writes its blobs again.
        """
        if self.refs.held and self._blob_exists is not None:
            self.refs.lock_for_commit()
            self.check_stored(self.refs.held)
        self.session.commit()
        messages, self.outbox.added = self.outbox.added, []
        if messages and self._publish is not None:
            self._publish(messages)
