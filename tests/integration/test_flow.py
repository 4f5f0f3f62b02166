"""The main flow on the real stack: register, train, delete an owner, completed with a certificate,
predictions changed."""

from __future__ import annotations

import pytest
from safetensors.numpy import load as load_safetensors

from service.runtime import Runtime
from tests.integration.conftest import Client

pytestmark = pytest.mark.integration


def test_register_train_delete_owner_completes_with_certificate_and_changes_predictions(
    client: Client, runtime: Runtime
) -> None:
    dataset_id = client.dataset(n=300, samples_per_owner=3)
    model_id = client.model(dataset_id, epochs=2)
    status = client.http.get(f"/v1/models/{model_id}").json()["status"]
    assert status["state"] in {"queued", "training", "ready"}
    model = client.ready(model_id)
    assert model["current_version"] == 1 and model["status"]["percent"] == 100.0

    # The owner's own rows, read from the stored training arrays, are what we predict on.
    with runtime.uow() as uow:
        data = runtime.cache.dataset(uow.models.get(model_id).training)
    rows = [i for i, o in enumerate(data.owner_ids) if o == "owner-00007"]
    assert len(rows) == 3
    instances = data.features[rows].reshape(len(rows), -1).tolist()
    before = client.http.post(f"/v1/models/{model_id}/predictions", json={"instances": instances}).json()
    assert before["version"] == 1

    accepted = client.delete(model_id, owner_ids=["owner-00007"], callback_url="http://127.0.0.1:9/unused")
    assert accepted["state"] == "queued" and accepted["expected_by"] > accepted["created_at"]
    done = client.done(accepted["id"])

    states = [h["state"] for h in done["history"]]
    assert states == ["received", "queued", "applying", "applied", "completed"]
    assert done["version"]["seq"] == 2 and done["version"]["kind"] == "unlearned"
    cert = done["version"]["certificate"]
    assert cert["method"] == "hessian_free" and cert["charge"] == 3 and cert["cumulative_deletions"] == 3
    assert cert["guarantee"] == "empirical"  # audited mode never claims a certified guarantee
    assert done["num_samples"] == 3

    after = client.http.post(f"/v1/models/{model_id}/predictions", json={"instances": instances}).json()
    assert after["version"] == 2
    assert after["predictions"] != before["predictions"]

    weights = client.http.get(f"/v1/models/{model_id}/weights")
    assert weights.status_code == 200 and weights.headers["X-Model-Version"] == "2"
    assert load_safetensors(weights.content)["weights"].ndim == 1

    versions = client.http.get(f"/v1/models/{model_id}/versions").json()["versions"]
    assert [(v["seq"], v["kind"], v["parent_seq"]) for v in versions] == [
        (1, "initial", None),
        (2, "unlearned", 1),
    ]
    assert versions[0]["weights_available"] is False and versions[1]["weights_available"] is True

    budget = client.http.get(f"/v1/models/{model_id}/budget").json()
    assert budget["budget_epoch"] == 1 and budget["spent"] == 3 and budget["remaining"] == budget["cap"] - 3
    assert [c["kind"] for c in budget["charges"]] == ["initial", "charge"]

    verified = client.http.get("/v1/audit/verify", params={"model_id": model_id}).json()
    assert verified["ok"] is True and len(verified["chains"]) == 3
