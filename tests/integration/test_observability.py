"""``python -m bench.observability --quick``: a real Prometheus scrapes the API and the workers of a
production deployment with the shipped config, rules (time-scaled) and dashboard while a client sends
deletions; every expression of the dashboard and the rules evaluates and returns series; each incident
(workers killed, a budget at 90%, a failing training, a callback target that always fails, deletions past
``expected_by``, the database stopped) fires its alert, which clears after the fix; none fires while the
deployment is healthy; /readyz answers 503 without workers."""

from __future__ import annotations

import pytest

from tests.integration.benchrun import run_bench
from tests.prometheus_tools import prometheus_tool

pytestmark = [pytest.mark.integration, pytest.mark.slow]

INJECTED = {
    "LetheNoLiveWorker",
    "LetheDeletionsOverdue",
    "LetheBudgetNearlyExhausted",
    "LetheTrainingFailing",
    "LetheCallbacksExhausted",
    "LetheApiErrorRate",
    "LetheMonitoringBlind",
}


def test_every_expression_returns_series_and_every_incident_pages() -> None:
    prometheus_tool("prometheus")
    figures = run_bench("bench.observability", "--quick")
    assert figures["expressions"] >= 30
    assert figures["expressions_failed"] == 0, figures["failed"]
    fired = {name for name, ok in figures["alerts"].items() if ok}
    assert fired == INJECTED, figures["alerts"]
    assert all(figures["seconds_to_alert"][name] is not None for name in INJECTED), figures
    assert figures["fired_in_healthy_run"] == [], figures
    assert figures["unexpected_alerts"] == {}, figures
    assert figures["readyz_status_without_worker"] == 503
