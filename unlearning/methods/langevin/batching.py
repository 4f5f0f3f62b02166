"""The seeded partition of the training samples into SGLU's N mini-batches (Algorithm 1, step 1).

Sample i belongs to batch blake2b_key(partition_seed)(sample_id) mod N, a seeded random partition that
depends on no feature and survives deletions without storing any id: the state keeps only scalars (no
copy of training data, no identifiers). Batches therefore hold different numbers of samples; every step
divides by b = the largest batch at fit time and the smaller batches are padded with null slots, so the
analysis sees N batches of exactly b slots (n = N b). A keyed, order-free digest of the live sample ids
(sum of keyed hashes mod 2^64) is kept to detect a ``remaining`` dataset that is not this model's
training data.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import torch

from unlearning.data import Dataset
from unlearning.methods.langevin.problem import LogisticProblem

_MASK64 = (1 << 64) - 1

Batch = tuple[torch.Tensor, torch.Tensor]
"""The features (augmented) and labels of one mini-batch's real samples (possibly none)."""


def _key(partition_seed: int) -> bytes:
    """The 32-byte blake2b key of a partition seed."""
    return hashlib.blake2b(f"lethe-langevin-partition:{int(partition_seed)}".encode(), digest_size=32).digest()


def sample_hashes(sample_ids: Sequence[str], partition_seed: int) -> np.ndarray:
    """Keyed 64-bit hashes of sample ids (blake2b keyed with the partition seed), as uint64."""
    key = _key(partition_seed)
    out = np.empty(len(sample_ids), dtype=np.uint64)
    for i, sid in enumerate(sample_ids):
        out[i] = int.from_bytes(hashlib.blake2b(sid.encode(), digest_size=8, key=key).digest(), "little")
    return out


def batch_of(hashes: np.ndarray, num_batches: int) -> np.ndarray:
    """Batch index of each sample: hash mod N (a seeded random partition; bias < N / 2^64)."""
    return (hashes % np.uint64(num_batches)).astype(np.int64)


def id_digest(hashes: np.ndarray) -> int:
    """Order-free digest of a set of samples: the sum of their keyed hashes mod 2^64."""
    return int(hashes.sum(dtype=np.uint64)) & _MASK64


def live_digest(hashes: np.ndarray) -> str:
    """The digest of the samples a model holds, as its accounting records it: :func:`id_digest` in 16 hex digits."""
    return format(id_digest(hashes), "016x")


def batch_rows(batch_index: np.ndarray, num_batches: int) -> list[np.ndarray]:
    """Row indices of every batch j = 0..N-1 (rows in dataset order within a batch)."""
    order = np.argsort(batch_index, kind="stable")
    counts = np.bincount(batch_index, minlength=num_batches)
    return np.split(order, np.cumsum(counts)[:-1])


def gather_batches(
    data: Dataset, rows_of_batches: Sequence[np.ndarray], problem: LogisticProblem, device: torch.device
) -> list[Batch]:
    """(features, labels) of every batch on ``device`` in float64, gathered once: rows not named (the
    samples being forgotten) are never copied."""
    features = data.features.reshape(len(data), -1)
    out: list[Batch] = []
    for rows in rows_of_batches:
        x = torch.as_tensor(features[rows], device=device).to(torch.float64)
        out.append((problem.augment(x), torch.as_tensor(data.labels[rows], device=device)))
    return out

