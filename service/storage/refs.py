"""SQL for artifact references (holder ``model:5`` -> blob): an unheld blob is garbage (advisory lock)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

from sqlalchemy import bindparam, delete, select, text
from sqlalchemy.orm import Session

from service import metrics
from service.db.base import table
from service.db.tables import ArtifactRef
from service.db.upsert import insert_ignore
from service.storage.artifacts import BlobVanished

log = logging.getLogger(__name__)
T = TypeVar("T")
_ATTEMPTS = 3

# advisory lock key ("lethe-gc" in ASCII) ordering collectors and writers across processes
COLLECTION_LOCK_KEY = 0x6C657468652D6763

# built once on the Core tables (docs/decisions.md, "Statements built once")
_refs = table(ArtifactRef).c
_RELEASE_ALL = delete(table(ArtifactRef)).where(_refs.holder == bindparam("holder")).returning(_refs.blob)
_RELEASE = (
    delete(table(ArtifactRef))
    .where(_refs.holder == bindparam("holder"), _refs.blob.in_(bindparam("blobs", expanding=True)))
    .returning(_refs.blob)
)
_HELD = select(_refs.blob).where(_refs.blob.in_(bindparam("blobs", expanding=True)))
_LOCKS = {
    function: text(f"SELECT {function}(:key)")
    for function in ("pg_advisory_xact_lock_shared", "pg_advisory_xact_lock")
}


class ArtifactRefRepository:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.held: set[str] = set()  # blobs this transaction added references to
        self.commit_locked = False  # the lock of lock_for_commit is held (taken by plain SQL, say)

    def hold(self, holder: str, blobs: Iterable[str]) -> None:
        rows = [{"blob": b, "holder": holder} for b in set(blobs)]
        if rows:
            insert_ignore(self.session, ArtifactRef, rows)
            self.held.update(r["blob"] for r in rows)

    def lock_for_commit(self) -> None:
        """Shared with other writers, exclusive of collectors, until this transaction ends."""
        if not self.commit_locked:
            self._lock("pg_advisory_xact_lock_shared")
            self.commit_locked = True

    def lock_for_collection(self) -> None:
        """Exclusive of writers' commits until this transaction ends (later statements see every reference)."""
        self._lock("pg_advisory_xact_lock")

    def _lock(self, function: str) -> None:
        self.session.execute(_LOCKS[function], {"key": COLLECTION_LOCK_KEY})

    def release(self, holder: str, blobs: Iterable[str] | None = None) -> set[str]:
        """Drop ``holder``'s references (all of them, or only to ``blobs``); returns the blobs released."""
        if blobs is None:
            return set(self.session.scalars(_RELEASE_ALL, {"holder": holder}))
        blobs = list(blobs)
        if not blobs:
            return set()
        return set(self.session.scalars(_RELEASE, {"holder": holder, "blobs": blobs}))

    def unreferenced(self, blobs: Iterable[str]) -> set[str]:
        """The blobs no visible reference holds; safe to delete only under :meth:`lock_for_collection`."""
        blobs = set(blobs)
        return blobs - set(self.session.scalars(_HELD, {"blobs": list(blobs)})) if blobs else set()


def rewrite_if_collected(attempt: Callable[[], T], *, job: str, detail: str = "") -> T:
    """``attempt()`` (putting its own blobs), run up to 3 times on :class:`BlobVanished`."""
    for n in range(1, _ATTEMPTS):
        try:
            return attempt()
        except BlobVanished as exc:
            metrics.BLOB_REWRITES.labels(job).inc()
            log.warning("%s %s: %s (attempt %d of %d); writing them again", job, detail, exc, n, _ATTEMPTS)
    return attempt()
