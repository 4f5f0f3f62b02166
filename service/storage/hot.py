"""The Redis hot store, rebuilt from Postgres and the artifact store. Keys under ``{prefix}:m:{model_id}:``:
``serving`` (seq, version_id, dtype, spec, raw weights), ``stats:meta`` (seq, dim, dtype), ``stats:vec`` and
``stats:owner`` (per sample: vector, owner), ``stats:osum`` and ``stats:omem`` (per owner: sum, members).
Vectors and sums are raw values of the statistics' dtype (bfloat16 as its 16 bits); sums of half-precision
vectors are computed in float32 and rounded once (:func:`~unlearning.methods.statistics.accumulation_dtype`)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import redis
import torch
from redis.commands.core import Script

from service.storage.tensors import array_of, dtype_name, numpy_dtype, tensor_of
from unlearning.methods.statistics import accumulation_dtype

_CHUNK = 512  # fields per HSET when loading statistics: bounds the size of one Redis command


def to_bytes(t: torch.Tensor) -> bytes:
    return array_of(t).tobytes()


def from_bytes(data: bytes, dtype: str) -> torch.Tensor:
    # np.frombuffer shares the (immutable) bytes; copy so torch gets a writable tensor.
    return tensor_of(np.frombuffer(data, dtype=numpy_dtype(dtype)).copy(), dtype)


def reply_bytes(value: bytes | str) -> bytes:
    """A Redis reply value typed as bytes (clients use ``decode_responses=False``)."""
    return cast(bytes, value)


def reply_hash(value: dict[bytes | str, bytes | str]) -> dict[bytes, bytes]:
    """An HGETALL reply as the bytes-to-bytes dict it is (see :func:`reply_bytes`)."""
    return cast(dict[bytes, bytes], value)


def connect(url: str | None) -> redis.Redis:
    """A client for ``url``; ``None`` (embedded mode) gives an in-process fakeredis server."""
    if url is None:
        import fakeredis

        return fakeredis.FakeRedis()
    return redis.Redis.from_url(url)


@dataclass(frozen=True)
class ServingWeights:
    seq: int
    version_id: int
    spec: dict[str, Any]
    weights: torch.Tensor


RETIRED_SEQ = 2**62  # the serving pointer's seq once a model is deleted: above any version's


# Compare-and-set of the serving pointer (KEYS[1]); ARGV: seq, version_id, dtype, spec, weights. 1 if the
# pointer is at seq afterwards, 0 if at a later one (seqs and RETIRED_SEQ are exact as Lua doubles).
_PUBLISH = """
local current = redis.call('HGET', KEYS[1], 'seq')
if current and tonumber(current) >= tonumber(ARGV[1]) then
  if tonumber(current) == tonumber(ARGV[1]) then return 1 end
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'seq', ARGV[1], 'version_id', ARGV[2], 'dtype', ARGV[3], 'spec', ARGV[4],
  'weights', ARGV[5])
