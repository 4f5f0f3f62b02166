"""A worker killed (SIGKILL) in the middle of a deletion update: once a healthy worker runs again, every
request completes, each applied exactly once, with a gap-free version chain and a ledger that counts
each sample once (DESIGN.md: "A deletion is applied at most once, even when ... the worker crashes
mid-task"); and two worker processes racing on one model do the same ("... or two workers race").

Each case runs in a deployment of its own (database, Redis database, queues, artifact directory), so
that the session's worker cannot pick the work up: the crashed worker's is the only consumer until the
replacement starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench import stack
from tests.integration.conftest import Deployment, wait_for
from tests.integration.invariants import assert_applied_exactly_once
from workers.launcher import worker_argv

pytestmark = pytest.mark.integration

OWNERS = [f"owner-{i:05d}" for i in range(6)]


def _crashing_worker(deployment: Deployment, point: str) -> subprocess.Popen[bytes]:
    argv = worker_argv(
        "crashing", pool="threads", concurrency=2, extra=("--without-gossip", "--without-mingle")
    )
    log = (deployment.var / "crashing-worker.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.crashing_worker", *argv[1:]],
        cwd=stack.ROOT,
        env={**os.environ, **deployment.env, "LETHE_TEST_CRASH_AT": point, "PYTHONUNBUFFERED": "1"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )


@pytest.mark.parametrize("point", ["before_commit", "after_commit"])
def test_a_worker_killed_mid_update_loses_nothing_and_applies_nothing_twice(
    deployment: Deployment, point: str
) -> None:
    client = deployment.client
    crashing = _crashing_worker(deployment, point)
    try:
        model_id = client.trained(n=120, samples_per_owner=2)
        ids = [int(client.delete(model_id, owner_ids=[owner])["id"]) for owner in OWNERS]
        # Only the crash point kills the process: a SIGKILL exit proves the update reached it.
        assert wait_for(lambda: crashing.poll() is not None, 60, 0.1, "the worker to crash") is True
        assert crashing.returncode == -9, (deployment.var / "crashing-worker.log").read_text()[-3000:]
    finally:
        if crashing.poll() is None:
            crashing.kill()
            crashing.wait()
    states = {client.deletion(i)["state"] for i in ids}
    # before_commit: the transaction rolled back, nothing is applied. after_commit: the version committed;
    # the API's own reconciler may already be completing it (it finishes versions left applied).
    assert states <= ({"queued"} if point == "before_commit" else {"applied", "completed", "queued"}), states

    with stack.celery_worker(deployment.env, deployment.var / "worker.log", name="replacement"):
        done = [client.done(i, timeout=90) for i in ids]

    assert all(d["state"] == "completed" and d["version"] is not None for d in done)
    assert_applied_exactly_once(client, deployment.runtime, model_id, ids, forgotten_samples=2 * len(OWNERS))
    for owner in OWNERS:  # each is recorded as forgotten once: asking again is a 409
        r = client.http.post(
            f"/v1/models/{model_id}/deletions",
            json={"owner_ids": [owner]},
            headers={"Idempotency-Key": f"again-{owner}"},
        )
        assert r.status_code == 409, r.text


def test_two_worker_processes_racing_on_one_model_apply_each_request_once(deployment: Deployment) -> None:
    """Two worker processes (not threads of one) take the same model's update jobs: the model lock in
    Postgres, not anything in one process's memory, keeps the chain gap-free and each request once."""
    client = deployment.client
    owners = [f"owner-{i:05d}" for i in range(30)]
    with (
        stack.celery_worker(deployment.env, deployment.var / "worker-a.log", name="racer-a"),
        stack.celery_worker(deployment.env, deployment.var / "worker-b.log", name="racer-b"),
    ):
        model_id = client.trained(n=200, samples_per_owner=2, policy={"max_deletion_fraction": 0.5})
        ids: list[int] = []
        for wave in range(3):  # three waves of concurrent submissions, each drained before the next
            with ThreadPoolExecutor(max_workers=8) as pool:
                submitted = pool.map(
                    lambda owner: int(client.delete(model_id, owner_ids=[owner])["id"]), owners[wave::3]
                )
                ids += list(submitted)
            for request_id in ids:
                client.done(request_id, timeout=90)
    logs = [(deployment.var / f"worker-{w}.log").read_text() for w in "ab"]
    assert all("apply_deletions" in log for log in logs), "both workers should have run updates"
    assert_applied_exactly_once(client, deployment.runtime, model_id, ids, forgotten_samples=2 * len(owners))
