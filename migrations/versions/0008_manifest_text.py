"""Store the bucket manifests as TEXT, not JSON (Postgres): ``models.training``, ``models.statistics``,
``datasets.arrays``.

Every deletion update writes three manifests again (about 84 KB each on a thousand owners). The JSON
type checks each document byte by byte on the way in: 0.3 ms of the server's CPU per manifest written
(an 84 KB update 400 times: 0.8 to 1.05 ms as JSON, 0.5 to 0.7 as TEXT).
Nothing queries inside a manifest, and the service writes them only as the JSON text its codec makes
(:class:`service.db.base.ManifestJSON`), so the check buys nothing. The values are kept as they are
(a JSON ``null`` stays the text ``null``, which the service reads as None).

Changing a column's type resets its storage to the type's default, so ``EXTERNAL`` (stored out of line,
not compressed, migration 0002) is set again. SQLite stores both as text: nothing to do there.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = (("models", "training"), ("models", "statistics"), ("datasets", "arrays"))


# The same steps as migration 0007's, repeated rather than imported: a migration stays as it was written,
# whatever later ones do.
def _retype(type_: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column in _COLUMNS:
        op.execute(
            f"ALTER TABLE {table} ALTER COLUMN {column} TYPE {type_} USING {column}::{type_}, "
            f"ALTER COLUMN {column} SET STORAGE EXTERNAL"
        )


def upgrade() -> None:
    _retype("text")


def downgrade() -> None:
    _retype("json")
