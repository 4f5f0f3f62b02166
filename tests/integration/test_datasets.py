"""Uploads (CSV, NPZ, Parquet) and bundled datasets; every bad input is a clear 4xx and stores nothing."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import Client

pytestmark = pytest.mark.integration

HEADER = "sample_id,owner_id,a,b,label\n"


def _upload(client: Client, name: str, body: bytes, content_type: str = "text/csv", **params: str) -> object:
    return client.http.post("/v1/datasets", files={"file": (name, body, content_type)}, params=params)


def _count(client: Client) -> int:
    return len(client.http.get("/v1/datasets", params={"limit": 500}).json()["datasets"])


def test_csv_npz_and_parquet_uploads(client: Client) -> None:
    csv = (HEADER + "s1,u1,0.5,1.0,0\ns2,u1,0.1,0.2,1\ns3,u2,0.3,0.4,1\n").encode()
    r = _upload(client, "people.csv", csv)
    assert r.status_code == 201, r.text
    assert (r.json()["num_rows"], r.json()["num_classes"], r.json()["feature_shape"]) == (3, 2, [2])
    assert r.json()["name"] == "people"

    buf = io.BytesIO()
    np.savez(
        buf,
        features=np.ones((4, 2, 2), np.float32),
        labels=np.array([0, 1, 0, 1]),
        sample_ids=np.array(["a", "b", "c", "d"]),
        owner_ids=np.array(["x", "x", "y", "y"]),
    )
    r = _upload(client, "arrays.npz", buf.getvalue(), "application/octet-stream")
    assert r.status_code == 201, r.text and r.json()["feature_shape"] == [2, 2]

    table = pa.table(
        {"sample_id": ["p1", "p2"], "owner_id": ["o", "o"], "f": [1.0, 2.0], "label": ["cat", "dog"]}
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    r = _upload(client, "t.parquet", buf.getvalue(), "application/vnd.apache.parquet")
    assert r.status_code == 201, r.text and r.json()["num_classes"] == 2

    # The raw file as the body (no multipart), with the column names as parameters.
    raw = b"id,who,x,y\nr1,w,1,0\nr2,w,2,1\n"
    r = client.http.post(
        "/v1/datasets",
        content=raw,
        headers={"Content-Type": "text/csv"},
        params={"id_column": "id", "owner_column": "who", "label_column": "y", "name": "raw"},
    )
    assert r.status_code == 201, r.text and r.json()["name"] == "raw"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("sample_id,a,b,label\ns1,1,2,0\n", "owner_id"),  # missing column
        (HEADER + "s1,u,1,2,0\ns1,u,3,4,1\n", "s1"),  # duplicate id
        (HEADER + "s1,u,nan,2,0\ns2,u,1,2,1\n", "NaN"),  # NaN
        (HEADER + "s1,u,inf,2,0\ns2,u,1,2,1\n", "infinite"),  # infinity
        (HEADER + "s1,u,abc,2,0\ns2,u,1,2,1\n", "abc"),  # wrong type
        ("sample_id,owner_id,a,b,label\n", "no data rows"),  # empty
        (HEADER + "s1,u,1,2\n", "fields"),  # ragged row
    ],
)
def test_bad_csv_is_422_with_a_message_that_says_what_to_fix(client: Client, body: str, needle: str) -> None:
    before = _count(client)
    r = _upload(client, "bad.csv", body.encode())
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_dataset" and needle in error["message"], error
    assert "/tmp" not in error["message"]  # the message names the user's file, not ours
    assert _count(client) == before


def test_npz_object_arrays_are_refused_never_unpickled(client: Client) -> None:
    buf = io.BytesIO()
    np.savez(
        buf, features=np.ones((2, 2)), labels=np.array([0, 1]), sample_ids=np.array(["a", None], dtype=object)
    )
    r = _upload(client, "evil.npz", buf.getvalue(), "application/octet-stream")
    assert r.status_code == 422 and "pickle" in r.json()["error"]["message"]


def test_oversized_upload_is_413(client: Client) -> None:
    before = _count(client)
    big = HEADER.encode() + b"s,u,1,2,0\n" * (500 * 1024)  # ~5 MB, limit is 4 MiB in this session
    r = _upload(client, "big.csv", big)
    assert r.status_code == 413 and "LETHE_MAX_UPLOAD_BYTES" in r.json()["error"]["message"]
    r = client.http.post("/v1/datasets", content=big, headers={"Content-Type": "text/csv"})
    assert r.status_code == 413
    assert _count(client) == before


def test_unsupported_media_and_parameters(client: Client) -> None:
    r = _upload(client, "notes.txt", b"hello", "text/plain")
    assert r.status_code == 415 and ".csv" in r.json()["error"]["message"]
    r = client.http.post("/v1/datasets", content=b"{}", headers={"Content-Type": "application/json"})
    assert r.status_code == 415
    r = _upload(client, "ok.csv", (HEADER + "s1,u,1,2,0\ns2,u,1,2,1\n").encode(), feature_shape="3")
    assert r.status_code == 422 and "feature_shape" in r.json()["error"]["message"]
    r = client.http.post("/v1/datasets", files={"other": ("x.csv", b"a", "text/csv")})
    assert r.status_code == 400 and "file" in r.json()["error"]["message"]


def test_bundled_datasets(client: Client) -> None:
    names = client.http.get("/v1/datasets/bundled").json()["names"]
    assert {"digits", "mnist", "synthetic"} <= set(names)
    r = client.http.post("/v1/datasets/bundled", json={"name": "iris", "samples_per_owner": 5})
    assert r.status_code == 201 and r.json()["num_rows"] == 150 and r.json()["num_classes"] == 3
    r = client.http.post("/v1/datasets/bundled", json={"name": "nope"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
    assert client.http.get("/v1/datasets/987654").status_code == 404


def test_registration_rejects_bad_configuration(client: Client) -> None:
    dataset_id = client.dataset(n=60)
    cases = [
        ({"family": "cnn"}, "cnn"),  # image family on tabular data
        ({"hyperparameters": {"epochz": 3}}, "epochz"),
        ({"dataset_id": 987654}, "987654"),
        ({"method": "nope"}, "nope"),
        ({"privacy": {"epsilon": -1}}, "epsilon"),
        ({"budget_policy": {"max_deletions": 0}}, "max_deletions"),
        # values of the right type that the method would refuse: refused now, not by a failed training
        ({"hyperparameters": {"epochs": -1}}, "epochs"),
        ({"hyperparameters": {"lr_decay": 1.5}}, "lr_decay"),
        ({"family": "mlp", "hyperparameters": {"hidden": [0]}}, "hidden"),
        ({"method": "newton_removal", "hyperparameters": {"lam": 0}}, "lam"),
        ({"method": "langevin", "hyperparameters": {"radius": -1.0}}, "radius"),
        ({"method": "mini_unlearning", "hyperparameters": {"k": 0}}, "k (the number of replayed steps)"),
    ]
    for override, needle in cases:
        r = client.http.post("/v1/models", json={"name": "x", "dataset_id": dataset_id, **override})
        assert r.status_code == 422, (override, r.text)
        assert needle in r.text, (override, r.json())
