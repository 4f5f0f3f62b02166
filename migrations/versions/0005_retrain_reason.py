"""Retrains asked for through the API: ``models.retrain_reason`` (text; null when none is pending).

``POST /v1/models/{id}/retrain`` records the caller's reason here in the transaction that schedules the
retrain; the retrain job reads it (so a job run again by the reconciler still retrains when no deletion
is waiting), puts it in the ledger, and clears it when the retrain is recorded or fails.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("retrain_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_column("retrain_reason")
