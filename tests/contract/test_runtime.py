"""The runtime's lifecycle: workers shared by overlapping lifespans, and the start-up orphan sweep."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.contract.conftest import embedded_runtime_in


def test_workers_outlive_an_inner_lifespan(tmp_path: Path) -> None:
    runtime = embedded_runtime_in(tmp_path)
    runtime.start()
    runtime.start()  # a second user of the same app (another client, a fuzzer)
    runtime.stop()
    assert runtime.queue.ping(), "the inner user's stop must not stop the outer user's workers"
    runtime.stop()
    assert not runtime.queue.ping()


def test_a_process_sweeps_the_orphan_blobs_it_finds_at_start_up(tmp_path: Path) -> None:
    """Blobs no row holds, left by a crash before this process started (older than the grace), go at once."""
    runtime = embedded_runtime_in(tmp_path)
    orphan = runtime.artifacts.put(b"bytes of an update that never committed")
    recent = runtime.artifacts.put(b"bytes of a job that may still commit")
    then = time.time() - 2 * runtime.settings.orphan_grace_seconds
    os.utime(tmp_path / "artifacts" / orphan[:2] / orphan, (then, then))
    runtime.start()
    try:
        deadline = time.monotonic() + 30
        while runtime.artifacts.exists(orphan):
            assert time.monotonic() < deadline, "the start-up sweep did not remove the orphan"
            time.sleep(0.05)
        assert runtime.artifacts.exists(recent)
    finally:
        runtime.stop()
