"""Registration refuses, with a 422 saying what to fix, hyperparameters it used to accept and then either
ignore (a ``family`` other than the model's) or fail on in training (magnitudes torch cannot hold)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.contract.conftest import api_error
from unlearning.methods.hessian_free import (
    MAX_BATCH_SIZE,
    MAX_CLIP_NORM,
    MAX_EPOCHS,
    MAX_L2,
    MAX_LR,
    MAX_RHO_ITERATIONS,
)
from unlearning.methods.registry import get_method
from unlearning.models.nets import MAX_HIDDEN_LAYERS, MAX_HIDDEN_WIDTH


@pytest.fixture(scope="module")
def dataset_id(client: TestClient) -> int:
    r = client.post("/v1/datasets/bundled", json={"name": "synthetic", "n": 40, "samples_per_owner": 2})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _register(client: TestClient, dataset_id: int, **fields: Any) -> Any:
    return client.post("/v1/models", json={"name": "x", "dataset_id": dataset_id, **fields})


def _wait_ready(client: TestClient, model_id: int) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while (model := client.get(f"/v1/models/{model_id}").json())["status"]["state"] != "ready":
        assert model["status"]["state"] != "failed", model
        assert time.monotonic() < deadline, "the model did not train"
        time.sleep(0.05)
    return dict(model)


@pytest.mark.parametrize(
    ("fields", "given"),
    [
        ({"hyperparameters": {"family": "mlp"}}, "'mlp'"),
        ({"hyperparameters": {"family": "bogus"}}, "'bogus'"),
        ({"hyperparameters": {"family": 3}}, "3"),
        ({"family": "mlp", "hyperparameters": {"family": "logistic_regression"}}, "'logistic_regression'"),
        ({"method": "newton_removal", "hyperparameters": {"family": "mlp"}}, "'mlp'"),
    ],
)
def test_a_family_in_the_hyperparameters_other_than_the_models_is_refused(
    client: TestClient, dataset_id: int, fields: dict[str, Any], given: str
) -> None:
    before = len(client.get("/v1/models").json()["models"])
    message = api_error(_register(client, dataset_id, **fields), 422, "invalid_config")
    assert f"hyperparameters.family {given}" in message
    assert "top-level `family` field" in message and "mlp" in message
    assert len(client.get("/v1/models").json()["models"]) == before


def test_the_stored_hyperparameters_family_included_can_be_sent_back(
    client: TestClient, dataset_id: int
) -> None:
    first = _register(client, dataset_id, family="mlp", hyperparameters={"hidden": [4], "epochs": 1})
    assert first.status_code == 202, first.text
    stored = _wait_ready(client, first.json()["id"])["hyperparameters"]
    assert stored["family"] == "mlp"
    again = _register(client, dataset_id, family="mlp", hyperparameters=stored)
    assert again.status_code == 202, again.text
    model = _wait_ready(client, again.json()["id"])
    assert model["family"] == "mlp" and model["hyperparameters"]["hidden"] == [4]


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"hyperparameters": {"lr": 1e300}}, f"lr must be at most {MAX_LR:g}"),
        ({"hyperparameters": {"l2": 1e300}}, "l2 must be at most"),
        ({"hyperparameters": {"clip_norm": 1e300}}, "clip_norm must be at most"),
        ({"hyperparameters": {"epochs": 10**12}}, f"epochs must be at most {MAX_EPOCHS:,}"),
        ({"hyperparameters": {"batch_size": 10**12}}, f"batch_size must be at most {MAX_BATCH_SIZE:,}"),
        ({"hyperparameters": {"rho_iterations": 10**9}}, "rho_iterations must be at most"),
        (
            {"family": "mlp", "hyperparameters": {"hidden": [10**12]}},
            f"integers from 1 to {MAX_HIDDEN_WIDTH}",
        ),
        ({"family": "mlp", "hyperparameters": {"hidden": [8] * 17}}, f"at most {MAX_HIDDEN_LAYERS} layers"),
        ({"family": "mlp", "hyperparameters": {"hidden": [65_536, 65_536]}}, "parameters, above the limit"),
        ({"method": "mini_unlearning", "hyperparameters": {"lr": 1e300}}, "lr must be at most"),
        ({"method": "mini_unlearning", "family": "mlp", "hyperparameters": {"hidden": [10**12]}}, "hidden"),
    ],
)
def test_magnitudes_training_cannot_handle_are_refused_at_registration(
    client: TestClient, dataset_id: int, fields: dict[str, Any], needle: str
) -> None:
    message = api_error(_register(client, dataset_id, **fields), 422, "invalid_config")
    assert needle in message


@pytest.mark.parametrize("name", ["hessian_free", "mini_unlearning"])
def test_the_bounds_themselves_are_accepted(name: str) -> None:
    get_method(name).check_config(
        {
            "lr": MAX_LR,
            "l2": MAX_L2,
            "clip_norm": MAX_CLIP_NORM,
            "epochs": MAX_EPOCHS,
            "batch_size": MAX_BATCH_SIZE,
            "family": "mlp",
            "hidden": [MAX_HIDDEN_WIDTH] + [1] * (MAX_HIDDEN_LAYERS - 1),
        }
    )
    get_method("hessian_free").check_config({"rho_iterations": MAX_RHO_ITERATIONS})
