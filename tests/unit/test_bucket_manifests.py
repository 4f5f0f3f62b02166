"""Dropping rows from bucket manifests: an owner forgotten whole loses their bucket without it being
read, unless another owner's rows may share it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from service.storage import buckets
from service.storage.artifacts import LocalArtifactStore
from service.storage.buckets import (
    MIN_SHARED_BUCKETS,
    PER_OWNER,
    SHARED_BUCKET_BYTES,
    Bucket,
    bucket_count,
    bucket_of,
    decode_bucket,
    drop_rows,
    read_rows,
    write_buckets,
)

# Three owners: o1 has two samples, o2 and o3 one each.
SAMPLES = ["s1", "s2", "s3", "s4"]
OWNERS = ["o1", "o1", "o2", "o3"]


@pytest.fixture()
def store(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts", durable=False)


def _manifest(store: LocalArtifactStore, num_buckets: int = PER_OWNER) -> dict:
    features = np.arange(8, dtype=np.float32).reshape(4, 2)
    return write_buckets(store, SAMPLES, OWNERS, {"features": features}, num_buckets)


class Reads:
    """A bucket reader that counts (and can forbid) reads."""

    def __init__(self, store: LocalArtifactStore, allowed: bool = True) -> None:
        self.store, self.allowed = store, allowed
        self.digests: list[str] = []

    def __call__(self, digest: str) -> Bucket:
        assert self.allowed, f"bucket {digest} was read"
        self.digests.append(digest)
        return decode_bucket(self.store.get(digest))


def test_a_per_owner_manifest_says_no_bucket_is_shared(store: LocalArtifactStore) -> None:
    manifest = _manifest(store)
    assert manifest["shared_buckets"] == []
    assert "shared_buckets" not in _manifest(store, num_buckets=2)  # shared by design: the key says nothing


def test_an_owner_forgotten_whole_loses_their_bucket_unread(store: LocalArtifactStore) -> None:
    manifest = _manifest(store)
    read = Reads(store, allowed=False)
    out, dropped = drop_rows(store, read, manifest, {"s1": "o1", "s2": "o1"}, whole_owners={"o1"})
    assert bucket_of("o1", PER_OWNER) not in out["buckets"]
    assert dropped == {manifest["buckets"][bucket_of("o1", PER_OWNER)]}
    assert out["num_rows"] == 2
    rest = read_rows(Reads(store), out)
    assert sorted(rest.sample_ids) == ["s3", "s4"]


def test_the_result_matches_reading_every_bucket(store: LocalArtifactStore) -> None:
    manifest = _manifest(store)
    removed = {"s1": "o1", "s2": "o1", "s4": "o3"}
    unread, _ = drop_rows(store, Reads(store, allowed=False), manifest, removed, whole_owners={"o1", "o3"})
    read, _ = drop_rows(store, Reads(store), manifest, removed)
    assert unread == read


@pytest.mark.parametrize(
    ("removed", "whole"),
    [
        ({"s1": "o1"}, set()),  # part of an owner: the bucket keeps s2 and must be rewritten
        ({"s1": "o1", "s2": "o1"}, set()),  # the caller did not say o1 is gone whole
    ],
)
def test_other_drops_read_the_bucket(store: LocalArtifactStore, removed: dict, whole: set) -> None:
    manifest = _manifest(store)
    read = Reads(store)
    out, _ = drop_rows(store, read, manifest, removed, whole_owners=whole)
    assert read.digests == [manifest["buckets"][bucket_of("o1", PER_OWNER)]]
    assert out["num_rows"] == 4 - len(removed)


def test_a_manifest_without_the_shared_list_reads_the_bucket(store: LocalArtifactStore) -> None:
    manifest = _manifest(store)
    del manifest["shared_buckets"]  # written before the list existed
    read = Reads(store)
    drop_rows(store, read, manifest, {"s3": "o2"}, whole_owners={"o2"})
    assert read.digests == [manifest["buckets"][bucket_of("o2", PER_OWNER)]]


def test_a_bucket_two_owners_hash_to_is_read_and_keeps_the_other(
    store: LocalArtifactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    collide: Callable[[str, int], str] = lambda owner, n: "k" if owner in ("o2", "o3") else owner
    monkeypatch.setattr(buckets, "bucket_of", collide)
    manifest = _manifest(store)
    assert manifest["shared_buckets"] == ["k"]
    read = Reads(store)
    out, _ = drop_rows(store, read, manifest, {"s3": "o2"}, whole_owners={"o2"})
    assert read.digests == [manifest["buckets"]["k"]]
    assert decode_bucket(store.get(out["buckets"]["k"])).sample_ids == ["s4"]  # o3's row stays
    assert out["num_rows"] == 3


def test_buckets_are_per_owner_up_to_the_limit_then_shared_by_bytes() -> None:
    """At most ``most`` owners: one bucket each. Past it, about SHARED_BUCKET_BYTES a bucket, never fewer
    than MIN_SHARED_BUCKETS nor more than ``most``."""
    owners = [f"o{i}" for i in range(5000)]
    assert bucket_count(owners[:4096], 4096, 10**9) == PER_OWNER
    assert bucket_count(owners, 4096, 1000 * SHARED_BUCKET_BYTES) == 1000
    assert bucket_count(owners, 4096, 1000 * SHARED_BUCKET_BYTES + 1) == 1001
    assert bucket_count(owners, 4096, 10) == MIN_SHARED_BUCKETS
    assert bucket_count(owners, 4096, 10**12) == 4096
    assert bucket_count(owners, 100, 10) == 100  # the limit wins over the floor
