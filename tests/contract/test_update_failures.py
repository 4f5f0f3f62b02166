"""A persistent fault in an update fails the queued requests with its reason instead of leaving them
queued for ever; the model stays on its version, and the next update works again."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from sqlalchemy import select

from service.db.tables import ArtifactRef
from service.jobs import drain, training
from service.runtime import Runtime


def collect_one_new_blob(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], Callable[[str], bool]]:
    """Make the next commit that checks a blob no row held before this call find it gone, as if another
    holder's completion had collected it after the writer's put. Returns the digest (once it happened)
    and the store's real ``exists``."""
    store = runtime.artifacts
    real_exists = store.exists
    with runtime.uow() as uow:
        held_before = set(uow.session.scalars(select(ArtifactRef.blob)))
    collected: list[str] = []

    def collected_once(digest: str) -> bool:
        if not collected and digest not in held_before:
            collected.append(digest)
            store.delete(digest)
        return real_exists(digest)

    monkeypatch.setattr(store, "exists", collected_once)
    return collected, real_exists


def every_reference_is_stored(runtime: Runtime, exists: Callable[[str], bool]) -> bool:
    with runtime.uow() as uow:
        return all(exists(blob) for blob in uow.session.scalars(select(ArtifactRef.blob)))


def _submit(client: TestClient, owner: str) -> int:
    r = client.post(
        "/v1/models/1/deletions", json={"owner_ids": [owner]}, headers={"Idempotency-Key": str(uuid.uuid4())}
    )
    assert r.status_code == 202, r.text
    return int(r.json()["id"])


def _state(client: TestClient, request_id: int) -> dict:
    return client.get(f"/v1/deletions/{request_id}").json()


def test_persistent_update_fault_fails_requests_with_the_reason(
    fresh: tuple[TestClient, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    embedded, embedded_runtime = fresh
    before = embedded.get("/v1/models/1").json()["current_version"]

    def broken(rt: Runtime, model_id: int) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(drain, "_drain", broken)
    request_id = _submit(embedded, "owner-00003")
    for _ in range(10):  # the in-process worker may take some of these attempts itself
        if _state(embedded, request_id)["state"] == "failed":
            break
        with pytest.raises(RuntimeError, match="disk on fire"):
            drain.apply_deletions(embedded_runtime, 1)
    failed = _state(embedded, request_id)
    assert failed["state"] == "failed" and "disk on fire" in failed["failure_reason"]
    assert embedded.get("/v1/models/1").json()["current_version"] == before

    monkeypatch.undo()
    request_id = _submit(embedded, "owner-00004")
    deadline = time.monotonic() + 30
    while _state(embedded, request_id)["state"] != "completed":
        assert time.monotonic() < deadline, (
            _state(embedded, request_id),
            embedded.get("/v1/models/1").json()["status"],
        )
        time.sleep(0.05)


def test_an_update_whose_blob_is_collected_before_its_commit_writes_it_again(
    fresh: tuple[TestClient, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit's check finds one of its blobs gone (as if another holder's completion had collected
    it after the put): the update rolls back, writes its blobs again, and the request completes with
    every blob of the new version stored."""
    embedded, embedded_runtime = fresh
    collected, real_exists = collect_one_new_blob(embedded_runtime, monkeypatch)
    rewrites = _rewrites("apply_deletions")
    request_id = _submit(embedded, "owner-00005")
    deadline = time.monotonic() + 30
    while _state(embedded, request_id)["state"] != "completed":
        assert time.monotonic() < deadline, _state(embedded, request_id)
        time.sleep(0.05)
    assert collected and real_exists(collected[0]), "the collected blob was written again"
    assert _rewrites("apply_deletions") >= rewrites + 1
    assert every_reference_is_stored(embedded_runtime, real_exists)
    assert embedded.get("/v1/models/1/weights").status_code == 200


def test_a_training_whose_blob_is_collected_before_its_commit_writes_it_again(
    fresh: tuple[TestClient, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a training: its release is written again (the fit is not redone) and the model is
    ready with every blob it names stored. (Another seed: trained alike, the model would share every
    blob with model 1, and none would be new.)"""
    embedded, embedded_runtime = fresh
    rewrites = _rewrites("train_model")
    collected, real_exists = collect_one_new_blob(embedded_runtime, monkeypatch)
    _train(embedded, "again", seed=7)
    assert collected and real_exists(collected[0])
    assert _rewrites("train_model") >= rewrites + 1
    assert every_reference_is_stored(embedded_runtime, real_exists)


def test_a_training_whose_statistics_are_unlinked_before_its_record_writes_them_again(
    fresh: tuple[TestClient, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race a shared worker saw in CI: the training's put found its statistics bytes already stored
    (another holder's garbage), a collector unlinked them, and the record step then read them back to fill
    Redis (BlobNotFound: the model stayed in training). Redis is filled from the statistics in memory now,
    so the commit's check sees the unlinked blob and the release is written again."""
    embedded, embedded_runtime = fresh
    rewrites = _rewrites("train_model")
    original = training._record_training
    unlinked: list[str] = []

    def record_after_a_collector(rt: Runtime, model_id: int, release: Any, certificate: Any) -> int | None:
        if not unlinked and release.statistics:
            unlinked.append(next(iter(release.statistics["buckets"].values())))
            rt.artifacts.delete(unlinked[0])  # as a completion's collect_garbage would, in another thread
            rt.cache.forget(unlinked)
        return original(rt, model_id, release, certificate)

    monkeypatch.setattr(training, "_record_training", record_after_a_collector)
    _train(embedded, "raced", seed=11)
    assert unlinked and embedded_runtime.artifacts.exists(unlinked[0]), "the unlinked blob was written again"
    assert _rewrites("train_model") >= rewrites + 1


def _train(embedded: TestClient, name: str, *, seed: int) -> int:
    """Register a 1-epoch model on dataset 1 and wait until it is ready; returns its id."""
    r = embedded.post(
        "/v1/models", json={"name": name, "dataset_id": 1, "seed": seed, "hyperparameters": {"epochs": 1}}
    )
    assert r.status_code == 202, r.text
    model_id = int(r.json()["id"])
    deadline = time.monotonic() + 60
    while (state := embedded.get(f"/v1/models/{model_id}").json()["status"])["state"] != "ready":
        assert state["state"] in ("queued", "training") and time.monotonic() < deadline, state
        time.sleep(0.05)
    return model_id


def _rewrites(job: str) -> float:
    """Blob rewrites counted so far. The counter is the process's: other embedded apps of the session
    (trainings the schema fuzzer registered) may add their own, so the tests require "at least"."""
    return REGISTRY.get_sample_value("lethe_blob_rewrites_total", {"job": job}) or 0.0
