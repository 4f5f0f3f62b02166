"""Blob encodings are canonical: the same content always gives the same bytes, so the same digest (the
artifact store deduplicates by digest, and a version's blobs can be reproduced byte for byte)."""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load as np_load
from safetensors.numpy import save as np_save

from service.jobs.state import BlobCache
from service.jobs.versions import write_state
from service.storage.artifacts import LocalArtifactStore
from service.storage.buckets import Bucket, decode_bucket, encode_bucket
from service.storage.tensors import canonical, decode_weights, encode_weights, read_metadata
from unlearning.methods.protocol import MethodState
from unlearning.models.spec import ModelSpec


def bucket() -> Bucket:
    rng = np.random.default_rng(3)
    return Bucket(
        ["s-1", "s-2", "s-é"],  # a non-ASCII id survives the re-serialised header
        ["owner-a", "owner-a", "owner-b"],
        {"features": rng.normal(size=(3, 5)).astype(np.float32), "labels": np.array([0, 1, 1])},
    )


def test_a_bucket_encodes_to_the_same_bytes_every_time() -> None:
    # The safetensors writer's metadata order changes from call to call (a hash map): with two
    # entries, twenty encodings without canonical() are all alike with probability about 2e-6.
    encodings = {encode_bucket(bucket()) for _ in range(20)}
    assert len(encodings) == 1


def test_canonical_files_read_back_unchanged() -> None:
    original = bucket()
    blob = encode_bucket(original)
    (size,) = struct.unpack("<Q", blob[:8])
    assert (8 + size) % 8 == 0, "the data section starts 8-byte aligned"
    assert list(json.loads(blob[8 : 8 + size])["__metadata__"]) == ["owner_ids", "sample_ids"]
    decoded = decode_bucket(blob)
    assert decoded.sample_ids == original.sample_ids and decoded.owner_ids == original.owner_ids
    for name, array in original.arrays.items():
        np.testing.assert_array_equal(decoded.arrays[name], array)
    assert canonical(blob) == blob  # idempotent


def test_canonical_keeps_what_the_safetensors_reader_sees() -> None:
    arrays = {"b": np.arange(6, dtype=np.int64).reshape(2, 3), "a": np.ones(4, dtype=np.float16)}
    raw = np_save(arrays, metadata={"z": "1", "y": "2", "x": "3"})
    blob = canonical(raw)
    assert read_metadata(blob) == read_metadata(raw) == {"x": "3", "y": "2", "z": "1"}
    loaded = np_load(blob)
    assert set(loaded) == {"a", "b"}
    for name, array in arrays.items():
        np.testing.assert_array_equal(loaded[name], array)


def test_weights_round_trip_and_are_canonical() -> None:
    weights = torch.linspace(-1, 1, 12, dtype=torch.float64)
    blob = encode_weights(weights, {"family": "logistic_regression", "classes": 3})
    assert canonical(blob) == blob
    assert torch.equal(decode_weights(blob), weights)


def test_remembered_weights_are_served_without_a_read_and_equal_the_stored_ones(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path, durable=False)
    weights = torch.linspace(-1, 1, 12, dtype=torch.float64)[::2]  # not contiguous
    digest = store.put(encode_weights(weights, {"family": "logistic_regression"}))
    reads: list[str] = []
    real_get = store.get

    def counted_get(d: str) -> bytes:
        reads.append(d)
        return real_get(d)

    store.get = counted_get  # type: ignore[method-assign]
    cache = BlobCache(store)
    cache.remember_weights(digest, weights)
    weights.mul_(0)  # the caller's tensor may change afterwards: the cache kept its own copy
    served = cache.weights(digest)
    assert reads == []
    assert torch.equal(served, decode_weights(real_get(digest)))


class _CountingStore(LocalArtifactStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.puts = 0

    def put_many(self, blobs: Sequence[bytes]) -> list[str]:
        self.puts += len(blobs)
        return super().put_many(blobs)


def test_a_release_without_noise_is_one_blob_and_a_noisy_one_two(tmp_path: Path) -> None:
    """The audited mode releases the clean tensor itself: its state's weights are written once and both
    names are that blob's. A noisy release is a blob of its own."""
    store = _CountingStore(tmp_path)
    spec = ModelSpec("logistic_regression", (4,), 3)
    clean = torch.arange(12, dtype=torch.float32)
    same = MethodState("hessian_free", spec, clean, clean, None, {})
    released, kept, _, _ = write_state(store, same)
    assert released == kept and store.puts == 1
    assert decode_weights(store.get(released)).equal(clean)
    noisy = MethodState("hessian_free", spec, clean, clean + 0.5, None, {})
    released, kept, _, _ = write_state(store, noisy)
    assert released != kept and store.puts == 3
    assert decode_weights(store.get(kept)).equal(clean)
