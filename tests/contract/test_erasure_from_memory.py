"""Erasure in embedded mode (SQLite, the in-process Redis stand-in, the in-process worker): a completed
deletion's blobs leave the memory of the process that deleted them, not only the disk (the decoded
buckets, and every assembled dataset built from them); deleting a model and its dataset leaves nothing."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from service.queue import InProcessQueue
from service.runtime import Runtime
from service.storage.buckets import bucket_of
from tests.contract.conftest import forget_owner


def test_the_forgotten_owner_s_rows_leave_the_cache_with_their_blobs(
    fresh: tuple[TestClient, Runtime],
) -> None:
    client, runtime = fresh
    with runtime.uow() as uow:
        model = uow.models.get(1)
        assert model is not None and model.training is not None
        samples = uow.models.samples_of_owners(1, ["owner-00004"])["owner-00004"]
        key = bucket_of("owner-00004", int(model.training["num_buckets"]))
        bucket = model.training["buckets"][key]
    # Predictions by id read the model's rows through the cache: the owner's bucket is in memory now.
    assert client.post("/v1/models/1/predictions", json={"sample_ids": samples}).status_code == 200
    assert ("bucket", bucket) in runtime.cache.cached()
    assert any(kind == "dataset" for kind, _ in runtime.cache.cached())

    forget_owner(client, "owner-00004")

    assert not runtime.artifacts.exists(bucket)
    cached = runtime.cache.cached()
    assert ("bucket", bucket) not in cached
    assert not any(kind == "dataset" and bucket in key for kind, key in cached)


def test_deleting_a_model_in_embedded_mode(fresh: tuple[TestClient, Runtime]) -> None:
    """The same deletion on SQLite and the in-process Redis stand-in (the integration tests use Postgres)."""
    client, runtime = fresh
    with runtime.uow() as uow:
        model = uow.models.get(1)
        assert model is not None and model.statistics is not None
        statistics = set(model.statistics["buckets"].values())
    assert statistics and all(runtime.artifacts.exists(b) for b in statistics)

    r = client.delete("/v1/models/1")
    assert r.status_code == 200 and r.json()["status"]["state"] == "deleted"
    assert not any(runtime.artifacts.exists(b) for b in statistics)  # the vectors: the model's alone
    assert not any(("bucket", b) in runtime.cache.cached() for b in statistics)
    assert runtime.hot.get_serving(1) is None
    assert client.get("/v1/models/1/weights").status_code == 410
    assert client.delete("/v1/datasets/1").status_code == 200
    assert client.get("/v1/datasets/1").json()["num_rows"] == 0


def test_what_a_training_wrote_for_a_model_deleted_meanwhile_goes_at_once(
    fresh: tuple[TestClient, Runtime],
) -> None:
    """The job finds the model deleted when it comes to record its version: the weights and per-sample
    statistics it wrote are unlinked then, not an hour later by the orphan sweep."""
    client, runtime = fresh
    dataset = client.post(
        "/v1/datasets/bundled", json={"name": "synthetic", "n": 300, "samples_per_owner": 3}
    )
    model = client.post(
        "/v1/models",
        json={"name": "slow", "dataset_id": dataset.json()["id"], "hyperparameters": {"epochs": 60}},
    )
    model_id = model.json()["id"]
    deadline = time.monotonic() + 30
    while client.get(f"/v1/models/{model_id}").json()["status"]["state"] != "training":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert client.delete(f"/v1/models/{model_id}").status_code == 200
    assert isinstance(runtime.queue, InProcessQueue)
    runtime.queue.join()  # the training job has ended: it found the model deleted when it came to record
    with runtime.uow() as uow:
        unheld = uow.refs.unreferenced(set(runtime.artifacts.digests()))
    assert unheld == set(), f"{len(unheld)} blobs no row holds are still stored"
