"""Deletion receipts in embedded mode: signed, verifiable with the published key, consistent with the
version and the audit log they name; refused before completion and for ids the request did not name."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from service.db.tables import AuditEvent
from service.receipts.__main__ import main as receipts_cli
from service.runtime import Runtime
from service.signing import ReceiptSigner, new_seed, parse_public_key, parse_seed, verify
from tests.contract.conftest import api_error, forget_owner, hold_model


def test_a_completed_deletion_s_receipt_verifies_and_matches_the_log(
    fresh: tuple[TestClient, Runtime], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client, runtime = fresh
    request = forget_owner(client, "owner-00005")
    key = client.get("/v1/receipts/key").json()
    assert key["algorithm"] == "Ed25519" and "BEGIN PUBLIC KEY" in key["public_key_pem"]

    answer = client.get(f"/v1/deletions/{request['id']}/receipt")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    receipt = body["receipt"]
    assert body["key_id"] == receipt["key_id"] == key["key_id"]
    assert verify(receipt, body["signature"], key["public_key"])
    assert not verify({**receipt, "model_id": 2}, body["signature"], key["public_key"])

    assert receipt["type"] == "lethe.deletion-receipt" and receipt["model_deleted"] is False
    assert (receipt["request_id"], receipt["model_id"], receipt["num_samples"]) == (request["id"], 1, 2)
    assert receipt["completed_at"].endswith("Z")
    version = client.get("/v1/models/1/versions/2").json()
    assert (
        receipt["version"]["seq"] == 2 and receipt["version"]["weights_sha256"] == version["weights_sha256"]
    )
    assert receipt["version"]["guarantee"] == version["certificate"]["guarantee"]
    (completed,) = client.get(
        "/v1/audit/events", params={"request_id": request["id"], "event_type": "deletion.completed"}
    ).json()["events"]
    assert receipt["audit"] == {
        "chain": completed["chain"],
        "seq": completed["seq"],
        "event_type": "deletion.completed",
        "hash": completed["hash"],
    }
    (subject,) = receipt["subjects"]
    assert subject["kind"] == "owner" and subject["id"] is None
    logged = client.get("/v1/audit/events", params={"owner_id": "owner-00005"}).json()["events"]
    assert subject["hash"] in logged[0]["payload"]["subject_hashes"]

    # Naming the owner puts the plain id in the signed receipt, for that person.
    named = client.get(f"/v1/deletions/{request['id']}/receipt", params={"owner_id": "owner-00005"}).json()
    assert named["receipt"]["subjects"][0]["id"] == "owner-00005"
    assert verify(named["receipt"], named["signature"], key["public_key"])
    saved = tmp_path / "receipt.json"
    saved.write_text(json.dumps(named))
    assert receipts_cli(["verify", str(saved), f"--public-key={key['public_key']}"]) == 0
    # With the service at hand, the event the receipt names is looked up in the recomputed chain.
    public = f"--public-key={key['public_key']}"
    assert receipts_cli(["verify", str(saved), public], client=client) == 0
    assert "logged: event" in capsys.readouterr().out
    signer = runtime.receipts
    assert signer is not None
    # Signed, yet wrong: the first event of the model's own chain (its registration), not this completion.
    elsewhere = {**named["receipt"], "audit": {**named["receipt"]["audit"], "chain": "model:1", "seq": 1}}
    saved.write_text(json.dumps({"receipt": elsewhere, "signature": signer.sign(elsewhere)}))
    assert receipts_cli(["verify", str(saved), public], client=client) == 1
    assert "not the receipt's" in capsys.readouterr().out
    saved.write_text(json.dumps(named))
    with runtime.uow() as uow:  # the log altered under the receipt: its chain no longer recomputes
        uow.session.execute(
            update(AuditEvent)
            .where(AuditEvent.chain == completed["chain"], AuditEvent.chain_seq == completed["seq"])
            .values(payload={"forged": True})
        )
        uow.commit()
    assert receipts_cli(["verify", str(saved), public], client=client) == 1
    assert "does not verify" in capsys.readouterr().out

    message = api_error(
        client.get(f"/v1/deletions/{request['id']}/receipt", params={"owner_id": "owner-00006"}),
        422,
        "not_a_subject",
    )
    assert "owner-00006" in message
    api_error(client.get("/v1/deletions/999999/receipt"), 404, "not_found")


def test_no_receipt_before_completion_and_one_when_the_model_was_deleted(
    fresh: tuple[TestClient, Runtime],
) -> None:
    client, runtime = fresh
    hold_model(runtime)  # the deletion stays queued
    queued = client.post(
        "/v1/models/1/deletions",
        json={"sample_ids": ["syn-00007"]},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    ).json()
    time.sleep(0.2)
    assert "queued" in api_error(client.get(f"/v1/deletions/{queued['id']}/receipt"), 409, "not_completed")

    assert client.delete("/v1/models/1").status_code == 200
    body = client.get(f"/v1/deletions/{queued['id']}/receipt", params={"sample_id": "syn-00007"}).json()
    receipt = body["receipt"]
    assert receipt["model_deleted"] is True and receipt["version"] is None
    assert receipt["subjects"] == [
        {"kind": "sample", "hash": receipt["subjects"][0]["hash"], "id": "syn-00007"}
    ]
    assert receipt["audit"]["event_type"] == "deletion.completed"
    assert verify(receipt, body["signature"], client.get("/v1/receipts/key").json()["public_key"])


def test_a_deployment_without_a_key_says_how_to_set_one(fresh: tuple[TestClient, Runtime]) -> None:
    client, runtime = fresh
    signer, runtime.receipts = runtime.receipts, None
    try:
        message = api_error(client.get("/v1/receipts/key"), 409, "receipts_not_configured")
        assert "LETHE_RECEIPT_SIGNING_KEY" in message
        api_error(client.get("/v1/deletions/1/receipt"), 409, "receipts_not_configured")
    finally:
        runtime.receipts = signer


def test_receipts_signed_before_a_key_rotation_still_verify(
    fresh: tuple[TestClient, Runtime], tmp_path: Path
) -> None:
    client, runtime = fresh
    before = client.get(f"/v1/deletions/{forget_owner(client, 'owner-00006')['id']}/receipt").json()
    old_key = client.get("/v1/receipts/key").json()
    assert client.get("/v1/receipts/keys").json()["keys"] == [{**old_key, "status": "current"}]

    # The operator rotates: a new signing key, the old public key published as retired.
    signer, retired = runtime.receipts, runtime.retired_receipt_keys
    runtime.receipts = ReceiptSigner(parse_seed(new_seed()))
    runtime.retired_receipt_keys = [parse_public_key(old_key["public_key"])]
    try:
        current = client.get("/v1/receipts/key").json()
        keys = client.get("/v1/receipts/keys").json()["keys"]
        assert [(k["key_id"], k["status"]) for k in keys] == [
            (current["key_id"], "current"),
            (old_key["key_id"], "retired"),
        ]
        assert keys[1]["public_key"] == old_key["public_key"]
        assert keys[1]["public_key_pem"] == old_key["public_key_pem"]
        after = client.get(f"/v1/deletions/{forget_owner(client, 'owner-00007')['id']}/receipt").json()
        assert after["key_id"] == current["key_id"] != before["key_id"]
        published = [f"--public-key={k['public_key']}" for k in keys]
        for answer in (before, after):  # each verifies against the published key it names
            saved = tmp_path / f"{answer['receipt']['request_id']}.json"
            saved.write_text(json.dumps(answer))
            assert receipts_cli(["verify", str(saved), *published]) == 0
        assert (
            receipts_cli(["verify", str(tmp_path / f"{before['receipt']['request_id']}.json"), published[0]])
            == 1
        )

        # Receipts switched off: nothing signs, yet the retired key is still published.
        runtime.receipts = None
        assert client.get("/v1/receipts/keys").json()["keys"] == [{**keys[1]}]
        api_error(client.get("/v1/receipts/key"), 409, "receipts_not_configured")
    finally:
        runtime.receipts, runtime.retired_receipt_keys = signer, retired
