"""Job name -> function. The Celery tasks and the in-process worker both dispatch through here; the lane
each job runs in is the queue's (:data:`service.queue.LANE_OF_TASK`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

TASKS: dict[str, str] = {
    "train_model": "service.jobs.training:train_model",
    "retrain_model": "service.jobs.training:retrain_model",
    "apply_deletions": "service.jobs.drain:apply_deletions",
    "deliver_callback": "service.jobs.callbacks:deliver_callback",
}
"""Each job as "module:function", imported when first run (keeps torch out of a Celery parent process)."""


def job_function(task: str) -> Callable[..., None]:
    module, name = TASKS[task].split(":")
    function: Callable[..., None] = getattr(importlib.import_module(module), name)
    return function


def run(context: object, task: str, payload: dict[str, Any]) -> None:
    """Run job ``task`` with the process's dependencies (the composition root, :class:`service.runtime.Runtime`)
    and the message's payload."""
    job_function(task)(context, **payload)
