"""SQL for the privacy ledger."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.tables import LedgerEntry, ModelVersion


class LedgerRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, entry: LedgerEntry) -> LedgerEntry:
        self.session.add(entry)
        return entry

    def entries(self, model_id: int) -> list[tuple[LedgerEntry, int | None]]:
        """The model's ledger, oldest first, each entry with the sequence number of its version (None for
        an entry that names none). One join: the version rows, certificates and all, are not loaded."""
        stmt = (
            select(LedgerEntry, ModelVersion.seq)
            .outerjoin(ModelVersion, ModelVersion.id == LedgerEntry.version_id)
            .where(LedgerEntry.model_id == model_id)
            .order_by(LedgerEntry.id)
        )
        return [(entry, seq) for entry, seq in self.session.execute(stmt)]

    def latest(self, model_id: int) -> LedgerEntry | None:
        return self.session.scalars(
            select(LedgerEntry)
            .where(LedgerEntry.model_id == model_id)
            .order_by(LedgerEntry.id.desc())
            .limit(1)
        ).first()
