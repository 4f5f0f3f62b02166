"""A (re)training leaves Postgres' statistics knowing the rows it loaded in bulk (service.uow), so the
deletions that follow are planned from them rather than from an empty table."""

from __future__ import annotations

import logging
import threading

import pytest
import sqlalchemy as sa

from service.jobs.training import refresh_planner_statistics, retrain_model, train_model
from tests.integration.conftest import Deployment

pytestmark = pytest.mark.integration

_ROWS = 300  # one sample per owner: a bucket per owner, so two references per owner for the model


def _planner_rows(deployment: Deployment) -> dict[str, float]:
    """The row count the planner assumes for each bulk-loaded table (-1: never analyzed)."""
    with deployment.runtime.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT relname, reltuples FROM pg_class WHERE relname IN ('samples', 'artifact_refs')")
        ).all()
    return {name: float(count) for name, count in rows}


def _reset_statistics(deployment: Deployment) -> None:
    """Forget what the planner knows of the two tables, as if they had never been analyzed."""
    with deployment.runtime.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE pg_class SET reltuples = -1 WHERE relname IN ('samples', 'artifact_refs')")
        )


def test_training_and_retraining_refresh_the_statistics_of_what_they_loaded(deployment: Deployment) -> None:
    client = deployment.client
    model_id = client.model(client.dataset(n=_ROWS, samples_per_owner=1), epochs=1)
    assert _planner_rows(deployment) == {"samples": -1.0, "artifact_refs": -1.0}  # control: never analyzed

    train_model(deployment.runtime, model_id)  # what the worker runs for the train_model job
    client.ready(model_id)
    trained = _planner_rows(deployment)
    assert trained["samples"] == _ROWS
    assert trained["artifact_refs"] >= 3 * _ROWS  # the dataset's buckets, the model's and its statistics

    _reset_statistics(deployment)
    r = client.http.post(f"/v1/models/{model_id}/retrain", json={"reason": "test"})
    assert r.status_code == 202, r.text
    retrain_model(deployment.runtime, model_id)
    client.ready(model_id)
    assert _planner_rows(deployment)["samples"] == _ROWS


def test_a_vacuum_holding_the_tables_does_not_hold_up_the_job(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    """ANALYZE waits for a conflicting lock (a VACUUM's) only up to its lock timeout; the job then logs
    that it could not refresh the statistics and ends, its work done."""
    done = threading.Event()
    with deployment.runtime.engine.connect() as vacuum:
        vacuum.execute(sa.text("LOCK TABLE samples IN SHARE UPDATE EXCLUSIVE MODE"))  # as VACUUM holds it

        def refresh() -> None:
            refresh_planner_statistics(deployment.runtime)
            done.set()

        with caplog.at_level(logging.WARNING, logger="service.jobs.training"):
            worker = threading.Thread(target=refresh, daemon=True)
            worker.start()
            finished = done.wait(timeout=60)
        vacuum.rollback()
    assert finished, "the statistics refresh waited for the lock instead of giving up"
    assert "could not refresh the planner's statistics" in caplog.text
    assert _planner_rows(deployment)["samples"] == -1.0  # nothing analyzed
