"""The schema comes from Alembic migrations, and the ORM tables agree with them."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from service.db.base import Base
from service.db.engine import make_engine
from service.db.migrate import current_revision, head_revision

pytestmark = pytest.mark.integration


def _diff(url: str, metadata: sa.MetaData) -> list:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            return compare_metadata(context, metadata)
    finally:
        engine.dispose()


def test_database_is_at_head(migrated: str) -> None:
    engine = make_engine(migrated)
    try:
        assert current_revision(engine) == head_revision() is not None
    finally:
        engine.dispose()


def test_orm_models_match_the_migrations(migrated: str) -> None:
    assert _diff(migrated, Base.metadata) == []


def test_the_comparison_detects_drift(migrated: str) -> None:
    """Control: the check above can fail. A column the migrations lack is reported."""
    drifted = sa.MetaData(naming_convention=Base.metadata.naming_convention)
    for table in Base.metadata.tables.values():
        table.to_metadata(drifted)
    drifted.tables["models"].append_column(sa.Column("extra_column", sa.Integer(), nullable=True))
    diff = _diff(migrated, drifted)
    assert any(d[0] == "add_column" and d[3].name == "extra_column" for d in diff)
