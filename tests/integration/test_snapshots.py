"""Answers read in several statements come from one snapshot (``Runtime.snapshot``): a commit that lands
between two of the reads shows in neither, so no answer mixes two states of the database."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from service.audit.repository import AuditRepository
from service.db.tables import AuditHead
from service.deletions.repository import DeletionRepository
from service.runtime import Runtime
from tests.integration.conftest import Client

pytestmark = pytest.mark.integration


def test_verify_reads_one_snapshot_while_a_chain_grows(
    client: Client, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event committed while verification runs (after it read the heads, before it read the events) is
    not reported as tampering."""
    chain = f"test:snapshot:{uuid.uuid4().hex[:12]}"
    with runtime.uow() as uow:
        uow.audit.append(chain, "test.first")
        uow.audit.append(chain, "test.second")
        uow.commit()
    read_heads = AuditRepository.heads

    def heads_then_an_append(repo: AuditRepository, chains: list[str] | None = None) -> list[AuditHead]:
        heads = read_heads(repo, chains)
        with runtime.uow() as other:
            other.audit.append(chain, "test.during_verify")
            other.commit()
        return heads

    monkeypatch.setattr(AuditRepository, "heads", heads_then_an_append)
    report = client.http.get("/v1/audit/verify", params={"chain": chain}).json()
    assert report["ok"], report
    assert [(c["events"], c["head_seq"]) for c in report["chains"]] == [(2, 2)]
    monkeypatch.undo()
    after = client.http.get("/v1/audit/verify", params={"chain": chain}).json()
    assert after["ok"] and after["chains"][0]["events"] == 3, after


def test_a_deletion_is_read_from_one_snapshot(
    client: Client, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state entered after the request's row was read is in neither its state nor its history."""
    model_id = client.trained(n=40, samples_per_owner=2)
    request_id = client.done(client.delete(model_id, owner_ids=["owner-00001"])["id"])["id"]
    read_events = DeletionRepository.events
    detail = "committed while the request was being read"

    def an_event_then_the_events(repo: DeletionRepository, rid: int) -> Any:
        with runtime.uow() as other:
            other.deletions.add_event(rid, "failed", datetime.now(UTC), detail)
            other.commit()
        return read_events(repo, rid)

    monkeypatch.setattr(DeletionRepository, "events", an_event_then_the_events)
    read = client.http.get(f"/v1/deletions/{request_id}").json()
    assert read["state"] == "completed"
    assert detail not in [h["detail"] for h in read["history"]], read["history"]
    monkeypatch.undo()
    after = client.http.get(f"/v1/deletions/{request_id}").json()
    assert detail in [h["detail"] for h in after["history"]]  # it did commit, after the snapshot
    _every_snapshot_read_answers(client, model_id, request_id)


def _every_snapshot_read_answers(client: Client, model_id: int, request_id: int) -> None:
    """The routes that read in a snapshot write nothing and lock no row (a READ ONLY transaction would
    refuse either): each answers on Postgres."""
    for path in (
        "/v1/models",
        f"/v1/models/{model_id}",
        f"/v1/models/{model_id}/versions",
        f"/v1/models/{model_id}/versions/2",
        f"/v1/models/{model_id}/budget",
        f"/v1/models/{model_id}/deletions",
        f"/v1/deletions/{request_id}/receipt",
        f"/v1/audit/events?model_id={model_id}",
        f"/v1/audit/verify?model_id={model_id}",
    ):
        answer = client.http.get(path)
        assert answer.status_code == 200, (path, answer.text)
    weights = client.http.get(f"/v1/models/{model_id}/weights")
    assert weights.status_code == 200 and weights.content
    again = client.http.get(
        f"/v1/models/{model_id}/weights", headers={"If-None-Match": weights.headers["ETag"]}
    )
    assert again.status_code == 304
