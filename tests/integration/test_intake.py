"""The group commit of deletion submissions (service/deletions/intake.py) on the real Postgres: many
submissions share a transaction, yet each gets its own answer, a repeated key replays, an unknown model
fails only its own submissions, and a batch that fails unexpectedly is retried one submission at a time."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import select

from service.db.tables import RequestSubject
from service.deletions import intake
from service.runtime import Runtime
from tests.integration.conftest import Client, key

pytestmark = pytest.mark.integration


def _post(client: Client, model_id: int, owner: str, headers: dict[str, str] | None = None) -> Any:
    return client.http.post(
        f"/v1/models/{model_id}/deletions", json={"owner_ids": [owner]}, headers=headers or key()
    )


def _subject_hashes(runtime: Runtime, request_id: int) -> set[str]:
    with runtime.uow() as uow:
        return set(
            uow.session.scalars(
                select(RequestSubject.subject_hash).where(RequestSubject.request_id == request_id)
            )
        )


@pytest.fixture()
def slow_first_batch(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Hold the intake's first batch for 0.3 s, so that submissions sent meanwhile form one batch; returns
    the sizes of the batches committed together."""
    original = intake._answers
    sizes: list[int] = []

    def held(items: list[Any], accept: Any) -> Any:
        sizes.append(sum(len(item.bodies) for item in items))
        if len(sizes) == 1:
            time.sleep(0.3)
        return original(items, accept)

    monkeypatch.setattr(intake, "_answers", held)
    return sizes


def test_concurrent_submissions_share_transactions_and_each_gets_its_own_answer(
    client: Client, runtime: Runtime, slow_first_batch: list[int]
) -> None:
    model_id = client.trained(n=120, samples_per_owner=2, policy={"max_deletion_fraction": 0.5})
    owners = [f"owner-{i:05d}" for i in range(24)]
    with ThreadPoolExecutor(max_workers=12) as pool:
        answers = list(pool.map(lambda o: _post(client, model_id, o), owners))
    assert all(r.status_code == 202 for r in answers), [r.text for r in answers]
    assert max(slow_first_batch) > 1, f"no two submissions were committed together: {slow_first_batch}"
    ids = [int(r.json()["id"]) for r in answers]
    assert len(set(ids)) == len(owners)
    for owner, request_id in zip(owners, ids):  # each answer names the request of its own owner
        assert _subject_hashes(runtime, request_id) == {runtime.hasher.owner(owner)}
    for request_id in ids:
        done = client.done(request_id)
        assert [h["state"] for h in done["history"]][:2] == ["received", "queued"]
    report = client.http.get("/v1/audit/verify").json()
    assert report["ok"], [c for c in report["chains"] if not c["ok"]]


def test_the_same_key_sent_twice_at_once_is_applied_once_and_replayed(
    client: Client, slow_first_batch: list[int]
) -> None:
    model_id = client.trained(n=60, samples_per_owner=2, policy={"max_deletion_fraction": 0.5})
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    with ThreadPoolExecutor(max_workers=3) as pool:
        first = pool.submit(_post, client, model_id, "owner-00001", headers)
        time.sleep(0.05)  # inside the held first batch: the twins queue behind it together
        twins = [pool.submit(_post, client, model_id, "owner-00001", headers) for _ in range(2)]
        answers = [first.result(), *(t.result() for t in twins)]
    assert [r.status_code for r in answers] == [202, 202, 202], [r.text for r in answers]
    assert len({r.json()["id"] for r in answers}) == 1
    assert [r.headers.get("Idempotent-Replayed") for r in answers] == [None, "true", "true"]


def test_an_unknown_model_fails_only_its_own_submissions(client: Client, slow_first_batch: list[int]) -> None:
    model_id = client.trained(n=60, samples_per_owner=2, policy={"max_deletion_fraction": 0.5})
    targets = [model_id, 987_654, model_id, 987_654, model_id]
    with ThreadPoolExecutor(max_workers=5) as pool:
        answers = list(
            pool.map(lambda pair: _post(client, pair[1], f"owner-{pair[0]:05d}"), enumerate(targets))
        )
    assert [r.status_code for r in answers] == [202 if t == model_id else 404 for t in targets]
    assert "987654" in answers[1].json()["error"]["message"]


def test_a_batch_that_fails_unexpectedly_is_retried_one_submission_at_a_time(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_id = client.trained(n=60, samples_per_owner=2, policy={"max_deletion_fraction": 0.5})
    original = intake._answers
    failed = threading.Event()
    calls: list[int] = []

    def flaky(items: list[Any], accept: Any) -> Any:
        calls.append(sum(len(item.bodies) for item in items))
        if len(calls) == 1:
            time.sleep(0.3)  # let the others queue into one batch
        elif calls[-1] > 1:
            failed.set()
            raise RuntimeError("the database dropped the connection")
        return original(items, accept)

    monkeypatch.setattr(intake, "_answers", flaky)
    owners = [f"owner-{i:05d}" for i in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda o: _post(client, model_id, o), owners))
    assert failed.is_set(), f"no batch of several submissions formed: {calls}"
    assert [r.status_code for r in answers] == [202] * len(owners), [r.text for r in answers]
    assert len({r.json()["id"] for r in answers}) == len(owners)


def test_bulk_and_single_submissions_share_a_batch_and_each_gets_its_own_report(
    client: Client, runtime: Runtime, slow_first_batch: list[int]
) -> None:
    model_id = client.trained(n=60, samples_per_owner=2, policy={"max_deletion_fraction": 0.5})

    def bulk(owners: list[str]) -> Any:
        return client.http.post(
            f"/v1/models/{model_id}/deletions/bulk",
            json={"items": [{"owner_ids": [o]} for o in owners]},
            headers=key(),
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        first = pool.submit(_post, client, model_id, "owner-00001")
        time.sleep(0.05)  # the rest queue behind the held first batch and commit together
        mixed = pool.submit(bulk, ["owner-00002", "owner-09999", "owner-00003"])
        whole = pool.submit(bulk, ["owner-00004", "owner-00005"])
        single = pool.submit(_post, client, model_id, "owner-00006")
        answers = [first.result(), mixed.result(), whole.result(), single.result()]
    # A transaction held more requests than any one submission has: a bulk shared it with another.
    assert max(slow_first_batch) > 3, slow_first_batch
    assert [r.status_code for r in answers] == [202, 207, 202, 202], [r.text for r in answers]
    report = answers[1].json()
    assert (report["accepted"], report["rejected"]) == (2, 1)
    assert [item["status"] for item in report["results"]] == [202, 422, 202]
    assert "owner-09999" in report["results"][1]["error"]["message"]
    owners = {"owner-00002": report["results"][0]["id"], "owner-00003": report["results"][2]["id"]}
    owners |= dict(zip(["owner-00004", "owner-00005"], [i["id"] for i in answers[2].json()["results"]]))
    owners["owner-00006"] = answers[3].json()["id"]
    for owner, request_id in owners.items():
        assert _subject_hashes(runtime, request_id) == {runtime.hasher.owner(owner)}
        client.done(request_id)
