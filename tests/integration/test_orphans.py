"""The orphan sweep on the real stores: a blob no row holds goes once it is older than the grace, and no
blob a row names is ever taken (every blob named by a dataset, a model or a served version is held in
``artifact_refs``, which is what the sweep trusts)."""

from __future__ import annotations

import os
import time

import pytest
from sqlalchemy import func, select

from service.db.tables import DeletionRequest, Model
from service.maintenance import sweep_orphans
from service.runtime import Runtime
from service.storage.buckets import digests
from tests.integration.conftest import Client, wait_for

pytestmark = pytest.mark.integration

HOURS_AGO = 2 * 3600.0


def named_and_held(runtime: Runtime) -> tuple[set[str], set[str]]:
    """Every blob a committed row names (datasets' arrays, models' training arrays and statistics, the
    weights and method artifacts of versions whose weights are kept), and those of them ``artifact_refs``
    holds, read from one snapshot (the worker may be committing meanwhile)."""
    named: set[str] = set()
    with runtime.uow() as uow:
        uow.session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        for dataset in uow.datasets.list(after_id=None, limit=100_000):
            named |= digests(dataset.arrays)
        for model in uow.models.list(after_id=None, limit=100_000):
            named |= digests(model.training) | digests(model.statistics)
            for version in uow.models.versions(model.id, limit=100_000):
                named |= {b for b in (version.released_blob, version.clean_blob) if b}
                named |= set(version.artifacts.values())
        return named, named - uow.refs.unreferenced(named)


def quiet(runtime: Runtime) -> bool:
    """No model training and no deletion in progress (earlier tests may have left work running, and the
    checks here are about every row of the database)."""
    with runtime.uow() as uow:
        busy_models = uow.session.scalar(
            select(func.count()).where(Model.status.in_(["queued", "training", "retraining"]))
        )
        busy_requests = uow.session.scalar(
            select(func.count()).where(
                DeletionRequest.state.in_(["queued", "applying", "applied", "awaiting_retrain", "retraining"])
            )
        )
    return busy_models == 0 and busy_requests == 0


def backdate(runtime: Runtime, blobs: set[str]) -> None:
    """Pretend the blobs were written hours ago. (A job of an earlier test may have committed since the
    blobs were listed and its completion deleted what it released: those are skipped.)"""
    then = time.time() - HOURS_AGO
    for digest in blobs:
        try:
            os.utime(runtime.artifacts.root / digest[:2] / digest, (then, then))  # type: ignore[attr-defined]
        except FileNotFoundError:
            pass


def test_the_sweep_removes_orphans_and_never_a_blob_a_row_names(client: Client, runtime: Runtime) -> None:
    # A seed of its own: blobs are content-addressed, and this test's must not be shared with other tests'.
    model_id = client.trained(n=120, samples_per_owner=2, seed=4242)
    client.done(client.delete(model_id, owner_ids=["owner-00003"])["id"])
    wait_for(lambda: quiet(runtime), 120, 0.2, "the worker to be idle")

    named, held = named_and_held(runtime)
    assert named, "the flow above stored no blob"
    assert held == named, f"rows name {len(named - held)} blobs that artifact_refs does not hold"

    orphan = runtime.artifacts.put(b"rows of an attempt that rolled back")
    fresh_orphan = runtime.artifacts.put(b"written by a job that has not committed yet")
    backdate(runtime, named | {orphan})

    removed = set(sweep_orphans(runtime))

    assert orphan in removed and not runtime.artifacts.exists(orphan)
    assert runtime.artifacts.exists(fresh_orphan)  # within the grace: a writer may be about to commit
    assert not removed & (named | named_and_held(runtime)[0]), "the sweep removed a blob a row names"
    with runtime.uow() as uow:
        model = uow.models.get(model_id)
        assert model is not None
        own = digests(model.training) | digests(model.statistics)
    assert own and all(runtime.artifacts.exists(d) for d in own)
    # The model is whole: its weights download, and the next deletion updates it.
    assert client.http.get(f"/v1/models/{model_id}/weights").status_code == 200
    assert client.done(client.delete(model_id, owner_ids=["owner-00004"])["id"])["state"] == "completed"
