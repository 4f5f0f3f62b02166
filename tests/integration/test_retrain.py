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


def test_a_retrain_asked_for_through_the_api_runs_on_the_worker_and_checks_out(client: Client) -> None:
    model_id = client.trained(n=90, samples_per_owner=3)
    client.done(client.delete(model_id, owner_ids=["owner-00000"])["id"])

    answer = client.http.post(f"/v1/models/{model_id}/retrain", json={"reason": "accuracy drifted"})
    assert answer.status_code == 202, answer.text
    again = client.http.post(f"/v1/models/{model_id}/retrain")
    # The first is still waiting or running on the worker (a fit takes far longer than this round trip).
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_retraining", again.text
    model = client.ready(model_id)
    assert model["budget_epoch"] == 2 and model["current_version"] == 3 and model["train_size"] == 87

    budget = client.http.get(f"/v1/models/{model_id}/budget").json()
    assert [(r["reason"], r["version_seq"]) for r in budget["retrains"]] == [("accuracy drifted", 3)]
    # Checked from outside: the retrained version has its ledger entry and release event, and it is
    # what the service serves.
    (chain,) = check(client.http, [f"model:{model_id}"])
    assert chain.ok, chain.problem
    report = check_model(client.http, model_id, chain_events(client.http, f"model:{model_id}"))
    assert report.ok and report.versions == 3, report.problems
    # The subject forgotten in the first epoch stays forgotten in the second.
    refused = client.http.post(
        f"/v1/models/{model_id}/deletions",
        json={"owner_ids": ["owner-00000"]},
        headers={"Idempotency-Key": "retrain-again-00000"},
    )
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "already_forgotten", refused.text
