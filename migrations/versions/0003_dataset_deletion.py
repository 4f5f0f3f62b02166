"""Datasets can be deleted: ``datasets.deleted_at``, and ``datasets.kind`` kept in a column of its own
(until now it was read from the arrays' manifest, which a deleted dataset no longer has).

Existing rows get the kind their manifest names (graph datasets), else ``table``.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("kind", sa.String(length=32), nullable=False, server_default="table"))
        batch.add_column(sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("UPDATE datasets SET kind = arrays->>'kind' WHERE arrays ? 'kind'")
    else:
        op.execute(
            "UPDATE datasets SET kind = json_extract(arrays, '$.kind') "
            "WHERE json_extract(arrays, '$.kind') IS NOT NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("deleted_at")
        batch.drop_column("kind")
