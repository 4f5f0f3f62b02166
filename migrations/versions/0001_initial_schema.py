"""Initial schema: datasets, models, versions, deletions, ledger, audit log, outbox, artifacts.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# JSONB on Postgres, JSON (text) elsewhere: the same type as service.db.base.JSONType.
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "artifact_refs",
        sa.Column("blob", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("blob", "holder", name=op.f("pk_artifact_refs")),
    )
    op.create_index(op.f("ix_artifact_refs_holder"), "artifact_refs", ["holder"], unique=False)
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("chain", sa.String(length=64), nullable=False),
        sa.Column("chain_seq", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event_type", sa.String(length=64), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=True),
        sa.Column("request_id", sa.Integer(), nullable=True),
        sa.Column("version_id", sa.Integer(), nullable=True),
        sa.Column("payload", JSON, nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
        sa.UniqueConstraint("chain", "chain_seq", name=op.f("uq_audit_events_chain_chain_seq")),
    )
    op.create_index(op.f("ix_audit_events_at"), "audit_events", ["at"], unique=False)
    op.create_index(op.f("ix_audit_events_model_id"), "audit_events", ["model_id"], unique=False)
    op.create_index(op.f("ix_audit_events_request_id"), "audit_events", ["request_id"], unique=False)
    op.create_table(
        "audit_heads",
        sa.Column("chain", sa.String(length=64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("chain", name=op.f("pk_audit_heads")),
    )
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("num_rows", sa.Integer(), nullable=False),
        sa.Column("num_classes", sa.Integer(), nullable=False),
        sa.Column("feature_shape", JSON, nullable=False),
        sa.Column("arrays", JSON, nullable=True),
        sa.Column("erased_rows", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("scope", sa.String(length=200), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.Column("response_body", JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("scope", "key", name=op.f("pk_idempotency_keys")),
    )
    op.create_index(op.f("ix_idempotency_keys_expires_at"), "idempotency_keys", ["expires_at"], unique=False)
    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task", sa.String(length=100), nullable=False),
        sa.Column("payload", JSON, nullable=False),
        sa.Column("dedupe_key", sa.String(length=200), nullable=True),
        sa.Column("available_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
    )
    op.create_index("ix_outbox_pending", "outbox", ["dispatched_at", "available_at"], unique=False)
    op.create_index(
        "uq_outbox_dedupe_key_pending",
        "outbox",
        ["dedupe_key"],
        unique=True,
        postgresql_where=sa.text("dispatched_at IS NULL"),
        sqlite_where=sa.text("dispatched_at IS NULL"),
    )
    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("method", sa.String(length=64), nullable=False),
        sa.Column("family", sa.String(length=64), nullable=False),
        sa.Column("config", JSON, nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("delta", sa.Float(), nullable=False),
        sa.Column("release_mode", sa.String(length=16), nullable=False),
        sa.Column("policy", JSON, nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("spec", JSON, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("phase", sa.String(length=64), nullable=False),
        sa.Column("progress", sa.Float(), nullable=False),
        sa.Column("eta_seconds", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("current_version_id", sa.Integer(), nullable=True),
        sa.Column("budget_epoch", sa.Integer(), nullable=False),
        sa.Column("train_size", sa.Integer(), nullable=False),
        sa.Column("training", JSON, nullable=True),
        sa.Column("statistics", JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"], name=op.f("fk_models_dataset_id_datasets")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
    )
    op.create_index(op.f("ix_models_dataset_id"), "models", ["dataset_id"], unique=False)
    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("budget_epoch", sa.Integer(), nullable=False),
        sa.Column("released_blob", sa.String(length=64), nullable=True),
        sa.Column("clean_blob", sa.String(length=64), nullable=True),
        sa.Column("released_sha256", sa.String(length=64), nullable=False),
        sa.Column("weights_purged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("spec", JSON, nullable=False),
        sa.Column("certificate", JSON, nullable=False),
        sa.Column("accounting", JSON, nullable=False),
        sa.Column("artifacts", JSON, nullable=False),
        sa.Column("num_forgotten", sa.Integer(), nullable=False),
        sa.Column("train_size", sa.Integer(), nullable=False),
        sa.Column("request_count", sa.Integer(), nullable=False),
        sa.Column("garbage", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_model_versions_model_id_models")),
        sa.ForeignKeyConstraint(
            ["parent_id"], ["model_versions.id"], name=op.f("fk_model_versions_parent_id_model_versions")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_versions")),
        sa.UniqueConstraint("model_id", "seq", name=op.f("uq_model_versions_model_id_seq")),
    )
    op.create_index(op.f("ix_model_versions_model_id"), "model_versions", ["model_id"], unique=False)
    # models <-> model_versions reference each other: the second foreign key is added once both
    # tables exist (batch mode, so that SQLite, which cannot ALTER constraints, recreates the table).
    with op.batch_alter_table("models") as batch:
        batch.create_foreign_key(
            "fk_models_current_version_id_model_versions", "model_versions", ["current_version_id"], ["id"]
        )
    op.create_table(
        "samples",
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("sample_id", sa.String(length=256), nullable=False),
        sa.Column("owner_id", sa.String(length=256), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_samples_model_id_models")),
        sa.PrimaryKeyConstraint("model_id", "sample_id", name=op.f("pk_samples")),
    )
    op.create_index("ix_samples_model_id_owner_id", "samples", ["model_id", "owner_id"], unique=False)
    op.create_table(
        "deletion_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("subjects", JSON, nullable=True),
        sa.Column("num_samples", sa.Integer(), nullable=False),
        sa.Column("callback_url", sa.Text(), nullable=True),
        sa.Column("callback_state", sa.String(length=16), nullable=True),
        sa.Column("callback_attempts", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=True),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("expected_by", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["model_id"], ["models.id"], name=op.f("fk_deletion_requests_model_id_models")
        ),
        sa.ForeignKeyConstraint(
            ["version_id"], ["model_versions.id"], name=op.f("fk_deletion_requests_version_id_model_versions")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deletion_requests")),
    )
    op.create_index(
        "ix_deletion_requests_model_id_state", "deletion_requests", ["model_id", "state"], unique=False
    )
    op.create_table(
        "ledger_entries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("budget_epoch", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=True),
        sa.Column("budget_unit", sa.String(length=64), nullable=False),
        sa.Column("budget_cap", sa.Float(), nullable=False),
        sa.Column("charge", sa.Float(), nullable=False),
        sa.Column("spent", sa.Float(), nullable=False),
        sa.Column("deletions", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("spent <= budget_cap", name=op.f("ck_ledger_entries_spent_within_cap")),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_ledger_entries_model_id_models")),
        sa.ForeignKeyConstraint(
            ["version_id"], ["model_versions.id"], name=op.f("fk_ledger_entries_version_id_model_versions")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_entries")),
    )
    op.create_index(
        "ix_ledger_entries_model_id_budget_epoch",
        "ledger_entries",
        ["model_id", "budget_epoch"],
        unique=False,
    )
    op.create_table(
        "erased_subjects",
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("subject_hash", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("budget_epoch", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.Integer(), nullable=True),
        sa.Column("erased_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_erased_subjects_model_id_models")),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["deletion_requests.id"],
            name=op.f("fk_erased_subjects_request_id_deletion_requests"),
        ),
        sa.PrimaryKeyConstraint("model_id", "subject_hash", name=op.f("pk_erased_subjects")),
    )
    op.create_table(
        "request_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["deletion_requests.id"],
            name=op.f("fk_request_events_request_id_deletion_requests"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_request_events")),
    )
    op.create_index(op.f("ix_request_events_request_id"), "request_events", ["request_id"], unique=False)
    op.create_table(
        "request_subjects",
        sa.Column("request_id", sa.Integer(), nullable=False),
        sa.Column("subject_hash", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["deletion_requests.id"],
            name=op.f("fk_request_subjects_request_id_deletion_requests"),
        ),
        sa.PrimaryKeyConstraint("request_id", "subject_hash", name=op.f("pk_request_subjects")),
    )
    op.create_index(
        op.f("ix_request_subjects_subject_hash"), "request_subjects", ["subject_hash"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_request_subjects_subject_hash"), table_name="request_subjects")
    op.drop_table("request_subjects")
    op.drop_index(op.f("ix_request_events_request_id"), table_name="request_events")
    op.drop_table("request_events")
    op.drop_table("erased_subjects")
    op.drop_index("ix_ledger_entries_model_id_budget_epoch", table_name="ledger_entries")
    op.drop_table("ledger_entries")
    op.drop_index("ix_deletion_requests_model_id_state", table_name="deletion_requests")
    op.drop_table("deletion_requests")
    op.drop_index("ix_samples_model_id_owner_id", table_name="samples")
    op.drop_table("samples")
    with op.batch_alter_table("models") as batch:
        batch.drop_constraint("fk_models_current_version_id_model_versions", type_="foreignkey")
    op.drop_index(op.f("ix_model_versions_model_id"), table_name="model_versions")
    op.drop_table("model_versions")
    op.drop_index(op.f("ix_models_dataset_id"), table_name="models")
    op.drop_table("models")
    op.drop_index(
        "uq_outbox_dedupe_key_pending",
        table_name="outbox",
        postgresql_where=sa.text("dispatched_at IS NULL"),
        sqlite_where=sa.text("dispatched_at IS NULL"),
    )
    op.drop_index("ix_outbox_pending", table_name="outbox")
    op.drop_table("outbox")
    op.drop_index(op.f("ix_idempotency_keys_expires_at"), table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
    op.drop_table("datasets")
    op.drop_table("audit_heads")
    op.drop_index(op.f("ix_audit_events_request_id"), table_name="audit_events")
    op.drop_index(op.f("ix_audit_events_model_id"), table_name="audit_events")
    op.drop_index(op.f("ix_audit_events_at"), table_name="audit_events")
    op.drop_table("audit_events")
    op.drop_index(op.f("ix_artifact_refs_holder"), table_name="artifact_refs")
    op.drop_table("artifact_refs")
