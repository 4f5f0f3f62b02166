"""``SampleStatistics`` over Redis: ``remove`` stages, :meth:`apply` writes under the model lock by seq. Sums
are computed in float32 for half-precision vectors (read upcast) and stored back in the statistics' dtype."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Container, Iterable, Sequence
from typing import Any, cast

import torch

from service.storage.hot import HotStore, from_bytes, reply_bytes, reply_hash, to_bytes
from service.storage.tensors import TORCH_DTYPES
from unlearning.errors import AlreadyDeletedError, UnknownSampleError
from unlearning.methods.protocol import StatisticsSnapshot
from unlearning.methods.statistics import accumulation_dtype


class HotStoreLost(RuntimeError):
    """The statistics vanished from Redis during an update (a flush): rebuild and retry."""


# Apply staged removals if meta.seq is still base seq (else 0). KEYS: meta, vec, owner, osum, omem. ARGV:
# base seq, new seq, n removed, their ids, n partly removed owners, (owner, sum, members) each, then the
# owners leaving whole. HDEL in slices: Lua's unpack is bounded by its C stack.
_APPLY = """
if redis.call('HGET', KEYS[1], 'seq') ~= ARGV[1] then return 0 end
local function hdel(key, first, last)
  for s = first, last, 1000 do
    redis.call('HDEL', key, unpack(ARGV, s, math.min(s + 999, last)))
  end
end
local removed = tonumber(ARGV[3])
hdel(KEYS[2], 4, 3 + removed)
hdel(KEYS[3], 4, 3 + removed)
local at = 4 + removed
local partial = tonumber(ARGV[at])
for i = 1, partial do
  local o = at + 3 * i - 2
  redis.call('HSET', KEYS[4], ARGV[o], ARGV[o + 1])
  redis.call('HSET', KEYS[5], ARGV[o], ARGV[o + 2])
