"""The embedded app (fakeredis, in-process worker) for the contract tests, each on a fresh database of
the machine's Postgres (tests.databases) rather than an embedded server of its own, which would cost a
server start and a migration per app."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import update

from service.app import create_app
from service.db.tables import Model
from service.queue import InProcessQueue
from service.runtime import Runtime
from service.settings import Settings
from tests.databases import fresh_database_url


def embedded_runtime_in(var: Path) -> Runtime:
    return Runtime(
        Settings(
            mode="embedded",
            var_dir=var,
            database_url=fresh_database_url(),
            demo_model=False,
            max_upload_bytes=256 * 1024,
        )
    )


def train_small_model(client: TestClient) -> None:
    """Model 1 (logistic regression, 1 epoch) on dataset 1 (60 synthetic rows, two per owner), trained."""
    dataset = client.post("/v1/datasets/bundled", json={"name": "synthetic", "n": 60, "samples_per_owner": 2})
    assert dataset.status_code == 201, dataset.text
    model = client.post(
        "/v1/models", json={"name": "m", "dataset_id": dataset.json()["id"], "hyperparameters": {"epochs": 1}}
    )
    assert model.status_code == 202, model.text
    deadline = time.monotonic() + 60
    while client.get(f"/v1/models/{model.json()['id']}").json()["status"]["state"] != "ready":
        assert time.monotonic() < deadline, "the embedded model did not train"
        time.sleep(0.05)


def forget_owner(client: TestClient, owner: str, model_id: int = 1) -> dict[str, Any]:
    """Delete ``owner`` from the model and wait for the request to complete; returns the request."""
    return forget(client, model_id, owner_ids=[owner])


def forget(client: TestClient, model_id: int, **subjects: Any) -> dict[str, Any]:
    """Submit a deletion of ``subjects`` and wait for the request to complete; returns the request."""
    r = client.post(
        f"/v1/models/{model_id}/deletions", json=subjects, headers={"Idempotency-Key": str(uuid.uuid4())}
    )
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 30
    while (request := client.get(f"/v1/deletions/{r.json()['id']}").json())["state"] != "completed":
        assert time.monotonic() < deadline, request
        time.sleep(0.02)
    return dict(request)


def hold_model(runtime: Runtime, model_id: int = 1) -> None:
    """Put the model in the state of a running retrain: deletions submitted now stay queued."""
    with runtime.uow() as uow:
        uow.session.execute(
            update(Model).where(Model.id == model_id).values(status="retraining", phase="running")
        )
        uow.commit()


def settle(runtime: Runtime) -> None:
    """Wait until the app's in-process worker has run every job sent so far. A training queues an update
    job as it finishes (for requests that arrived meanwhile), which may still be running when the model
    reads ready; a test that patches the update code, or submits a deletion, must not race it."""
    if isinstance(runtime.queue, InProcessQueue):
        runtime.queue.join()


def api_error(response: Any, status: int, code: str) -> str:
    """Assert the answer is the error ``status`` / ``code``; returns its message."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    return str(error["message"])


@pytest.fixture(scope="session")
def embedded_runtime(tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    return embedded_runtime_in(tmp_path_factory.mktemp("lethe-embedded"))


@pytest.fixture(scope="session")
def embedded_app(embedded_runtime: Runtime) -> FastAPI:
    return create_app(runtime=embedded_runtime)


@pytest.fixture(scope="session")
def embedded(embedded_app: FastAPI, embedded_runtime: Runtime) -> Iterator[TestClient]:
    """A client with one trained model (id 1) on a small synthetic dataset (id 1)."""
    with TestClient(embedded_app) as client:
        train_small_model(client)
        settle(embedded_runtime)
        yield client


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """An embedded app of the test module's own, without a model (the session's app carries whatever the
    schemathesis run left)."""
    with TestClient(create_app(runtime=embedded_runtime_in(tmp_path_factory.mktemp("app")))) as http:
        yield http


@pytest.fixture()
def fresh(tmp_path: Path) -> Iterator[tuple[TestClient, Runtime]]:
    """An embedded app of its own, with one trained model (id 1): the session's app carries whatever the
    schemathesis run left."""
    runtime = embedded_runtime_in(tmp_path)
    with TestClient(create_app(runtime=runtime)) as client:
        train_small_model(client)
        settle(runtime)
        yield client, runtime
