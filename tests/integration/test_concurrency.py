"""50 concurrent deletions on one model: a gap-free version chain, every request applied exactly once,
the ledger never above its cap. One job drains a queue longer than a round may take, and the requests
committed while it drains."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from service.jobs import update_round
from service.jobs.drain import apply_deletions
from service.runtime import Runtime
from tests.integration.conftest import Client, deployment_of_its_own, key
from tests.integration.invariants import assert_applied_exactly_once

pytestmark = pytest.mark.integration


def test_fifty_concurrent_deletions_make_a_gap_free_chain_applied_exactly_once(
    client: Client, runtime: Runtime
) -> None:
    model_id = client.trained(n=400, samples_per_owner=2, policy={"max_deletion_fraction": 0.5})
    owners = [f"owner-{i:05d}" for i in range(50)]

    def submit(owner: str) -> int:
        r = client.http.post(f"/v1/models/{model_id}/deletions", json={"owner_ids": [owner]}, headers=key())
        assert r.status_code == 202, r.text
        return int(r.json()["id"])

    with ThreadPoolExecutor(max_workers=16) as pool:
        ids = list(pool.map(submit, owners))
    assert len(set(ids)) == 50
    done = [client.done(i) for i in ids]

    chain = assert_applied_exactly_once(client, runtime, model_id, ids, forgotten_samples=100)
    # Coalescing happened (fewer versions than requests), and each answer names its version.
    assert 2 <= len(chain.versions) <= 51
    assert {d["version"]["seq"] for d in done} <= {v.seq for v in chain.versions[1:]}
    assert chain.charges[-1].spent == 100


def test_mlps_trained_at_once_on_one_worker_equal_the_same_mlps_trained_alone(client: Client) -> None:
    """The worker runs jobs on a thread pool. MLPs trained at the same time (Stage II in torch's forward
    mode; initial weights drawn from torch's process-wide generator) must each come out as they would
    alone: none fails, and each one's weights are its seed's (unlearning.forward_mode, FlatModel)."""
    dataset_id = client.dataset(n=120, samples_per_owner=2, seed=7)

    def register(seed: int) -> int:
        return client.model(dataset_id, epochs=1, family="mlp", seed=seed)

    def weights(model_id: int) -> bytes:
        client.ready(model_id, timeout=180)
        r = client.http.get(f"/v1/models/{model_id}/weights")
        assert r.status_code == 200, r.text
        return r.content

    # Registered back to back: the worker's threads take the three trainings together.
    together = [register(seed) for seed in (1, 2, 3)]
    trained_together = [weights(m) for m in together]
    alone = weights(register(1))
    assert alone == trained_together[0]
    assert len(set(trained_together)) == 3


def test_one_job_drains_a_queue_longer_than_a_round_may_take(tmp_path: Path) -> None:
    """A round takes at most ``max_batch`` requests (2 here); the five queued before the job started
    published no job of their own (the first one's was pending), so the job goes on after each round that
    handled requests: three versions, of 2, 2 and 1 requests, every request completed. No worker runs in
    this deployment: the test runs the jobs itself."""
    with deployment_of_its_own(tmp_path, max_batch="2") as deployment:
        client, runtime = deployment.client, deployment.runtime
        model_id = deployment.trained_model()
        ids = [int(client.delete(model_id, owner_ids=[f"owner-{i:05d}"])["id"]) for i in range(5)]
        assert {client.deletion(i)["state"] for i in ids} == {"queued"}

        apply_deletions(runtime, model_id)

        done = [client.deletion(i) for i in ids]
        assert [d["state"] for d in done] == ["completed"] * 5
        assert [d["version"]["seq"] for d in done] == [2, 2, 3, 3, 4]


def test_a_request_committed_while_a_drain_holds_the_claim_is_drained_by_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request committed during a drain publishes no job (the drain holds the model's claim), so the
    drain itself must read it. Here a third request arrives while the first round's version is
    completed; the one job completes all three, in two versions, and leaves the claim free."""
    with deployment_of_its_own(tmp_path) as deployment:
        client, runtime = deployment.client, deployment.runtime
        model_id = deployment.trained_model()
        ids = [int(client.delete(model_id, owner_ids=[f"owner-{i:05d}"])["id"]) for i in range(2)]
        assert not runtime.hot.claim_update(model_id)  # their job's claim, still held

        # A round's completion goes on in the round's unit of work (complete_in_round_transaction).
        complete_in_round_transaction = update_round.complete_in_round_transaction

        def finish_while_a_request_arrives(*args: Any, **kwargs: Any) -> None:
            if len(ids) == 2:
                ids.append(int(client.delete(model_id, owner_ids=["owner-00002"])["id"]))
            complete_in_round_transaction(*args, **kwargs)

        monkeypatch.setattr(update_round, "complete_in_round_transaction", finish_while_a_request_arrives)
        apply_deletions(runtime, model_id)

        done = [client.deletion(i) for i in ids]
        assert [d["state"] for d in done] == ["completed"] * 3
        assert [d["version"]["seq"] for d in done] == [2, 2, 3]
        assert runtime.hot.claim_update(model_id)  # the drain let go of the claim
        runtime.hot.release_update(model_id)


def test_a_request_committed_just_before_the_drain_lets_go_of_the_claim_is_drained_by_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a round that found the queue empty the drain lets go of the claim; a request committed
    after that round's read but before the release published no job (the claim was still held), so the
    drain looks at the queue once more after the release, takes the claim back and drains it."""
    with deployment_of_its_own(tmp_path) as deployment:
        client, runtime = deployment.client, deployment.runtime
        model_id = deployment.trained_model()
        ids = [int(client.delete(model_id, owner_ids=["owner-00000"])["id"])]
        release = runtime.hot.release_update

        def release_after_a_request_arrives(mid: int) -> None:
            if len(ids) == 1:  # the drain's first release: its round before found the queue empty
                ids.append(int(client.delete(model_id, owner_ids=["owner-00001"])["id"]))
            release(mid)

        monkeypatch.setattr(runtime.hot, "release_update", release_after_a_request_arrives)
        apply_deletions(runtime, model_id)

        done = [client.deletion(i) for i in ids]
        assert [d["state"] for d in done] == ["completed"] * 2
        assert [d["version"]["seq"] for d in done] == [2, 3]
        assert runtime.hot.claim_update(model_id)  # the drain let go of the claim at its end
        release(model_id)


def test_a_drain_s_next_round_reads_its_queue_with_the_previous_completion_s_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each completion starts the next round's lock with its COMMIT, in a new transaction the
    next round then runs in: a drain of three one-request rounds reads the queue in a round trip of its
    own once (the first round), and the two later rounds and the last look, which finds the queue empty,
    read what the completions sent. No worker runs in this deployment: the test runs the job itself."""
    with deployment_of_its_own(tmp_path, max_batch="1") as deployment:
        client, runtime = deployment.client, deployment.runtime
        model_id = deployment.trained_model()
        ids = [int(client.delete(model_id, owner_ids=[f"owner-{i:05d}"])["id"]) for i in range(3)]
        calls: dict[str, int] = {"lock_round": 0, "finish_lock_round": 0}

        def counted(name: str) -> Any:
            original = getattr(update_round, name)

            def call(*args: Any, **kwargs: Any) -> Any:
                calls[name] += 1
                return original(*args, **kwargs)

            return call

        for name in calls:
            monkeypatch.setattr(update_round, name, counted(name))
        apply_deletions(runtime, model_id)
        monkeypatch.undo()

        done = [client.deletion(i) for i in ids]
        assert [d["state"] for d in done] == ["completed"] * 3
        assert [d["version"]["seq"] for d in done] == [2, 3, 4]
        assert calls == {"lock_round": 1, "finish_lock_round": 3}
        assert runtime.hot.claim_update(model_id)  # the drain let go of the claim
        runtime.hot.release_update(model_id)
