"""Celery (production) or in-process (embedded) queues, each job in its lane (:data:`LANE_OF_TASK`)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)

LANES = ("train", "retrain", "updates", "io")

_Job = tuple[str, dict[str, Any]]  # task, payload

LANE_OF_TASK: dict[str, str] = {
    "train_model": "train",
    "retrain_model": "retrain",
    "apply_deletions": "updates",
    "deliver_callback": "io",
}


class TaskQueue(Protocol):
    def send(self, task: str, payload: dict[str, Any]) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def ping(self) -> bool: ...


def celery_queue_name(prefix: str, lane: str) -> str:
    return f"{prefix}.{lane}"


class CeleryQueue:
    """Publishes jobs by name to the Celery broker; the worker side lives in ``workers.celery_app``."""

    def __init__(self, broker_url: str, queue_prefix: str) -> None:
        from celery import Celery

        self.prefix = queue_prefix
        self.app = Celery("lethe-producer", broker=broker_url)
        self.app.conf.broker_connection_retry_on_startup = True

    def send(self, task: str, payload: dict[str, Any]) -> None:
        lane = celery_queue_name(self.prefix, LANE_OF_TASK[task])
        self.app.send_task(f"lethe.{task}", kwargs=payload, queue=lane, retry=False)

    def start(self) -> None: ...  # the broker runs on its own
    def stop(self) -> None: ...

    def ping(self) -> bool:
        try:
            with self.app.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1, timeout=2)
            return True
        except Exception:  # noqa: BLE001 - any failure means "not ready"
            return False


class InProcessQueue:
    """One daemon thread per lane, running jobs in the API process (embedded mode)."""

    def __init__(self, run: Callable[[str, dict[str, Any]], None]) -> None:
        self._run = run
        self._queues: dict[str, queue.Queue[_Job | None]] = {lane: queue.Queue() for lane in LANES}
        self._threads: list[threading.Thread] = []

    def send(self, task: str, payload: dict[str, Any]) -> None:
        self._queues[LANE_OF_TASK[task]].put((task, payload))

    def start(self) -> None:
        if self._threads:
            return
        for lane, q in self._queues.items():
            thread = threading.Thread(target=self._loop, args=(q,), name=f"lethe-worker-{lane}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _loop(self, q: queue.Queue[_Job | None]) -> None:
        while True:
            item = q.get()
            try:
                if item is None:
                    return
                task, payload = item
                self._run(task, payload)
            except Exception:
                log.exception("job %s failed", item[0] if item else "?")
            finally:
                q.task_done()

    def join(self) -> None:
        """Wait until every job sent so far (and every job those sent) has run."""
        for q in self._queues.values():
            q.join()

    def stop(self) -> None:
        for q in self._queues.values():
            q.put(None)
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads.clear()

    def ping(self) -> bool:
        return all(t.is_alive() for t in self._threads) if self._threads else False
