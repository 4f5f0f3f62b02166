"""The composition root: every long-lived object of one process, built from the settings; jobs receive it
as the narrow context protocol each declares. Importing it imports torch."""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from service import heap
from service.cpus import choose_torch_threads
from service.db.engine import make_engine, make_sessionmaker
from service.deletions.intake import DeletionIntake
from service.jobs.heartbeat import job_heartbeat
from service.jobs.state import BlobCache, KnownManifests
from service.logs import X_REQUEST_ID, log_context
from service.maintenance import Maintenance
from service.monitoring.liveness import live_by_lane
from service.outbox.dispatcher import Dispatcher
from service.queue import LANES, CeleryQueue, InProcessQueue, TaskQueue
from service.settings import Settings
from service.signing import ReceiptSigner
from service.storage.artifacts import ArtifactStore, LocalArtifactStore
from service.storage.hot import HotStore, connect
from service.storage.s3 import S3ArtifactStore, parse_s3_url, s3_client
from service.subjects import SubjectHasher
from service.uow import UnitOfWork

log = logging.getLogger(__name__)


def open_artifact_store(settings: Settings) -> ArtifactStore:
    """The blob store the settings name: a bucket (``LETHE_ARTIFACT_URL=s3://...``) or a directory."""
    if settings.artifact_url:
        bucket, prefix = parse_s3_url(settings.artifact_url)
        return S3ArtifactStore(s3_client(settings.s3_endpoint_url), bucket, prefix)
    return LocalArtifactStore(settings.effective_artifact_dir, durable=settings.artifact_fsync)


class Runtime:
    def __init__(self, settings: Settings, *, role: str = "api") -> None:
        self.settings = settings
        self.role = role
        self.engine = make_engine(settings.effective_database_url)
        self.sessions = make_sessionmaker(self.engine)
        self.artifacts = open_artifact_store(settings)
        self.hot = HotStore(connect(settings.redis_url), settings.redis_prefix)
        self.hasher = SubjectHasher(settings.effective_subject_hash_key)
        seed = settings.effective_receipt_signing_key
        self.receipts = ReceiptSigner(seed) if seed is not None else None
        self.retired_receipt_keys = settings.retired_receipt_keys
        self.cache = BlobCache(self.artifacts, ttl_seconds=settings.cache_ttl_seconds)
        self.manifests = KnownManifests()  # the bucket manifests this process's rounds wrote
        self.queue: TaskQueue = self._make_queue()
        self.dispatcher = Dispatcher(self.sessions, self.queue, settings.dispatcher_interval_seconds)
        self.maintenance = Maintenance(self)
        self._intake: DeletionIntake | None = None
        self._started = False
        self._users = 0
        self._heap_settled = False

    def _make_queue(self) -> TaskQueue:
        if self.settings.effective_worker == "celery":
            broker = self.settings.effective_broker_url
            if broker is None:
                raise ValueError("the celery worker needs LETHE_BROKER_URL or LETHE_REDIS_URL")
            return CeleryQueue(broker, self.settings.celery_queue)
        return InProcessQueue(self.run_job)

    def uow(self) -> UnitOfWork:
        return UnitOfWork(
            self.sessions,
            publish=self.dispatcher.publish,
            blob_exists=self.artifacts.exists,
            hasher=self.hasher,
        )

    def live_workers(self) -> dict[str, int]:
        """Live workers per lane: the Celery workers' liveness records, or this process's lane threads."""
        if isinstance(self.queue, InProcessQueue):
            return dict.fromkeys(LANES, int(self.queue.ping()))
        return live_by_lane(self.hot.client, self.hot.prefix)

    def snapshot(self) -> UnitOfWork:
        """A ``REPEATABLE READ, READ ONLY`` unit of work: every statement sees one snapshot."""
        return UnitOfWork(self.sessions, snapshot=True)

    def deletion_intake(self) -> DeletionIntake:
        """The group commit of deletion submissions (unstarted: each submission commits alone)."""
        if self._intake is None:
            self._intake = DeletionIntake(self)
        return self._intake

    def run_job(self, task: str, payload: dict[str, Any]) -> None:
        """Run the job ``task`` on ``payload``; its log lines name the job, its model and the API request
        that queued it (``x_request_id``, which the payload carries for the logs only)."""
        from service.jobs.registry import run

        payload = dict(payload)
        request_id = payload.pop(X_REQUEST_ID, None)
        started = time.perf_counter()
        try:
            with log_context(x_request_id=request_id, job=task, model_id=payload.get("model_id")):
                with job_heartbeat(self, task, payload):
                    run(self, task, payload)
                log.info("job %s done in %.3f s", task, time.perf_counter() - started)
        finally:
            if not self._heap_settled:
                # the first job imported torch and warmed the caches
                self._heap_settled = True
                heap.settle()

    def migrate(self) -> None:
        from service.db.migrate import upgrade

        upgrade(self.engine)

    def start(self) -> None:
        """Start the background machinery (counted: runs until the last :meth:`stop`)."""
        self._users += 1
        if self._started:
            return
        self._started = True
        if self.settings.auto_migrate and self.role == "api":
            self.migrate()
        threads, source = choose_torch_threads(self.settings.torch_threads, self.settings.worker_cores)
        torch.set_num_threads(threads)
        log.info("torch threads: %d (from %s)", threads, source)
        self.queue.start()
        self.dispatcher.start()
        self.maintenance.start()
        if self.role == "api":
            self.deletion_intake().start()
            heap.settle()  # everything the API keeps is built now

    def stop(self) -> None:
        self._users = max(self._users - 1, 0)
        if not self._started or self._users > 0:
            return
        self._started = False
        if self._intake is not None:
            self._intake.stop()
        self.maintenance.stop()
        self.dispatcher.stop()
        self.queue.stop()
        self.engine.dispose()
