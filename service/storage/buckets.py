"""Per-sample arrays as safetensors buckets: one per owner up to ``max_buckets`` owners, else shared."""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from safetensors.numpy import load as np_load
from safetensors.numpy import save as np_save

from service.storage.artifacts import ArtifactStore
from service.storage.tensors import canonical, read_metadata


@dataclass(frozen=True)
class Bucket:
    sample_ids: list[str]
    owner_ids: list[str]
    arrays: dict[str, np.ndarray]


PER_OWNER = 0  # ``num_buckets`` value meaning one bucket per owner
SHARED_BUCKET_BYTES = 128 * 1024
MIN_SHARED_BUCKETS = 256
_WRITERS = 8


def bucket_count(owner_ids: Sequence[str], most: int, nbytes: int) -> int:
    """:data:`PER_OWNER` while there are at most ``most`` owners; else shared buckets of about
    :data:`SHARED_BUCKET_BYTES` each for the rows' ``nbytes``, at least :data:`MIN_SHARED_BUCKETS` and at
    most ``most`` of them. Each deletion rewrites its owners' buckets and every version's manifest names
    them all: the size balances the two (docs/decisions.md, "Bucket sizes")."""
    if len(set(owner_ids)) <= most:
        return PER_OWNER
    return min(most, max(MIN_SHARED_BUCKETS, math.ceil(nbytes / SHARED_BUCKET_BYTES)))


def bucket_of(owner_id: str, num_buckets: int) -> str:
    """The owner's bucket key: 48 bits of blake2b(id) in hex per owner, else that hash mod ``num_buckets``."""
    digest = hashlib.blake2b(owner_id.encode(), digest_size=6).digest()
    if num_buckets == PER_OWNER:
        return digest.hex()
    return str(int.from_bytes(digest[:4], "big") % num_buckets)


def encode_bucket(bucket: Bucket) -> bytes:
    ids = {"sample_ids": json.dumps(bucket.sample_ids), "owner_ids": json.dumps(bucket.owner_ids)}
    return canonical(np_save({k: np.ascontiguousarray(v) for k, v in bucket.arrays.items()}, metadata=ids))


def decode_bucket(blob: bytes) -> Bucket:
    meta = read_metadata(blob)
    return Bucket(json.loads(meta["sample_ids"]), json.loads(meta["owner_ids"]), dict(np_load(blob)))


def write_buckets(
    artifacts: ArtifactStore,
    sample_ids: Sequence[str],
    owner_ids: Sequence[str],
    arrays: Mapping[str, np.ndarray],
    num_buckets: int,
    **extra: Any,
) -> dict[str, Any]:
    """Split the rows by owner bucket and write each bucket; returns the manifest."""
    rows: dict[str, list[int]] = defaultdict(list)
    for i, owner in enumerate(owner_ids):
        rows[bucket_of(owner, num_buckets)].append(i)

    def put(idx: list[int]) -> str:
        return artifacts.put(encode_bucket(_rows(sample_ids, owner_ids, arrays, idx)))

    # file creation dominates and releases the GIL: threads overlap it
    items = sorted(rows.items())
    with ThreadPoolExecutor(max_workers=_WRITERS) as pool:
        digests_ = list(pool.map(put, [idx for _, idx in items]))
    buckets = {b: d for (b, _), d in zip(items, digests_)}
    manifest = {**extra, "num_buckets": num_buckets, "num_rows": len(sample_ids), "buckets": buckets}
    if num_buckets == PER_OWNER:
        manifest["shared_buckets"] = _shared_keys(owner_ids, num_buckets)
    return manifest


def _rows(
    sample_ids: Sequence[str], owner_ids: Sequence[str], arrays: Mapping[str, np.ndarray], rows: list[int]
) -> Bucket:
    index = np.asarray(rows, dtype=np.int64)
    return Bucket(
        [sample_ids[i] for i in rows], [owner_ids[i] for i in rows], {k: v[index] for k, v in arrays.items()}
    )


