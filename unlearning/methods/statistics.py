"""In-memory per-sample statistics with per-owner sums (the library's SampleStatistics)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from unlearning.errors import AlreadyDeletedError, DimensionMismatchError, UnknownSampleError
from unlearning.methods.protocol import StatisticsSnapshot


class InMemorySampleStatistics:
    """One d-vector per sample in a dense (n, d) matrix, plus a sum per owner.

    ``sum_owner`` always covers the owner's *remaining* samples. The sums are computed once; removing
    samples only flips a mask, and an owner some of whose samples are already gone is corrected by
    subtracting just those few vectors when (rarely) it is forgotten as a whole. That keeps the hot
    path, forgetting a batch of samples, at one gather-and-sum over the forgotten rows.

    Vectors of a half-precision dtype (float16, bfloat16) are summed in float32 (:func:`accumulation_dtype`):
    the sums returned are float32, and the per-owner sums are kept in the vectors' dtype, each rounded once
    from its float32 sum.
    """

    def __init__(self, sample_ids: Sequence[str], owner_ids: Sequence[str], vectors: torch.Tensor) -> None:
        if vectors.ndim != 2 or vectors.shape[0] != len(sample_ids) or len(owner_ids) != len(sample_ids):
            raise DimensionMismatchError(
                f"{len(sample_ids)} sample ids, {len(owner_ids)} owner ids and vectors of shape "
                f"{tuple(vectors.shape)}: expected one (d,) row per sample"
            )
        self.dim = int(vectors.shape[1])
        self._vectors = vectors
        self._row = {sid: i for i, sid in enumerate(sample_ids)}
        self._owner = {sid: oid for sid, oid in zip(sample_ids, owner_ids)}
        self._alive = np.ones(len(sample_ids), dtype=bool)  # numpy: cheap per-element checks in _rows
        self._owner_rows: dict[str, list[int]] = {}
        for i, oid in enumerate(owner_ids):
            self._owner_rows.setdefault(oid, []).append(i)
        self._owner_index = {oid: k for k, oid in enumerate(self._owner_rows)}
        self._row_owner = torch.as_tensor([self._owner_index[o] for o in owner_ids], dtype=torch.long)
        self._sum_dtype = accumulation_dtype(vectors.dtype)
        sums = torch.zeros(len(self._owner_index), self.dim, dtype=self._sum_dtype)
        sums.index_add_(0, self._row_owner, vectors.to(self._sum_dtype))
        self._owner_sums = sums.to(vectors.dtype)
        self._sample_ids = tuple(sample_ids)

    def has(self, sample_id: str) -> bool:
        row = self._row.get(sample_id)
        return row is not None and bool(self._alive[row])

    def _rows(self, sample_ids: Sequence[str]) -> torch.Tensor:
        rows = []
        for sid in sample_ids:
            row = self._row.get(sid)
            if row is None:
                raise UnknownSampleError(f"sample id {sid!r} was not in this model's training set")
            if not self._alive[row]:
                raise AlreadyDeletedError(f"sample {sid!r} has already been forgotten")
            rows.append(row)
        if len(set(rows)) != len(rows):
            raise AlreadyDeletedError("the request names the same sample twice")
        return torch.as_tensor(rows, dtype=torch.long)

    def owner_of(self, sample_id: str) -> str:
        if sample_id not in self._owner:
            raise UnknownSampleError(f"sample id {sample_id!r} was not in this model's training set")
        return self._owner[sample_id]

    def remaining_of_owner(self, owner_id: str) -> tuple[str, ...]:
        if owner_id not in self._owner_rows:
            raise UnknownSampleError(f"owner {owner_id!r} has no samples in this model's training set")
        return tuple(self._sample_ids[i] for i in self._owner_rows[owner_id] if self._alive[i])

    def sum_samples(self, sample_ids: Sequence[str]) -> torch.Tensor:
        # Summing 32 gathered rows at a time keeps the temporary in cache; one large gather of m x d
        # floats allocates fresh pages on every call and is an order of magnitude slower at the median.
        total = torch.zeros(self.dim, dtype=self._sum_dtype)
        for rows in torch.split(self._rows(sample_ids), 32):
            total += self._vectors[rows].to(self._sum_dtype).sum(dim=0)
        return total

    def sum_owner(self, owner_id: str) -> torch.Tensor:
        if owner_id not in self._owner_index:
            raise UnknownSampleError(f"owner {owner_id!r} has no samples in this model's training set")
        total = self._owner_sums[self._owner_index[owner_id]].to(self._sum_dtype, copy=True)
        gone = [r for r in self._owner_rows[owner_id] if not self._alive[r]]
        if gone:
            total -= self._vectors[torch.as_tensor(gone)].to(self._sum_dtype).sum(dim=0)
        return total

    def remove(self, sample_ids: Sequence[str]) -> None:
        self._alive[self._rows(sample_ids).numpy()] = False

    def vector(self, sample_id: str) -> torch.Tensor:
        return self._vectors[self._rows([sample_id])[0]].clone()

    def export(self) -> StatisticsSnapshot:
        alive = torch.as_tensor(np.flatnonzero(self._alive))
        ids = tuple(self._sample_ids[i] for i in alive.tolist())
        return StatisticsSnapshot(
            sample_ids=ids, owner_ids=tuple(self._owner[s] for s in ids), vectors=self._vectors[alive].clone()
        )

    @classmethod
    def from_snapshot(cls, snapshot: StatisticsSnapshot) -> InMemorySampleStatistics:
        return cls(snapshot.sample_ids, snapshot.owner_ids, snapshot.vectors)


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype sums of vectors stored as ``dtype`` are computed in: float32 for the half-precision
    types, ``dtype`` itself otherwise."""
    return torch.promote_types(dtype, torch.float32)
