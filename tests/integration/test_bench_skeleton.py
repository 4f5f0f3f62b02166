"""``python -m bench.skeleton`` runs end to end, bare and with every variant, and erases what it says."""

from __future__ import annotations

import pytest

from bench.skeleton import VARIANTS
from tests.integration.benchrun import run_bench

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize("variants", ["", "manifest", ",".join(VARIANTS)])
def test_skeleton_completes_every_request(pg_url: str, redis_url: str, variants: str) -> None:
    """A small load: every request completes (the driver waits for each ``completed`` row), each passes
    through the four states in order, one version takes one or more requests, and nothing of the
    forgotten owners is left in any store."""
    figures = run_bench("bench.skeleton", "--requests", "15", "--rate", "50", "--with", variants)
    (config,) = figures["configs"]
    assert config["variants"] == sorted(v for v in variants.split(",") if v)
    assert set(config["leftover"].values()) == {0}, config["leftover"]
    (load,) = config["loads"]
    assert load["requests"] == 15 and 1 <= load["versions"] <= 15
    stages = load["stage_p50_ms"]
    assert 0 < stages["queued"] <= stages["applying"] <= stages["applied"] <= stages["completed"]
    assert stages["completed"] == load["p50_ms"] > 0
    assert load["p50_over_target"] == pytest.approx(load["p50_ms"] / 20.0, abs=1e-3)
    assert {"api", "worker", "postgres"} <= set(load["cpu_ms_per_request"])
