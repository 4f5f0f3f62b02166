"""Job name -> function and lane. The Celery tasks and the in-process worker both dispatch through here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.runtime import Runtime


@dataclass(frozen=True)
class Job:
    lane: str
    target: str  # "module:function", imported when first run (keeps torch out of the parent process)

    def function(self) -> Callable[..., None]:
        import importlib

        module, name = self.target.split(":")
        return getattr(importlib.import_module(module), name)


TASKS: dict[str, Job] = {
    "train_model": Job("train", "service.jobs.training:train_model"),
    "retrain_model": Job("train", "service.jobs.training:retrain_model"),
    "apply_deletions": Job("updates", "service.jobs.updates:apply_deletions"),
    "deliver_callback": Job("io", "service.jobs.callbacks:deliver_callback"),
}


def run(rt: Runtime, task: str, payload: dict[str, Any]) -> None:
    TASKS[task].function()(rt, **payload)
