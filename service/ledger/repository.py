"""SQL for the privacy ledger."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, insert, select
from sqlalchemy.orm import Session

from service.db.base import table
from service.db.tables import LedgerEntry, ModelVersion

_INSERT = insert(table(LedgerEntry))


class LedgerRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, **columns: Any) -> None:
        """Append one entry (column -> value; ``created_at`` defaults to now). One prebuilt INSERT, not
        an ORM object for the unit of work to flush: every update round charges the ledger. The cap's
        CHECK constraint (spent <= budget_cap) raises here, before anything reaches Redis."""
        self.session.execute(_INSERT, columns)

    def entries(self, model_id: int) -> list[Row[Any]]:
        """The model's ledger, oldest first: rows with every column of ``ledger_entries`` and the sequence
        number of the entry's version (``version_seq``; None for an entry that names none). One join,
        columns only: neither the version rows (certificates and all) nor ORM objects are loaded."""
        entries = table(LedgerEntry)
        stmt = (
            select(*entries.c, ModelVersion.seq.label("version_seq"))
            .outerjoin(ModelVersion, ModelVersion.id == entries.c.version_id)
            .where(entries.c.model_id == model_id)
            .order_by(entries.c.id)
        )
        return list(self.session.execute(stmt))

    def latest(self, model_id: int) -> LedgerEntry | None:
        return self.session.scalars(
            select(LedgerEntry)
            .where(LedgerEntry.model_id == model_id)
            .order_by(LedgerEntry.id.desc())
            .limit(1)
        ).first()
