"""Idempotency-Key semantics (IETF draft) and bulk submission."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from service.db.base import utcnow
from service.deletions.schemas import DeletionIn
from service.idempotency.service import fingerprint
from service.runtime import Runtime
from tests.integration.conftest import Client

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def model_id(api: TestClient) -> int:
    return Client(api).trained(n=120, samples_per_owner=2)


def _post(client: Client, model_id: int, body: dict, key: str | None) -> object:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return client.http.post(f"/v1/models/{model_id}/deletions", json=body, headers=headers)


def test_same_key_and_body_returns_the_original_response_and_applies_once(
    client: Client, model_id: int
) -> None:
    key = str(uuid.uuid4())
    first = _post(client, model_id, {"owner_ids": ["owner-00001"]}, key)
    # Same body with another key order and whitespace: the same request.
    second = client.http.post(
        f"/v1/models/{model_id}/deletions",
        content=b'{ "owner_ids" : ["owner-00001"] }',
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )
    assert first.status_code == second.status_code == 202
    assert second.json() == first.json()
    assert second.headers.get("Idempotent-Replayed") == "true" and "Idempotent-Replayed" not in first.headers
    client.done(first.json()["id"])
    third = _post(client, model_id, {"owner_ids": ["owner-00001"]}, key)
    assert third.status_code == 202 and third.json()["id"] == first.json()["id"]
    mine = client.http.get(f"/v1/models/{model_id}/deletions").json()["deletions"]
    assert sum(1 for d in mine if d["id"] == first.json()["id"]) == 1
    assert len([d for d in mine if d["num_samples"] == 2 and d["state"] == "completed"]) >= 1


def test_same_key_different_body_is_422(client: Client, model_id: int) -> None:
    key = str(uuid.uuid4())
    assert _post(client, model_id, {"owner_ids": ["owner-00002"]}, key).status_code == 202
    r = _post(client, model_id, {"owner_ids": ["owner-00003"]}, key)
    assert r.status_code == 422 and r.json()["error"]["code"] == "idempotency_key_reused"


def test_missing_key_is_400(client: Client, model_id: int) -> None:
    r = _post(client, model_id, {"owner_ids": ["owner-00004"]}, None)
    assert r.status_code == 400
    assert (
        r.json()["error"]["code"] == "idempotency_key_missing"
        and "Idempotency-Key" in r.json()["error"]["message"]
    )


def test_a_key_sent_as_the_drafts_quoted_string_is_the_same_key_as_its_text(
    client: Client, model_id: int
) -> None:
    """The draft defines the header as a Structured Field string (``"..."``); most clients send the bare
    text. Both name one key, so a retry in either form replays the first answer."""
    text = f"retry {uuid.uuid4()}"  # a space is allowed inside the key
    body = {"owner_ids": ["owner-00041"]}
    first = _post(client, model_id, body, f'"{text}"')
    bare = _post(client, model_id, body, text)
    assert first.status_code == bare.status_code == 202
    assert bare.json() == first.json() and bare.headers.get("Idempotent-Replayed") == "true"
    assert _post(client, model_id, {"owner_ids": ["owner-00042"]}, text).status_code == 422
    # Escapes are read: this key's text is a\b"c and the rest, another key (a body of its own, so
    # reusing the first key's text would be a 422).
    escaped = _post(client, model_id, {"owner_ids": ["owner-00043"]}, '"a\\\\b\\"c ' + text + '"')
    assert escaped.status_code == 202 and escaped.json()["id"] != first.json()["id"]
    assert _post(client, model_id, {"owner_ids": ["owner-00043"]}, 'a\\b"c ' + text).json() == escaped.json()


@pytest.mark.parametrize(
    "key",
    ["", '"unterminated', '"bad \\x escape"', '"\\"nested\\""', '""', "x" * 256],
)
def test_a_malformed_key_is_400_and_says_what_a_key_is(client: Client, model_id: int, key: str) -> None:
    r = _post(client, model_id, {"owner_ids": ["owner-00044"]}, key)
    assert r.status_code == 400, key
    assert r.json()["error"]["code"] == "idempotency_key_invalid"
    assert "printable ASCII" in r.json()["error"]["message"]


def test_first_request_still_in_flight_is_409(client: Client, model_id: int, runtime: Runtime) -> None:
    key = str(uuid.uuid4())
    body = {"owner_ids": ["owner-00005"]}
    # Claim the key exactly as a concurrent first request does before it commits its work.
    digest = fingerprint(runtime.hasher, DeletionIn(**body).model_dump(mode="json"))
    with runtime.uow() as uow:
        assert uow.idempotency.claim(f"deletions:{model_id}", key, digest, utcnow() + timedelta(hours=1))
        uow.commit()
    r = _post(client, model_id, body, key)
    assert r.status_code == 409 and r.json()["error"]["code"] == "idempotency_key_in_flight"


def test_a_rejected_request_is_replayed_too(client: Client, model_id: int) -> None:
    key = str(uuid.uuid4())
    first = _post(client, model_id, {"sample_ids": ["no-such-sample"]}, key)
    again = _post(client, model_id, {"sample_ids": ["no-such-sample"]}, key)
    assert first.status_code == again.status_code == 422
    # The live answer names the id; the stored one, which the replay returns, its position in the body.
    message = first.json()["error"]["message"]
    assert "'no-such-sample'" in message
    assert again.json()["error"] == {
        **first.json()["error"],
        "message": message.replace("'no-such-sample'", "sample_ids[0]"),
    }


def test_bulk_reports_each_item(client: Client, model_id: int) -> None:
    body = {
        "items": [{"owner_ids": ["owner-00010"]}, {"sample_ids": ["nope"]}, {"owner_ids": ["owner-00011"]}]
    }
    key = str(uuid.uuid4())
    r = client.http.post(f"/v1/models/{model_id}/deletions/bulk", json=body, headers={"Idempotency-Key": key})
    assert r.status_code == 207, r.text
    out = r.json()
    assert (out["accepted"], out["rejected"]) == (2, 1)
    assert [i["status"] for i in out["results"]] == [202, 422, 202]
    assert out["results"][1]["error"]["code"] == "unknown_subject"
    for item in (out["results"][0], out["results"][2]):
        client.done(item["id"])
    replay = client.http.post(
        f"/v1/models/{model_id}/deletions/bulk", json=body, headers={"Idempotency-Key": key}
    )
    stored = out["results"][1]["error"]
    stored["message"] = stored["message"].replace("'nope'", "items[1].sample_ids[0]")  # stored by position
    assert replay.status_code == 207 and replay.json() == out


def test_forgetting_twice_is_409_and_unknown_is_422(client: Client, model_id: int) -> None:
    done = client.done(client.delete(model_id, owner_ids=["owner-00020"])["id"])
    assert done["state"] == "completed"
    again = _post(client, model_id, {"owner_ids": ["owner-00020"]}, str(uuid.uuid4()))
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_forgotten"
    sample = _post(client, model_id, {"sample_ids": ["syn-00040"]}, str(uuid.uuid4()))  # owner-00020's sample
    assert sample.status_code == 409
    unknown = _post(client, model_id, {"owner_ids": ["owner-99999"]}, str(uuid.uuid4()))
    assert unknown.status_code == 422 and "owner-99999" in unknown.json()["error"]["message"]
