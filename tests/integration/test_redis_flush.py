"""Redis flushed in the middle of a run: the broker queue, serving pointers and statistics are gone, and
everything is rebuilt from Postgres and the artifact store; no request is lost."""

from __future__ import annotations

import threading
import time

import pytest
import redis
import torch

from service.faults import is_transient
from service.jobs.state import read_statistics
from service.runtime import Runtime
from service.storage.statistics import HotStoreLost, RedisSampleStatistics
from tests.integration.conftest import Client, key, wait_for
from unlearning.errors import UnknownSampleError

pytestmark = pytest.mark.integration


def test_flushing_redis_mid_run_loses_nothing(client: Client, runtime: Runtime, redis_url: str) -> None:
    model_id = client.trained(n=300, samples_per_owner=2, policy={"max_deletion_fraction": 0.5})
    owners = [f"owner-{i:05d}" for i in range(60)]
    ids: list[int] = []

    def submit_all() -> None:
        for owner in owners:
            r = client.http.post(
                f"/v1/models/{model_id}/deletions", json={"owner_ids": [owner]}, headers=key()
            )
            assert r.status_code == 202, r.text
            ids.append(int(r.json()["id"]))
            time.sleep(0.02)

    thread = threading.Thread(target=submit_all)
    thread.start()
    wait_for(lambda: len(ids) >= 20, 30, what="20 submissions")
    redis.Redis.from_url(redis_url).flushdb()
    thread.join()
    for request_id in ids:
        client.done(request_id, timeout=90)

    model = client.http.get(f"/v1/models/{model_id}").json()
    versions = client.http.get(f"/v1/models/{model_id}/versions").json()["versions"]
    assert [v["seq"] for v in versions] == list(range(1, len(versions) + 1))
    assert sum(v["num_forgotten"] for v in versions) == 120
    assert model["train_size"] == 300 - 120

    # Serving pointer rebuilt (by the worker or on the first prediction) at the current version.
    served = client.http.post(f"/v1/models/{model_id}/predictions", json={"instances": [[0.0] * 20]}).json()
    assert served["version"] == model["current_version"]

    # The statistics in Redis equal the durable ones, owner sums included.
    with runtime.uow() as uow:
        row = uow.models.get(model_id)
        durable = read_statistics(runtime.cache, row.statistics)
    assert runtime.hot.stats_meta(model_id)["seq"] == str(model["current_version"])
    stats = RedisSampleStatistics(runtime.hot, model_id, row.statistics["dim"], row.statistics["dtype"])
    assert len(durable.sample_ids) == 180
    for owner in ("owner-00060", "owner-00149"):
        rows = [i for i, o in enumerate(durable.owner_ids) if o == owner]
        assert torch.allclose(stats.sum_owner(owner), durable.vectors[rows].sum(0), atol=1e-5)
    assert not stats.has("syn-00000") and stats.has("syn-00299")

    # And the model keeps working.
    client.done(client.delete(model_id, owner_ids=["owner-00100"])["id"])


def test_statistics_flushed_under_an_update_say_so_instead_of_naming_the_ids_unknown(
    client: Client, runtime: Runtime, redis_url: str
) -> None:
    """A flush between a round's start and its reads: the ids it asks for are missing because the
    statistics went, not because the request named unknown ids, so the round is retried (HotStoreLost,
    transient) rather than failing the request (UnknownSampleError, the request's own error)."""
    model_id = client.trained(n=100, samples_per_owner=2)
    with runtime.uow() as uow:
        row = uow.models.get(model_id)
        assert row is not None and row.statistics is not None
        read_statistics(runtime.cache, row.statistics)
    stats = RedisSampleStatistics(runtime.hot, model_id, row.statistics["dim"], row.statistics["dtype"])
    assert stats.has("syn-00001")
    with pytest.raises(UnknownSampleError):
        stats.remove(["no-such-sample"])  # the statistics are there: an unknown id is the request's error
    redis.Redis.from_url(redis_url).flushdb()
    with pytest.raises(HotStoreLost):
        stats.remove(["syn-00001"])
    with pytest.raises(HotStoreLost):
        stats.sum_owner("owner-00001")
    assert is_transient(HotStoreLost("statistics of model gone"))
