"""A request a method refuses fails with the method's message, which quotes the id it stopped at: the
reason kept (the request's row and history, its audit event, what a callback reads) names that subject
by keyed hash, never in plain."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from service.jobs import update_round
from service.runtime import Runtime
from service.subjects import hashed_names
from unlearning.errors import AlreadyDeletedError
from unlearning.methods.protocol import UnlearningMethod

OWNER = "owner-00003"


class _Refusing:
    """The model's method, except that ``forget`` refuses, naming ``sample``."""

    def __init__(self, real: UnlearningMethod, sample: str) -> None:
        self._real, self._sample = real, sample

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def forget(self, *args: Any, **kwargs: Any) -> Any:
        raise AlreadyDeletedError(f"sample {self._sample!r} was already forgotten in this budget epoch")


def test_a_method_error_is_kept_with_the_subject_hashed(
    fresh: tuple[TestClient, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, runtime = fresh
    with runtime.uow() as uow:
        samples = uow.models.samples_of_owners(1, [OWNER])[OWNER]
    real = update_round.get_method
    monkeypatch.setattr(update_round, "get_method", lambda name: _Refusing(real(name), samples[-1]))

    r = client.post(
        "/v1/models/1/deletions",
        json={"owner_ids": [OWNER]},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert r.status_code == 202, r.text
    request_id = r.json()["id"]
    deadline = time.monotonic() + 30
    while (request := client.get(f"/v1/deletions/{request_id}").json())["state"] != "failed":
        assert time.monotonic() < deadline and request["state"] != "completed", request
        time.sleep(0.02)

    hashed = hashed_names(runtime.hasher, [], samples)[samples[-1]]
    assert request["failure_reason"] == f"sample {hashed} was already forgotten in this budget epoch"
    assert request["history"][-1]["detail"] == request["failure_reason"]
    events = client.get("/v1/audit/events", params={"request_id": request_id}).json()["events"]
    failed = [e for e in events if e["type"] == "deletion.failed"]
    assert [e["payload"]["reason"] for e in failed] == [request["failure_reason"]]
    # Nothing the failure wrote names the subject (the samples table still holds its rows: not forgotten).
    with runtime.engine.connect() as conn:
        for table in ("deletion_requests", "request_events", "audit_events", "outbox", "idempotency_keys"):
            rows = conn.execute(text(f"SELECT t::text FROM {table} t")).scalars().all()
            assert not [row for row in rows for s in (OWNER, *samples) if s in row], table
