"""Transient faults fail nothing: a retrain whose Postgres connections are terminated while it fits runs
again and completes its deletions; a deterministic error's failure reason carries no SQL; with the
artifact disk full the API answers 503 ``storage_full`` and records nothing, and a queued deletion
completes once space is back; a request whose database connection drops answers 503
``backend_unavailable``."""

from __future__ import annotations

import contextlib
import errno
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import exc as sa_exc

from bench.fault_servers import fill
from service.jobs import requeue, training
from service.jobs.drain import apply_deletions
from service.jobs.training import retrain_model, train_model
from service.models import service as models_service
from service.runtime import Runtime
from service.states import ModelState, RequestState
from tests.integration.conftest import Deployment, deployment_of_its_own, key, settings_from, wait_for

pytestmark = pytest.mark.integration

_SQL_WORDS = ("INSERT", "SELECT", "UPDATE", "DELETE FROM", "[SQL", "parameters")


def _retried(kind: str) -> float:
    return REGISTRY.get_sample_value("lethe_trainings_total", {"kind": kind, "outcome": "retried"}) or 0.0


def _db(d: Deployment) -> psycopg.Connection[Any]:
    """A connection of the test's own, outside the deployment's pool."""
    url = d.env["LETHE_DATABASE_URL"].replace("postgresql+psycopg://", "postgresql://")
    return psycopg.connect(url, autocommit=True)


def _model_row(conn: psycopg.Connection[Any], model_id: int) -> tuple[str, str, float]:
    row = conn.execute("SELECT status, phase, progress FROM models WHERE id = %s", (model_id,)).fetchone()
    assert row is not None
    return str(row[0]), str(row[1]), float(row[2] or 0.0)


def _request_states(conn: psycopg.Connection[Any], model_id: int) -> list[str]:
    rows = conn.execute("SELECT state FROM deletion_requests WHERE model_id = %s", (model_id,)).fetchall()
    return [str(r[0]) for r in rows]


def _terminate_others(conn: psycopg.Connection[Any]) -> int:
    """Terminate every backend of the test database but this connection's; how many."""
    rows = conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchall()
    return sum(1 for (done,) in rows if done)


def _retrain_waiting_on(d: Deployment, n: int, epochs: int) -> tuple[int, int]:
    """A trained model, a deletion queued for it and a retrain asked for: (model id, request id)."""
    model_id = d.client.model(d.client.dataset(n=n, samples_per_owner=2), epochs=epochs)
    train_model(d.runtime, model_id)
    d.client.ready(model_id, timeout=300)
    request_id = int(d.client.delete(model_id, owner_ids=["owner-00000"])["id"])
    r = d.client.http.post(f"/v1/models/{model_id}/retrain", json={"reason": "a test's retrain"})
    assert r.status_code in (200, 202), r.text
    return model_id, request_id


@contextlib.contextmanager
def _worker_runtime(d: Deployment) -> Iterator[Runtime]:
    """The runtime of a worker process: a pool of its own, so the job's connections are the ones it
    finds dead (in the API's pool the dispatcher would find them first and renew the pool)."""
    rt = Runtime(settings_from(d.env))
    try:
        yield rt
    finally:
        rt.engine.dispose()


def test_terminated_connections_during_a_retrain_fail_nothing_and_the_retrain_runs_again(
    tmp_path: Path,
) -> None:
    with deployment_of_its_own(tmp_path) as d, _db(d) as conn, _worker_runtime(d) as worker:
        model_id, request_id = _retrain_waiting_on(d, n=2000, epochs=15)
        retried_before = _retried("retrain")
        job = threading.Thread(target=retrain_model, args=(worker, model_id), daemon=True)
        job.start()

        def fitting() -> bool:
            status, phase, progress = _model_row(conn, model_id)
            assert status == ModelState.RETRAINING, (status, phase)  # still fitting when the fault comes
            return phase not in {"waiting", ModelState.RETRAINING} and progress > 0

        wait_for(fitting, 120, 0.02, f"model {model_id} to be fitting its retrain")
        assert _terminate_others(conn) >= 1
        job.join(timeout=120)
        assert not job.is_alive()

        # Nothing failed: the retrain waits to run again, its request still with it.
        assert _retried("retrain") == retried_before + 1
        assert _model_row(conn, model_id)[:2] == (ModelState.RETRAINING, "waiting")
        assert _request_states(conn, model_id) == [RequestState.RETRAINING]
        queued = conn.execute(
            "SELECT count(*) FROM outbox WHERE task = 'retrain_model' AND payload->>'model_id' = %s",
            (str(model_id),),
        ).fetchone()
        assert queued is not None and queued[0] >= 2  # the API's, and the one the fault queued again

        retrain_model(worker, model_id)  # the re-queued job

        done = d.client.done(request_id, timeout=60)
        assert done["state"] == "completed"
        model = d.client.ready(model_id)
        assert model["status"]["error"] is None
        assert RequestState.FAILED not in _request_states(conn, model_id)


def test_a_deterministic_error_fails_the_retrain_with_a_short_cause_and_no_sql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_fit(*_: Any, **__: Any) -> Any:
        unique = psycopg.errors.UniqueViolation(
            'duplicate key value violates unique constraint "samples_pkey"\n'
            "DETAIL:  Key (sample_id)=(u0-s0) already exists."
        )
        raise sa_exc.IntegrityError(
            "INSERT INTO samples (model_id, sample_id) VALUES (%(model_id)s, %(sample_id)s)",
            {"model_id": 1, "sample_id": "u0-s0"},
            unique,
        )

    with deployment_of_its_own(tmp_path) as d:
        model_id, request_id = _retrain_waiting_on(d, n=40, epochs=1)
        monkeypatch.setattr(training, "_fit", broken_fit)
        retrain_model(d.runtime, model_id)

        failed = d.client.deletion(request_id)
        model = d.client.http.get(f"/v1/models/{model_id}").json()
        events = d.client.http.get(
            "/v1/audit/events", params={"model_id": model_id, "event_type": "retrain.failed"}
        ).json()["events"]

    assert failed["state"] == "failed"
    reason = failed["failure_reason"]
    assert reason.startswith("retraining failed: UniqueViolation: duplicate key value violates"), reason
    assert model["status"]["state"] == "ready"  # the old version keeps serving
    assert len(events) == 1
    for text in (reason, str(model["status"]["error"]), str(events[0]["payload"])):
        assert not any(word in text for word in _SQL_WORDS), text
        assert "u0-s0" not in text


