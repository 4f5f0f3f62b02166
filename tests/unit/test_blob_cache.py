"""The decoded-blob cache of each process: bounded in bytes, and in time (an erased subject's rows or vectors
must not stay in memory), and dropped at once by the process that deletes a blob."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from service.jobs.state import BlobCache, write_training
from service.storage.artifacts import LocalArtifactStore
from service.storage.tensors import encode_weights
from unlearning.data import make_synthetic


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingStore(LocalArtifactStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root, durable=False)
        self.reads = 0

    def get(self, digest: str) -> bytes:
        self.reads += 1
        return super().get(digest)


@pytest.fixture()
def store(tmp_path: Path) -> CountingStore:
    return CountingStore(tmp_path / "artifacts")


def _weights(store: CountingStore, value: float) -> str:
    return store.put(encode_weights(torch.full((4,), value), {"family": "logistic_regression"}))


def test_values_expire_after_the_ttl(store: CountingStore) -> None:
    clock = Clock()
    cache = BlobCache(store, ttl_seconds=60, clock=clock)
    digest = _weights(store, 1.0)
    cache.weights(digest)
    cache.weights(digest)
    assert store.reads == 1  # the second read is a hit
    clock.now += 59
    assert cache.prune_expired() == 0 and ("weights", digest) in cache.cached()
    clock.now += 2
    assert cache.prune_expired() == 1 and cache.cached() == set()
    cache.weights(digest)
    assert store.reads == 2
    clock.now += 61  # expired but not pruned yet: a read loads it again instead of serving it
    cache.weights(digest)
    assert store.reads == 3


def test_forget_drops_a_deleted_blob_and_every_dataset_assembled_from_it(store: CountingStore) -> None:
    cache = BlobCache(store, ttl_seconds=600)
    data = make_synthetic(n=12, num_features=3, num_classes=2, seed=0, samples_per_owner=3)
    manifest = write_training(store, data, max_buckets=64)
    assembled = cache.dataset(manifest)
    assert np.array_equal(assembled.features, data.features)
    buckets = sorted(manifest["buckets"].values())
    kept = _weights(store, 2.0)
    cache.weights(kept)
    assert {("bucket", b) for b in buckets} <= cache.cached()

    cache.forget([buckets[0]])
    left = cache.cached()
    assert ("bucket", buckets[0]) not in left
    assert not any(kind == "dataset" for kind, _ in left)  # it held the deleted bucket's rows
    assert ("bucket", buckets[1]) in left and ("weights", kept) in left
    cache.forget([])
    assert cache.cached() == left


def test_the_byte_bound_still_holds(store: CountingStore) -> None:
    digests = [_weights(store, float(i)) for i in range(5)]
    cache = BlobCache(store, max_bytes=2 * 4 * 4, ttl_seconds=600)  # two float32 vectors of 4
    for d in digests:
        cache.weights(d)
    assert cache.cached() == {("weights", d) for d in digests[-2:]}
