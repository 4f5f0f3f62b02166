"""Training jobs cannot hold the service: a registration whose job estimate exceeds the deployment's
limits is refused with the estimate; deleting a model stops its running training within seconds, and
nothing restarts it; a retrain has a lane of its own."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select

from service.db.tables import OutboxMessage
from service.jobs.training import train_model
from service.maintenance import reconcile
from service.queue import LANE_OF_TASK
from service.states import ModelState
from tests.integration.conftest import deployment_of_its_own, wait_for

pytestmark = pytest.mark.integration


def test_a_job_over_the_memory_limit_is_refused_at_registration_with_its_estimate(tmp_path: Path) -> None:
    with deployment_of_its_own(tmp_path, max_job_memory_mb="128") as d:
        dataset_id = d.client.dataset(n=300)
        r = d.client.http.post(
            "/v1/models",
            json={
                "name": "big",
                "dataset_id": dataset_id,
                "family": "mlp",
                "hyperparameters": {"hidden": [4096, 4096]},
            },
        )

    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "job_too_large"
    assert "MiB of memory" in error["message"] and "LETHE_MAX_JOB_MEMORY_MB is 128" in error["message"]


def test_deleting_a_training_model_stops_its_job_within_seconds_and_nothing_restarts_it(
    tmp_path: Path,
) -> None:
    with deployment_of_its_own(
        tmp_path, stale_job_seconds="1", job_heartbeat_seconds="0.3", job_heartbeat_timeout_seconds="1"
    ) as d:
        model_id = d.client.model(d.client.dataset(n=3000), epochs=200)
        job = threading.Thread(target=train_model, args=(d.runtime, model_id), daemon=True)
        job.start()

        def fitting() -> bool:
            status = d.client.http.get(f"/v1/models/{model_id}").json()["status"]
            assert status["state"] in {"queued", "training"}, status  # still training when deleted
            return status["state"] == "training" and status["percent"] > 0

        canceled_before = _canceled_trainings()
        wait_for(fitting, 120, 0.05, f"model {model_id} to be training")
        assert d.client.http.delete(f"/v1/models/{model_id}").status_code == 200
        deleted_at = time.monotonic()
        job.join(timeout=30)
        freed = time.monotonic() - deleted_at

        assert not job.is_alive()
        assert freed < 5.0, f"the training ran on {freed:.1f} s after its model was deleted"
        assert _canceled_trainings() == canceled_before + 1  # stopped, not finished and discarded
        time.sleep(1.5)  # past both timeouts: a training that stopped reporting would be re-queued
        reconcile(d.runtime)
        with d.runtime.uow() as uow:
            model = uow.models.get(model_id)
            assert model is not None and model.status == ModelState.DELETED
            assert uow.models.versions(model_id) == []
            jobs = uow.session.scalars(
                select(OutboxMessage.task).where(OutboxMessage.task.in_(["train_model", "retrain_model"]))
            ).all()
        assert jobs == ["train_model"]  # the registration's, never one from recovery
        train_model(d.runtime, model_id)  # a redelivered job finds the model deleted and does nothing
        assert d.client.http.get(f"/v1/models/{model_id}").json()["status"]["state"] == "deleted"


def _canceled_trainings() -> float:
    value = REGISTRY.get_sample_value("lethe_trainings_total", {"kind": "initial", "outcome": "canceled"})
    return value or 0.0


def test_retrains_have_a_lane_of_their_own() -> None:
    assert LANE_OF_TASK["retrain_model"] != LANE_OF_TASK["train_model"]
    assert LANE_OF_TASK["apply_deletions"] not in {LANE_OF_TASK["retrain_model"], LANE_OF_TASK["train_model"]}
