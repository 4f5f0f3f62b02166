"""A runtime shared by overlapping lifespans keeps its workers until its last user stops."""

from __future__ import annotations

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
