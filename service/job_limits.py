"""The deployment's limits on one training job (docs/decisions.md, "Job estimates"): a registration whose
estimate exceeds them is refused; every training job runs under :meth:`JobLimits.time_limit`."""

from __future__ import annotations

from dataclasses import dataclass

from service.errors import Unprocessable
from service.settings import Settings
from unlearning.methods.job_estimate import JobEstimate


@dataclass(frozen=True)
class JobLimits:
    max_memory_bytes: int
    max_seconds: float
    time_factor: float
    grace_seconds: float

    @classmethod
    def of(cls, settings: Settings) -> JobLimits:
        return cls(
            max_memory_bytes=settings.max_job_memory_mb * 2**20,
            max_seconds=settings.max_job_seconds,
            time_factor=settings.job_time_factor,
            grace_seconds=settings.job_time_grace_seconds,
        )

    def check(self, estimate: JobEstimate) -> None:
        """422 ``job_too_large`` when ``estimate`` exceeds either limit, naming the estimate and the limit."""
        over = []
        if estimate.memory_bytes > self.max_memory_bytes:
            over.append(f"LETHE_MAX_JOB_MEMORY_MB is {self.max_memory_bytes // 2**20:,}")
        if estimate.seconds > self.max_seconds:
            over.append(f"LETHE_MAX_JOB_SECONDS is {self.max_seconds:,.0f}")
        if over:
            raise Unprocessable(
                f"training this model would need {estimate.describe()}, over this deployment's limit "
                f"({'; '.join(over)}): use fewer epochs or steps, a smaller model, or fewer classes or rows",
                code="job_too_large",
            )

    def time_limit(self, estimate: JobEstimate) -> float:
        """The seconds a job of ``estimate`` may run: ``min(max, grace + factor * estimate)``."""
        return min(self.max_seconds, self.grace_seconds + self.time_factor * estimate.seconds)
