"""SQL for the privacy ledger, the one writer of ``ledger_entries`` (session, or a round's connection)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import Connection
from sqlalchemy import Row, insert, select
from sqlalchemy.orm import Session

from service.db.base import table
from service.db.tables import LedgerEntry, ModelVersion
from unlearning.privacy.certificate import Certificate

_INSERT = insert(table(LedgerEntry))
_CHARGE = """
INSERT INTO ledger_entries (model_id, budget_epoch, kind, version_id, budget_unit, budget_cap, charge,
    spent, deletions, created_at)
VALUES (%s, %s, 'charge', %s, %s, %s, %s, %s, %s, %s)
"""


def append_charge(
    conn: Connection[Any],
    model_id: int,
    budget_epoch: int,
    version_id: int,
    cert: Certificate,
    deletions: int,
    at: datetime,
) -> None:
    """Append a round's charge (``cert``'s); the CHECK ``spent <= budget_cap`` fails the transaction."""
    charge = (cert.budget_unit, cert.budget_cap, cert.charge, cert.budget_spent)
    conn.execute(_CHARGE, (model_id, budget_epoch, version_id, *charge, deletions, at))


class LedgerRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, **columns: Any) -> None:
        """Append one entry (column -> value); IntegrityError if the CHECK ``spent <= budget_cap`` fails."""
        self.session.execute(_INSERT, columns)

    def entries(self, model_id: int) -> list[Row[Any]]:
        """The model's ledger, oldest first, as plain rows: every column plus ``version_seq``."""
        entries = table(LedgerEntry)
        stmt = (
            select(*entries.c, ModelVersion.seq.label("version_seq"))
            .outerjoin(ModelVersion, ModelVersion.id == entries.c.version_id)
            .where(entries.c.model_id == model_id)
            .order_by(entries.c.id)
        )
        return list(self.session.execute(stmt))