end
local whole = at + 3 * partial + 1
hdel(KEYS[4], whole, #ARGV)
hdel(KEYS[5], whole, #ARGV)
redis.call('HSET', KEYS[1], 'seq', ARGV[2])
return 1
"""


class RedisSampleStatistics:
    def __init__(
        self,
        hot: HotStore,
        model_id: int,
        dim: int,
        dtype: str,
        erased_samples: Container[str] = frozenset(),
        erased_owners: Container[str] = frozenset(),
    ) -> None:
        """``erased_*`` answer "was this id forgotten earlier?" so errors say AlreadyDeleted, not Unknown."""
        self.dim = dim
        self.dtype = dtype
        self._sum_dtype = accumulation_dtype(TORCH_DTYPES[dtype])
        self._hot = hot
        self._model_id = model_id
        self._erased_samples = erased_samples
        self._erased_owners = erased_owners
        self._removed: dict[str, str] = {}  # staged: sample id -> owner id
        self._vectors: dict[str, torch.Tensor] = {}  # vectors read so far (sample id -> vector)
        self._owners: dict[str, tuple[list[str], torch.Tensor] | None] = {}  # prefetched: members, sum
        self._k = {n: hot.key(model_id, f"stats:{n}") for n in ("vec", "owner", "osum", "omem", "meta")}
        self._keys = [self._k[n] for n in ("meta", "vec", "owner", "osum", "omem")]  # _APPLY's order

    def _hot_store_lost(self) -> HotStoreLost | None:
        """A flush under the update, told apart from a sample that is not there: the meta key is gone."""
        if self.loaded_seq() is None:
            return HotStoreLost(f"statistics of model {self._model_id} are no longer in Redis")
        return None

    def _missing_sample(self, sample_id: str) -> Exception:
        if lost := self._hot_store_lost():
            return lost
        if sample_id in self._removed or sample_id in self._erased_samples:
            return AlreadyDeletedError(f"sample {sample_id!r} has already been forgotten")
        return UnknownSampleError(f"sample id {sample_id!r} was not in this model's training set")

    def _missing_owner(self, owner_id: str) -> Exception:
        if lost := self._hot_store_lost():
            return lost
        if owner_id in self._erased_owners:
            return AlreadyDeletedError(f"owner {owner_id!r} has already been forgotten")
        return UnknownSampleError(f"owner {owner_id!r} has no samples in this model's training set")

    def prefetch_owners(self, owner_ids: Iterable[str]) -> None:
        """Members and sums of ``owner_ids`` in one round trip (a batch forgetting many owners)."""
        owners = [o for o in dict.fromkeys(owner_ids) if o not in self._owners]
        if not owners:
            return
        pipe = self._hot.client.pipeline(transaction=False)
        pipe.hmget(self._k["omem"], owners)
        pipe.hmget(self._k["osum"], owners)
        members, sums = pipe.execute()
        for owner, m, s in zip(owners, members, sums):
            self._owners[owner] = (
                None if m is None or s is None else (json.loads(m), from_bytes(s, self.dtype))
            )

    def _owner(self, owner_id: str) -> tuple[list[str], torch.Tensor]:
        if owner_id not in self._owners:
            self.prefetch_owners([owner_id])
        found = self._owners[owner_id]
        if found is None:
            raise self._missing_owner(owner_id)
        return found

    def _read_vectors(self, sample_ids: Sequence[str]) -> None:
        wanted = [s for s in sample_ids if s not in self._vectors]
        if wanted:
            for sid, raw in zip(wanted, self._hot.client.hmget(self._k["vec"], wanted)):
                if raw is None:
                    raise self._missing_sample(sid)
                self._vectors[sid] = from_bytes(reply_bytes(raw), self.dtype)

    def _live_owners(self, sample_ids: Sequence[str]) -> list[str]:
        """Owners of live samples, with the errors the in-memory implementation raises."""
        dup = [s for s, n in Counter(sample_ids).items() if n > 1]
        if dup:
            raise AlreadyDeletedError(f"the request names sample {dup[0]!r} twice")
        for sid in sample_ids:
            if sid in self._removed:
                raise self._missing_sample(sid)
        if not sample_ids:
            return []
        owners = self._hot.client.hmget(self._k["owner"], list(sample_ids))
        for sid, owner in zip(sample_ids, owners):
            if owner is None:
                raise self._missing_sample(sid)
        return [o.decode() for o in cast("list[bytes]", owners)]  # None ruled out above; see reply_bytes

    def has(self, sample_id: str) -> bool:
        return sample_id not in self._removed and bool(self._hot.client.hexists(self._k["owner"], sample_id))

    def owner_of(self, sample_id: str) -> str:
        if sample_id in self._removed:
            return self._removed[sample_id]
        owner = self._hot.client.hget(self._k["owner"], sample_id)
        if owner is None:
            raise self._missing_sample(sample_id)
        return reply_bytes(owner).decode()

    def remaining_of_owner(self, owner_id: str) -> tuple[str, ...]:
        members, _ = self._owner(owner_id)
        return tuple(s for s in members if s not in self._removed)

    def sum_samples(self, sample_ids: Sequence[str]) -> torch.Tensor:
        self._live_owners(sample_ids)
        self._read_vectors(sample_ids)
        out = torch.zeros(self.dim, dtype=self._sum_dtype)
        for sid in sample_ids:
            out += self._vectors[sid].to(self._sum_dtype)
        return out

    def sum_owner(self, owner_id: str) -> torch.Tensor:
        members, total = self._owner(owner_id)
        gone = [s for s in members if s in self._removed]
        if len(gone) == len(members):
            return torch.zeros(self.dim, dtype=self._sum_dtype)
        total = total.to(self._sum_dtype, copy=True)
        if gone:
            self._read_vectors(gone)
            for sid in gone:
                total -= self._vectors[sid].to(self._sum_dtype)
        return total

    def remove(self, sample_ids: Sequence[str]) -> None:
        for sid, owner in zip(sample_ids, self._live_owners(sample_ids)):
            self._removed[sid] = owner

    def export(self) -> StatisticsSnapshot:
        vec = reply_hash(self._hot.client.hgetall(self._k["vec"]))
        owner = reply_hash(self._hot.client.hgetall(self._k["owner"]))
        ids = sorted(k.decode() for k in vec if k.decode() not in self._removed)
        rows = [from_bytes(vec[s.encode()], self.dtype) for s in ids]
        vectors = torch.stack(rows) if rows else torch.zeros((0, self.dim), dtype=TORCH_DTYPES[self.dtype])
        return StatisticsSnapshot(
            sample_ids=tuple(ids), owner_ids=tuple(owner[s.encode()].decode() for s in ids), vectors=vectors
        )

    @property
    def staged(self) -> dict[str, str]:
        """Sample id -> owner id of every removal staged so far."""
        return dict(self._removed)

    def discard_staged(self) -> None:
        self._removed.clear()

    def loaded_seq(self) -> int | None:
        seq = self._hot.client.hget(self._k["meta"], "seq")
        return None if seq is None else int(seq)

    def apply(self, base_seq: int, new_seq: int) -> None:
        """Write the staged removals atomically as ``new_seq``; HotStoreLost if not at ``base_seq``."""
        by_owner: dict[str, list[str]] = defaultdict(list)
        for sid, owner in self._removed.items():
            by_owner[owner].append(sid)
        self.prefetch_owners(by_owner)
        if any(self._owners[o] is None for o in by_owner):
            raise HotStoreLost(f"statistics of model {self._model_id} are no longer in Redis")
        partial = {o: sids for o, sids in by_owner.items() if len(set(sids)) < len(self._owners[o][0])}  # type: ignore[index]
        self._read_vectors([s for sids in partial.values() for s in sids])
        if not self._hot.script(_APPLY)(
            keys=self._keys, args=self._apply_args(by_owner, partial, base_seq, new_seq)
        ):
            raise HotStoreLost(f"statistics of model {self._model_id} changed under the update")
        self._removed.clear()
        self._owners.clear()

    def _apply_args(
        self, by_owner: dict[str, list[str]], partial: dict[str, list[str]], base_seq: int, new_seq: int
    ) -> list[Any]:
        """:data:`_APPLY`'s ARGV."""
        args: list[Any] = [base_seq, new_seq, len(self._removed), *self._removed, len(partial)]
        for owner, sids in partial.items():
            members, total = self._owners[owner]  # type: ignore[misc]
            gone = set(sids)
            total = total.to(self._sum_dtype, copy=True)
            for sid in gone:
                total -= self._vectors[sid].to(self._sum_dtype)
            stored = total.to(TORCH_DTYPES[self.dtype])
            args += [owner, to_bytes(stored), json.dumps([s for s in members if s not in gone])]
        return args + [o for o in by_owner if o not in partial]
