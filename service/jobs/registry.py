"""Job name -> function, for the Celery tasks and the in-process worker alike."""

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


def run(context: object, task: str, payload: dict[str, Any]) -> None:
    """Run job ``task`` with the process's dependencies (:class:`service.runtime.Runtime`) and the payload."""
    module, name = TASKS[task].split(":")
    function: Callable[..., None] = getattr(importlib.import_module(module), name)
    function(context, **payload)
