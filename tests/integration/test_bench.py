"""``python -m bench.service`` runs end to end and its last line is the JSON the issue asks for; so do
``python -m bench.deletion_path``, ``bench.history``, ``bench.ab`` and ``bench.hostile``."""

from __future__ import annotations

import pytest

from tests.integration.benchrun import run_bench

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEYS = {
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "rate_rps",
    "completed_per_s",
    "retrain_per_request_p50_ms",
    "first_request_ms",
    "warmup",
}


def test_bench_prints_the_figures(pg_url: str, redis_url: str) -> None:
    """A small run (the fixtures have checked that Postgres and Redis are up)."""
    figures = run_bench(
        "bench.service",
        *("--quick", "--requests", "30", "--burst", "40", "--retrains", "1", "--warmup", "5"),
        *("--sweep", "20,50", "--sweep-requests", "8"),
    )
    assert KEYS <= set(figures)
    assert figures["rate_rps"] == 100.0 and figures["requests"] == 30 and figures["burst"] == 40
    assert figures["warmup"] == 5 and figures["first_request_ms"] > 0
    assert 0 < figures["p50_ms"] <= figures["p95_ms"] <= figures["p99_ms"]
    assert figures["completed_per_s"] > 0 and figures["retrain_per_request_p50_ms"] > 0
    # The burst's rate is its deletions over its span (and nothing measured after it, such as the sweep).
    assert figures["completed_per_s"] == pytest.approx(40 / figures["burst_seconds"], rel=0.01)
    # Where the time went, from the requests' own histories: each stage after the one before.
    stages = figures["stage_p50_ms"]
    assert list(stages) == ["queued", "applying", "applied", "completed"]
    assert 0 < stages["queued"] <= stages["applying"] <= stages["applied"] <= stages["completed"]
    # Where the CPU went (Linux /proc): the API, the worker and Postgres did the work, nobody ran
    # backwards. /proc counts each process's CPU in ticks of 10 ms, and the burst's 40 coalesced deletions
    # cost each process a few milliseconds (on a fast machine the worker's whole share of them is under a
    # tick, and rounds down to 0), so only the offered load (30 requests, some 5 ms of the worker's
    # CPU each at 100 requests/s) must show work; both phases go through the same accounting.
    for phase in ("offered_load", "burst"):
        cpu = figures["cpu_ms_per_request"][phase]
        assert {"api", "worker", "postgres", "redis", "load_generator"} <= set(cpu)
        assert all(v >= 0 for v in cpu.values())
    offered = figures["cpu_ms_per_request"]["offered_load"]
    assert offered["api"] > 0 and offered["worker"] > 0 and offered["postgres"] > 0
    # Rounds: at least one version for the offered load, at most one per request; a round's CPU is the
    # per-request CPU times the requests per round.
    rounds = figures["versions_offered_load"]
    assert 1 <= rounds <= 30
    per_version = figures["cpu_ms_per_version_offered_load"]
    per_request = figures["cpu_ms_per_request"]["offered_load"]
    assert per_version["worker"] == pytest.approx(per_request["worker"] * 30 / rounds, abs=0.02)
    # The sweep: the same measurement at each rate asked for, in that order, after the figures above.
    sweep = figures["sweep"]
    assert [(p["rate_rps"], p["requests"]) for p in sweep] == [(20.0, 8), (50.0, 8)]
    for point in sweep:
        assert 0 < point["p50_ms"] <= point["p95_ms"] <= point["p99_ms"]
        assert 1 <= point["versions"] <= 8
        assert list(point["stage_p50_ms"]) == ["queued", "applying", "applied", "completed"]
        assert point["cpu_ms_per_request"]["worker"] > 0


