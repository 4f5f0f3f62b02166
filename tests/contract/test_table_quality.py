"""Table models through the API (embedded app): feature scaling on raw columns, the quality report, the
low-quality flag and metric, ``min_quality``, and certified mode's refusal of data-fitted scaling."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from tests.contract.conftest import api_error, embedded_runtime_in

SGD = {"epochs": 20, "l2": 0.001, "lr": 0.05, "batch_size": 32}


def _rows(n: int, signal: bool, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 3))
    labels = (z @ np.array([1.0, -1.0, 0.5]) > 0).astype(int) if signal else rng.integers(0, 2, n)
    return z * np.array([1e-3, 1.0, 1e4]) + np.array([5.0, -100.0, 1e5]), labels


def _csv(features: np.ndarray, labels: np.ndarray) -> bytes:
    lines = ["sample_id,owner_id,a,b,c,label"]
    for i, (row, label) in enumerate(zip(features, labels)):
        lines.append(f"s{i},o{i // 2},{row[0]:.17g},{row[1]:.17g},{row[2]:.17g},{label}")
    return ("\n".join(lines) + "\n").encode()


def _upload(client: TestClient, features: np.ndarray, labels: np.ndarray) -> int:
    r = client.post("/v1/datasets", files={"file": ("t.csv", _csv(features, labels), "text/csv")})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _settled(client: TestClient, model_id: int) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while (model := client.get(f"/v1/models/{model_id}").json())["status"]["state"] not in ("ready", "failed"):
        assert time.monotonic() < deadline, model
        time.sleep(0.05)
    return dict(model)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    var: Path = tmp_path_factory.mktemp("quality")
    with TestClient(create_app(runtime=embedded_runtime_in(var))) as c:
        yield c


def test_raw_columns_train_a_useful_model_and_the_report_says_so(client: TestClient) -> None:
    features, labels = _rows(240, signal=True)
    dataset = _upload(client, features, labels)
    r = client.post("/v1/models", json={"name": "raw", "dataset_id": dataset, "hyperparameters": SGD})
    assert r.status_code == 202, r.text
    model = _settled(client, r.json()["id"])
    assert model["status"]["state"] == "ready" and model["status"]["low_quality"] is False
    quality = model["quality"]
    assert quality["verdict"] in ("ok", "below_baseline") and quality["flagged"] is False
    assert quality["accuracy"] > quality["majority_rate"] + 0.2
    assert quality["baseline_accuracy"] > 0.85 and quality["holdout_rows"] > 40
    assert model["hyperparameters"]["feature_scaling"] == "auto"
    certificate = client.get(f"/v1/models/{model['id']}/versions").json()["versions"][0]["certificate"]
    assert certificate["inputs"]["feature_scaling"] == "standardize"
    assert certificate["measured"]["quality_accuracy"] == quality["accuracy"]

    # Predictions take raw rows (the scale of the upload) and rows by id alike, with probabilities.
    by_rows = client.post(f"/v1/models/{model['id']}/predictions", json={"instances": features[:40].tolist()})
    by_ids = client.post(
        f"/v1/models/{model['id']}/predictions", json={"sample_ids": [f"s{i}" for i in range(40)]}
    )
    assert by_rows.status_code == 200 and by_ids.status_code == 200, (by_rows.text, by_ids.text)
    rows, ids = by_rows.json()["predictions"], by_ids.json()["predictions"]
    assert [p["label"] for p in rows] == [p["label"] for p in ids]
    assert all(len(p["probabilities"]) == 2 for p in rows)
    assert np.mean([p["label"] for p in rows] == labels[:40]) > 0.85
    wrong = client.post(f"/v1/models/{model['id']}/predictions", json={"instances": [[1.0, 2.0]]})
    assert "3 features" in api_error(wrong, 422, "dimension_mismatch")


def test_a_model_no_better_than_the_majority_is_flagged_or_failed_on_request(client: TestClient) -> None:
    features, labels = _rows(300, signal=False, seed=3)
    dataset = _upload(client, features, labels)
    flagged = client.post("/v1/models", json={"name": "noise", "dataset_id": dataset, "hyperparameters": SGD})
    model = _settled(client, flagged.json()["id"])
    assert model["status"]["state"] == "ready"
    assert model["status"]["low_quality"] is True and model["quality"]["flagged"] is True
    assert "majority class" in model["quality"]["note"]
    metrics = client.get("/metrics").text
    assert 'lethe_trainings_low_quality_total{kind="initial"} 1.0' in metrics

    strict = client.post(
        "/v1/models",
        json={"name": "strict", "dataset_id": dataset, "hyperparameters": {**SGD, "min_quality": "above_majority"}},
    )
    failed = _settled(client, strict.json()["id"])
    assert failed["status"]["state"] == "failed"
    assert "min_quality" in failed["status"]["error"]


def test_certified_models_need_declared_statistics_to_scale(client: TestClient) -> None:
    features, labels = _rows(120, signal=True)
    dataset = _upload(client, features, labels)
    body = {"name": "c", "dataset_id": dataset, "method": "newton_removal", "release_mode": "certified"}
    refused = client.post("/v1/models", json={**body, "hyperparameters": {"feature_scaling": "standardize"}})
    assert "feature_statistics" in api_error(refused, 422, "invalid_config")
    narrow = {"feature_statistics": {"mean": [0.0, 0.0], "std": [1.0, 1.0]}}
    refused = client.post("/v1/models", json={**body, "hyperparameters": narrow})
    assert "3 feature columns" in api_error(refused, 422, "dimension_mismatch")
    declared = {"feature_statistics": {"mean": [5.0, -100.0, 1e5], "std": [1e-3, 1.0, 1e4]}}
    accepted = client.post("/v1/models", json={**body, "hyperparameters": declared})
    assert accepted.status_code == 202, accepted.text
    model = _settled(client, accepted.json()["id"])
    assert model["status"]["state"] == "ready", model["status"]
    certificate = client.get(f"/v1/models/{model['id']}/versions").json()["versions"][0]["certificate"]
    assert certificate["inputs"]["feature_statistics"] == "declared"
    assert certificate["guarantee"] == "certified"
