"""Cancel while queued; callbacks delivered after completion through the outbox, retried a bounded number
of times; model status while training; state history of a failed request."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import update

from service.db.tables import Model
from service.runtime import Runtime
from tests.integration.conftest import CALLBACK_SIGNING_KEY, Client, key, wait_for

pytestmark = pytest.mark.integration


class _Hook:
    def __init__(self, fail_first: int) -> None:
        self.fail_first = fail_first
        self.calls: list[dict] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                hook.calls.append(
                    {
                        "body": json.loads(raw),
                        "raw": raw,
                        "attempt": self.headers.get("X-Lethe-Attempt"),
                        "host": self.headers.get("Host"),
                        "signature": self.headers.get("Lethe-Signature"),
                    }
                )
                self.send_response(500 if len(hook.calls) <= hook.fail_first else 204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # A name, not an address: the worker resolves it, checks the address against the allowed networks
        # (service.callback_targets) and connects to that address with the name in the Host header.
        self.host = f"localhost:{self.server.server_address[1]}"
        self.url = f"http://{self.host}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture()
def hook() -> Iterator[_Hook]:
    h = _Hook(fail_first=1)
    yield h
    h.server.shutdown()


def test_callback_is_delivered_after_completion_and_retried(client: Client, hook: _Hook) -> None:
    model_id = client.trained(n=90, samples_per_owner=3)
    request_id = client.delete(model_id, owner_ids=["owner-00002"], callback_url=hook.url)["id"]
    client.done(request_id)

    def delivered() -> dict | None:
        d = client.deletion(request_id)
        return d if d["callback"]["state"] == "delivered" else None

    final = wait_for(delivered, 30, 0.1, "callback delivery")
    assert final["callback"]["attempts"] == 2 and len(hook.calls) == 2
    assert [c["attempt"] for c in hook.calls] == ["1", "2"]
    assert {c["host"] for c in hook.calls} == {hook.host}
    for call in hook.calls:  # signed: verified the way the README tells an app to
        fields = dict(part.split("=", 1) for part in call["signature"].split(","))
        expected = hmac.new(
            CALLBACK_SIGNING_KEY.encode(), fields["t"].encode() + b"." + call["raw"], hashlib.sha256
        ).hexdigest()
        assert hmac.compare_digest(fields["v1"], expected) and abs(time.time() - int(fields["t"])) < 60
    body = hook.calls[-1]["body"]
    assert body["request_id"] == request_id and body["state"] == "completed" and body["version_seq"] == 2


def test_callback_failures_are_bounded(client: Client) -> None:
    model_id = client.trained(n=90, samples_per_owner=3)
    # Nothing listens on port 9 (discard): every attempt fails fast.
    request_id = client.delete(model_id, owner_ids=["owner-00003"], callback_url="http://127.0.0.1:9/none")[
        "id"
    ]
    assert client.done(request_id)["state"] == "completed"  # delivery never blocks completion

    def gave_up() -> dict | None:
        d = client.deletion(request_id)
        return d if d["callback"]["state"] == "failed" else None

    final = wait_for(gave_up, 60, 0.2, "callback to give up")
    assert final["callback"]["attempts"] == 5
    events = client.http.get(f"/v1/audit/events?request_id={request_id}&event_type=callback.failed").json()[
        "events"
    ]
    assert len(events) == 1


def test_cancel_while_queued_and_not_after(client: Client, runtime: Runtime) -> None:
    model_id = client.trained(n=90, samples_per_owner=3)
    # Hold the model the way a running retrain does, so a new deletion stays queued for certain.
    with runtime.uow() as uow:
        uow.session.execute(
            update(Model).where(Model.id == model_id).values(status="retraining", phase="running")
        )
        uow.commit()
    queued = client.delete(model_id, owner_ids=["owner-00001"])
    time.sleep(0.3)
    assert client.deletion(queued["id"])["state"] == "queued"
    canceled = client.http.post(f"/v1/deletions/{queued['id']}/cancel")
    assert canceled.status_code == 200 and canceled.json()["state"] == "canceled"
    assert [h["state"] for h in canceled.json()["history"]] == ["received", "queued", "canceled"]
    with runtime.uow() as uow:
        uow.session.execute(update(Model).where(Model.id == model_id).values(status="ready", phase="ready"))
        uow.commit()

    other = client.done(client.delete(model_id, owner_ids=["owner-00002"])["id"])
    assert other["version"]["seq"] == 2 and other["num_samples"] == 3
    assert client.deletion(queued["id"])["state"] == "canceled"
    # The canceled owner was never forgotten: it can still be deleted.
    assert client.done(client.delete(model_id, owner_ids=["owner-00001"])["id"])["state"] == "completed"
    again = client.http.post(f"/v1/deletions/{other['id']}/cancel")
    assert again.status_code == 409 and "completed" in again.json()["error"]["message"]
    assert client.http.post("/v1/deletions/999999/cancel").status_code == 404


def test_status_shows_phase_percent_and_eta(client: Client) -> None:
    dataset_id = client.dataset(n=300, samples_per_owner=3)
    model_id = client.model(dataset_id, epochs=40)
    seen = []

    def progressing() -> bool:
        status = client.http.get(f"/v1/models/{model_id}").json()["status"]
        seen.append(status)
        return status["state"] == "ready"

    wait_for(progressing, 120, 0.05, "training")
    assert {"state", "phase", "percent", "eta_seconds", "error"} <= set(seen[-1])
    assert seen[-1]["percent"] == 100.0 and seen[-1]["error"] is None
    assert any(
        s["state"] == "training" and 0 < s["percent"] < 100 and s["eta_seconds"] is not None for s in seen
    )
    assert (
        client.http.post(
            f"/v1/models/{model_id}/deletions", json={"owner_ids": ["owner-00000"]}, headers=key()
        ).status_code
        == 202
    )
