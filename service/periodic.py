"""A daemon thread running one pass every interval (or when woken), logging each kind of failure once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


class RepeatingPass:
    def __init__(
        self, name: str, interval_seconds: float, run: Callable[[], None], log: logging.Logger
    ) -> None:
        self._name = name
        self._interval = interval_seconds
        self._run = run
        self._log = log
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_failure: str | None = None

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"lethe-{self._name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._run()
            except Exception as exc:  # noqa: BLE001 - a pass that fails is logged and run again
                failure = f"{type(exc).__name__}: {exc}".splitlines()[0]
                self._log.warning(
                    "%s pass failed: %s", self._name, failure, exc_info=failure != self._last_failure
                )
                self._last_failure = failure
            else:
                if self._last_failure is not None:
                    self._log.info("%s passes succeed again after: %s", self._name, self._last_failure)
                    self._last_failure = None
