"""GET /v1/audit/verify says what it checked: an unknown model or chain is a 404, not an empty success, and a
chain that must exist but was removed fails verification (embedded app)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import delete

from service.db.tables import AuditEvent, AuditHead
from service.runtime import Runtime
from tests.contract.conftest import api_error, forget_owner


def _verify(client: TestClient, **params: object) -> dict:
    r = client.get("/v1/audit/verify", params=params)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _chains(report: dict) -> dict[str, dict]:
    return {c["chain"]: c for c in report["chains"]}


def test_an_unknown_model_or_chain_is_a_404_not_an_empty_success(fresh: tuple[TestClient, Runtime]) -> None:
    client, _ = fresh
    message = api_error(client.get("/v1/audit/verify", params={"model_id": 999}), 404, "not_found")
    assert "model 999" in message
    message = api_error(client.get("/v1/audit/verify", params={"chain": "modle:1"}), 404, "not_found")
    assert "'modle:1'" in message and "model:<id>" in message
    api_error(client.get("/v1/audit/verify", params={"chain": "model:2"}), 404, "not_found")
    api_error(client.get("/v1/audit/verify", params={"chain": "model:1\x00"}), 404, "not_found")
    api_error(client.get("/v1/audit/verify", params={"chain": ""}), 404, "not_found")
    api_error(client.get("/v1/audit/verify", params={"chain": "model:1", "model_id": 999}), 404, "not_found")

    # What exists still verifies, alone or together.
    assert _verify(client, model_id=1)["ok"] is True and "model:1" in _chains(_verify(client, model_id=1))
    assert list(_chains(_verify(client, chain="model:1"))) == ["model:1"]
    assert _verify(client, chain="system")["ok"] is True
    assert set(_chains(_verify(client, chain="system", model_id=1))) >= {"system", "model:1"}


def test_a_deleted_model_keeps_verifiable_chains(fresh: tuple[TestClient, Runtime]) -> None:
    client, _ = fresh
    forget_owner(client, "owner-00004")
    assert client.delete("/v1/models/1").status_code == 200
    report = _verify(client, model_id=1)
    assert report["ok"] is True, report
    assert set(_chains(report)) >= {"model:1", "model:1:requests"}


def test_a_registered_models_removed_chain_is_reported_missing(fresh: tuple[TestClient, Runtime]) -> None:
    client, runtime = fresh
    with runtime.uow() as uow:  # the model's chain removed whole, head and events
        uow.session.execute(delete(AuditEvent).where(AuditEvent.chain == "model:1"))
        uow.session.execute(delete(AuditHead).where(AuditHead.chain == "model:1"))
        uow.commit()
    for params in ({"model_id": 1}, {"chain": "model:1"}, {}):
        report = _verify(client, **params)
        assert report["ok"] is False, (params, report)
        chain = _chains(report)["model:1"]
        assert chain["ok"] is False and chain["events"] == 0
        assert "chain missing" in chain["problem"] and "model 1 is registered" in chain["problem"]


def test_a_chain_whose_head_was_removed_is_reported_missing_with_its_events(
    fresh: tuple[TestClient, Runtime],
) -> None:
    client, runtime = fresh
    forget_owner(client, "owner-00008")
    events = _chains(_verify(client, model_id=1))["model:1:requests"]["events"]
    assert events >= 1
    with runtime.uow() as uow:
        uow.session.execute(delete(AuditHead).where(AuditHead.chain == "model:1:requests"))
        uow.commit()
    for params in ({"model_id": 1}, {"chain": "model:1:requests"}, {}):
        report = _verify(client, **params)
        assert report["ok"] is False, (params, report)
        chain = _chains(report)["model:1:requests"]
        assert chain["events"] == events and "chain missing" in chain["problem"]
        if "model:1" in _chains(report):  # the other chains still verify
            assert _chains(report)["model:1"]["ok"] is True
