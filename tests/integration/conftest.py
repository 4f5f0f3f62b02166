"""Fixtures for the integration tests: the REAL Postgres, Redis and a Celery worker process.

- Postgres (127.0.0.1:5432, user postgres, trust auth): a fresh database per test session, built with
  ``alembic upgrade head``, dropped at the end;
- Redis (127.0.0.1:6379): an empty database number claimed for the session, flushed at the end;
- a Celery worker subprocess (``celery -A workers.celery_app worker``) with the session's settings;
- the API in-process (FastAPI TestClient) in production mode with the same settings.

When Postgres or Redis is unreachable the tests are skipped, unless the environment variable CI is set,
in which case they fail: CI must never pass by skipping them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from bench import stack
from bench.stack import ServersUnavailable, new_token, postgres_database, redis_database
from service.app import create_app
from service.db.engine import make_engine
from service.db.migrate import upgrade
from service.jobs.training import train_model
from service.runtime import Runtime
from service.settings import Settings


def _unavailable(exc: ServersUnavailable) -> None:
    message = f"{exc}; the integration tests need the real Postgres and Redis"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def token() -> str:
    return new_token()


@pytest.fixture(scope="session")
def pg_url(token: str) -> Iterator[str]:
    try:
        with postgres_database(f"lethe_test_{token}") as url:
            yield url
    except ServersUnavailable as exc:
        _unavailable(exc)


@pytest.fixture(scope="session")
def redis_url(token: str) -> Iterator[str]:
    try:
        with redis_database(token) as url:
            yield url
    except ServersUnavailable as exc:
        _unavailable(exc)


CALLBACK_SIGNING_KEY = "test-callback-signing-key-0123456789"


@pytest.fixture(scope="session")
def service_env(
    pg_url: str, redis_url: str, token: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """The settings of this session, as the LETHE_ environment variables the worker process reads."""
    return stack.service_env(
        pg_url,
        redis_url,
        tmp_path_factory.mktemp("lethe-var"),
        token,
        demo_model="false",
        auto_migrate="false",
        dispatcher_interval_seconds="0.2",
        reconcile_after_seconds="1",
        callback_backoff_seconds="0.2",
        callback_timeout_seconds="2",
        callback_allowed_networks="127.0.0.0/8",  # the tests' callback endpoints listen on loopback
        callback_signing_key=CALLBACK_SIGNING_KEY,
        max_upload_bytes=str(4 * 1024 * 1024),
        torch_threads="1",
    )


def settings_from(env: dict[str, str]) -> Settings:
    fields = {k.removeprefix("LETHE_").lower(): v for k, v in env.items() if k.startswith("LETHE_")}
    fields.pop("device", None)  # read by the core library, not a service setting
    return Settings(**fields)


@pytest.fixture(scope="session")
def settings(service_env: dict[str, str]) -> Settings:
    return settings_from(service_env)


@pytest.fixture(scope="session")
def migrated(settings: Settings) -> str:
    """The session database, built the way production builds it: ``alembic upgrade head``."""
    engine = make_engine(settings.effective_database_url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    return settings.effective_database_url


@pytest.fixture(scope="session")
def worker(
    service_env: dict[str, str], migrated: str, token: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[subprocess.Popen[bytes]]:
    """A real Celery worker process with the session's settings."""
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    with stack.celery_worker(service_env, log, name=f"lethe-test-{token}") as proc:
        yield proc
    worker_log = log.read_text()
    if "Traceback" in worker_log:
        sys.stderr.write(f"\n--- worker log (has tracebacks) ---\n{worker_log[-6000:]}\n")


@pytest.fixture(scope="session")
def runtime(settings: Settings, migrated: str) -> Iterator[Runtime]:
    rt = Runtime(settings)
    yield rt


@pytest.fixture(scope="session")
def api(runtime: Runtime, worker: subprocess.Popen[bytes]) -> Iterator[TestClient]:
    """The API in production mode (Celery queue), sharing the session's Postgres, Redis and artifacts."""
    with TestClient(create_app(runtime=runtime)) as client:
        yield client


# -- helpers -------------------------------------------------------------------------------------


