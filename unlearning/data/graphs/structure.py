"""Checks and canonical forms of graph structure shared by the graph types and the graph loaders.

Every check raises :class:`~unlearning.errors.InvalidDatasetError` with a message that names what to fix,
prefixed by ``where`` (the graph or file being checked).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from unlearning.data.limits import MAX_CLASSES
from unlearning.errors import InvalidDatasetError

__all__ = ["canonical_edges", "check_class_count", "symmetric_adjacency", "unique_ids"]


def canonical_edges(edges: np.ndarray, n: int, where: str) -> np.ndarray:
    """Undirected edges as a sorted unique (E, 2) int64 array with u < v; rejects self-loops/out-of-range."""
    arr = np.asarray(edges, dtype=np.int64).reshape(-1, 2) if np.size(edges) else np.zeros((0, 2), np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        bad = arr[(arr < 0).any(1) | (arr >= n).any(1)][0]
        raise InvalidDatasetError(f"{where}: edge {tuple(int(x) for x in bad)} names a node outside 0..{n - 1}")
    if arr.size and (arr[:, 0] == arr[:, 1]).any():
        node = int(arr[arr[:, 0] == arr[:, 1]][0, 0])
        raise InvalidDatasetError(f"{where}: self-loop on node {node}; self-loops are not edges (drop them)")
    lo, hi = np.minimum(arr[:, 0], arr[:, 1]), np.maximum(arr[:, 0], arr[:, 1])
    out = np.unique(np.stack([lo, hi], axis=1), axis=0) if len(arr) else np.zeros((0, 2), np.int64)
    return np.ascontiguousarray(out, dtype=np.int64)


def unique_ids(ids: Sequence[str], what: str, where: str) -> tuple[str, ...]:
    """``ids`` as strings, refusing a repeated or an empty id."""
    out = tuple(str(s) for s in ids)
    if len(set(out)) != len(out):
        seen: set[str] = set()
        dup = next(s for s in out if s in seen or seen.add(s))  # type: ignore[func-returns-value]
        raise InvalidDatasetError(f"{where}: {what} {dup!r} appears more than once: {what}s must be unique")
    if any(s == "" for s in out):
        raise InvalidDatasetError(f"{where}: {what}s must be non-empty strings")
    return out


def symmetric_adjacency(n: int, edges: np.ndarray) -> sp.csr_matrix:
    """The symmetric 0/1 (n, n) adjacency of canonical ``edges`` (CSR, sorted indices)."""
    rows = np.concatenate([edges[:, 0], edges[:, 1]])
    cols = np.concatenate([edges[:, 1], edges[:, 0]])
    adj = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    adj.sum_duplicates()
    adj.sort_indices()
    return adj


def check_class_count(count: int, what: str, where: str) -> None:
    """At most MAX_CLASSES classes (or tags), as the table loaders allow: a label of 10**9 must not size a
    model with a billion outputs."""
    if count > MAX_CLASSES:
        raise InvalidDatasetError(f"{where}: {what} is {count:,}; at most {MAX_CLASSES:,} are supported")
