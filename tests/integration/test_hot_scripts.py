"""The hot store's two scripts (the serving pointer's compare-and-set and the statistics' staged removals),
run by the real Redis of this machine and by the in-process stand-in of embedded mode (fakeredis with
its Lua runtime): each must behave the same on both."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
import torch

from service.storage.hot import RETIRED_SEQ, HotStore, connect
from service.storage.statistics import HotStoreLost, RedisSampleStatistics


@pytest.fixture(params=["redis", "embedded"])
def hot(request: pytest.FixtureRequest) -> Iterator[HotStore]:
    if request.param == "redis":
        client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
    else:
        client = connect(None)
    store = HotStore(client, f"scripts-{request.node.name}")
    yield store
    keys = list(client.scan_iter(match=f"{store.prefix}:*"))
    if keys:
        client.delete(*keys)


def _weights(value: float) -> torch.Tensor:
    return torch.full((4,), value, dtype=torch.float32)


def test_the_pointer_moves_forward_only(hot: HotStore) -> None:
    assert hot.set_serving(7, 101, 3, {"kind": "logreg"}, _weights(3.0))
    assert hot.set_serving(7, 102, 5, {"kind": "logreg"}, _weights(5.0))
    assert not hot.set_serving(7, 101, 3, {"kind": "logreg"}, _weights(3.0))  # older: refused
    assert hot.set_serving(7, 102, 5, {"kind": "logreg"}, _weights(9.0))  # already there: True, unchanged
    serving = hot.get_serving(7)
    assert serving is not None
    assert (serving.seq, serving.version_id, serving.spec) == (5, 102, {"kind": "logreg"})
    assert torch.equal(serving.weights, _weights(5.0))


def test_a_retired_model_is_never_published_again(hot: HotStore) -> None:
    assert hot.set_serving(8, 1, 1, {}, _weights(1.0))
    hot.retire(8)
    assert not hot.set_serving(8, 2, 2, {}, _weights(2.0))
    assert hot.get_serving(8) is None
    assert int(hot.client.hget(hot.key(8, "serving"), "seq")) == RETIRED_SEQ  # type: ignore[arg-type]


def test_a_flushed_pointer_is_published_again(hot: HotStore) -> None:
    assert hot.set_serving(9, 1, 4, {}, _weights(4.0))
    hot.client.delete(hot.key(9, "serving"))
    assert hot.set_serving(9, 1, 4, {}, _weights(4.0))
    serving = hot.get_serving(9)
    assert serving is not None and serving.seq == 4


def _load(hot: HotStore, owners: dict[str, int]) -> tuple[list[str], torch.Tensor]:
    """Statistics of version 5: owner o has owners[o] samples named f"{o}/{i}"; vector of row r is r."""
    samples = [f"{o}/{i}" for o, n in owners.items() for i in range(n)]
    owner_ids = [s.split("/")[0] for s in samples]
    vectors = torch.arange(len(samples), dtype=torch.float64).repeat(2, 1).T.contiguous()
    hot.load_stats(1, 5, samples, owner_ids, vectors)
    return samples, vectors


def _stats(hot: HotStore) -> RedisSampleStatistics:
    return RedisSampleStatistics(hot, 1, dim=2, dtype="float64")


def test_thousands_of_removals_in_one_version(hot: HotStore) -> None:
    """More ids than one HDEL slice (1,000): every whole owner goes; a partial one keeps its sum."""
    owners = {f"o{k:04d}": 1 for k in range(2500)} | {"many": 3}
    samples, vectors = _load(hot, owners)
    stats = _stats(hot)
    stats.remove([s for s in samples if not s.startswith("many/")] + ["many/1"])
    stats.apply(5, 6)

    after = _stats(hot)
    assert hot.stats_meta(1)["seq"] == "6"  # type: ignore[index]
    assert hot.client.hlen(hot.key(1, "stats:vec")) == 2
    assert hot.client.hlen(hot.key(1, "stats:owner")) == 2
    assert hot.client.hlen(hot.key(1, "stats:osum")) == 1
    assert hot.client.hlen(hot.key(1, "stats:omem")) == 1
    assert after.remaining_of_owner("many") == ("many/0", "many/2")
    first = samples.index("many/0")
    assert torch.equal(after.sum_owner("many"), vectors[first] + vectors[first + 2])


def test_removals_against_other_statistics_write_nothing(hot: HotStore) -> None:
    samples, _ = _load(hot, {"A": 2, "B": 1})
    stats = _stats(hot)
    stats.remove(["A/0", "B/0"])
    with pytest.raises(HotStoreLost):
        stats.apply(4, 5)  # the update read version 4's statistics; Redis holds version 5's
    after = _stats(hot)
    assert all(after.has(s) for s in samples)
    assert after.remaining_of_owner("A") == ("A/0", "A/1")
    assert hot.stats_meta(1)["seq"] == "5"  # type: ignore[index]


def test_removals_after_a_flush_write_nothing(hot: HotStore) -> None:
    _load(hot, {"A": 1})
    stats = _stats(hot)
    stats.remove(["A/0"])
    hot.clear_stats(1)
    with pytest.raises(HotStoreLost):
        stats.apply(5, 6)
    assert hot.stats_meta(1) is None
    assert hot.client.exists(hot.key(1, "stats:vec")) == 0
