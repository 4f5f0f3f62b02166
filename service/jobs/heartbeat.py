"""A running job's heartbeat: while a training or retrain holds its model, a daemon thread bumps the model's
``updated_at`` every ``job_heartbeat_seconds``, through the phases outside the fit (reading and writing
arrays, writing the release, recording it) as through the fit (whose progress reports,
:mod:`service.jobs.job_guard`, bump it too). The reconciler (:func:`service.maintenance.reconcile`)
presumes a job silent for ``job_heartbeat_timeout_seconds`` dead and re-queues it.

A beat writes only a model this job claimed: one in the job's state whose ``started_at`` (which a job sets
when it claims its model) is not older than the heartbeat. A job that finds its model in another job's
hands, or a retrain still waiting, writes nothing, so a job never keeps a dead one's model looking alive.
A beat waits at most a moment for the model's row lock (held while a job records its result): a beat
skipped then is harmless, since the job that holds the lock is alive and a job re-queued meanwhile finds
the model recorded.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Protocol, Self

from service.db.base import utcnow
from service.settings import Settings
from service.states import ModelState
from service.uow import UnitOfWork

log = logging.getLogger(__name__)

HEARTBEAT_JOBS: Mapping[str, Sequence[ModelState]] = {
    "train_model": (ModelState.TRAINING,),
    "retrain_model": (ModelState.RETRAINING,),
}
"""The jobs that hold their model for long (task name -> the model states they hold it in)."""


class HeartbeatContext(Protocol):
    @property
    def settings(self) -> Settings: ...

    def uow(self) -> UnitOfWork: ...


class Heartbeat:
    """``with Heartbeat(rt, model_id, states):`` beats for the job run inside (see the module docstring)."""

    def __init__(self, rt: HeartbeatContext, model_id: int, states: Sequence[ModelState]) -> None:
        self._rt, self._model_id, self._states = rt, model_id, list(states)
        self._interval = rt.settings.job_heartbeat_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.began = utcnow()
        self.beats = 0  # beats that wrote the row

    def __enter__(self) -> Self:
        self.began = utcnow()
        self._thread = threading.Thread(
            target=self._run, name=f"lethe-heartbeat-{self._model_id}", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def beat(self) -> bool:
        """One beat; whether it wrote the row (False: not this job's model now, or its row was busy)."""
        try:
            with self._rt.uow() as uow:
                wrote = uow.models.heartbeat(self._model_id, self._states, claimed_since=self.began)
                uow.commit()
        except Exception:  # a lock timeout, a database blip: the next beat tries again
            log.debug("heartbeat of model %s skipped", self._model_id, exc_info=True)
            return False
        self.beats += wrote
        return wrote

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.beat()


@contextmanager
def job_heartbeat(rt: HeartbeatContext, task: str, payload: Mapping[str, Any]) -> Iterator[None]:
    """A :class:`Heartbeat` around job ``task`` if it is one of :data:`HEARTBEAT_JOBS`, else nothing."""
    states = HEARTBEAT_JOBS.get(task)
    model_id = payload.get("model_id")
    if states is None or not isinstance(model_id, int):
        yield
        return
    with Heartbeat(rt, model_id, states):
        yield
