"""POST /v1/datasets/{id}/deletions: one deletion, submitted to every model trained on the dataset."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from service.db.tables import ArtifactRef
from service.runtime import Runtime
from service.storage.buckets import bucket_of
from tests.integration.conftest import Client

pytestmark = pytest.mark.integration


def test_a_subject_is_forgotten_by_every_model_of_the_dataset(client: Client) -> None:
    dataset_id = client.dataset(n=90, samples_per_owner=3, seed=5)
    models = [client.model(dataset_id) for _ in range(2)]
    for model_id in models:
        client.ready(model_id)
    key = {"Idempotency-Key": str(uuid.uuid4())}
    r = client.http.post(
        f"/v1/datasets/{dataset_id}/deletions", json={"owner_ids": ["owner-00002"]}, headers=key
    )
    assert r.status_code == 202, r.text
    report = r.json()
    assert report["dataset_id"] == dataset_id and report["accepted"] == 2 and report["rejected"] == 0
    assert [item["model_id"] for item in report["results"]] == models
    done = [client.done(item["id"]) for item in report["results"]]
    assert [d["model_id"] for d in done] == models and all(d["num_samples"] == 3 for d in done)

    again = client.http.post(
        f"/v1/datasets/{dataset_id}/deletions", json={"owner_ids": ["owner-00002"]}, headers=key
    )
    assert again.status_code == 202 and again.json() == report
    assert again.headers["Idempotent-Replayed"] == "true"
    other_body = client.http.post(
        f"/v1/datasets/{dataset_id}/deletions", json={"owner_ids": ["owner-00003"]}, headers=key
    )
    # Same key, another body: every model refuses the key, so the request as a whole is the draft's 422
    # (not a 207 listing the same refusal per model).
    assert other_body.status_code == 422, other_body.text
    assert other_body.json()["error"]["code"] == "idempotency_key_reused"

    # Forgotten everywhere: each model, and the dataset's own rows, no longer know the owner.
    for model_id in models:
        r = client.http.post(
            f"/v1/models/{model_id}/deletions",
            json={"owner_ids": ["owner-00002"]},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        assert r.status_code == 409, r.text
    assert client.http.get(f"/v1/datasets/{dataset_id}").json()["num_rows"] == 87


def test_each_model_answers_for_itself(client: Client) -> None:
    dataset_id = client.dataset(n=60, samples_per_owner=2, seed=6)
    ready = client.model(dataset_id)
    client.ready(ready)
    client.done(client.delete(ready, owner_ids=["owner-00001"])["id"])
    later = client.model(dataset_id)  # registered after owner-00001 left the dataset: it never had them
    client.ready(later)
    r = client.http.post(
        f"/v1/datasets/{dataset_id}/deletions",
        json={"owner_ids": ["owner-00001"]},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert r.status_code == 207, r.text
    by_model = {item["model_id"]: item for item in r.json()["results"]}
    assert by_model[ready]["status"] == 409 and by_model[ready]["error"]["code"] == "already_forgotten"
    assert by_model[later]["status"] == 422 and by_model[later]["error"]["code"] == "unknown_subject"
    assert r.json()["accepted"] == 0


def test_refusals(client: Client) -> None:
    dataset_id = client.dataset(n=30, samples_per_owner=2, seed=7)
    body = {"owner_ids": ["owner-00001"]}
    assert client.http.post(f"/v1/datasets/{dataset_id}/deletions", json=body).status_code == 400  # no key
    key = {"Idempotency-Key": str(uuid.uuid4())}
    assert client.http.post("/v1/datasets/987654/deletions", json=body, headers=key).status_code == 404
    assert client.http.post(f"/v1/datasets/{dataset_id}/deletions", json={}, headers=key).status_code == 422


def test_without_a_model_the_dataset_erases_the_rows_itself(client: Client, runtime: Runtime) -> None:
    dataset_id = client.dataset(n=40, samples_per_owner=2, seed=8)
    with runtime.uow() as uow:
        row = uow.datasets.get(dataset_id)
        assert row is not None and row.arrays is not None
        bucket = row.arrays["buckets"][bucket_of("owner-00003", int(row.arrays["num_buckets"]))]
    key = {"Idempotency-Key": str(uuid.uuid4())}
    body = {"owner_ids": ["owner-00003"], "sample_ids": ["syn-00000"]}
    r = client.http.post(f"/v1/datasets/{dataset_id}/deletions", json=body, headers=key)
    assert r.status_code == 200, r.text
    assert r.json() == {
        "dataset_id": dataset_id,
        "accepted": 0,
        "rejected": 0,
        "results": [],
        "erased_rows": 3,
    }
    assert client.http.get(f"/v1/datasets/{dataset_id}").json()["num_rows"] == 37
    assert not runtime.artifacts.exists(bucket) or len(_holders(runtime, bucket)) > 0  # unless shared
    again = client.http.post(f"/v1/datasets/{dataset_id}/deletions", json=body, headers=key)
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    gone = client.http.post(
        f"/v1/datasets/{dataset_id}/deletions", json=body, headers={"Idempotency-Key": str(uuid.uuid4())}
    )
    # Erased before (the dataset's own audit event names it by keyed hash): 409, as a model answers.
    assert gone.status_code == 409 and gone.json()["error"]["code"] == "already_forgotten", gone.text
    never = client.http.post(
        f"/v1/datasets/{dataset_id}/deletions",
        json={"owner_ids": ["no-such-owner"]},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert never.status_code == 422 and never.json()["error"]["code"] == "unknown_subject"

    events = client.http.get("/v1/audit/events", params={"event_type": "dataset.subjects_erased"}).json()[
        "events"
    ]
    mine = [e for e in events if e["payload"]["dataset_id"] == dataset_id]
    assert len(mine) == 1 and mine[0]["payload"]["rows"] == 3
    assert "owner-00003" not in str(mine[0]) and "syn-00000" not in str(mine[0])  # keyed hashes only
    for subject in ("owner_id=owner-00003", "sample_id=syn-00000"):  # an auditor finds it by subject
        found = client.http.get(f"/v1/audit/events?{subject}").json()["events"]
        assert mine[0]["id"] in [e["id"] for e in found], subject
    others = client.http.get("/v1/audit/events?owner_id=owner-00005").json()["events"]
    assert mine[0]["id"] not in [e["id"] for e in others]
    # A model registered now never sees them.
    model_id = client.model(dataset_id)
    client.ready(model_id)
    r = client.http.post(
        f"/v1/models/{model_id}/deletions",
        json={"owner_ids": ["owner-00003"]},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_subject"


def test_a_graph_dataset_without_a_model_is_refused(client: Client) -> None:
    dataset_id = client.http.post("/v1/datasets/bundled", json={"name": "cora"}).json()["id"]
    r = client.http.post(
        f"/v1/datasets/{dataset_id}/deletions",
        json={"sample_ids": ["0"]},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "graph_dataset"
    deleted = client.http.delete(f"/v1/datasets/{dataset_id}")
    assert deleted.status_code == 200
    r = client.http.post(
        f"/v1/datasets/{dataset_id}/deletions",
        json={"sample_ids": ["0"]},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert r.status_code == 409 and r.json()["error"]["code"] == "no_rows"


def _holders(runtime: Runtime, blob: str) -> list[str]:
    with runtime.uow() as uow:
        return list(uow.session.scalars(select(ArtifactRef.holder).where(ArtifactRef.blob == blob)))
