"""What an operator sees: /readyz names the lanes no live worker serves; the gauges computed from Postgres
at scrape time (waiting and overdue deletions, models by state, budgets, running jobs, live workers); and
a worker refuses the prefork pool and stops when its metrics port is taken."""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from bench.stack import ROOT
from service import logs
from service.db.base import utcnow
from service.db.tables import DeletionRequest, OutboxMessage
from service.monitoring.liveness import beat, forget, live_by_lane
from service.queue import LANES
from tests.integration.conftest import Deployment, deployment_of_its_own

pytestmark = pytest.mark.integration


def _gauge(text: str, name: str, **labels: str) -> float | None:
    """The value of ``name{labels}`` in a Prometheus exposition, None when absent."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = rf"^{re.escape(name)}{re.escape('{' + wanted + '}') if wanted else ''} (\S+)$"
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else None


def test_readyz_names_the_lanes_no_live_worker_serves(tmp_path: Path) -> None:
    with deployment_of_its_own(tmp_path, worker_liveness_seconds="1") as d:
        rt, http = d.runtime, d.client.http
        r = http.get("/readyz")
        assert r.status_code == 503
        assert r.json()["checks"]["workers"] == f"no live worker for the lanes: {', '.join(LANES)}"

        beat(rt.hot.client, rt.hot.prefix, "cpu@host", ["updates", "io"], interval=5)
        r = http.get("/readyz")
        assert r.status_code == 503 and r.json()["checks"]["workers"].endswith("train, retrain")

        beat(rt.hot.client, rt.hot.prefix, "jobs@host", ["train", "retrain"], interval=5)
        assert live_by_lane(rt.hot.client, rt.hot.prefix) == dict.fromkeys(LANES, 1)
        r = http.get("/readyz")
        assert r.status_code == 200, r.text

        forget(rt.hot.client, rt.hot.prefix, "jobs@host")  # a worker gone: its lanes go with it
        assert http.get("/readyz").status_code == 503
        beat(rt.hot.client, rt.hot.prefix, "jobs@host", ["train", "retrain"], interval=0.1)
        assert rt.hot.client.pttl(f"{rt.hot.prefix}:worker:jobs@host") <= 300  # expires unless renewed


def _overdue(d: Deployment, request_id: int) -> None:
    with d.runtime.uow() as uow:
        uow.session.execute(
            update(DeletionRequest)
            .where(DeletionRequest.id == request_id)
            .values(
                expected_by=utcnow() - timedelta(seconds=90), created_at=utcnow() - timedelta(seconds=150)
            )
        )
        uow.commit()


def test_the_gauges_come_from_the_database_at_scrape_time(deployment: Deployment) -> None:
    d = deployment
    model_id = d.trained_model()
    request_id = int(d.client.delete(model_id, owner_ids=["owner-00000"])["id"])  # queued: no worker runs
    _overdue(d, request_id)
    text = d.client.http.get("/metrics").text
    assert _gauge(text, "lethe_monitoring_up") == 1.0
    assert _gauge(text, "lethe_deletions", state="queued") == 1.0
    assert _gauge(text, "lethe_deletions", state="applying") == 0.0  # every waiting state is present
    assert _gauge(text, "lethe_deletions", state="completed") is None  # final ones are counters' business
    assert _gauge(text, "lethe_deletions_overdue") == 1.0
    oldest = _gauge(text, "lethe_deletion_oldest_waiting_seconds")
    assert oldest is not None and 140 <= oldest <= 200
    assert _gauge(text, "lethe_models", state="ready") == 1.0
    assert _gauge(text, "lethe_models", state="failed") == 0.0
    assert _gauge(text, "lethe_budget_spent", model_id=str(model_id)) is not None
    assert _gauge(text, "lethe_budget_cap", model_id=str(model_id)) is not None
    assert _gauge(text, "lethe_workers_live", lane="updates") == 0.0
    assert "owner-00000" not in text and f'request_id="{request_id}"' not in text

    with d.runtime.uow() as uow:  # the request is canceled: nothing waits any more
        uow.session.execute(
            update(DeletionRequest).where(DeletionRequest.id == request_id).values(state="canceled")
        )
        uow.commit()
    text = d.client.http.get("/metrics").text
    assert _gauge(text, "lethe_deletions", state="queued") == 0.0
    assert _gauge(text, "lethe_deletions_overdue") == 0.0
    assert _gauge(text, "lethe_deletion_oldest_waiting_seconds") == 0.0


def _celery(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``celery -A workers.celery_app worker ARGS`` in embedded settings (an in-memory broker)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LETHE_")}
    argv = [sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker", "--loglevel=INFO", *args]
    return subprocess.run(
        argv, cwd=ROOT, env={**clean, **(env or {})}, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_worker_refuses_the_prefork_pool() -> None:
    done = _celery()
    assert done.returncode != 0
    assert "not the prefork pool" in done.stdout + done.stderr


def test_a_worker_whose_metrics_port_is_taken_stops_saying_so() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _celery("--pool=threads", env={"LETHE_WORKER_METRICS_PORT": str(port)})
    assert done.returncode == 3
    assert f"the metrics port {port} cannot be bound" in done.stdout + done.stderr


def test_the_request_id_is_echoed_and_follows_the_job_it_queues_into_its_log_lines(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    d = deployment
    model_id = d.trained_model()
    generated = d.client.http.get("/healthz").headers["X-Request-ID"]
    assert len(generated) == 32
    r = d.client.http.post(
        f"/v1/models/{model_id}/retrain", json={"reason": "ops test"}, headers={"X-Request-ID": "ops-test-1"}
    )
    assert r.status_code == 202 and r.headers["X-Request-ID"] == "ops-test-1"
    with d.runtime.uow() as uow:
        payloads = [
            p
            for p in uow.session.scalars(
                select(OutboxMessage.payload).where(OutboxMessage.task == "retrain_model")
            )
            if p.get("model_id") == model_id
        ]
    assert payloads and payloads[-1]["x_request_id"] == "ops-test-1"
    logs.install(caplog.handler, "json")  # as the worker's handlers are
    with caplog.at_level(logging.INFO, logger="service.runtime"):
        d.runtime.run_job(
            "retrain_model", payloads[-1]
        )  # a worker's run: the id left out of the job's kwargs
    done = [rec for rec in caplog.records if rec.getMessage().startswith("job retrain_model done")]
    assert done and done[0].__dict__["lethe"] == {
        "x_request_id": "ops-test-1",
        "job": "retrain_model",
        "model_id": model_id,
    }


def test_the_worker_healthcheck_answers_from_this_hosts_liveness_records(deployment: Deployment) -> None:
    rt = deployment.runtime
    env = {**os.environ, **deployment.env}

    def alive(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "workers.alive", *args]
        return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)

    assert alive().returncode == 1
    beat(rt.hot.client, rt.hot.prefix, f"cpu@{socket.gethostname()}", ["updates", "io"], interval=5)
    beat(rt.hot.client, rt.hot.prefix, "train@another-host", ["train"], interval=5)
    assert alive("--lanes", "updates,io").returncode == 0
    missing = alive("--lanes", "updates,train")  # another host's worker does not count here
    assert missing.returncode == 1 and "['train']" in missing.stderr
