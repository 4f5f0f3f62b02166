"""DELETE /v1/models/{id}: every copy of the model's data goes (artifact store, Redis, sample rows, the
weights of every version), its history stays readable, and what still waited on it completes.
DELETE /v1/datasets/{id}: once no live model uses it, its rows go and its record stays."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import func, select

from service.db.tables import ArtifactRef, Sample
from service.maintenance import reconcile
from service.models import retirement
from service.runtime import Runtime
from tests.integration.conftest import Client, Deployment, key, wait_for

pytestmark = pytest.mark.integration


def _held(runtime: Runtime, holder: str) -> set[str]:
    with runtime.uow() as uow:
        return set(uow.session.scalars(select(ArtifactRef.blob).where(ArtifactRef.holder == holder)))


def _held_only_by(runtime: Runtime, *holders: str) -> set[str]:
    """The blobs ``holders`` hold and nobody else does (blobs are content-addressed: another model trained
    alike holds the same weights, and a deletion must leave those)."""
    with runtime.uow() as uow:
        rows = uow.session.execute(select(ArtifactRef.blob, ArtifactRef.holder))
        by_blob: dict[str, set[str]] = {}
        for blob, holder in rows:
            by_blob.setdefault(blob, set()).add(holder)
    return {blob for blob, held_by in by_blob.items() if held_by <= set(holders)}


def test_deleting_a_model_erases_its_data_and_keeps_its_history(client: Client, runtime: Runtime) -> None:
    model_id = client.trained(n=120, samples_per_owner=2)
    dataset_id = client.http.get(f"/v1/models/{model_id}").json()["dataset_id"]
    client.done(client.delete(model_id, owner_ids=["owner-00000"])["id"])
    assert (
        client.http.post(f"/v1/models/{model_id}/predictions", json={"sample_ids": ["syn-00010"]}).status_code
        == 200
    )
    dataset_blobs = _held(runtime, f"dataset:{dataset_id}")
    own = _held_only_by(runtime, f"model:{model_id}")  # its weights and statistics, at least
    assert own and all(runtime.artifacts.exists(b) for b in own)
    shared = _held(runtime, f"model:{model_id}") - own
    versions_before = client.http.get(f"/v1/models/{model_id}/versions").json()["versions"]

    r = client.http.delete(f"/v1/models/{model_id}")
    assert r.status_code == 200, r.text
    assert r.json()["status"]["state"] == "deleted"

    # Gone from every store: the artifact store (what the dataset does not hold), Redis, the samples table.
    assert not any(runtime.artifacts.exists(b) for b in own)
    assert all(runtime.artifacts.exists(b) for b in dataset_blobs | shared)  # others still hold these
    assert _held(runtime, f"model:{model_id}") == set()
    redis_keys = {k.decode() for k in runtime.hot.client.scan_iter(match=runtime.hot.key(model_id, "*"))}
    assert redis_keys == {runtime.hot.key(model_id, "serving")}  # the tombstone, without weights
    assert runtime.hot.get_serving(model_id) is None
    with runtime.uow() as uow:
        assert uow.session.scalar(select(func.count()).where(Sample.model_id == model_id)) == 0

    # Its history stays: versions (with the weights' digests), ledger, audit log.
    versions_after = client.http.get(f"/v1/models/{model_id}/versions").json()["versions"]
    assert [v["weights_sha256"] for v in versions_after] == [v["weights_sha256"] for v in versions_before]
    assert client.http.get(f"/v1/models/{model_id}/budget").status_code == 200
    events = client.http.get(f"/v1/audit/events?model_id={model_id}").json()["events"]
    assert events[-1]["type"] == "model.deleted"
    assert client.http.get(f"/v1/audit/verify?model_id={model_id}").json()["ok"] is True

    # What needs the data answers 410 and says why.
    for r in (
        client.http.get(f"/v1/models/{model_id}/weights"),
        client.http.post(f"/v1/models/{model_id}/predictions", json={"sample_ids": ["syn-00010"]}),
        client.http.post(
            f"/v1/models/{model_id}/deletions", json={"owner_ids": ["owner-00003"]}, headers=key()
        ),
    ):
        assert r.status_code == 410, r.text
        assert r.json()["error"]["code"] == "model_deleted" and "deleted" in r.json()["error"]["message"]

    again = client.http.delete(f"/v1/models/{model_id}")
    assert again.status_code == 200 and again.json()["status"]["state"] == "deleted"
    assert client.http.delete("/v1/models/987654").status_code == 404
    # The dataset is untouched: a new model trains on it.
    client.ready(client.model(dataset_id))


def test_requests_still_waiting_on_a_deleted_model_complete(deployment: Deployment) -> None:
    """No worker runs in this deployment, so the model never trains and its deletions stay queued."""
    client = deployment.client
    model_id = client.model(client.dataset(n=60, samples_per_owner=2))
    ids = [int(client.delete(model_id, owner_ids=[f"owner-{i:05d}"])["id"]) for i in range(3)]
    assert {client.deletion(i)["state"] for i in ids} == {"queued"}

    assert client.http.delete(f"/v1/models/{model_id}").json()["status"]["state"] == "deleted"
    for request_id in ids:
        d = client.deletion(request_id)
        assert d["state"] == "completed" and d["version"] is None
        assert d["history"][-1]["detail"] == "the model was deleted: every copy of its data is gone"
    events = client.http.get(f"/v1/audit/events?model_id={model_id}").json()["events"]
    assert [e["type"] for e in events[-4:]] == ["model.deleted", *["deletion.completed"] * 3]
    assert client.http.post(f"/v1/deletions/{ids[0]}/cancel").status_code == 409


def test_the_reconciler_finishes_a_deletion_cut_off_between_its_two_steps(deployment: Deployment) -> None:
    """A process that died after retiring the model (step 1) and before erasing its data (step 2): the
    reconciler runs step 2 for it, so the waiting requests complete and the blobs go."""
    client, runtime = deployment.client, deployment.runtime
    model_id = client.model(client.dataset(n=60, samples_per_owner=2))
    request_id = int(client.delete(model_id, owner_ids=["owner-00001"])["id"])
    retirement.retire(runtime, model_id)  # ... and the process dies here
    assert client.deletion(request_id)["state"] == "queued"
    time.sleep(runtime.settings.reconcile_after_seconds + 0.2)
    reconcile(runtime)
    assert client.deletion(request_id)["state"] == "completed"
    assert client.http.get(f"/v1/models/{model_id}").json()["status"]["state"] == "deleted"


def test_a_dataset_is_deleted_once_no_live_model_uses_it(client: Client, runtime: Runtime) -> None:
    dataset_id = client.dataset(n=60, samples_per_owner=2)
    model_id = client.model(dataset_id)
    client.ready(model_id)
    blobs = _held_only_by(runtime, f"dataset:{dataset_id}", f"model:{model_id}")
    assert blobs and all(runtime.artifacts.exists(b) for b in blobs)

    refused = client.http.delete(f"/v1/datasets/{dataset_id}")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "dataset_in_use"
    assert f"[{model_id}]" in refused.json()["error"]["message"]
    assert all(runtime.artifacts.exists(b) for b in blobs)

    assert client.http.delete(f"/v1/models/{model_id}").status_code == 200
    r = client.http.delete(f"/v1/datasets/{dataset_id}")
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["deleted_at"] is not None and out["num_rows"] == 0 and out["erased_rows"] == 60
    assert out["kind"] == "table"
    assert not any(runtime.artifacts.exists(b) for b in blobs)  # neither the model nor the dataset holds them
    assert _held(runtime, f"dataset:{dataset_id}") == set()
    assert client.http.get(f"/v1/datasets/{dataset_id}").json()["deleted_at"] == out["deleted_at"]
    assert client.http.delete(f"/v1/datasets/{dataset_id}").json() == out  # again: the same answer
    registered = client.http.post("/v1/models", json={"name": "x", "dataset_id": dataset_id})
    assert registered.status_code == 422 and registered.json()["error"]["code"] == "dataset_deleted"
    events = client.http.get("/v1/audit/events", params={"event_type": "dataset.deleted"}).json()["events"]
    assert any(e["payload"]["dataset_id"] == dataset_id for e in events)
    assert client.http.delete("/v1/datasets/987654").status_code == 404


def test_a_deleted_graph_dataset_keeps_its_kind(client: Client) -> None:
    r = client.http.post("/v1/datasets/bundled", json={"name": "cora"})
    assert r.status_code == 201, r.text
    out = client.http.delete(f"/v1/datasets/{r.json()['id']}").json()
    assert out["kind"] == "node_graph" and out["deleted_at"] is not None and out["num_rows"] == 0


def test_a_model_deleted_while_it_trains_stays_deleted(client: Client, runtime: Runtime) -> None:
    """The training job finishes after the deletion: it finds the model deleted under the lock and records
    nothing (no version, no references, nothing served) and unlinks what it wrote (tested in embedded mode,
    tests/contract/test_erasure_from_memory.py, where the store holds this test's blobs only)."""
    model_id = client.model(client.dataset(n=300, samples_per_owner=3, seed=9), epochs=40)
    wait_for(
        lambda: client.http.get(f"/v1/models/{model_id}").json()["status"]["state"] == "training",
        60,
        0.02,
        "the training to start",
    )
    assert client.http.delete(f"/v1/models/{model_id}").json()["status"]["state"] == "deleted"
    started = client.http.get(f"/v1/audit/events?model_id={model_id}").json()["events"]
    assert [e["type"] for e in started][-1] == "model.deleted"
    # Long enough for the 40 epochs to end (1.6 s here, measured); the job then finds the model deleted.
    time.sleep(8)
    model = client.http.get(f"/v1/models/{model_id}").json()
    assert model["status"]["state"] == "deleted" and model["current_version"] is None
    assert client.http.get(f"/v1/models/{model_id}/versions").json()["versions"] == []
    assert _held(runtime, f"model:{model_id}") == set()
    assert runtime.hot.get_serving(model_id) is None
    events = [e["type"] for e in client.http.get(f"/v1/audit/events?model_id={model_id}").json()["events"]]
    assert "model.trained" not in events and "training.failed" not in events
