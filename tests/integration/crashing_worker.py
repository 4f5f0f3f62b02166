"""``python -m tests.integration.crashing_worker <celery worker arguments>``: a real Celery worker that
kills itself with SIGKILL at one point of its first deletion update, for the crash tests.

``LETHE_TEST_CRASH_AT`` names the point:

- ``before_commit``: inside the update's transaction, after the new version's blobs are written and its
  rows (the version, the ledger charge, the requests' states) sent, as the statistics in Redis are about
  to move to it, before anything commits;
- ``after_commit``: after the version, ledger charge and request states committed (and, on Postgres, the
  completion's transaction begun with its reads and locks in the same round trip), before the rest of
  the completion (serve the version, delete the garbage blobs, mark the requests completed).

SIGKILL gives the process no chance to clean up: Postgres sees the connection drop (and rolls back an
open transaction), the broker message is gone, nothing is flushed. The service's production code is
used as it is; only the one function at the crash point is replaced, in this process only.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from service.jobs import update_round
from service.storage.statistics import RedisSampleStatistics

CRASH_POINTS: dict[str, tuple[object, str]] = {
    "before_commit": (RedisSampleStatistics, "apply"),
    # the completion, in the unit of work of the round that committed the version
    "after_commit": (update_round, "complete_in_round_transaction"),
}


def _die(*_: Any, **__: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    point = os.environ.get("LETHE_TEST_CRASH_AT", "")
    if point not in CRASH_POINTS:
        raise SystemExit(f"LETHE_TEST_CRASH_AT must be one of {sorted(CRASH_POINTS)}, got {point!r}")
    owner, name = CRASH_POINTS[point]
    setattr(owner, name, _die)
    from celery.__main__ import main as celery_main

    sys.argv = ["celery", *sys.argv[1:]]
    celery_main()


if __name__ == "__main__":
    main()
