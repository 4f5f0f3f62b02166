"""The guard a training job fits under: progress, time limit and cancellation (docs/decisions.md)."""

from __future__ import annotations

import math
import time

from service.db.tables import Model
from service.job_limits import JobLimits
from service.jobs.heartbeat import JobContext
from service.states import ModelState
from unlearning.errors import UnlearningError
from unlearning.methods.job_estimate import DataShape, JobEstimate
from unlearning.methods.protocol import UnlearningMethod

FITTING = (ModelState.TRAINING, ModelState.RETRAINING)
"""The model states in which a job fits the model (and reports its progress)."""


class JobCanceled(Exception):
    """The model left the fitting states while its job ran (it was deleted): nothing is to be recorded."""


class JobTimedOut(UnlearningError):
    """The job ran past its time limit."""


def job_estimate(method: UnlearningMethod, model: Model) -> JobEstimate:
    """The estimate of fitting ``model`` as registered, on its current training size."""
    spec = model.spec
    shape = DataShape(
        rows=int(model.train_size), features=math.prod(spec["input_shape"]), classes=int(spec["num_classes"])
    )
    return method.estimate_job(model.config, shape)


class GuardedProgress:
    """``progress(phase, fraction)`` for ``method.fit``, raising JobTimedOut or JobCanceled as they occur."""

    def __init__(self, rt: JobContext, model_id: int, estimate: JobEstimate, interval: float = 0.5) -> None:
        self._rt, self._model_id, self._interval = rt, model_id, interval
        self._estimate = estimate
        self.time_limit = JobLimits.of(rt.settings).time_limit(estimate)
        self._start = time.monotonic()
        self._last = 0.0

    def __call__(self, phase: str, fraction: float) -> None:
        now = time.monotonic()
        elapsed = now - self._start
        if elapsed > self.time_limit:
            raise JobTimedOut(
                f"the training was stopped after its time limit of {self.time_limit:,.0f} s (it was estimated "
                f"to need {self._estimate.describe()}; the limit is LETHE_JOB_TIME_FACTOR x the estimate + "
                "LETHE_JOB_TIME_GRACE_SECONDS, at most LETHE_MAX_JOB_SECONDS)"
            )
        if now - self._last < self._interval and fraction < 1.0:
            return
        self._last = now
        fraction = min(max(float(fraction), 0.0), 1.0)
        eta = elapsed * (1.0 - fraction) / fraction if fraction > 0 else None
        with self._rt.uow() as uow:
            fitting = uow.models.record_progress(self._model_id, FITTING, phase, fraction, eta)
            uow.commit()
        if not fitting:
            raise JobCanceled(f"model {self._model_id} is no longer fitting (deleted)")
