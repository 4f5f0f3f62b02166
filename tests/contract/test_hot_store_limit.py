"""A deployment's hot-store limit (LETHE_MAX_HOT_STORE_MB) at registration: a model whose state would take
more of Redis than the limit is refused with 422 ``job_too_large`` naming the estimate, the limit and what
to change; the same model with half-precision vectors fits under it, trains, serves and forgets, its
statistics in Redis in that dtype."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.runtime import Runtime
from service.settings import Settings
from tests.contract.conftest import api_error, forget_owner, settle
from tests.databases import fresh_database_url

ROWS = 1_000  # synthetic: 20 features, 4 classes; the float32 state estimated at 1.3 MiB, float16's at 0.9


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Runtime]]:
    runtime = Runtime(
        Settings(
            mode="embedded",
            var_dir=Path(tmp_path_factory.mktemp("hot-store-limit")),
            database_url=fresh_database_url(),
            demo_model=False,
            max_hot_store_mb=1,
        )
    )
    with TestClient(create_app(runtime=runtime)) as client:
        yield client, runtime


@pytest.fixture(scope="module")
def dataset_id(tight: tuple[TestClient, Runtime]) -> int:
    r = tight[0].post("/v1/datasets/bundled", json={"name": "synthetic", "n": ROWS, "samples_per_owner": 2})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _register(client: TestClient, dataset_id: int, **fields: Any) -> Any:
    return client.post("/v1/models", json={"name": "m", "dataset_id": dataset_id, **fields})


def test_a_state_over_the_hot_store_limit_is_refused_saying_what_to_change(
    tight: tuple[TestClient, Runtime], dataset_id: int
) -> None:
    client, _ = tight
    before = len(client.get("/v1/models").json()["models"])
    message = api_error(_register(client, dataset_id, hyperparameters={"epochs": 1}), 422, "job_too_large")
    assert "MiB of the hot store, LETHE_MAX_HOT_STORE_MB is 1" in message
    assert "fewer rows" in message and "vector_dtype 'float16' or 'bfloat16'" in message
    assert "without per-sample vectors" in message
    assert "LETHE_MAX_JOB_MEMORY_MB" not in message  # only the limit it is over
    assert len(client.get("/v1/models").json()["models"]) == before


def test_a_method_without_per_sample_vectors_fits_under_the_same_limit(
    tight: tuple[TestClient, Runtime], dataset_id: int
) -> None:
    r = _register(tight[0], dataset_id, method="newton_removal")
    assert r.status_code == 202, r.text


@pytest.mark.parametrize(("dtype", "owner"), [("float16", "owner-00003"), ("bfloat16", "owner-00004")])
def test_half_precision_vectors_fit_under_it_and_serve_and_forget(
    tight: tuple[TestClient, Runtime], dataset_id: int, dtype: str, owner: str
) -> None:
    client, runtime = tight
    r = _register(client, dataset_id, hyperparameters={"epochs": 1, "vector_dtype": dtype})
    assert r.status_code == 202, r.text
    model_id = int(r.json()["id"])
    deadline = time.monotonic() + 120
    while (state := client.get(f"/v1/models/{model_id}").json()["status"]["state"]) != "ready":
        assert state != "failed" and time.monotonic() < deadline, state
        time.sleep(0.05)
    settle(runtime)
    assert runtime.hot.stats_meta(model_id)["dtype"] == dtype  # type: ignore[index]
    before = client.post(f"/v1/models/{model_id}/predictions", json={"instances": [[0.0] * 20]})
    assert before.status_code == 200, before.text
    rows = client.get(f"/v1/models/{model_id}").json()["train_size"]
    assert forget_owner(client, owner, model_id)["state"] == "completed"
    assert client.get(f"/v1/models/{model_id}").json()["train_size"] == rows - 2  # the owner's two rows
