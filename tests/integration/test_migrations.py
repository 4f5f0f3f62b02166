"""The schema comes from Alembic migrations, and the ORM tables agree with them."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from bench.stack import new_token, postgres_database
from service.db.base import Base
from service.db.engine import make_engine
from service.db.migrate import alembic_config, head_revision, is_current
from service.db.tables import Dataset

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
        assert is_current(engine) == (True, head_revision()) and head_revision() is not None
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


def _upgrade_to(engine: sa.Engine, revision: str) -> None:
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def _downgrade_to(engine: sa.Engine, revision: str) -> None:
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def test_0003_gives_existing_datasets_the_kind_their_manifest_names() -> None:
    """Rows written before 0003 kept the kind only in the manifest; the migration copies it to the column."""
    token = new_token()
    with postgres_database(f"lethe_migration_{token}") as url:
        engine = make_engine(url)
        try:
            _upgrade_to(engine, "0002")
            rows = [("t", {"buckets": {}}), ("g", {"kind": "graph_collection", "buckets": {}}), ("e", None)]
            with engine.begin() as conn:
                for name, arrays in rows:
                    conn.execute(
                        sa.text(
                            "INSERT INTO datasets (name, source, format, num_rows, num_classes, feature_shape, "
                            "arrays, erased_rows, created_at) VALUES (:n, 'upload', 'csv', 1, 2, :shape, :arrays, "
                            "0, CURRENT_TIMESTAMP)"
                        ),
                        {
                            "n": name,
                            "shape": json.dumps([3]),
                            "arrays": None if arrays is None else json.dumps(arrays),
                        },
                    )
            _upgrade_to(engine, "head")
            with engine.connect() as conn:
                kinds = dict(conn.execute(sa.text("SELECT name, kind FROM datasets")).all())
                deleted = conn.execute(
                    sa.text("SELECT count(*) FROM datasets WHERE deleted_at IS NULL")
                ).scalar()
        finally:
            engine.dispose()
    assert kinds == {"t": "table", "g": "graph_collection", "e": "table"}
    assert deleted == 3


_MANIFEST_COLUMNS = {("models", "training"), ("models", "statistics"), ("datasets", "arrays")}


def _manifest_columns(conn: sa.Connection) -> dict[tuple[str, str], tuple[str, str]]:
    """(table, column) -> (type, storage: 'e' external, 'x' extended) of the manifest columns."""
    rows = conn.execute(
        sa.text(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attstorage "
            "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "WHERE c.relname IN ('models', 'datasets') AND a.attname IN ('training', 'statistics', 'arrays')"
        )
    ).all()
    return {(table, column): (type_, storage) for table, column, type_, storage in rows}


def test_0007_keeps_the_manifests_as_json_stored_out_of_line() -> None:
    """The manifests go from JSONB to JSON with their values intact, stay EXTERNAL (not compressed) both
    ways, and a downgrade gives JSONB back."""
    manifest = {"num_buckets": 0, "num_rows": 2, "buckets": {"a1": "d" * 64, "b2": "e" * 64}, "dim": 3}
    with postgres_database(f"lethe_migration_{new_token()}") as url:
        engine = make_engine(url)
        try:
            _upgrade_to(engine, "0006")
            with engine.begin() as conn:
                before = _manifest_columns(conn)
                conn.execute(
                    sa.text(
                        "INSERT INTO datasets (name, source, format, num_rows, num_classes, feature_shape, "
                        "arrays, erased_rows, created_at, kind) VALUES ('t', 'upload', 'csv', 2, 2, '[3]', "
                        "CAST(:arrays AS jsonb), 0, CURRENT_TIMESTAMP, 'table')"
                    ),
                    {"arrays": json.dumps(manifest)},
                )
            _upgrade_to(engine, "0007")
            with engine.connect() as conn:
                after = _manifest_columns(conn)
                stored = conn.execute(sa.text("SELECT arrays FROM datasets")).scalar()
            _downgrade_to(engine, "0006")
            with engine.connect() as conn:
                downgraded = _manifest_columns(conn)
                restored = conn.execute(sa.text("SELECT arrays FROM datasets")).scalar()
        finally:
            engine.dispose()
    assert set(before) == _MANIFEST_COLUMNS
    assert set(before.values()) == {("jsonb", "e")}
    assert set(after.values()) == {("json", "e")}
    assert set(downgraded.values()) == {("jsonb", "e")}
    assert stored == manifest
    assert restored == manifest


def test_0008_keeps_the_manifests_as_text_stored_out_of_line() -> None:
    """The manifests go from JSON to TEXT with their text intact (a JSON ``null`` included, which the
    service's column type reads as None), stay EXTERNAL both ways, and a downgrade gives JSON back."""
    manifest = {"num_buckets": 0, "num_rows": 2, "buckets": {"a1": "d" * 64, "b2": "e" * 64}, "dim": 3}
    insert = sa.text(
        "INSERT INTO datasets (name, source, format, num_rows, num_classes, feature_shape, arrays, "
        "erased_rows, created_at, kind) VALUES (:name, 'upload', 'csv', 2, 2, '[3]', CAST(:arrays AS json), 0, "
        "CURRENT_TIMESTAMP, 'table')"
    )
    read = sa.select(Dataset.name, Dataset.arrays).order_by(Dataset.name)
    with postgres_database(f"lethe_migration_{new_token()}") as url:
        engine = make_engine(url)
        try:
            _upgrade_to(engine, "0007")
            with engine.begin() as conn:
                conn.execute(
                    insert, [{"name": "a", "arrays": json.dumps(manifest)}, {"name": "b", "arrays": "null"}]
                )
            _upgrade_to(engine, "head")
            with engine.connect() as conn:
                after = _manifest_columns(conn)
                stored = conn.execute(sa.text("SELECT arrays FROM datasets ORDER BY name")).scalars().all()
                through_the_orm = {name: arrays for name, arrays in conn.execute(read)}
            _downgrade_to(engine, "0007")
            with engine.connect() as conn:
                downgraded = _manifest_columns(conn)
                restored = conn.execute(sa.text("SELECT arrays FROM datasets ORDER BY name")).scalars().all()
        finally:
            engine.dispose()
    assert set(after.values()) == {("text", "e")}
    assert set(downgraded.values()) == {("json", "e")}
    assert [json.loads(text) for text in stored] == [manifest, None]
    assert through_the_orm == {"a": manifest, "b": None}
    assert restored == [manifest, None]
