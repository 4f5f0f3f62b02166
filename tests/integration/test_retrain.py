"""Budget exhaustion: the affected requests wait, a retrain on the remaining data runs, a new budget
epoch begins, and the retrained version completes them."""

from __future__ import annotations

import pytest

from service.audit.check import chain_events, check, check_model
from tests.integration.conftest import Client

pytestmark = pytest.mark.integration


def test_budget_exhaustion_triggers_a_retrain_that_completes_the_waiting_requests(client: Client) -> None:
    # 3 samples per owner, at most 6 deletions per budget epoch: the third owner does not fit.
    model_id = client.trained(
        n=150, samples_per_owner=3, policy={"max_deletions": 6, "max_deletion_fraction": None}
    )
    first = client.done(client.delete(model_id, owner_ids=["owner-00000", "owner-00001"])["id"])
    assert first["version"]["kind"] == "unlearned" and first["version"]["certificate"]["budget_spent"] == 6

    waiting = client.delete(model_id, owner_ids=["owner-00002"])
    done = client.done(waiting["id"], timeout=120)
    states = [h["state"] for h in done["history"]]
    assert states == ["received", "queued", "awaiting_retrain", "retraining", "applied", "completed"]
    reason = next(h["detail"] for h in done["history"] if h["state"] == "awaiting_retrain")
    assert "max_deletions" in reason
    assert done["version"]["kind"] == "retrained"

    model = client.http.get(f"/v1/models/{model_id}").json()
    assert model["budget_epoch"] == 2 and model["status"]["state"] == "ready"
    assert model["train_size"] == 150 - 9

    budget = client.http.get(f"/v1/models/{model_id}/budget").json()
    assert budget["budget_epoch"] == 2 and budget["spent"] == 0
    assert [r["budget_epoch"] for r in budget["retrains"]] == [2]
    assert "max_deletions" in budget["retrains"][0]["reason"]
    assert all(c["spent"] <= c["cap"] for c in budget["charges"])

    # The new epoch has its own budget: the next deletion is an ordinary update again.
    after = client.done(client.delete(model_id, owner_ids=["owner-00003"])["id"])
    assert after["version"]["kind"] == "unlearned"
    assert after["version"]["certificate"]["cumulative_deletions"] == 3
    versions = client.http.get(f"/v1/models/{model_id}/versions").json()["versions"]
    assert [v["kind"] for v in versions] == ["initial", "unlearned", "retrained", "unlearned"]
    assert [v["budget_epoch"] for v in versions] == [1, 1, 2, 2]

    events = client.http.get(f"/v1/audit/events?model_id={model_id}&event_type=retrain.scheduled").json()[
        "events"
    ]
    assert len(events) == 1 and "max_deletions" in events[0]["payload"]["reason"]

    # Checked from outside (service.audit.check): every version, the retrained one included, has its
    # ledger entry and its release event, and the weights served are the last version's.
    (chain,) = check(client.http, [f"model:{model_id}"])
    assert chain.ok, chain.problem
    report = check_model(client.http, model_id, chain_events(client.http, f"model:{model_id}"))
    assert report.ok and report.versions == 4, report.problems
