"""The deployment's limits on one training job (docs/decisions.md, "Job estimates"): a registration whose
estimate exceeds them (memory, single-core time, or the trained state's bytes in the hot store) is refused;
every training job runs under :meth:`JobLimits.time_limit` (where each method is practical under them:
``python -m bench.practical``)."""

from __future__ import annotations

from dataclasses import dataclass

from service.errors import Unprocessable
from service.settings import Settings
from unlearning.methods.job_estimate import JobEstimate

_JOB_ADVICE = "use fewer epochs or steps, a smaller model, or fewer classes or rows"
_HOT_STORE_ADVICE = (
    "to hold less in the hot store, train on fewer rows, keep the per-sample vectors in half precision "
    "(hyperparameter vector_dtype 'float16' or 'bfloat16': half the bytes), or choose a method without "
    "per-sample vectors (GET /v1/methods)"
)


@dataclass(frozen=True)
class JobLimits:
    max_memory_bytes: int
    max_seconds: float
    time_factor: float
    grace_seconds: float
    max_hot_store_bytes: int = 4096 * 2**20

    @classmethod
    def of(cls, settings: Settings) -> JobLimits:
        return cls(
            max_memory_bytes=settings.max_job_memory_mb * 2**20,
            max_seconds=settings.max_job_seconds,
            time_factor=settings.job_time_factor,
            grace_seconds=settings.job_time_grace_seconds,
            max_hot_store_bytes=settings.max_hot_store_mb * 2**20,
        )

    @classmethod
    def defaults(cls) -> JobLimits:
        """The limits of a deployment that sets none of them."""
        return cls.of(Settings.model_construct())

    def exceeded(self, estimate: JobEstimate) -> tuple[str, ...]:
        """The limits ``estimate`` is over, of ``memory``, ``time`` and ``hot store``."""
        over = (
            ("memory", estimate.memory_bytes > self.max_memory_bytes),
            ("time", estimate.seconds > self.max_seconds),
            ("hot store", estimate.hot_store_bytes > self.max_hot_store_bytes),
        )
        return tuple(name for name, is_over in over if is_over)

    def check(self, estimate: JobEstimate) -> None:
        """422 ``job_too_large`` when ``estimate`` exceeds any limit, naming the estimate, the limits it
        exceeds and what to change."""
        exceeded = self.exceeded(estimate)
        over, advice = [], []
        if "memory" in exceeded:
            over.append(f"LETHE_MAX_JOB_MEMORY_MB is {self.max_memory_bytes // 2**20:,}")
        if "time" in exceeded:
            over.append(f"LETHE_MAX_JOB_SECONDS is {self.max_seconds:,.0f}")
        if over:
            advice.append(_JOB_ADVICE)
        if "hot store" in exceeded:
            over.append(
                f"its state would take {estimate.hot_store_bytes / 2**20:,.1f} MiB of the hot store, "
                f"LETHE_MAX_HOT_STORE_MB is {self.max_hot_store_bytes // 2**20:,}"
            )
            advice.append(_HOT_STORE_ADVICE)
        if over:
            raise Unprocessable(
                f"training this model would need {estimate.describe()}, over this deployment's limit "
                f"({'; '.join(over)}): {'; '.join(advice)}",
                code="job_too_large",
            )

    def time_limit(self, estimate: JobEstimate) -> float:
        """The seconds a job of ``estimate`` may run: ``min(max, grace + factor * estimate)``."""
        return min(self.max_seconds, self.grace_seconds + self.time_factor * estimate.seconds)
