"""POST /v1/models/{id}/retrain in embedded mode: a retrained version, a new budget epoch and the caller's
reason in the ledger and the audit log; 409, 410, 404 and 422 where a retrain cannot or need not run."""

from __future__ import annotations

import time
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import update

from service.db.tables import Model
from service.jobs.training import retrain_model
from service.runtime import Runtime
from tests.contract.conftest import api_error, forget_owner


def _ready(client: TestClient, model_id: int = 1, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (model := client.get(f"/v1/models/{model_id}").json())["status"]["state"] != "ready":
        assert time.monotonic() < deadline, model
        time.sleep(0.05)
    return dict(model)


def test_a_retrain_on_request_releases_a_retrained_version_in_a_new_budget_epoch(
    fresh: tuple[TestClient, Runtime],
) -> None:
    client, _ = fresh
    forget_owner(client, "owner-00001")
    before = client.get("/v1/models/1/budget").json()
    assert before["budget_epoch"] == 1 and before["spent"] > 0

    answer = client.post("/v1/models/1/retrain", json={"reason": "nightly refresh"})
    assert answer.status_code == 202, answer.text
    assert answer.json()["status"]["state"] in ("retraining", "ready")  # the in-process worker may be done
    model = _ready(client)
    assert model["budget_epoch"] == 2 and model["status"]["error"] is None
    assert model["current_version"] == 3 and model["train_size"] == 60 - 2

    versions = client.get("/v1/models/1/versions").json()["versions"]
    assert [(v["kind"], v["budget_epoch"]) for v in versions] == [
        ("initial", 1),
        ("unlearned", 1),
        ("retrained", 2),
    ]
    budget = client.get("/v1/models/1/budget").json()
    assert budget["budget_epoch"] == 2 and budget["spent"] == 0
    assert [(r["budget_epoch"], r["reason"], r["version_seq"]) for r in budget["retrains"]] == [
        (2, "nightly refresh", 3)
    ]
    events = client.get("/v1/audit/events", params={"model_id": 1, "limit": 1000}).json()["events"]
    retrain = [e for e in events if e["type"].startswith("retrain.")]
    assert [e["type"] for e in retrain] == ["retrain.scheduled", "retrain.started", "retrain.completed"]
    assert all(e["payload"]["reason"] == "nightly refresh" for e in retrain)
    assert retrain[0]["payload"]["requests"] == []

    # The retrained version serves, and the next deletion is an ordinary update of the new epoch.
    assert client.post("/v1/models/1/predictions", json={"instances": [[0.0] * 20]}).status_code == 200
    assert client.get("/v1/models/1/weights").headers["X-Model-Version"] == "3"
    forget_owner(client, "owner-00002")
    after = client.get("/v1/models/1/versions").json()["versions"][-1]
    assert (after["kind"], after["budget_epoch"]) == ("unlearned", 2)

    # No body: the default reason.
    assert client.post("/v1/models/1/retrain").status_code == 202
    _ready(client)
    reasons = [r["reason"] for r in client.get("/v1/models/1/budget").json()["retrains"]]
    assert reasons == ["nightly refresh", "requested through the API"]


def test_a_retrain_is_refused_where_it_cannot_or_need_not_run(fresh: tuple[TestClient, Runtime]) -> None:
    client, runtime = fresh

    def hold(status: str, phase: str) -> None:
        with runtime.uow() as uow:
            uow.session.execute(update(Model).where(Model.id == 1).values(status=status, phase=phase))
            uow.commit()

    hold("retraining", "retraining")
    message = api_error(client.post("/v1/models/1/retrain"), 409, "already_retraining")
    assert "already retraining" in message and "phase retraining" in message
    hold("training", "fitting")
    assert "still training" in api_error(client.post("/v1/models/1/retrain"), 409, "not_ready")
    hold("ready", "ready")
    versions = len(client.get("/v1/models/1/versions").json()["versions"])

    api_error(client.post("/v1/models/1/retrain", json={"reason": ""}), 422, "validation_error")
    api_error(client.post("/v1/models/1/retrain", json={"why": "typo"}), 422, "validation_error")
    api_error(client.post("/v1/models/1/retrain", json={"reason": "x" * 501}), 422, "validation_error")
    # Control characters: Postgres refuses a NUL in text (a 500 there), and the reason is shown in the
    # budget and the audit log as one line.
    for reason in ("bad\u0000reason", "two\nlines", "\u001b[31mred"):
        api_error(client.post("/v1/models/1/retrain", json={"reason": reason}), 422, "validation_error")
    api_error(client.post("/v1/models/999/retrain"), 404, "not_found")
    # None of the refusals scheduled anything.
    model = client.get("/v1/models/1").json()
    assert model["status"]["state"] == "ready" and model["budget_epoch"] == 1
    assert len(client.get("/v1/models/1/versions").json()["versions"]) == versions
    types = {e["type"] for e in client.get("/v1/audit/events", params={"model_id": 1}).json()["events"]}
    assert "retrain.scheduled" not in types

    # A model whose training failed never gets a version: its weights say so, not "try again when its
    # status is ready" (predictions read the same version once Redis holds no served weights).
    with runtime.uow() as uow:
        values = {"status": "failed", "phase": "failed", "error": "boom", "current_version_id": None}
        uow.session.execute(update(Model).where(Model.id == 1).values(**values))
        uow.commit()
    assert "register it again" in api_error(client.get("/v1/models/1/weights"), 409, "model_failed")

    assert client.delete("/v1/models/1").status_code == 200
    api_error(client.post("/v1/models/1/retrain"), 410, "model_deleted")


def test_a_retrain_job_run_again_by_the_reconciler_still_knows_why(fresh: tuple[TestClient, Runtime]) -> None:
    """The reconciler re-publishes a stale retrain with the model id alone: the reason recorded on the
    model row makes it retrain although no deletion waits; with none recorded it only ends the wait."""
    client, runtime = fresh

    def waiting(reason: str | None) -> None:
        with runtime.uow() as uow:
            uow.session.execute(
                update(Model)
                .where(Model.id == 1)
                .values(status="retraining", phase="waiting", retrain_reason=reason)
            )
            uow.commit()

    waiting("asked for before a crash")
    retrain_model(runtime, 1)  # as the re-published job runs it: no reason in its message
    model = _ready(client)
    assert model["budget_epoch"] == 2 and model["current_version"] == 2
    retrains = client.get("/v1/models/1/budget").json()["retrains"]
    assert [r["reason"] for r in retrains] == ["asked for before a crash"]
    with runtime.uow() as uow:
        row = uow.models.get(1)
        assert row is not None and row.retrain_reason is None

    waiting(None)  # e.g. every request it waited for was canceled
    retrain_model(runtime, 1)
    model = _ready(client, timeout=1)
    assert model["budget_epoch"] == 2 and model["current_version"] == 2
