"""Staged removals written to the hot store (``RedisSampleStatistics.apply``), on the in-process
Redis stand-in of embedded mode: whole owners leave, partial owners keep the sum of what remains."""

from __future__ import annotations

import pytest
import torch

from service.storage.hot import HotStore, connect
from service.storage.statistics import HotStoreLost, RedisSampleStatistics

SAMPLES = ["a1", "a2", "b1", "b2", "b3", "c1", "d1"]
OWNERS = ["A", "A", "B", "B", "B", "C", "D"]


def _loaded() -> tuple[HotStore, torch.Tensor]:
    hot = HotStore(connect(None), "test")
    vectors = torch.arange(len(SAMPLES) * 3, dtype=torch.float64).reshape(len(SAMPLES), 3)
    hot.load_stats(1, 5, SAMPLES, OWNERS, vectors)
    return hot, vectors


def _stats(hot: HotStore) -> RedisSampleStatistics:
    return RedisSampleStatistics(hot, 1, dim=3, dtype="float64")


def test_apply_drops_whole_owners_and_updates_partial_ones() -> None:
    hot, vectors = _loaded()
    stats = _stats(hot)
    stats.remove(["a1", "a2", "b2", "c1"])  # A and C whole, one of B's three
    stats.apply(5, 6)

    after = _stats(hot)
    assert hot.stats_meta(1)["seq"] == "6"
    assert after.remaining_of_owner("B") == ("b1", "b3")
    assert torch.equal(after.sum_owner("B"), vectors[2] + vectors[4])
    assert torch.equal(after.sum_owner("D"), vectors[6])
    for gone in ("A", "C"):
        with pytest.raises(Exception, match="no samples"):
            after.sum_owner(gone)
    assert not after.has("a1") and not after.has("b2") and after.has("b1")


def test_apply_refuses_statistics_that_changed_under_it() -> None:
    hot, _ = _loaded()
    stats = _stats(hot)
    stats.remove(["d1"])
    with pytest.raises(HotStoreLost):
        stats.apply(4, 5)  # the update read version 4's statistics; Redis holds version 5's
    assert _stats(hot).has("d1")
