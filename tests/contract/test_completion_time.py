"""A request's ``completed_at`` (which receipts sign) is never earlier than the erasure it reports: the
completion stamps it after the version's garbage blobs are unlinked."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from fastapi.testclient import TestClient

from service.runtime import Runtime
from tests.contract.conftest import forget_owner, hold_model

_SLOW_UNLINK_SECONDS = 0.05


def _slow_unlinks(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Make the artifact store's unlinks slow (a busy disk); returns the list of times each one ended."""
    store = runtime.artifacts
    real_delete = store.delete
    unlinked: list[float] = []

    def slow_delete(digest: str) -> None:
        time.sleep(_SLOW_UNLINK_SECONDS)
        real_delete(digest)
        unlinked.append(time.time())

    monkeypatch.setattr(store, "delete", slow_delete)
    return unlinked


def test_completed_at_follows_the_unlinking_of_the_subject_s_blobs(
    fresh: tuple[TestClient, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, runtime = fresh
    unlinked = _slow_unlinks(runtime, monkeypatch)
    request = forget_owner(client, "owner-00009")
    assert unlinked, "the completion unlinked none of the owner's blobs"

    completed_at = datetime.fromisoformat(request["completed_at"]).timestamp()
    assert completed_at >= max(unlinked)
    (event,) = [e for e in request["history"] if e["state"] == "completed"]
    assert datetime.fromisoformat(event["at"]).timestamp() == completed_at
    (logged,) = client.get(
        "/v1/audit/events", params={"request_id": request["id"], "event_type": "deletion.completed"}
    ).json()["events"]
    assert datetime.fromisoformat(logged["at"]).timestamp() >= max(unlinked)
    receipt = client.get(f"/v1/deletions/{request['id']}/receipt").json()["receipt"]
    assert datetime.fromisoformat(receipt["completed_at"]).timestamp() == completed_at


def test_requests_a_model_deletion_completes_are_stamped_after_its_blobs_go(
    fresh: tuple[TestClient, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, runtime = fresh
    hold_model(runtime)  # the deletion stays queued
    queued = client.post(
        "/v1/models/1/deletions", json={"owner_ids": ["owner-00011"]}, headers={"Idempotency-Key": "k-11"}
    ).json()
    unlinked = _slow_unlinks(runtime, monkeypatch)
    assert client.delete("/v1/models/1").status_code == 200
    request = client.get(f"/v1/deletions/{queued['id']}").json()
    assert request["state"] == "completed" and unlinked
    assert datetime.fromisoformat(request["completed_at"]).timestamp() >= max(unlinked)