def _shared_keys(owner_ids: Sequence[str], num_buckets: int) -> list[str]:
    """The bucket keys more than one owner hashes to."""
    owners_of: dict[str, set[str]] = defaultdict(set)
    for owner in set(owner_ids):
        owners_of[bucket_of(owner, num_buckets)].add(owner)
    return sorted(b for b, owners in owners_of.items() if len(owners) > 1)


def _single_owner_keys(manifest: Mapping[str, Any], affected: Mapping[str, set[str]]) -> set[str]:
    """``affected``'s keys whose bucket holds one owner only; none without ``shared_buckets``."""
    if int(manifest["num_buckets"]) != PER_OWNER or "shared_buckets" not in manifest:
        return set()
    return set(affected) - set(manifest["shared_buckets"])


def drop_rows(
    artifacts: ArtifactStore,
    read: Callable[[str], Bucket],
    manifest: Mapping[str, Any],
    removed: Mapping[str, str],
    remember: Callable[[str, Bucket], None] | None = None,
    whole_owners: Collection[str] = (),
) -> tuple[dict[str, Any], set[str]]:
    """Remove ``removed`` (sample id -> owner id) from their buckets: the new manifest and the digests it
    drops. ``remember`` gets each bucket written; ``whole_owners``' own buckets are dropped unread."""
    affected: dict[str, set[str]] = defaultdict(set)
    owners_in: dict[str, set[str]] = defaultdict(set)
    for sid, owner in removed.items():
        key = bucket_of(owner, int(manifest["num_buckets"]))
        affected[key].add(sid)
        owners_in[key].add(owner)
    single = _single_owner_keys(manifest, affected)
    whole = set(whole_owners)
    buckets = dict(manifest["buckets"])
    removed_rows = 0
    rewritten: dict[str, Bucket] = {}
    for b, gone in affected.items():
        old = buckets.get(b)
        if old is None:
            continue
        if b in single and owners_in[b] <= whole:
            del buckets[b]
            removed_rows += len(gone)
            continue
        bucket = read(old)
        keep = [i for i, sid in enumerate(bucket.sample_ids) if sid not in gone]
        if len(keep) == len(bucket.sample_ids):
            continue
        removed_rows += len(bucket.sample_ids) - len(keep)
        if keep:
            rewritten[b] = _rows(bucket.sample_ids, bucket.owner_ids, bucket.arrays, keep)
        else:
            del buckets[b]
    written = artifacts.put_many([encode_bucket(kept) for kept in rewritten.values()])
    for (b, kept), digest in zip(rewritten.items(), written, strict=True):
        buckets[b] = digest
        if remember is not None:
            remember(digest, kept)
    dropped = set(manifest["buckets"].values()) - set(buckets.values())
    out = {**manifest, "buckets": buckets}
    if "num_rows" in manifest:
        out["num_rows"] = int(manifest["num_rows"]) - removed_rows
    return out, dropped


def read_rows(read: Callable[[str], Bucket], manifest: Mapping[str, Any]) -> Bucket:
    """Every row of every bucket (bucket order), as one Bucket."""
    ids: list[str] = []
    owners: list[str] = []
    parts: dict[str, list[np.ndarray]] = defaultdict(list)
    for _, digest in sorted(manifest["buckets"].items()):
        bucket = read(digest)
        ids += bucket.sample_ids
        owners += bucket.owner_ids
        for k, v in bucket.arrays.items():
            parts[k].append(v)
    return Bucket(ids, owners, {k: np.concatenate(v) for k, v in parts.items()})


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """One digest for a whole manifest: what an audit record names."""
    return hashlib.sha256(json.dumps(manifest["buckets"], sort_keys=True).encode()).hexdigest()


def digests(manifest: Mapping[str, Any] | None) -> set[str]:
    return set(manifest["buckets"].values()) if manifest else set()
