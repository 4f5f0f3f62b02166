"""Store the bucket manifests uncompressed (Postgres): ``models.training``, ``models.statistics``,
``datasets.arrays``.

A manifest names one bucket per owner (service.storage.buckets), so on a dataset of a thousand owners it
is about 80 KB of JSON, rewritten by every deletion update. With the default storage Postgres compresses
each new value with pglz, which measured 4.3 ms per 84 KB update here against 2.3 ms uncompressed
(``EXTERNAL``: still stored out of line, not compressed); the digests in a manifest barely compress anyway.
SQLite has no such setting: nothing to do there.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = (("models", "training"), ("models", "statistics"), ("datasets", "arrays"))


def _set_storage(storage: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column in _COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STORAGE {storage}")


def upgrade() -> None:
    _set_storage("EXTERNAL")


def downgrade() -> None:
    _set_storage("EXTENDED")
