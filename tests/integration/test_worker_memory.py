"""A worker's memory under steady load: deletion rounds and retrains of a ``hessian_free`` and a
``newton_removal`` model, run in this process as a Celery worker runs them (the real Postgres and Redis),
leave its resident set where the warm-up left it (docs/decisions.md, "Worker memory under steady load")."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from service.jobs.drain import apply_deletions
from service.jobs.state import MAX_ASSEMBLED, BlobCache, write_training
from service.jobs.training import retrain_model, train_model
from service.runtime import Runtime
from service.storage.artifacts import LocalArtifactStore
from tests.integration.conftest import Deployment, deployment_of_its_own, settings_from
from unlearning.data import make_synthetic

pytestmark = pytest.mark.integration

_WARM_UP, _MEASURED = 3, 6  # cycles
_BOUND_MB = 20.0  # RSS growth over the measured cycles: measured 1 to 7 MiB; holding superseded datasets, 66
_ROUNDS = {"newton_removal": 8, "hessian_free": 1}  # deletion rounds per cycle, each one version
_ROWS = 4000  # one table, both models trained on it (two samples per owner)
_MODELS: dict[str, dict[str, Any]] = {  # method -> hyperparameters
    "newton_removal": {},  # reads its remaining rows in every round
    "hessian_free": {"epochs": 1},
}


def _rss_mb() -> float:
    """This process's resident set (``VmRSS``), MiB, after a full collection."""
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@contextmanager
def _worker(d: Deployment) -> Iterator[Runtime]:
    """A worker process's runtime: a database pool and blob cache of its own, beside the API's."""
    rt = Runtime(settings_from(d.env), role="worker")
    try:
        yield rt
    finally:
        rt.engine.dispose()


@dataclass
class _Load:
    """Deletions of one owner at a time, each applied as a worker applies it, and a retrain per cycle."""

    d: Deployment
    worker: Runtime
    models: dict[str, int]
    next_owner: int = 0

    def cycle(self) -> None:
        for method, model_id in self.models.items():
            for _ in range(_ROUNDS[method]):
                self._delete_one_owner(model_id)
            r = self.d.client.http.post(f"/v1/models/{model_id}/retrain", json={"reason": "steady load"})
            assert r.status_code in (200, 202), r.text
            retrain_model(self.worker, model_id)
            self.d.client.ready(model_id)

    def _delete_one_owner(self, model_id: int) -> None:
        owner = f"owner-{self.next_owner:05d}"
        self.next_owner += 1
        request_id = int(self.d.client.delete(model_id, owner_ids=[owner])["id"])
        apply_deletions(self.worker, model_id)
        if self._state(model_id) == "retraining":  # the round found the budget spent
            retrain_model(self.worker, model_id)
            apply_deletions(self.worker, model_id)
        self.d.client.done(request_id, timeout=60)

    def _state(self, model_id: int) -> str:
        return str(self.d.client.http.get(f"/v1/models/{model_id}").json()["status"]["state"])


def _trained(d: Deployment, worker: Runtime, dataset_id: int, method: str) -> int:
    body = {
        "name": method,
        "dataset_id": dataset_id,
        "method": method,
        "hyperparameters": _MODELS[method],
        "budget_policy": {"max_deletion_fraction": 0.5},
    }
    r = d.client.http.post("/v1/models", json=body)
    assert r.status_code == 202, r.text
    model_id = int(r.json()["id"])
    train_model(worker, model_id)
    d.client.ready(model_id)
    return model_id


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the resident set from /proc")
def test_the_worker_memory_levels_off_under_deletions_and_retrains(tmp_path: Path) -> None:
    with deployment_of_its_own(tmp_path) as d, _worker(d) as worker:
        table = d.client.dataset(n=_ROWS, samples_per_owner=2, seed=1)
        load = _Load(d, worker, {method: _trained(d, worker, table, method) for method in _MODELS})
        for _ in range(_WARM_UP):
            load.cycle()
        before = _rss_mb()
        for _ in range(_MEASURED):
            load.cycle()
        grown = _rss_mb() - before

        assert grown <= _BOUND_MB, f"the RSS grew {grown:.1f} MiB over {_MEASURED} cycles after the warm-up"
        assembled = [key for kind, key in worker.cache.cached() if kind == "dataset"]
        assert len(assembled) <= MAX_ASSEMBLED, "the blob cache holds superseded datasets"


def test_the_blob_cache_holds_only_the_latest_assembled_datasets(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "artifacts", durable=False)
    cache = BlobCache(store, ttl_seconds=600)
    manifests = [
        write_training(store, make_synthetic(n=20, num_features=3, num_classes=2, seed=seed), max_buckets=4)
        for seed in range(MAX_ASSEMBLED + 3)
    ]
    assembled = [cache.dataset(m) for m in manifests]
    held = [key for kind, key in cache.cached() if kind == "dataset"]
    assert len(held) == MAX_ASSEMBLED
    assert cache.dataset(manifests[-1]) is assembled[-1]  # the latest is still held
    assert cache.dataset(manifests[0]) is not assembled[0]  # the first was let go: assembled again
