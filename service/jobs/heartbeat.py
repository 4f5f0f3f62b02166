"""While a training or retrain holds its model, a daemon thread bumps the model's ``updated_at``."""

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


class JobContext(Protocol):
    """What a job's heartbeat, progress guard and callbacks use of the runtime."""

    @property
    def settings(self) -> Settings: ...
    def uow(self) -> UnitOfWork: ...


class Heartbeat:
    """``with Heartbeat(rt, model_id, states):`` beats for the job run inside."""

    def __init__(self, rt: JobContext, model_id: int, states: Sequence[ModelState]) -> None:
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
        """One beat; whether it wrote the row (False: not this job's model, or its row was busy)."""
        try:
            with self._rt.uow() as uow:
                wrote = uow.models.heartbeat(self._model_id, self._states, claimed_since=self.began)
                uow.commit()
        except Exception:  # the next beat tries again
            log.debug("heartbeat of model %s skipped", self._model_id, exc_info=True)
            return False
        self.beats += wrote
        return wrote

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.beat()


@contextmanager
def job_heartbeat(rt: JobContext, task: str, payload: Mapping[str, Any]) -> Iterator[None]:
    """A :class:`Heartbeat` around job ``task`` if it is one of :data:`HEARTBEAT_JOBS`, else nothing."""
    states = HEARTBEAT_JOBS.get(task)
    model_id = payload.get("model_id")
    if states is None or not isinstance(model_id, int):
        yield
        return
    with Heartbeat(rt, model_id, states):
        yield
