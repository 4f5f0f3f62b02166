"""SQL for the privacy ledger."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.tables import LedgerEntry


class LedgerRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, entry: LedgerEntry) -> LedgerEntry:
        self.session.add(entry)
        return entry

    def entries(self, model_id: int) -> list[LedgerEntry]:
        return list(
            self.session.scalars(
                select(LedgerEntry).where(LedgerEntry.model_id == model_id).order_by(LedgerEntry.id)
            )
        )

    def latest(self, model_id: int) -> LedgerEntry | None:
        return self.session.scalars(
            select(LedgerEntry)
            .where(LedgerEntry.model_id == model_id)
            .order_by(LedgerEntry.id.desc())
            .limit(1)
        ).first()