def wait_for(
    predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.05, what: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


class Client:
    """Small helpers over the TestClient for the flows the tests repeat."""

    def __init__(self, http: TestClient) -> None:
        self.http = http

    def dataset(self, n: int = 300, samples_per_owner: int = 3, seed: int = 0) -> int:
        r = self.http.post(
            "/v1/datasets/bundled",
            json={"name": "synthetic", "n": n, "seed": seed, "samples_per_owner": samples_per_owner},
        )
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def model(
        self,
        dataset_id: int,
        *,
        epochs: int = 2,
        policy: dict[str, Any] | None = None,
        release_mode: str = "audited",
        **extra: Any,
    ) -> int:
        body = {
            "name": "t",
            "dataset_id": dataset_id,
            "hyperparameters": {"epochs": epochs},
            "release_mode": release_mode,
            **extra,
        }
        if policy is not None:
            body["budget_policy"] = policy
        r = self.http.post("/v1/models", json=body)
        assert r.status_code == 202, r.text
        return int(r.json()["id"])

    def ready(self, model_id: int, timeout: float = 120) -> dict[str, Any]:
        def state() -> dict[str, Any] | None:
            m = self.http.get(f"/v1/models/{model_id}").json()
            assert m["status"]["state"] != "failed", m["status"]["error"]
            return m if m["status"]["state"] == "ready" else None

        return wait_for(state, timeout, 0.1, f"model {model_id} to be ready")

    def trained(self, **kw: Any) -> int:
        model_id = self.model(
            self.dataset(**{k: kw.pop(k) for k in ("n", "samples_per_owner", "seed") if k in kw}), **kw
        )
        self.ready(model_id)
        return model_id

    def delete(self, model_id: int, **subjects: Any) -> dict[str, Any]:
        r = self.http.post(f"/v1/models/{model_id}/deletions", json=subjects, headers=key())
        assert r.status_code == 202, r.text
        return r.json()

    def deletion(self, request_id: int) -> dict[str, Any]:
        return self.http.get(f"/v1/deletions/{request_id}").json()

    def done(
        self, request_id: int, timeout: float = 60, states: tuple[str, ...] = ("completed",)
    ) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            d = self.deletion(request_id)
            assert d["state"] not in {"failed", "canceled"} - set(states), d
            return d if d["state"] in states else None

        return wait_for(check, timeout, 0.05, f"request {request_id} to reach {states}")


@pytest.fixture()
def client(api: TestClient) -> Client:
    return Client(api)


@dataclass
class Deployment:
    """A deployment of its own: database, Redis database, queues and artifact directory, an in-process API
    (with its dispatcher and reconciler) and no worker; a test starts the workers it needs."""

    env: dict[str, str]
    runtime: Runtime
    client: Client
    var: Path

    def trained_model(self) -> int:
        """A model on a new 40-row dataset (two samples per owner), trained by this process (no worker
        runs here) and ready; its id."""
        model_id = self.client.model(self.client.dataset(n=40, samples_per_owner=2), epochs=1)
        train_model(self.runtime, model_id)
        self.client.ready(model_id)
        return model_id


@contextmanager
def deployment_of_its_own(tmp_path: Path, **overrides: str) -> Iterator[Deployment]:
    """A :class:`Deployment` with these settings changed (``LETHE_`` names without the prefix, lower
    case; an empty value removes the variable)."""
    token = new_token()
    try:
        with postgres_database(f"lethe_isolated_{token}") as pg, redis_database(token) as redis_url:
            env = stack.service_env(
                pg,
                redis_url,
                tmp_path / "var",
                token,
                auto_migrate="false",
                dispatcher_interval_seconds="0.2",
                reconcile_after_seconds="1",
                torch_threads="1",
                **overrides,
            )
            env = {k: v for k, v in env.items() if v}
            engine = make_engine(pg)
            try:
                upgrade(engine)
            finally:
                engine.dispose()
            runtime = Runtime(settings_from(env))
            with TestClient(create_app(runtime=runtime)) as http:
                yield Deployment(env, runtime, Client(http), tmp_path)
    except ServersUnavailable as exc:
        _unavailable(exc)


@pytest.fixture()
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    with deployment_of_its_own(tmp_path) as d:
        yield d
