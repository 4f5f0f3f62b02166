"""``python -m bench.scale`` on two small sizes of one method and a small service run: the JSON carries the
growth exponents of the acceptance (``exponent.<method>.fit``, ``.deletion``, ``.hot_bytes``) and the
service's figures (``service.ready_s``, ``p50_ms``, ``p99_ms``, ``redis_mb``)."""

from __future__ import annotations

import pytest

from tests.integration.benchrun import run_bench

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_scale_bench_reports_growth_exponents_and_the_service_at_size() -> None:
    figures = run_bench(
        "bench.scale", "--quick", "--methods", "hessian_free", "--sizes", "500,1000", "--requests", "40"
    )
    points = figures["methods"]["hessian_free"]["covertype"]["points"]
    assert set(points) == {"500", "1000"} and all("fit_s" in p for p in points.values()), points
    assert points["1000"]["hot_bytes"] == 2 * points["500"]["hot_bytes"] > 0  # one vector per sample
    growth = figures["exponent"]["hessian_free"]
    assert growth["needs_pass"] is False
    assert growth["fit"] is not None and growth["deletion"] is not None
    assert growth["hot_bytes"] == pytest.approx(1.0, abs=0.01)
    service = figures["service"]
    assert service["rows"] == 5000 and service["requests"] == 40
    assert service["ready_s"] > 0 and 0 < service["p50_ms"] <= service["p99_ms"]
    assert service["redis_mb"] > 0
