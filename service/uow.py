"""Unit of work: one transaction, its repositories, and what follows its commit (the outbox published, the
:meth:`UnitOfWork.after_commit` hooks run). Services never commit; the entrypoint (a route or a job) that
opened the unit of work does."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, Self

from psycopg import Connection
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from service.audit.repository import AuditRepository
from service.datasets.repository import DatasetRepository
from service.db.postgres import session_connection
from service.deletions.repository import DeletionRepository
from service.idempotency.repository import IdempotencyRepository
from service.ledger.repository import LedgerRepository
from service.models.repository import ModelRepository
from service.outbox.repository import Message, OutboxRepository
from service.storage.artifacts import BlobVanished
from service.storage.refs import ArtifactRefRepository
from service.subjects import SubjectHasher


class UnitOfWork:
    session: Session

    def __init__(
        self,
        sessions: sessionmaker[Session],
        publish: Callable[[list[Message]], None] | None = None,
        blob_exists: Callable[[str], bool] | None = None,
        snapshot: bool = False,
        hasher: SubjectHasher | None = None,
    ) -> None:
        """``hasher``: for what the unit of work writes about subjects in text (failure reasons)."""
        self.hasher = hasher
        self._sessions = sessions
        self._snapshot = snapshot
        self._publish = publish
        self._blob_exists = blob_exists
        self._after_commit: list[Callable[[], None]] = []

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
        self._after_commit = []  # what this transaction did not commit is never counted
        self.session.close()  # rolls back without expiring: loaded objects stay readable

    def after_commit(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` once this transaction has committed (metrics of what it records); never when it rolls
        back. A hook must not raise."""
        self._after_commit.append(hook)

    def _committed(self) -> None:
        hooks, self._after_commit = self._after_commit, []
        for hook in hooks:
            hook()

    def postgres_connection(self) -> Connection[Any]:
        """The psycopg connection of this transaction, after flushing the session."""
        return session_connection(self.session)

    def refresh_planner_statistics(self) -> None:
        """``ANALYZE`` the tables filled in bulk; raises (lock timeout) rather than wait behind a VACUUM."""
        self.session.execute(text("SET LOCAL lock_timeout = '2s'"))
        self.session.execute(text("ANALYZE samples, artifact_refs"))

    def send_commit(self, conn: Connection[Any], begin_next: bool = False) -> bool:
        """Queue the COMMIT in the caller's pipeline on ``conn``; True if sent, False when :meth:`commit` has
        work to do first (session changes, outbox messages, held references, or, with ``begin_next``,
        :meth:`after_commit` hooks: the caller commits). ``begin_next``: also queue BEGIN; this unit of work
        continues in the new transaction. Without it the COMMIT is awaited and the hooks run."""
        session = self.session
        if session.new or session.dirty or session.deleted or self.outbox.added or self.refs.held:
            return False
        if begin_next:
            if self._after_commit:  # the COMMIT's outcome would be known only when the pipeline syncs
                return False
            conn.execute("COMMIT")
            conn.execute("BEGIN")
            self.refs.commit_locked = False  # the commit released it
        else:
            conn.commit()  # in a pipeline too: synced, so a failed COMMIT raises here
            self._committed()
        return True

    def check_stored(self, blobs: Iterable[str]) -> None:
        """Raise :class:`BlobVanished` if one of ``blobs`` is no longer stored (under the commit lock)."""
        exists = self._blob_exists
        missing = sorted(d for d in blobs if not exists(d)) if exists is not None else []
        if missing:
            raise BlobVanished(missing)

    def commit(self) -> None:
        """Commit, run the :meth:`after_commit` hooks, then publish the outbox messages written. With artifact
        references added, first take the commit lock and :meth:`check_stored` them (:class:`BlobVanished`:
        nothing committed)."""
        if self.refs.held and self._blob_exists is not None:
            self.refs.lock_for_commit()
            self.check_stored(self.refs.held)
        self.session.commit()
        self._committed()
        messages, self.outbox.added = self.outbox.added, []
        if messages and self._publish is not None:
            self._publish(messages)
