"""The orphan sweep on the real stores: a blob no row holds goes once it is older than the grace, and no
blob a row names is ever taken (every blob named by a dataset, a model or a served version is held in
``artifact_refs``, which is what the sweep trusts)."""

from __future__ import annotations

import os
import time

import pytest

from service.jobs.reconcile import sweep_orphans
from service.runtime import Runtime
from service.storage.buckets import digests
from tests.integration.conftest import Client

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


def backdate(runtime: Runtime, blobs: set[str]) -> None:
    then = time.time() - HOURS_AGO
    for digest in blobs:
        os.utime(runtime.artifacts.root / digest[:2] / digest, (then, then))  # type: ignore[attr-defined]


def test_the_sweep_removes_orphans_and_never_a_blob_a_row_names(client: Client, runtime: Runtime) -> None:
    model_id = client.trained(n=120, samples_per_owner=2)
    client.done(client.delete(model_id, owner_ids=["owner-00003"])["id"])

    named, held = named_and_held(runtime)
    assert named, "the flow above stored no blob"
    assert held == named, f"rows name {len(named - held)} blobs that artifact_refs does not hold"

    orphan = runtime.artifacts.put(b"rows of an attempt that rolled back")
    fresh_orphan = runtime.artifacts.put(b"written by a job that has not committed yet")
    backdate(runtime, named | {orphan})

    removed = sweep_orphans(runtime)

    assert removed >= 1
    assert not runtime.artifacts.exists(orphan)
    assert runtime.artifacts.exists(fresh_orphan)  # within the grace: a writer may be about to commit
    named_now, _ = named_and_held(runtime)  # what the rows name now (the worker may have moved on)
    assert [d for d in named_now if not runtime.artifacts.exists(d)] == []
    # The model is whole: its weights download, and the next deletion updates it.
    assert client.http.get(f"/v1/models/{model_id}/weights").status_code == 200
    assert client.done(client.delete(model_id, owner_ids=["owner-00004"])["id"])["state"] == "completed"
