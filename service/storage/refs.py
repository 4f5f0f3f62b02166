"""SQL for artifact references: which row holds which blob.

Holders are strings such as ``dataset:3``, ``model:5:training``, ``model:5:stats``,
``version:9:released``. A blob no holder names is garbage and is deleted from the artifact store after
the transaction that dropped its last reference commits.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from service.db.base import table
from service.db.tables import ArtifactRef
from service.db.upsert import insert_ignore


class ArtifactRefRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def hold(self, holder: str, blobs: Iterable[str]) -> None:
        rows = [{"blob": b, "holder": holder} for b in set(blobs)]
        if rows:
            insert_ignore(self.session, ArtifactRef, rows)

    def release(self, holder: str, blobs: Iterable[str] | None = None) -> set[str]:
        """Drop ``holder``'s references (all of them, or only to ``blobs``); returns the blobs released."""
        stmt = delete(table(ArtifactRef)).where(ArtifactRef.holder == holder)
        if blobs is not None:
            blobs = list(blobs)
            if not blobs:
                return set()
            stmt = stmt.where(ArtifactRef.blob.in_(blobs))
        return set(self.session.scalars(stmt.returning(ArtifactRef.blob)))

    def unreferenced(self, blobs: Iterable[str]) -> set[str]:
        blobs = set(blobs)
        if not blobs:
            return set()
        held = set(self.session.scalars(select(ArtifactRef.blob).where(ArtifactRef.blob.in_(list(blobs)))))
        return blobs - held
