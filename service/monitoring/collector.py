"""One Prometheus collector, in the API process, reading its gauges from Postgres (and the workers'
liveness records) at scrape time, so they hold whichever process did the work and survive restarts: the
gauges listed in docs/service.md ("Operating it"). No label names a user, a sample or a request. A scrape that
cannot read the database yields the liveness gauge only (``lethe_monitoring_up`` 0), never an error page.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from service.monitoring.repository import MonitoringRepository
from service.uow import UnitOfWork

log = logging.getLogger(__name__)


class DatabaseCollector(Collector):
    """The gauges above; ``snapshot`` opens a read-only unit of work, ``live_workers`` counts workers per
    lane, ``now`` is the database-comparable clock."""

    def __init__(
        self,
        snapshot: Callable[[], AbstractContextManager[UnitOfWork]],
        live_workers: Callable[[], dict[str, int]],
        now: Callable[[], datetime],
    ) -> None:
        self._snapshot, self._live_workers, self._now = snapshot, live_workers, now

    def describe(self) -> Iterator[Metric]:
        return iter(())  # collected at scrape time only: the registry must not call collect() to describe

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("lethe_monitoring_up", "1 when the database-derived gauges could be read")
        try:
            families = list(self._from_database())
            up.add_metric([], 1.0)
        except Exception as exc:  # noqa: BLE001 -- a scrape reports what it can, never fails
            log.warning("the database-derived gauges could not be read: %s", type(exc).__name__)
            families = []
            up.add_metric([], 0.0)
        yield up
        yield from families
        yield self._workers()

    def _workers(self) -> Metric:
        gauge = GaugeMetricFamily("lethe_workers_live", "Live workers serving each lane", labels=["lane"])
        try:
            live = self._live_workers()
        except Exception as exc:  # noqa: BLE001 -- Redis away: no worker is known to be alive
            log.warning("the workers' liveness records could not be read: %s", type(exc).__name__)
            live = {}
        for lane, count in sorted(live.items()):
            gauge.add_metric([lane], float(count))
        return gauge

    def _from_database(self) -> Iterator[Metric]:
        now = self._now()
        with self._snapshot() as uow:
            repo = MonitoringRepository(uow.session)
            waiting, models = repo.waiting_deletions(now), repo.models_by_state()
            budgets, fitting = repo.current_budgets(), repo.fitting()
        by_state = GaugeMetricFamily(
            "lethe_deletions", "Deletion requests not final, per state", labels=["state"]
        )
        for state, count in waiting.by_state.items():
            by_state.add_metric([state], float(count))
        yield by_state
        yield GaugeMetricFamily(
            "lethe_deletions_overdue", "Deletion requests not final past expected_by", value=waiting.overdue
        )
        oldest = (
            0.0 if waiting.oldest_created_at is None else (now - waiting.oldest_created_at).total_seconds()
        )
        yield GaugeMetricFamily(
            "lethe_deletion_oldest_waiting_seconds",
            "Age of the oldest deletion request not final",
            value=oldest,
        )
        per_model = GaugeMetricFamily("lethe_models", "Models per state", labels=["state"])
        for state, count in models.items():
            per_model.add_metric([state], float(count))
        yield per_model
        spent = GaugeMetricFamily(
            "lethe_budget_spent", "Budget spent in the current epoch", labels=["model_id"]
        )
        cap = GaugeMetricFamily("lethe_budget_cap", "Budget cap of the current epoch", labels=["model_id"])
        for budget in budgets:
            spent.add_metric([str(budget.model_id)], budget.spent)
            if budget.cap is not None:
                cap.add_metric([str(budget.model_id)], budget.cap)
        yield spent
        yield cap
        progress = GaugeMetricFamily(
            "lethe_model_job_progress",
            "Progress of a running training or retrain",
            labels=["model_id", "kind"],
        )
        for model_id, kind, fraction in fitting:
            progress.add_metric([str(model_id), kind], fraction)
        yield progress
