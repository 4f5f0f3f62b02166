"""Callbacks reach public addresses only, unless the operator allows a network (embedded app, with no
network allowed): literal internal hosts are refused at submission, names at delivery."""

from __future__ import annotations

import time
import uuid

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from service import callback_targets
from service.runtime import Runtime


def _delete(client: TestClient, path: str, body: dict) -> tuple[int, dict]:
    response = client.post(path, json=body, headers={"Idempotency-Key": str(uuid.uuid4())})
    return response.status_code, response.json()


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9/hook", "http://localhost:8000/v1/models", "http://169.254.169.254/latest"]
)
def test_a_callback_to_an_internal_address_is_refused_at_submission(embedded: TestClient, url: str) -> None:
    before = _count(embedded)
    status, body = _delete(
        embedded, "/v1/models/1/deletions", {"owner_ids": ["owner-00001"], "callback_url": url}
    )
    assert status == 422 and body["error"]["code"] == "callback_not_allowed"
    assert "LETHE_CALLBACK_ALLOWED_NETWORKS" in body["error"]["message"]
    status, body = _delete(
        embedded,
        "/v1/models/1/deletions/bulk",
        {"items": [{"owner_ids": ["owner-00001"]}, {"owner_ids": ["owner-00002"], "callback_url": url}]},
    )
    assert status == 422 and body["error"]["message"].startswith("items[1]: ")
    status, body = _delete(
        embedded, "/v1/datasets/1/deletions", {"owner_ids": ["owner-00001"], "callback_url": url}
    )
    assert status == 422 and body["error"]["code"] == "callback_not_allowed"
    assert _count(embedded) == before  # nothing was queued


def _count(client: TestClient) -> int:
    return len(client.get("/v1/models/1/deletions?limit=500").json()["deletions"])


def test_a_name_resolving_to_an_internal_address_is_refused_at_delivery_without_retries(
    fresh: tuple[TestClient, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = fresh
    asked: list[tuple[str, int]] = []

    def resolver(
        host: str, port: int
    ) -> list[str]:  # no DNS on the test machine: answer as a rebinding attacker would
        asked.append((host, port))
        return ["10.9.8.7"]

    monkeypatch.setattr(callback_targets, "system_resolver", resolver)
    refused = REGISTRY.get_sample_value("lethe_callbacks_total", {"outcome": "refused"}) or 0.0
    gave_up = REGISTRY.get_sample_value("lethe_callbacks_total", {"outcome": "gave_up"})
    assert gave_up is not None  # present at 0 from the start: the first one is an increase
    status, body = _delete(
        client,
        "/v1/models/1/deletions",
        {"owner_ids": ["owner-00003"], "callback_url": "https://hooks.app.example/lethe"},
    )
    assert status == 202, body
    deadline = time.monotonic() + 30
    # Until completion the callback has no state yet (None), then it is pending until its one attempt.
    while (request := client.get(f"/v1/deletions/{body['id']}").json())["callback"]["state"] in (None, "pending"):
        assert time.monotonic() < deadline, request
        time.sleep(0.05)
    assert request["state"] == "completed"  # the deletion itself is not affected
    assert request["callback"]["state"] == "failed" and request["callback"]["attempts"] == 1  # not retried
    assert asked.count(("hooks.app.example", 443)) == 1
    events = client.get(f"/v1/audit/events?request_id={body['id']}&event_type=callback.failed").json()[
        "events"
    ]
    assert len(events) == 1 and events[0]["payload"]["error"].startswith(
        "refused: hooks.app.example resolves"
    )
    # at least: the counter and the patched resolver are the process's (another app's callbacks may retry meanwhile)
    assert (REGISTRY.get_sample_value("lethe_callbacks_total", {"outcome": "refused"}) or 0.0) >= refused + 1
    assert (REGISTRY.get_sample_value("lethe_callbacks_total", {"outcome": "gave_up"}) or 0.0) >= gave_up + 1
