"""Labels given as names: the dataset lists them and predictions name the class (embedded app)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient

from service.app import create_app
from tests.contract.conftest import embedded_runtime_in


def _csv(n: int) -> bytes:
    """Two well-separated blobs, labelled by name; the names sort the other way round from the blobs
    ("zebra" is the blob at +2, yet class 1), so a mix-up of names and indices shows."""
    rng = np.random.default_rng(7)
    lines = ["sample_id,owner_id,x,y,animal"]
    for i in range(n):
        zebra = i % 2 == 0
        x, y = rng.normal(2.0 if zebra else -2.0, 0.3, size=2)
        lines.append(f"s{i},o{i // 2},{x:.4f},{y:.4f},{'zebra' if zebra else 'aardvark'}")
    return ("\n".join(lines) + "\n").encode()


def test_named_labels_are_listed_and_predicted_by_name(tmp_path: Path) -> None:
    with TestClient(create_app(runtime=embedded_runtime_in(tmp_path))) as client:
        upload = client.post(
            "/v1/datasets",
            files={"file": ("zoo.csv", _csv(80), "text/csv")},
            params={"label_column": "animal"},
        )
        assert upload.status_code == 201, upload.text
        dataset = upload.json()
        assert dataset["class_names"] == ["aardvark", "zebra"] and dataset["num_classes"] == 2
        assert client.get(f"/v1/datasets/{dataset['id']}").json()["class_names"] == ["aardvark", "zebra"]

        model = client.post("/v1/models", json={"name": "zoo", "dataset_id": dataset["id"]}).json()
        deadline = time.monotonic() + 60
        while client.get(f"/v1/models/{model['id']}").json()["status"]["state"] != "ready":
            assert time.monotonic() < deadline, "the model did not train"
            time.sleep(0.05)
        answer = client.post(
            f"/v1/models/{model['id']}/predictions", json={"instances": [[2.0, 2.0], [-2.0, -2.0]]}
        )
        assert answer.status_code == 200, answer.text
        assert [(p["label"], p["class_name"]) for p in answer.json()["predictions"]] == [
            (1, "zebra"),
            (0, "aardvark"),
        ]


def test_integer_labels_have_no_names_and_bundled_sets_keep_theirs(tmp_path: Path) -> None:
    with TestClient(create_app(runtime=embedded_runtime_in(tmp_path))) as client:
        numbers = client.post(
            "/v1/datasets",
            files={
                "file": ("n.csv", b"sample_id,owner_id,x,label\na,u,1,0\nb,u,2,1\nc,v,3,1.0\n", "text/csv")
            },
        )
        assert numbers.status_code == 201 and numbers.json()["class_names"] is None
        iris = client.post("/v1/datasets/bundled", json={"name": "iris"})
        assert iris.status_code == 201 and iris.json()["class_names"] == ["setosa", "versicolor", "virginica"]
        half = client.post(
            "/v1/datasets",
            files={"file": ("h.csv", b"sample_id,owner_id,x,label\na,u,1,0\nb,u,2,0.5\n", "text/csv")},
        )
        assert half.status_code == 422 and "not a whole number" in half.json()["error"]["message"]
