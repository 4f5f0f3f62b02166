"""A training or retrain job that met a transient fault fails nothing: :meth:`Run.retry_later` re-queues it."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from service import metrics
from service.db.base import utcnow
from service.faults import disk_full, is_transient, short_cause
from service.jobs.heartbeat import JobContext
from service.states import ModelState, VersionKind

log = logging.getLogger(__name__)

INITIAL = VersionKind.INITIAL.value
"""A first training's kind: its ledger entry's, and its label in the training metrics."""


RETRY_DELAYS = (1.0, 2.0, 4.0, 8.0, 16.0, 29.0)  # seconds between looks at the database (60 s in all)
DISK_FULL_RETRY_SECONDS = 30.0  # a job that could not write waits this long before it runs again


@dataclass
class Run:
    """One run of a training (``kind`` INITIAL) or retrain job; ``started_at``: when it claimed the model."""

    kind: str
    model_id: int
    started_at: datetime | None = None
    reason: str | None = None
    low_quality: bool = False

    def retry_later(self, rt: JobContext, exc: BaseException) -> None:
        """Put the model back as before this run claimed it, its job queued (or left to recovery)."""
        log.warning(
            "the %s of model %s met a transient fault (%s); it runs again",
            "first training" if self.kind == INITIAL else "retrain",
            self.model_id,
            short_cause(exc),
        )
        due = timedelta(seconds=DISK_FULL_RETRY_SECONDS if disk_full(exc) else 0.0)
        for delay in RETRY_DELAYS:
            time.sleep(delay)
            try:
                if self._requeue(rt, due):
                    metrics.TRAININGS.labels(self.kind, "retried").inc()
                return
            except Exception as again:
                if not is_transient(again):
                    raise
        log.warning("model %s: the database did not answer; recovery re-queues its job", self.model_id)

    def _requeue(self, rt: JobContext, due: timedelta) -> bool:
        """The model back to its job's gate, the job queued; False when the model is no longer this run's."""
        with rt.uow() as uow:
            model = uow.models.lock(self.model_id)
            if model is None:
                return False
            mine = self.started_at is not None and model.started_at == self.started_at
            payload: dict[str, Any] = {"model_id": self.model_id}
            if self.kind == INITIAL:
                if not (model.status == ModelState.QUEUED or (model.status == ModelState.TRAINING and mine)):
                    return False
                model.status = model.phase = ModelState.QUEUED
                task, dedupe = "train_model", f"train:{self.model_id}"
            else:
                if model.status != ModelState.RETRAINING or not (model.phase == "waiting" or mine):
                    return False
                model.phase, payload["reason"] = "waiting", self.reason
                task, dedupe = "retrain_model", f"retrain:{self.model_id}"
            model.progress, model.eta_seconds = 0.0, None
            uow.outbox.add(task, payload, dedupe_key=dedupe, available_at=utcnow() + due)
            uow.commit()
            return True
