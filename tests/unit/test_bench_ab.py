"""The comparison of ``python -m bench.ab``: numbers found at any depth, medians per side, ratios per pair."""

from __future__ import annotations

import pytest

from bench.ab import compare, main, numbers


def test_numbers_are_found_at_any_depth_and_booleans_are_not_numbers() -> None:
    result = {"p50_ms": 80, "quick": True, "phases": {"round": {"cpu_ms": 17.5, "name": "x"}}, "seconds": 2.0}
    assert numbers(result) == {"p50_ms": 80.0, "phases.round.cpu_ms": 17.5, "seconds": 2.0}


def test_the_objects_of_a_list_are_numbered_by_their_index() -> None:
    result = {"sweep": [{"rate_rps": 10, "p50_ms": 31.5}, {"rate_rps": 100, "p50_ms": 55.0}], "ids": [1, 2]}
    assert numbers(result) == {
        "sweep.0.rate_rps": 10.0,
        "sweep.0.p50_ms": 31.5,
        "sweep.1.rate_rps": 100.0,
        "sweep.1.p50_ms": 55.0,
    }


def test_compare_gives_medians_and_the_pairs_ratios() -> None:
    before = [{"t": 10.0, "rate": 100.0}, {"t": 20.0, "rate": 100.0}, {"t": 30.0, "rate": 200.0}]
    after = [{"t": 5.0, "rate": 150.0}, {"t": 15.0, "rate": 100.0}, {"t": 30.0, "rate": 100.0}]
    out = compare(before, after)
    assert out["t"]["before"] == 20.0 and out["t"]["after"] == 15.0
    # Ratios pair by pair (0.5, 0.75, 1.0), not the ratio of the medians (0.75 by chance here too).
    assert (out["t"]["ratio"], out["t"]["ratio_low"], out["t"]["ratio_high"]) == (0.75, 0.5, 1.0)
    assert (out["rate"]["ratio"], out["rate"]["ratio_low"], out["rate"]["ratio_high"]) == (1.0, 0.5, 1.5)


def test_compare_keeps_only_numbers_every_run_has_and_skips_ratios_over_zero() -> None:
    before = [{"a": 0.0, "b": 1.0, "only_before": 3.0}]
    after = [{"a": 2.0, "b": 2.0}]
    out = compare(before, after)
    assert set(out) == {"a", "b"}
    assert "ratio" not in out["a"] and out["a"]["after"] == 2.0
    assert out["b"]["ratio"] == pytest.approx(2.0)


def test_a_base_that_names_no_commit_is_refused_before_anything_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--base", "no-such-revision-anywhere"])
    assert exit_.value.code == 2
    assert "names no commit" in capsys.readouterr().err
