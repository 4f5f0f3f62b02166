"""What every command gets: the API client, the printer, and how often to poll."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lethe_cli.api import Api
from lethe_cli.output import Output


@dataclass
class Context:
    api: Api
    out: Output
    interval: float = 0.5  # seconds between two polls of --wait and watch
    sleep: Callable[[float], None] = field(default=time.sleep)

    def pause(self) -> None:
        self.sleep(self.interval)
