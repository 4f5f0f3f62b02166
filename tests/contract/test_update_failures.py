"""A persistent fault in an update fails the queued requests with its reason instead of leaving them
queued for ever; the model stays on its version, and the next update works again."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from sqlalchemy import select

from service.app import create_app
from service.db.tables import ArtifactRef
from service.jobs import updates
from service.runtime import Runtime
from tests.contract.conftest import embedded_runtime_in, train_small_model


@pytest.fixture()
def fresh(tmp_path: Path) -> Iterator[tuple[TestClient, Runtime]]:
    """An embedded app of its own: the session's app carries whatever the schemathesis run left."""
    runtime = embedded_runtime_in(tmp_path)
    with TestClient(create_app(runtime=runtime)) as client:
        train_small_model(client)
        yield client, runtime


def _submit(client: TestClient, owner: str) -> int:
    r = client.post(
        "/v1/models/1/deletions", json={"owner_ids": [owner]}, headers={"Idempotency-Key": str(uuid.uuid4())}
    )
    assert r.status_code == 202, r.text
    return int(r.json()["id"])


def _state(client: TestClient, request_id: int) -> dict:
    return client.get(f"/v1/deletions/{request_id}").json()


def test_persistent_update_fault_fails_requests_with_the_reason(
    fresh: tuple[TestClient, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    embedded, embedded_runtime = fresh
    before = embedded.get("/v1/models/1").json()["current_version"]

    def broken(rt: Runtime, model_id: int) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(updates, "_drain", broken)
    request_id = _submit(embedded, "owner-00003")
    for _ in range(10):  # the in-process worker may take some of these attempts itself
        if _state(embedded, request_id)["state"] == "failed":
            break
        with pytest.raises(RuntimeError, match="disk on fire"):
            updates.apply_deletions(embedded_runtime, 1)
    failed = _state(embedded, request_id)
    assert failed["state"] == "failed" and "disk on fire" in failed["failure_reason"]
    assert embedded.get("/v1/models/1").json()["current_version"] == before

    monkeypatch.undo()
    request_id = _submit(embedded, "owner-00004")
    deadline = time.monotonic() + 30
    while _state(embedded, request_id)["state"] != "completed":
        assert time.monotonic() < deadline, (
            _state(embedded, request_id),
            embedded.get("/v1/models/1").json()["status"],
        )
        time.sleep(0.05)


def test_an_update_whose_blob_is_collected_before_its_commit_writes_it_again(
    fresh: tuple[TestClient, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit's check finds one of its blobs gone (as if another holder's completion had collected
    it after the put): the update rolls back, writes its blobs again, and the request completes with
    every blob of the new version stored."""
    embedded, embedded_runtime = fresh
    store = embedded_runtime.artifacts
    real_exists = store.exists
    collected: list[str] = []

    def collected_once(digest: str) -> bool:
        if not collected:
            collected.append(digest)
            store.delete(digest)
        return real_exists(digest)

    monkeypatch.setattr(store, "exists", collected_once)
    rewrites = REGISTRY.get_sample_value("lethe_blob_rewrites_total", {"job": "apply_deletions"}) or 0.0
    request_id = _submit(embedded, "owner-00005")
    deadline = time.monotonic() + 30
    while _state(embedded, request_id)["state"] != "completed":
        assert time.monotonic() < deadline, _state(embedded, request_id)
        time.sleep(0.05)
    assert collected and real_exists(collected[0]), "the collected blob was written again"
    assert REGISTRY.get_sample_value("lethe_blob_rewrites_total", {"job": "apply_deletions"}) == rewrites + 1
    with embedded_runtime.uow() as uow:
        refs = {r.blob for r in uow.session.scalars(select(ArtifactRef))}
    assert all(real_exists(blob) for blob in refs), "a committed reference names a missing blob"
    assert embedded.get("/v1/models/1/weights").status_code == 200