def test_the_deletion_path_prints_each_phase_and_its_floor(pg_url: str, redis_url: str) -> None:
    """``python -m bench.deletion_path``: every phase measured, and the floor is what its phases add to."""
    figures = run_bench("bench.deletion_path", "--rounds", "8", "--warmup", "2", "--rows", "200")
    phases = figures["phases"]
    assert list(phases) == ["intake", "round", "completion"]
    for name, phase in phases.items():
        assert phase["statements"] >= 3, name  # each phase is a transaction of several statements
        assert 0 < phase["cpu_ms"] and 0 < phase["wall_ms"], name
    assert figures["floor_ms"] == pytest.approx(sum(p["wall_ms"] for p in phases.values()), abs=0.02)
    assert figures["floor_over_target"] == pytest.approx(figures["floor_ms"] / 20.0, abs=0.01)
    assert (figures["rounds"], figures["warmup"], figures["rows"]) == (8, 2, 200)


def test_the_history_bench_times_each_statement_with_and_without_its_index(pg_url: str) -> None:
    """``python -m bench.history``: the purge at both history lengths and the subject query, both ways,
    and the ratio of the two."""
    figures = run_bench("bench.history", "--versions", "300", "--events", "3003", "--repeats", "2")
    cases = ["purge_history_1", "purge_history_300", "subject_query_3003_events"]
    assert list(figures)[:3] == cases
    for case in cases:
        timing = figures[case]
        assert timing["with_index_ms"] > 0 and timing["without_index_ms"] > 0
        ratio = timing["without_index_ms"] / timing["with_index_ms"]
        assert timing["without_over_with"] == pytest.approx(ratio, abs=0.06)
    assert (figures["versions"], figures["events"], figures["repeats"]) == (300, 3003, 2)


def test_the_ab_bench_runs_both_trees_and_compares_them(pg_url: str, redis_url: str) -> None:
    """``python -m bench.ab``: the earlier commit (here the same one) and this checkout each run once; the
    same code makes the same statements, so their ratio is exactly 1."""
    figures = run_bench(
        "bench.ab", "--base", "HEAD", "--pairs", "1", "--", "--rounds", "6", "--warmup", "2", "--rows", "200"
    )
    assert figures["bench"] == "deletion_path" and figures["pairs"] == 1
    assert len(figures["before"]) == len(figures["after"]) == 1
    assert figures["base"] == figures["head"]
    comparison = figures["comparison"]
    if not figures["dirty"]:  # uncommitted changes would be measured as "after"
        for phase in ("intake", "round", "completion"):
            assert comparison[f"phases.{phase}.statements"]["ratio"] == 1.0
    floor = comparison["floor_ms"]
    assert floor["ratio"] == pytest.approx(
        figures["after"][0]["floor_ms"] / figures["before"][0]["floor_ms"], abs=1e-3
    )


HOSTILE_KEYS = {
    "victim_p99_ms",
    "quiet_p99_ms",
    "victim_missed_deadlines",
    "victim_errors",
    "hostile_5xx",
    "api_rss_peak_mb",
    "worker_freed_s",
    "plain_ids_found",
    "hostile_answers",
    "targets_met",
}


def test_the_hostile_bench_leaves_the_victim_served_and_the_forgotten_subject_nowhere(
    pg_url: str, redis_url: str
) -> None:
    """``python -m bench.hostile --quick``: a hostile client's inputs are refused without a server error,
    the victim's deletions all go through, and the subject it forgot is named nowhere afterwards."""
    figures = run_bench("bench.hostile", "--quick")
    assert HOSTILE_KEYS <= set(figures)
    answers = figures["hostile_answers"]
    assert {"gzip_csv_2gb", "npz_header_1e9x1000", "stray_label_99999_upload", "langevin_epochs_1e9"} <= set(
        answers
    )
    assert all(a["status"] is not None and a["status"] < 500 for a in answers.values()), answers
    assert figures["hostile_5xx"] == 0
    assert figures["victim_errors"] == 0, figures["victim_error_samples"]
    assert figures["plain_ids_found"] == 0, figures["plain_id_hits"]
    assert figures["victim_requests"] > 0 and figures["quiet_requests"] > 0
