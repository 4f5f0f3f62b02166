"""The guard a training job fits under (service.jobs.job_guard): the time limit derived from the job's
estimate, and cancellation once the model leaves the fitting states; and the registration limits
(service.job_limits)."""

from __future__ import annotations

from typing import Any, Self

import pytest

from service.errors import Unprocessable
from service.job_limits import JobLimits
from service.jobs.job_guard import GuardedProgress, JobCanceled, JobTimedOut
from service.settings import Settings
from unlearning.methods.job_estimate import JobEstimate


class _Models:
    def __init__(self, fitting: bool) -> None:
        self.fitting = fitting
        self.reports: list[tuple[str, float]] = []

    def record_progress(self, model_id: int, states: Any, phase: str, fraction: float, eta: Any) -> bool:
        self.reports.append((phase, fraction))
        return self.fitting


class _Uow:
    def __init__(self, models: _Models) -> None:
        self.models = models

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def commit(self) -> None:
        pass


class _Context:
    def __init__(self, fitting: bool = True, **settings: Any) -> None:
        self.settings = Settings(**settings)
        self.models = _Models(fitting)

    def uow(self) -> _Uow:
        return _Uow(self.models)


def _estimate(seconds: float, memory_mb: int = 10) -> JobEstimate:
    return JobEstimate(memory_bytes=memory_mb * 2**20, seconds=seconds, dominant="the test's terms")


def test_the_time_limit_is_the_factor_times_the_estimate_plus_the_grace_capped_by_the_maximum() -> None:
    limits = JobLimits(max_memory_bytes=2**30, max_seconds=1000.0, time_factor=5.0, grace_seconds=60.0)

    assert limits.time_limit(_estimate(10.0)) == 110.0
    assert limits.time_limit(_estimate(500.0)) == 1000.0


def test_a_job_past_its_time_limit_stops_naming_the_limit_and_the_estimate() -> None:
    rt = _Context(job_time_factor=1.0, job_time_grace_seconds=0.0)
    progress = GuardedProgress(rt, 7, _estimate(0.0))  # type: ignore[arg-type]

    with pytest.raises(JobTimedOut, match="time limit of 0 s") as raised:
        progress("training", 0.5)
    assert "the test's terms" in str(raised.value)


def test_a_job_whose_model_left_the_fitting_states_is_canceled_at_its_next_report() -> None:
    rt = _Context(fitting=False)
    progress = GuardedProgress(rt, 7, _estimate(100.0), interval=0.0)  # type: ignore[arg-type]

    with pytest.raises(JobCanceled):
        progress("training", 0.1)
    assert rt.models.reports == [("training", 0.1)]


def test_reports_are_throttled_but_the_last_one_is_always_written() -> None:
    rt = _Context()
    progress = GuardedProgress(rt, 7, _estimate(100.0), interval=60.0)  # type: ignore[arg-type]

    for fraction in (0.1, 0.2, 0.3, 1.0):
        progress("training", fraction)

    assert rt.models.reports == [("training", 0.1), ("training", 1.0)]


def test_a_registration_over_a_limit_is_refused_with_the_estimate_and_the_limit() -> None:
    limits = JobLimits.of(Settings(max_job_memory_mb=64, max_job_seconds=3600))

    limits.check(_estimate(3600.0, memory_mb=64))  # at the limits: accepted
    with pytest.raises(Unprocessable, match="LETHE_MAX_JOB_MEMORY_MB is 64") as memory:
        limits.check(_estimate(1.0, memory_mb=65))
    with pytest.raises(Unprocessable, match="LETHE_MAX_JOB_SECONDS is 3,600") as time:
        limits.check(_estimate(3601.0))
    assert memory.value.code == time.value.code == "job_too_large"
    assert "the test's terms" in str(memory.value)
