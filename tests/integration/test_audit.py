"""The audit log: queries by model, request, subject and time; tampering breaks the chain."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update

from service.db.tables import AuditEvent, AuditHead
from service.runtime import Runtime
from tests.integration.conftest import Client

pytestmark = pytest.mark.integration


def test_query_by_model_request_subject_and_time(client: Client) -> None:
    model_id = client.trained(n=60, samples_per_owner=3)
    time.sleep(0.05)
    start = datetime.now(UTC)
    request_id = client.done(client.delete(model_id, sample_ids=["syn-00004"])["id"])["id"]

    by_model = client.http.get("/v1/audit/events", params={"model_id": model_id, "limit": 1000}).json()[
        "events"
    ]
    types = [e["type"] for e in by_model]
    assert types[0] == "model.registered" and "model.trained" in types and "version.created" in types
    for chain in (f"model:{model_id}", f"model:{model_id}:requests", f"model:{model_id}:completions"):
        seqs = [e["seq"] for e in by_model if e["chain"] == chain]
        assert seqs == list(range(1, len(seqs) + 1)) and seqs, chain

    by_request = client.http.get("/v1/audit/events", params={"request_id": request_id}).json()["events"]
    assert [e["type"] for e in by_request] == ["deletion.received", "deletion.applied", "deletion.completed"]
    # What a client did, what the service recorded, what it completed: one chain each (docs/service.md).
    assert [e["chain"] for e in by_request] == [
        f"model:{model_id}:requests",
        f"model:{model_id}",
        f"model:{model_id}:completions",
    ]
    by_subject = client.http.get(
        "/v1/audit/events", params={"sample_id": "syn-00004", "model_id": model_id}
    ).json()
    assert [e["id"] for e in by_subject["events"]] == [e["id"] for e in by_request]
    since = client.http.get(
        "/v1/audit/events", params={"model_id": model_id, "since": start.isoformat()}
    ).json()
    assert {e["type"] for e in since["events"]} >= {"deletion.received", "deletion.completed"}
    assert "model.registered" not in {e["type"] for e in since["events"]}
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert client.http.get("/v1/audit/events", params={"since": future}).json()["events"] == []
    page = client.http.get("/v1/audit/events", params={"model_id": model_id, "limit": 2}).json()
    assert len(page["events"]) == 2 and page["next_after_id"] == page["events"][-1]["id"]


def test_tampering_is_detected(client: Client, runtime: Runtime) -> None:
    model_id = client.trained(n=60, samples_per_owner=3)
    client.done(client.delete(model_id, owner_ids=["owner-00001"])["id"])
    chain = f"model:{model_id}"
    assert client.http.get("/v1/audit/verify", params={"chain": chain}).json()["ok"] is True

    with runtime.uow() as uow:
        target = uow.session.scalars(
            select(AuditEvent).where(AuditEvent.chain == chain, AuditEvent.chain_seq == 3)
        ).one()
        original = dict(target.payload)
        uow.session.execute(
            update(AuditEvent).where(AuditEvent.id == target.id).values(payload={**original, "x": 1})
        )
        uow.commit()
    report = client.http.get("/v1/audit/verify", params={"chain": chain}).json()
    assert report["ok"] is False and report["chains"][0]["first_bad_seq"] == 3
    assert "altered" in report["chains"][0]["problem"]

    with runtime.uow() as uow:
        uow.session.execute(update(AuditEvent).where(AuditEvent.id == target.id).values(payload=original))
        head = uow.session.get(AuditHead, chain)
        last = uow.session.scalars(
            select(AuditEvent).where(AuditEvent.chain == chain, AuditEvent.chain_seq == head.seq)
        ).one()
        saved = {c.name: getattr(last, c.name) for c in AuditEvent.__table__.columns}
        uow.session.delete(last)  # truncate the tail
        uow.commit()
    report = client.http.get("/v1/audit/verify", params={"chain": chain}).json()
    assert report["ok"] is False and "removed" in report["chains"][0]["problem"]

    with runtime.uow() as uow:  # put it back: the chain verifies again
        uow.session.add(AuditEvent(**saved))
        uow.commit()
    assert client.http.get("/v1/audit/verify", params={"chain": chain}).json()["ok"] is True


def test_a_receipt_on_postgres_verifies_and_names_the_logged_event(client: Client) -> None:
    from service.signing import verify

    model_id = client.trained(n=60, samples_per_owner=3)
    request = client.done(client.delete(model_id, owner_ids=["owner-00002"])["id"])
    answer = client.http.get(f"/v1/deletions/{request['id']}/receipt", params={"owner_id": "owner-00002"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    receipt = body["receipt"]
    key = client.http.get("/v1/receipts/key").json()
    assert verify(receipt, body["signature"], key["public_key"])
    assert receipt["subjects"][0]["id"] == "owner-00002" and receipt["num_samples"] == 3
    assert receipt["completed_at"] == request["completed_at"].replace("+00:00", "Z")
    assert receipt["version"]["seq"] == request["version"]["seq"]
    (event,) = client.http.get(
        "/v1/audit/events", params={"request_id": request["id"], "event_type": "deletion.completed"}
    ).json()["events"]
    assert (receipt["audit"]["seq"], receipt["audit"]["hash"]) == (event["seq"], event["hash"])
