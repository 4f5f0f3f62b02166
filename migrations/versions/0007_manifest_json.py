"""Store the bucket manifests as JSON, not JSONB (Postgres): ``models.training``,
``models.statistics``, ``datasets.arrays``.

Every deletion update reads the three manifests of its model and dataset and writes them again (about
84 KB each on a thousand owners). JSONB is parsed into its binary form on every write and printed back
to text on every read; nothing queries inside a manifest, so that work buys nothing. Reading an 84 KB
manifest ``FOR UPDATE`` and rewriting it cost the server 2.2 ms of CPU as JSONB against 1.1 ms as JSON
(both ``EXTERNAL``, 300 times each, measured twice). JSON still checks the text is valid JSON.

Changing a column's type resets its storage to the type's default, so the ``EXTERNAL`` storage of
migration 0002 (stored out of line, not compressed) is set again. SQLite stores both as text: nothing
to do there.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = (("models", "training"), ("models", "statistics"), ("datasets", "arrays"))


def _retype(type_: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column in _COLUMNS:
        op.execute(
            f"ALTER TABLE {table} ALTER COLUMN {column} TYPE {type_} USING {column}::{type_}, "
            f"ALTER COLUMN {column} SET STORAGE EXTERNAL"
        )


def upgrade() -> None:
    _retype("json")


def downgrade() -> None:
    _retype("jsonb")
