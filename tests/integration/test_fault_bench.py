"""``python -m bench.faults --smoke``: production mode on a Postgres and a Redis of its own, the real API
and worker processes, a steady load of keyed single and bulk deletions, and every fault in turn: worker
SIGKILL during rounds, a first training and a retrain; API SIGKILL with requests in flight; Postgres
restarted immediately and its backends terminated during retrains; Redis FLUSHALL and restart; a full
artifact disk. No accepted deletion fails, is lost, is applied twice or completes past its deadline."""

from __future__ import annotations

import pytest

from tests.integration.benchrun import run_bench

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAULTS = {
    "worker_kill_updates",
    "worker_kill_training",
    "worker_kill_retrain",
    "api_kill_in_flight",
    "postgres_restart_in_retrain",
    "backends_terminated_in_retrain",
    "redis_flushall",
    "redis_restart",
    "disk_full",
}


def test_no_accepted_deletion_fails_is_lost_or_doubled_under_every_fault() -> None:
    figures = run_bench("bench.faults", "--smoke")
    faults = figures["faults"]
    assert set(faults) == FAULTS
    assert not [name for name, found in faults.items() if "error" in found], faults
    assert faults["worker_kill_training"]["state_at_kill"] == "training", faults
    assert figures["accepted"] > 0 and figures["completed"] == figures["accepted"], figures
    assert figures["failed"] == 0, figures["failure_reasons"]
    assert figures["lost"] == 0, figures
    assert figures["double_applied"] == 0, figures["double_detail"]
    assert figures["over_budget"] == 0
    assert figures["audit_ok"] is True
    assert figures["missed_deadline"] == 0, figures["late_samples"]
    assert not figures["samples_inconsistent"], figures["samples_inconsistent"]
