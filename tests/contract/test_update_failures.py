"""A persistent fault in an update fails the queued requests with its reason instead of leaving them
queued for ever; the model stays on its version, and the next update works again."""

from __future__ import annotations

import time
import uuid

import pytest
from fastapi.testclient import TestClient

from service.jobs import updates
from service.runtime import Runtime


def _submit(client: TestClient, owner: str) -> int:
    r = client.post("/v1/models/1/deletions", json={"owner_ids": [owner]},
                    headers={"Idempotency-Key": str(uuid.uuid4())})
    assert r.status_code == 202, r.text
    return int(r.json()["id"])


def _state(client: TestClient, request_id: int) -> dict:
    return client.get(f"/v1/deletions/{request_id}").json()


def test_persistent_update_fault_fails_requests_with_the_reason(
    embedded: TestClient, embedded_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
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
        assert time.monotonic() < deadline, _state(embedded, request_id)
        time.sleep(0.05)
