"""Datasets keep the names of their classes: ``datasets.class_names`` (a JSON list; null for integer labels).

A table whose label column held names ("cat", "dog") is stored as class indices, the names in sorted
order; predictions and the dataset's description give the names back. Rows uploaded before this
revision have none recorded (null): their indices follow the same sorted order.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# JSONB on Postgres, JSON (text) elsewhere: the same type as service.db.base.JSONType.
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("class_names", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("class_names")
