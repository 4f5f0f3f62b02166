"""The relational schema (changes need a migration); plain subject ids only in samples and open requests."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base, ManifestJSON, utcnow

ID_LENGTH = 256  # longest sample or owner id accepted
HASH_LENGTH = 64  # hex sha256 / hmac-sha256


# audit event of a dataset erasing subjects itself: names them in its payload, not through a request
SUBJECTS_ERASED_EVENT = "dataset.subjects_erased"


def partial(predicate: str) -> dict[str, Any]:
    """The options of a partial index holding only the rows ``predicate`` names."""
    return {"postgresql_where": text(predicate)}


class Dataset(Base):
    """An uploaded or bundled dataset; its arrays live in the artifact store, as owner-hashed buckets."""

    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    source: Mapped[str] = mapped_column(String(16))  # upload | bundled
    format: Mapped[str] = mapped_column(String(16))  # csv | npz | parquet | bundled
    num_rows: Mapped[int] = mapped_column(Integer)
    num_classes: Mapped[int] = mapped_column(Integer)
    feature_shape: Mapped[list[Any]]
    # bucket manifest (service.storage.buckets); None once every row is erased
    arrays: Mapped[dict[str, Any] | None] = mapped_column(ManifestJSON())
    erased_rows: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    kind: Mapped[str] = mapped_column(String(32), default="table", server_default="table")
    # table | node_graph | graph_collection
    deleted_at: Mapped[datetime | None] = mapped_column(default=None)  # DELETE /v1/datasets/{id}
    # the label names of a table whose labels were names ("cat" -> class 0); None for integer labels
    class_names: Mapped[list[Any] | None] = mapped_column(default=None)


class Model(Base):
    """A registered model: configuration, training status and pointers to its current state."""

    __tablename__ = "models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), index=True)
    method: Mapped[str] = mapped_column(String(64))
    family: Mapped[str] = mapped_column(String(64))
    config: Mapped[dict[str, Any]]
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    release_mode: Mapped[str] = mapped_column(String(16))
    policy: Mapped[dict[str, Any]]
    seed: Mapped[int] = mapped_column(BigInteger)
    spec: Mapped[dict[str, Any]]

    status: Mapped[str] = mapped_column(String(16))  # a ModelState
    phase: Mapped[str] = mapped_column(String(64))
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    eta_seconds: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    # reason of a pending POST /v1/models/{id}/retrain, until recorded or failed (a rerun job still retrains)
    retrain_reason: Mapped[str | None] = mapped_column(Text)

    current_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("model_versions.id", use_alter=True, name="fk_models_current_version_id_model_versions")
    )
    budget_epoch: Mapped[int] = mapped_column(Integer, default=0)
    train_size: Mapped[int] = mapped_column(Integer)
    # bucket manifests of the training arrays and statistics; deferred: they grow with the owners
    training: Mapped[dict[str, Any] | None] = mapped_column(ManifestJSON(), deferred=True)
    statistics: Mapped[dict[str, Any] | None] = mapped_column(ManifestJSON(), deferred=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class ModelVersion(Base):
    """One released model; versions of a model form a gap-free chain (seq 1, 2, ...)."""

    __tablename__ = "model_versions"
    __table_args__ = (
        UniqueConstraint("model_id", "seq"),
        # versions still naming weights (one per model): purging predecessors does not scan the history
        Index("ix_model_versions_unpurged", "model_id", **partial("weights_purged_at IS NULL")),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))  # a VersionKind
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id"))
    budget_epoch: Mapped[int] = mapped_column(Integer)
    released_blob: Mapped[str | None] = mapped_column(String(HASH_LENGTH))
    clean_blob: Mapped[str | None] = mapped_column(String(HASH_LENGTH))
    released_sha256: Mapped[str] = mapped_column(String(HASH_LENGTH))
    weights_purged_at: Mapped[datetime | None]
    spec: Mapped[dict[str, Any]]
    certificate: Mapped[dict[str, Any]]
    accounting: Mapped[dict[str, Any]]
    artifacts: Mapped[dict[str, Any]] = mapped_column(default=dict)  # MethodState.artifacts: name -> blob
    num_forgotten: Mapped[int] = mapped_column(Integer, default=0)
    train_size: Mapped[int] = mapped_column(Integer)
    request_count: Mapped[int] = mapped_column(Integer, default=0)
    # blobs whose last reference this version dropped: deleted before its requests complete
    garbage: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Sample(Base):
    """A sample still in a model's training set (rows are deleted when their subject is erased)."""

    __tablename__ = "samples"
    __table_args__ = (Index("ix_samples_model_id_owner_id", "model_id", "owner_id"),)

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), primary_key=True)
    sample_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    owner_id: Mapped[str] = mapped_column(String(ID_LENGTH))


class ErasedSubject(Base):
    """Tombstone of an erased sample or owner, as a keyed hash (answers 'already forgotten')."""

    __tablename__ = "erased_subjects"

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), primary_key=True)
    subject_hash: Mapped[str] = mapped_column(String(HASH_LENGTH), primary_key=True)
    kind: Mapped[str] = mapped_column(String(8))  # sample | owner
    budget_epoch: Mapped[int] = mapped_column(Integer)
    request_id: Mapped[int | None] = mapped_column(ForeignKey("deletion_requests.id"))
    erased_at: Mapped[datetime] = mapped_column(default=utcnow)


