"""The growth figures of ``bench.scale``: a fitted exponent recovers a known power law, and a point is
skipped from its predecessors' growth."""

from __future__ import annotations

import pytest

from bench.scale import exponent, predicted_fit, verdict


def test_the_exponent_recovers_a_power_law() -> None:
    assert exponent([(n, 3.0 * n**1.5) for n in (1000, 4000, 16000)]) == pytest.approx(1.5, abs=1e-3)
    assert exponent([(n, 7.0) for n in (1000, 4000)]) == pytest.approx(0.0, abs=1e-3)
    assert exponent([(1000, 1.0)]) is None
    assert exponent([(1000, 0.0), (4000, 0.0)]) is None  # no hot bytes at all: no growth to fit


def test_a_fit_is_predicted_from_the_last_two_points_at_least_linearly() -> None:
    assert predicted_fit([], 1000) is None
    assert predicted_fit([(1000, 2.0)], 4000) == pytest.approx(32.0)  # quadratic from one point
    assert predicted_fit([(1000, 2.0), (2000, 8.0)], 4000) == pytest.approx(32.0)  # observed: quadratic
    assert predicted_fit([(1000, 2.0), (2000, 2.2)], 4000) == pytest.approx(4.4)  # sublinear: linear


def test_the_deletion_target_depends_on_whether_the_method_reads_the_data() -> None:
    def points(delete_ms: float, needs_pass: bool) -> dict:
        return {"covertype": {"points": {"1000": {"needs_pass": needs_pass}}, "exponent": {"deletion": delete_ms}}}

    met = verdict({"hessian_free": points(0.1, False), "newton_removal": points(1.0, True)}, None)
    assert met["targets_met"] is True
    assert met["exponent"]["newton_removal"]["deletion_target"] == 1.1
    assert verdict({"hessian_free": points(0.5, False)}, None)["targets_met"] is False
    assert verdict({}, {"p99_ms": 140.0})["targets_met"] is False
