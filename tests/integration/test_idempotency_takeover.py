"""An Idempotency-Key's claim commits with the work it guards (service.idempotency.service.run), on the real
Postgres: a claim an API killed mid-request left in flight is taken over by the next retry, a duplicate
sent while the first runs waits for it and replays its answer, and one whose first rolled back does the
work itself."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from service.db.base import utcnow
from service.db.tables import DeletionRequest, IdempotencyKey
from service.deletions.intake import deletion_scope
from service.deletions.schemas import DeletionIn
from service.idempotency import service as idempotency
from service.idempotency.service import IN_FLIGHT_TAKEOVER_SECONDS, Outcome, fingerprint
from service.runtime import Runtime
from service.uow import UnitOfWork
from tests.integration.conftest import Client

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def model_id(api: Any) -> int:
    return Client(api).trained(n=120, samples_per_owner=2, policy={"max_deletion_fraction": 0.5})


def _post(client: Client, model_id: int, owner: str, key: str) -> Any:
    return client.http.post(
        f"/v1/models/{model_id}/deletions", json={"owner_ids": [owner]}, headers={"Idempotency-Key": key}
    )


def _claim_as_a_killed_api_left_it(
    runtime: Runtime, scope: str, key: str, body: dict[str, Any], age: float
) -> None:
    """The row an older version committed on its own before its work, and then died: in flight, ``age``
    seconds old."""
    digest = fingerprint(runtime.hasher, DeletionIn(**body).model_dump(mode="json"))
    created = utcnow() - timedelta(seconds=age)
    with runtime.uow() as uow:
        uow.session.add(
            IdempotencyKey(
                scope=scope,
                key=key,
                fingerprint=digest,
                status="in_flight",
                created_at=created,
                expires_at=created + timedelta(hours=24),
            )
        )
        uow.commit()


def _requests(runtime: Runtime, model_id: int) -> int:
    with runtime.uow() as uow:
        count = uow.session.scalar(
            select(func.count()).select_from(DeletionRequest).where(DeletionRequest.model_id == model_id)
        )
        return int(count or 0)


def test_a_claim_a_killed_api_left_in_flight_is_taken_over_by_the_retry(
    client: Client, runtime: Runtime, model_id: int
) -> None:
    key = str(uuid.uuid4())
    body = {"owner_ids": ["owner-00031"]}
    _claim_as_a_killed_api_left_it(
        runtime, deletion_scope(model_id), key, body, IN_FLIGHT_TAKEOVER_SECONDS + 5
    )
    retried = _post(client, model_id, "owner-00031", key)
    assert retried.status_code == 202, retried.text
    assert "Idempotent-Replayed" not in retried.headers
    client.done(retried.json()["id"])
    again = _post(client, model_id, "owner-00031", key)  # the key now holds the answer
    assert again.status_code == 202 and again.json() == retried.json()
    assert again.headers.get("Idempotent-Replayed") == "true"


def test_a_claim_in_flight_for_less_than_the_bound_still_answers_409(
    client: Client, runtime: Runtime, model_id: int
) -> None:
    key = str(uuid.uuid4())
    _claim_as_a_killed_api_left_it(runtime, deletion_scope(model_id), key, {"owner_ids": ["owner-00032"]}, 1)
    r = _post(client, model_id, "owner-00032", key)
    assert r.status_code == 409 and r.json()["error"]["code"] == "idempotency_key_in_flight"


def test_two_requests_at_once_with_one_key_make_one_deletion_and_get_one_answer(
    client: Client, runtime: Runtime, model_id: int
) -> None:
    before = _requests(runtime, model_id)
    key = str(uuid.uuid4())
    start = threading.Barrier(4)

    def send(_: int) -> Any:
        start.wait()
        return _post(client, model_id, "owner-00033", key)

    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(send, range(4)))
    assert [r.status_code for r in answers] == [202] * 4, [r.text for r in answers]
    assert len({r.json()["id"] for r in answers}) == 1
    assert sum(1 for r in answers if "Idempotent-Replayed" not in r.headers) == 1
    assert _requests(runtime, model_id) == before + 1


class _HeldHandler:
    """A handler that signals once it holds the claim, then waits ``hold`` seconds (and fails if told)."""

    def __init__(self, hold: float, fail_first: bool = False) -> None:
        self.hold, self.fail_first = hold, fail_first
        self.claimed = threading.Event()
        self.calls = 0

    def __call__(self, uow: UnitOfWork) -> tuple[int, dict[str, Any]]:
        self.calls += 1
        call = self.calls
        self.claimed.set()
        if call == 1:
            time.sleep(self.hold)
            if self.fail_first:
                raise RuntimeError("the first owner dies")
        return 201, {"call": call}


def _run(runtime: Runtime, scope: str, key: str, handler: _HeldHandler) -> Outcome:
    return idempotency.run(
        runtime.uow, runtime.hasher, scope=scope, key=key, body={"b": 1}, ttl_hours=1, handler=handler
    )


def test_a_duplicate_waits_for_the_first_to_commit_and_replays_its_answer(runtime: Runtime) -> None:
    scope, key, handler = f"test:{uuid.uuid4()}", "k", _HeldHandler(hold=0.5)
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(_run, runtime, scope, key, handler)
        assert handler.claimed.wait(10)
        second = pool.submit(_run, runtime, scope, key, handler)
        outcomes = first.result(), second.result()
    assert handler.calls == 1
    assert outcomes == (Outcome(201, {"call": 1}, replayed=False), Outcome(201, {"call": 1}, replayed=True))


def test_a_duplicate_whose_first_rolled_back_does_the_work_itself(runtime: Runtime) -> None:
    scope, key, handler = f"test:{uuid.uuid4()}", "k", _HeldHandler(hold=0.5, fail_first=True)
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(_run, runtime, scope, key, handler)
        assert handler.claimed.wait(10)
        second = pool.submit(_run, runtime, scope, key, handler)
        with pytest.raises(RuntimeError, match="first owner dies"):
            first.result()
        outcome = second.result()
    assert handler.calls == 2 and outcome == Outcome(201, {"call": 2}, replayed=False)
    assert _run(runtime, scope, key, handler) == Outcome(201, {"call": 2}, replayed=True)


def test_an_unexpected_error_leaves_no_claim_behind(runtime: Runtime) -> None:
    scope, key = f"test:{uuid.uuid4()}", "k"

    def broken(uow: UnitOfWork) -> tuple[int, dict[str, Any]]:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        idempotency.run(
            runtime.uow, runtime.hasher, scope=scope, key=key, body={}, ttl_hours=1, handler=broken
        )
    with runtime.uow() as uow:
        assert uow.idempotency.get(scope, key) is None
