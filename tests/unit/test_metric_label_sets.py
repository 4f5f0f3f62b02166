"""Every label set of the counters an alert watches exists at 0 from the start: Prometheus' increase() of a
series that appears with its first failure is 0, so the first failure of a process would go unseen."""

from __future__ import annotations

from prometheus_client import REGISTRY

from service import metrics  # noqa: F401 -- the label sets are made on import


def test_training_and_callback_outcomes_exist_before_anything_happens() -> None:
    for kind in ("initial", "retrain"):
        for outcome in ("ok", "failed", "retried", "canceled"):
            labels = {"kind": kind, "outcome": outcome}
            assert REGISTRY.get_sample_value("lethe_trainings_total", labels) is not None, labels
        assert REGISTRY.get_sample_value("lethe_trainings_low_quality_total", {"kind": kind}) is not None
    for outcome in ("ok", "error", "refused", "gave_up"):
        assert REGISTRY.get_sample_value("lethe_callbacks_total", {"outcome": outcome}) is not None, outcome


def test_blob_rewrites_exist_for_every_job_that_retries_on_a_collected_blob() -> None:
    for job in ("apply_deletions", "train_model", "retrain_model", "upload_dataset", "upload_graph"):
        assert REGISTRY.get_sample_value("lethe_blob_rewrites_total", {"job": job}) is not None, job
