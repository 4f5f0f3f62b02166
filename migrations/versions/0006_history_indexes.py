"""Two partial indexes that keep per-version and per-subject costs flat as a model's history grows.

``ix_model_versions_unpurged``, on the model versions that still name weights (``weights_purged_at IS
NULL``). Every new version purges its predecessors' weights with ``UPDATE model_versions ... WHERE
model_id = :m AND id != :new AND weights_purged_at IS NULL``. Through the plain ``model_id`` index (or a
sequential scan) that statement reads every version the model ever had: 6 ms per update at 20,000
versions, and growing. Only the current version is unpurged, so this index holds about one row per
model and the statement touches that row alone.

``ix_audit_events_subjects_erased``, on the audit events of a dataset erasing subjects itself
(``dataset.subjects_erased``, which name their subjects in the payload rather than through a request).
An audit query by subject matched those by scanning every event of the log (273 ms at a million events);
with this index, and the subject's requests looked up first, it reads the few events concerned (0.3 ms).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# (name, table, column, predicate): each index holds only the rows its predicate names.
_INDEXES = (
    ("ix_model_versions_unpurged", "model_versions", "model_id", "weights_purged_at IS NULL"),
    ("ix_audit_events_subjects_erased", "audit_events", "id", "event_type = 'dataset.subjects_erased'"),
)


def upgrade() -> None:
    for name, table, column, predicate in _INDEXES:
        where = sa.text(predicate)
        op.create_index(name, table, [column], postgresql_where=where, sqlite_where=where)


def downgrade() -> None:
    for name, table, _, _ in reversed(_INDEXES):
        op.drop_index(name, table_name=table)
