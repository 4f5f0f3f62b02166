"""Worker liveness: each worker process writes a record naming its lanes every ``interval`` seconds, kept
for :data:`TTL_INTERVALS` intervals; a lane with no record is served by no live worker.

Records live in Redis (the hot store's prefix, ``{prefix}:worker:{name}``): written by the worker's own
beat thread, so a worker that is SIGKILLed or hangs its process stops renewing them and disappears from
:func:`live_by_lane` within ``TTL_INTERVALS * interval`` seconds.
"""

from __future__ import annotations

import json
import logging
import threading
import time

import redis

from service.queue import LANES

log = logging.getLogger(__name__)

TTL_INTERVALS = 3


def _key(prefix: str, name: str) -> str:
    return f"{prefix}:worker:{name}"


def beat(client: redis.Redis, prefix: str, name: str, lanes: list[str], interval: float) -> None:
    """Write (or renew) this worker's record: its lanes and the time, for ``TTL_INTERVALS * interval`` s."""
    record = json.dumps({"lanes": lanes, "at": time.time()})
    client.set(_key(prefix, name), record, px=int(TTL_INTERVALS * interval * 1000))


def forget(client: redis.Redis, prefix: str, name: str) -> None:
    """Remove the record (a worker shutting down cleanly)."""
    client.delete(_key(prefix, name))


def live_by_lane(client: redis.Redis, prefix: str) -> dict[str, int]:
    """How many live workers serve each lane of :data:`service.queue.LANES` (0 for a lane none serves)."""
    counts = dict.fromkeys(LANES, 0)
    keys = list(client.scan_iter(match=_key(prefix, "*"), count=100))
    for raw in client.mget(keys) if keys else []:
        if raw is None:
            continue  # expired between the scan and the read
        for lane in json.loads(raw).get("lanes", []):
            if lane in counts:
                counts[lane] += 1
    return counts


class Beat:
    """A daemon thread renewing one worker's record every ``interval`` seconds; Redis errors are logged
    once per outage and retried at the next beat."""

    def __init__(
        self, client: redis.Redis, prefix: str, name: str, lanes: list[str], interval: float
    ) -> None:
        self._args = (client, prefix, name, lanes, interval)
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lethe-liveness", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        failing = False
        while True:
            try:
                beat(*self._args)
                failing = False
            except redis.RedisError as exc:
                if not failing:
                    log.warning("could not renew the worker's liveness record: %s", exc)
                failing = True
            if self._stop.wait(self._interval):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        client, prefix, name, _, _ = self._args
        try:
            forget(client, prefix, name)
        except redis.RedisError:
            pass  # the record expires on its own
