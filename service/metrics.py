"""Prometheus metrics. The API exposes them at /metrics; a Celery worker on LETHE_WORKER_METRICS_PORT."""

from __future__ import annotations

from datetime import datetime

from prometheus_client import Counter, Gauge, Histogram

_SECONDS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 300)

HTTP_REQUESTS = Counter("lethe_http_requests_total", "HTTP requests", ["method", "route", "status"])
HTTP_LATENCY = Histogram(
    "lethe_http_request_seconds", "HTTP request latency", ["method", "route"], buckets=_SECONDS
)
DELETIONS_RECEIVED = Counter("lethe_deletions_received_total", "Deletion requests accepted")
DELETIONS_COMPLETED = Counter("lethe_deletions_completed_total", "Deletion requests completed")
DELETIONS_FAILED = Counter("lethe_deletions_failed_total", "Deletion requests failed")
MODELS_DELETED = Counter("lethe_models_deleted_total", "Models deleted (DELETE /v1/models/{id})")
DELETION_LATENCY = Histogram(
    "lethe_deletion_completion_seconds", "Time from receipt to completion of a deletion", buckets=_SECONDS
)
UPDATE_BATCH = Histogram(
    "lethe_update_batch_requests",
    "Deletion requests coalesced into one version",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000),
)
UPDATE_SECONDS = Histogram("lethe_update_seconds", "Duration of one deletion update", buckets=_SECONDS)
TRAININGS = Counter("lethe_trainings_total", "Trainings and retrains finished", ["kind", "outcome"])
LOW_QUALITY = Counter(
    "lethe_trainings_low_quality_total",
    "Trainings and retrains whose held-out accuracy was no better than the majority class (flagged)",
    ["kind"],
)
TRAINING_SECONDS = Histogram(
    "lethe_training_seconds",
    "Duration of a training or retrain",
    ["kind"],
    buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
CALLBACKS = Counter(
    "lethe_callbacks_total",
    "Callback delivery attempts (outcome: ok, error, refused by the address check), and callbacks that "
    "gave up (gave_up: attempts exhausted or refused)",
    ["outcome"],
)
HOT_STORE_REBUILDS = Counter("lethe_hot_store_rebuilds_total", "Rebuilds of Redis state from durable stores")
OUTBOX_PENDING = Gauge("lethe_outbox_pending", "Outbox messages not yet published")
ORPHAN_BLOBS_REMOVED = Counter(
    "lethe_orphan_blobs_removed_total", "Blobs no row held, removed from the artifact store by the sweep"
)
BLOB_REWRITES = Counter(
    "lethe_blob_rewrites_total",
    "Jobs retried because a blob they relied on was collected as garbage before their commit",
    ["job"],
)


def observe_completed(received_at: datetime, completed_at: datetime) -> None:
    DELETIONS_COMPLETED.inc()
    DELETION_LATENCY.observe(max((completed_at - received_at).total_seconds(), 0.0))


# Every label set exists from the start at 0, so that increase() sees the first failure of a process.
for _kind in ("initial", "retrain"):
    LOW_QUALITY.labels(_kind)
    for _outcome in ("ok", "failed", "retried", "canceled"):
        TRAININGS.labels(_kind, _outcome)
for _outcome in ("ok", "error", "refused", "gave_up"):
    CALLBACKS.labels(_outcome)
for _job in ("apply_deletions", "train_model", "retrain_model", "upload_dataset", "upload_graph"):
    BLOB_REWRITES.labels(_job)