def test_a_first_training_that_loses_the_database_is_queued_again_and_then_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fit = training._fit
    calls = {"n": 0}

    def fit_losing_the_database_once(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            lost = psycopg.OperationalError(
                "consuming input failed: server closed the connection unexpectedly"
            )
            raise sa_exc.OperationalError("UPDATE models SET progress=%(p)s", {"p": 0.5}, lost)
        return fit(*args, **kwargs)

    with deployment_of_its_own(tmp_path) as d, _db(d) as conn:
        model_id = d.client.model(d.client.dataset(n=40, samples_per_owner=2), epochs=1)
        monkeypatch.setattr(training, "_fit", fit_losing_the_database_once)
        monkeypatch.setattr(requeue, "RETRY_DELAYS", (0.0,))
        retried_before = _retried("initial")

        train_model(d.runtime, model_id)

        assert _retried("initial") == retried_before + 1
        assert _model_row(conn, model_id)[:2] == (ModelState.QUEUED, ModelState.QUEUED)
        train_model(d.runtime, model_id)  # the job queued again
        assert d.client.ready(model_id)["status"]["error"] is None
        assert calls["n"] == 2


# -- a full artifact disk --------------------------------------------------------------------------


@contextlib.contextmanager
def _small_disk(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        check=False,
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(
            "a size-limited artifact directory needs `mount -t tmpfs` (root, or CAP_SYS_ADMIN): "
            f"{mounted.stderr.strip() or mounted.returncode}; a directory cannot be filled portably otherwise"
        )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _dataset_count(d: Deployment) -> int:
    return len(d.client.http.get("/v1/datasets", params={"limit": 500}).json()["datasets"])


def test_a_full_artifact_disk_refuses_new_work_with_503_and_queued_deletions_resume(tmp_path: Path) -> None:
    with (
        _small_disk(tmp_path / "artifacts", "16m") as artifacts,
        deployment_of_its_own(tmp_path, artifact_dir=str(artifacts)) as d,
    ):
        model_id = d.trained_model()
        datasets_before = _dataset_count(d)
        filler = fill(artifacts)

        csv = b"sample_id,owner_id,a,b,label\n" + b"".join(
            f"s{i},o{i},{i * 0.5},{i * 0.25},{i % 2}\n".encode() for i in range(2000)
        )
        upload = d.client.http.post("/v1/datasets", files={"file": ("t.csv", csv, "text/csv")}, headers=key())
        bundled = d.client.http.post("/v1/datasets/bundled", json={"name": "synthetic", "n": 2000, "seed": 9})
        for r in (upload, bundled):
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "storage_full"
            assert "out of space (ENOSPC)" in r.json()["error"]["message"]
            assert int(r.headers["Retry-After"]) > 0
        assert _dataset_count(d) == datasets_before  # nothing recorded

        submitted = d.client.http.post(
            f"/v1/models/{model_id}/deletions", json={"owner_ids": ["owner-00000"]}, headers=key()
        )
        assert submitted.status_code in (202, 503), submitted.text
        if submitted.status_code == 202:
            request_id = int(submitted.json()["id"])
            for _ in range(4):  # more than the update's three strikes: a full disk never counts
                with pytest.raises(OSError) as raised:
                    apply_deletions(d.runtime, model_id)
                assert raised.value.errno == errno.ENOSPC
                assert d.client.deletion(request_id)["state"] == "queued"

        filler.unlink()  # space is back
        if submitted.status_code == 503:
            request_id = int(d.client.delete(model_id, owner_ids=["owner-00000"])["id"])
        apply_deletions(d.runtime, model_id)
        assert d.client.done(request_id, timeout=60)["state"] == "completed"
        assert d.client.http.get(f"/v1/models/{model_id}").json()["status"]["state"] == "ready"
        r = d.client.http.post("/v1/datasets/bundled", json={"name": "synthetic", "n": 200, "seed": 9})
        assert r.status_code == 201, r.text


def test_a_dropped_database_connection_answers_503_backend_unavailable_without_sql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request whose connection drops is answered 503 with Retry-After (its transaction rolled back; the
    client sends it again), never an unhandled 500, and the answer names no SQL, parameter or server."""
    with deployment_of_its_own(tmp_path) as d:
        model_id = d.trained_model()
        lost = sa_exc.OperationalError(
            "SELECT secret_column FROM models WHERE id = %(id)s",
            {"id": 424242},
            psycopg.OperationalError('connection to server at "10.9.8.7", port 5432 failed: server closed'),
        )

        def drop(*_: Any, **__: Any) -> None:
            raise lost

        monkeypatch.setattr(models_service, "get_model", drop)
        r = d.client.http.get(f"/v1/models/{model_id}")
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "backend_unavailable"
        assert int(r.headers["Retry-After"]) >= 1
        for leaked in (*_SQL_WORDS, "secret_column", "424242", "10.9.8.7"):
            assert leaked not in r.text, leaked
        monkeypatch.undo()
        assert d.client.http.get(f"/v1/models/{model_id}").status_code == 200