class DeletionRequest(Base):
    """One deletion request and where it stands; ``subjects`` is cleared when it ends."""

    __tablename__ = "deletion_requests"
    __table_args__ = (Index("ix_deletion_requests_model_id_state", "model_id", "state"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    state: Mapped[str] = mapped_column(String(20))  # a RequestState
    subjects: Mapped[dict[str, Any] | None]  # {"sample_ids": [...], "owner_ids": [...]}, plaintext until done
    num_samples: Mapped[int] = mapped_column(Integer)
    callback_url: Mapped[str | None] = mapped_column(Text)
    callback_state: Mapped[str | None] = mapped_column(String(16))  # a CallbackState
    callback_attempts: Mapped[int] = mapped_column(Integer, default=0)
    version_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id"))
    failure_reason: Mapped[str | None] = mapped_column(Text)
    expected_by: Mapped[datetime]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    completed_at: Mapped[datetime | None]


class RequestSubject(Base):
    """Keyed hash of each subject a request names: lets the audit log be queried by subject."""

    __tablename__ = "request_subjects"

    request_id: Mapped[int] = mapped_column(ForeignKey("deletion_requests.id"), primary_key=True)
    subject_hash: Mapped[str] = mapped_column(String(HASH_LENGTH), primary_key=True, index=True)
    kind: Mapped[str] = mapped_column(String(8))


class RequestEvent(Base):
    """State history of a deletion request (append-only)."""

    __tablename__ = "request_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    request_id: Mapped[int] = mapped_column(ForeignKey("deletion_requests.id"), index=True)
    state: Mapped[str] = mapped_column(String(20))  # a RequestState
    at: Mapped[datetime] = mapped_column(default=utcnow)
    detail: Mapped[str | None] = mapped_column(Text)


class LedgerEntry(Base):
    """The privacy ledger (append-only): every charge and every retrain of every budget epoch."""

    __tablename__ = "ledger_entries"
    __table_args__ = (
        CheckConstraint("spent <= budget_cap", name="spent_within_cap"),
        Index("ix_ledger_entries_model_id_budget_epoch", "model_id", "budget_epoch"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    budget_epoch: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))  # initial | charge | retrain
    version_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id"))
    budget_unit: Mapped[str] = mapped_column(String(64))
    budget_cap: Mapped[float] = mapped_column(Float)
    charge: Mapped[float] = mapped_column(Float)
    spent: Mapped[float] = mapped_column(Float)
    deletions: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AuditEvent(Base):
    """The audit log: append-only, hash-chained per chain (one chain per model, one for the system)."""

    __tablename__ = "audit_events"
    __table_args__ = (
        UniqueConstraint("chain", "chain_seq"),
        # lets an audit query by subject read these events without scanning the log
        Index("ix_audit_events_subjects_erased", "id", **partial(f"event_type = '{SUBJECTS_ERASED_EVENT}'")),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    chain: Mapped[str] = mapped_column(String(64))
    chain_seq: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(index=True)
    event_type: Mapped[str] = mapped_column(String(64))
    model_id: Mapped[int | None] = mapped_column(Integer, index=True)  # no FK: the log outlives rows
    request_id: Mapped[int | None] = mapped_column(Integer, index=True)
    version_id: Mapped[int | None] = mapped_column(Integer)
    payload: Mapped[dict[str, Any]]
    prev_hash: Mapped[str] = mapped_column(String(HASH_LENGTH))
    hash: Mapped[str] = mapped_column(String(HASH_LENGTH))


class AuditHead(Base):
    """The last event of each chain: truncating a chain's tail is detectable against it."""

    __tablename__ = "audit_heads"

    chain: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)
    hash: Mapped[str] = mapped_column(String(HASH_LENGTH))


class IdempotencyKey(Base):
    """An Idempotency-Key and the response it produced (IETF draft semantics)."""

    __tablename__ = "idempotency_keys"

    scope: Mapped[str] = mapped_column(String(200), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(HASH_LENGTH))
    status: Mapped[str] = mapped_column(String(16))  # in_flight | done
    response_status: Mapped[int | None] = mapped_column(Integer)
    response_body: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(index=True)


class OutboxMessage(Base):
    """Work to hand to the task queue once the transaction that wrote it has committed."""

    __tablename__ = "outbox"
    __table_args__ = (
        Index("ix_outbox_pending", "dispatched_at", "available_at"),
        # At most one undispatched message per dedupe key: 50 deletions on one model queue one update.
        Index("uq_outbox_dedupe_key_pending", "dedupe_key", unique=True, **partial("dispatched_at IS NULL")),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task: Mapped[str] = mapped_column(String(100))
    payload: Mapped[dict[str, Any]]
    dedupe_key: Mapped[str | None] = mapped_column(String(200))
    available_at: Mapped[datetime] = mapped_column(default=utcnow)
    dispatched_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ArtifactRef(Base):
    """Who holds which content-addressed blob; a blob with no holder is deleted from the store."""

    __tablename__ = "artifact_refs"

    blob: Mapped[str] = mapped_column(String(HASH_LENGTH), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200), primary_key=True, index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
