"""The hot-store limit of a registration (LETHE_MAX_HOT_STORE_MB) and docs/service.md's table of where each
table method is practical, which must be what ``python -m bench.practical`` prints from the estimates."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.practical import practical_table
from service.errors import Unprocessable
from service.job_limits import JobLimits
from service.settings import Settings
from unlearning.methods.job_estimate import JobEstimate

DOCS = Path(__file__).resolve().parents[2] / "docs" / "service.md"


def _estimate(hot_store_mb: float, memory_mb: int = 10, seconds: float = 1.0) -> JobEstimate:
    return JobEstimate(memory_mb * 2**20, seconds, "the test's terms", round(hot_store_mb * 2**20))


def test_a_state_over_the_hot_store_limit_is_refused_naming_it_and_what_to_change() -> None:
    limits = JobLimits.of(Settings(max_hot_store_mb=100))
    limits.check(_estimate(100))  # at the limit: accepted
    with pytest.raises(Unprocessable) as refused:
        limits.check(_estimate(100.5))
    message = str(refused.value)
    assert refused.value.code == "job_too_large"
    assert "100.5 MiB of the hot store, LETHE_MAX_HOT_STORE_MB is 100" in message
    assert "vector_dtype 'float16' or 'bfloat16'" in message and "fewer rows" in message
    assert "LETHE_MAX_JOB" not in message and "fewer epochs" not in message  # only the limit it is over
    assert limits.exceeded(_estimate(101, memory_mb=10**6, seconds=1e9)) == ("memory", "time", "hot store")


def test_the_default_hot_store_limit_is_generous() -> None:
    assert JobLimits.defaults().max_hot_store_bytes == Settings.model_construct().max_hot_store_mb * 2**20
    assert Settings.model_construct().max_hot_store_mb == 4096


def test_docs_carry_the_table_the_estimates_give() -> None:
    table = practical_table()
    assert "refused (" in table and "hessian_free (float16 vectors)" in table
    assert table in DOCS.read_text(), "docs/service.md is stale: paste `python -m bench.practical` into it"