return 1
"""


class HotStore:
    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self._scripts: dict[str, Script] = {}

    def script(self, source: str) -> Script:
        """The Lua ``source`` registered once as a redis-py ``Script`` (EVALSHA, reloaded when flushed)."""
        found = self._scripts.get(source)
        if found is None:
            found = self._scripts[source] = self.client.register_script(source)
        return found

    def key(self, model_id: int, name: str) -> str:
        return f"{self.prefix}:m:{model_id}:{name}"

    def ping(self) -> bool:
        try:
            return bool(self.client.ping())
        except redis.RedisError:
            return False

    def set_serving(
        self, model_id: int, version_id: int, seq: int, spec: dict[str, Any], weights: torch.Tensor
    ) -> bool:
        """Point the model at ``seq`` unless a newer one is served; whether it is at ``seq``."""
        published = self.script(_PUBLISH)(
            keys=[self.key(model_id, "serving")],
            args=[seq, version_id, dtype_name(weights.dtype), json.dumps(spec), to_bytes(weights)],
        )
        return bool(published)

    def get_serving(self, model_id: int) -> ServingWeights | None:
        raw = reply_hash(self.client.hgetall(self.key(model_id, "serving")))
        if not raw or b"weights" not in raw:
            return None
        return ServingWeights(
            seq=int(raw[b"seq"]),
            version_id=int(raw[b"version_id"]),
            spec=json.loads(raw[b"spec"]),
            weights=from_bytes(raw[b"weights"], raw[b"dtype"].decode()),
        )

    def retire(self, model_id: int) -> None:
        """Delete the model's keys, leaving a tombstone pointer (``RETIRED_SEQ``) no writer passes."""
        serving = self.key(model_id, "serving")
        pipe = self.client.pipeline()
        pipe.delete(serving, self.key(model_id, "update-pending"))
        pipe.delete(*self._stats_keys(model_id))
        pipe.hset(serving, mapping={"seq": RETIRED_SEQ, "version_id": 0})
        pipe.execute()

    def claim_update(self, model_id: int, ttl_seconds: int = 30) -> bool:
        """The model's update claim, for ``ttl_seconds``: True for the first caller, or if Redis fails."""
        try:
            return bool(self.client.set(self.key(model_id, "update-pending"), 1, nx=True, ex=ttl_seconds))
        except redis.RedisError:
            return True  # cannot tell: publish (a redundant job is harmless)

    def release_update(self, model_id: int) -> None:
        self.client.delete(self.key(model_id, "update-pending"))

    def stats_meta(self, model_id: int) -> dict[str, str] | None:
        raw = reply_hash(self.client.hgetall(self.key(model_id, "stats:meta")))
        return {k.decode(): v.decode() for k, v in raw.items()} if raw else None

    def _stats_keys(self, model_id: int) -> list[str]:
        return [self.key(model_id, f"stats:{n}") for n in ("meta", "vec", "owner", "osum", "omem")]

    def clear_stats(self, model_id: int) -> None:
        self.client.delete(*self._stats_keys(model_id))

    def load_stats(
        self,
        model_id: int,
        seq: int,
        sample_ids: Sequence[str],
        owner_ids: Sequence[str],
        vectors: torch.Tensor,
    ) -> None:
        """Replace the model's statistics with these rows (for version ``seq``)."""
        self.clear_stats(model_id)
        dtype = dtype_name(vectors.dtype)
        vectors = vectors.detach().contiguous().cpu()
        members: dict[str, list[str]] = defaultdict(list)
        for sid, oid in zip(sample_ids, owner_ids):
            members[oid].append(sid)
        owners = list(members)
        index = {o: k for k, o in enumerate(owners)}
        sums = torch.zeros(len(owners), vectors.shape[1], dtype=accumulation_dtype(vectors.dtype))
        sums.index_add_(
            0, torch.as_tensor([index[o] for o in owner_ids], dtype=torch.long), vectors.to(sums.dtype)
        )
        width = vectors.shape[1] * vectors.element_size()  # bytes of one row
        rows, owner_sums = to_bytes(vectors), to_bytes(sums.to(vectors.dtype))
        keys = dict(zip(("meta", "vec", "owner", "osum", "omem"), self._stats_keys(model_id), strict=True))
        pipe = self.client.pipeline(transaction=False)
        for start in range(0, len(sample_ids), _CHUNK):
            stop = start + _CHUNK
            pipe.hset(
                keys["vec"],
                mapping={
                    sid: rows[i * width : (i + 1) * width]
                    for i, sid in enumerate(sample_ids[start:stop], start)
                },
            )
            pipe.hset(keys["owner"], mapping=dict(zip(sample_ids[start:stop], owner_ids[start:stop])))
        for start in range(0, len(owners), _CHUNK):
            chunk = owners[start : start + _CHUNK]
            pipe.hset(
                keys["osum"],
                mapping={o: owner_sums[index[o] * width : (index[o] + 1) * width] for o in chunk},
            )
            pipe.hset(keys["omem"], mapping={o: json.dumps(members[o]) for o in chunk})
        # the meta last: a reader seeing its ``seq`` sees every row
        pipe.hset(keys["meta"], mapping={"seq": seq, "dim": int(vectors.shape[1]), "dtype": dtype})
        pipe.execute()
