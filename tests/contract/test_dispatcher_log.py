"""The outbox dispatcher's log while its passes fail: a database or broker that is down fails every pass,
twice a second, and the log must say so without a traceback each time."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from service.outbox.dispatcher import Dispatcher
from tests.contract.conftest import embedded_runtime_in


def test_a_failing_pass_logs_its_traceback_once_then_one_line_and_its_recovery(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = embedded_runtime_in(tmp_path)
    dispatcher = Dispatcher(runtime.sessions, runtime.queue, interval_seconds=0.01)
    failures = iter([RuntimeError("database unreachable")] * 5 + [OSError("disk full")] * 2)

    def dispatch_due() -> int:
        error = next(failures, None)
        if error is not None:
            raise error
        return 0

    monkeypatch.setattr(dispatcher, "dispatch_due", dispatch_due)
    with caplog.at_level(logging.INFO, logger="service.outbox.dispatcher"):
        dispatcher.start()
        deadline = time.monotonic() + 10
        while not any("succeed again" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
            time.sleep(0.01)
        dispatcher.stop()
    failed = [r for r in caplog.records if "dispatcher pass failed" in r.getMessage()]
    assert [r.getMessage().split(": ", 1)[1] for r in failed] == [
        "RuntimeError: database unreachable"
    ] * 5 + ["OSError: disk full"] * 2
    # The traceback with the first of each kind of failure only.
    assert [bool(r.exc_info) for r in failed] == [True, False, False, False, False, True, False]
    assert any("succeed again after: OSError: disk full" in r.getMessage() for r in caplog.records)
