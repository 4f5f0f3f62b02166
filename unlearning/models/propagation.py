"""Graph propagation features for node classification: SGC ``P^K X`` and GPR ``[X, PX, .., P^K X]/(K+1)``,
computed in full or recomputed locally for only the rows a deletion can change.

Digest 001 section 2 (Chien, Pan, Milenkovic, "Certified Graph Unlearning"):

* ``P = D~^{-1} (A + I)``, the row-normalised propagation matrix with self-loops (right-stochastic:
  ``P 1 = 1``). The paper picks it over the symmetric normalisation because it keeps every row norm
  of ``P^K X`` at most the largest row norm of ``X`` (Lemma 4.4), so the unit row-norm assumption of the
  certified-removal bounds survives propagation.
* SGC (Sec. 4.1): ``Z = P^K X``.  GPR (Sec. 4.5): ``Z = [X, PX, .., P^K X] / (K + 1)`` (the 1/(K+1)
  scaling, not 1/sqrt(K+1), because the paper's Delta bound needs it).
* Deleted nodes keep their index and their self-loop but lose every edge and their features. The
  paper zeroes the self-loop too (row m of P' is zero); with X'[m] = 0 both conventions give the same
  ``P'^K X'`` (digest 001 section 3.3, verified there), and keeping it avoids a division by zero.

Input normalisation (:class:`FeatureScaler`), applied to the raw features before propagation:

* ``row_l2``: ``x_i / ||x_i||``; it depends on the node's own row only, so deleting a node leaves
  nothing of it in the scaler.
* ``standardize``: the authors' code: column-wise ``(x - mean) / std`` over the live nodes, then
  every row divided by the largest standardised row norm so that rows have norm <= 1. The statistics
  depend on every node present when they were computed; a method freezes them for a budget epoch and
  must say so in its certificate (digest 001 section 4.4).
* ``none``: the raw features.

Locality (digest 001 section 3, [DERIVED, VERIFIED] there): a deleted node's features or edges change
only rows within K hops of it, and a deleted edge {u, v} only rows within K-1 hops of u or v. This
module recomputes a requested set of rows from the rows K hops around it: level k of the recursion
``Z_k = P Z_{k-1}`` is evaluated only on the rows level k+1 reads. Every product goes through the same
CSR-times-dense kernel with the same per-row order of non-zeros as the full computation, so the local
rows are bit-for-bit equal to the corresponding rows of the full computation (tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp

from unlearning.data.graphs.node_graph import NodeGraph
from unlearning.errors import InvalidConfigError
from unlearning.validation import integer_at_least

__all__ = [
    "FeatureScaler",
    "Normalization",
    "PropagationSpec",
    "full_features",
    "k_hop",
    "local_features",
    "propagation_rows",
]

Normalization = Literal["row_l2", "standardize", "none"]
NORMALIZATIONS: tuple[str, ...] = ("row_l2", "standardize", "none")


PROPAGATIONS: tuple[str, ...] = ("sgc", "gpr")
MAX_HOPS = 64  # the papers use K = 2 to 10; a registration's K costs K sparse products per (re)training


@dataclass(frozen=True)
class PropagationSpec:
    """Which features: ``kind`` "sgc" (``P^K X``) or "gpr" (``[X, .., P^K X]/(K+1)``) with ``hops`` = K."""

    kind: Literal["sgc", "gpr"] = "sgc"
    hops: int = 2

    def __post_init__(self) -> None:
        if self.kind not in PROPAGATIONS:
            raise InvalidConfigError(f"propagation kind must be 'sgc' or 'gpr', got {self.kind!r}")
        if integer_at_least("hops (K)", self.hops, 0) > MAX_HOPS:
            raise InvalidConfigError(
                f"hops (K) must be at most {MAX_HOPS}, got {self.hops}: each hop is a sparse product over "
                "the whole graph, and beyond a few the features of a connected graph are already smoothed flat"
            )

    def dim(self, num_features: int) -> int:
        return num_features * (self.hops + 1 if self.kind == "gpr" else 1)


@dataclass(frozen=True)
class FeatureScaler:
    """The per-row input transform; see the module docstring. ``mean``/``scale`` only for standardize."""

    kind: Normalization
    mean: np.ndarray | None = None
    scale: np.ndarray | None = None
    divisor: float = 1.0

    @classmethod
    def fit(cls, graph: NodeGraph, kind: str) -> FeatureScaler:
        """Fit on the live nodes of ``graph`` (standardize) or return the data-independent transform."""
        if kind not in NORMALIZATIONS:
            raise InvalidConfigError(f"normalization must be one of {NORMALIZATIONS}, got {kind!r}")
        if kind != "standardize":
            return cls(kind)  # type: ignore[arg-type]
        live = np.flatnonzero(graph.live_mask())
        rows = graph.features[live]
        mean = np.asarray(rows.mean(axis=0)).ravel()
        sq = np.asarray(rows.multiply(rows).mean(axis=0)).ravel()
        std = np.sqrt(np.maximum(sq - mean * mean, 0.0))
        scale = np.where(std > 1e-12, std, 1.0)  # sklearn's convention: constant columns keep scale 1
        scaler = cls("standardize", mean, scale, 1.0)
        norms = np.linalg.norm(scaler._standardize(rows.toarray()), axis=1)
        return cls("standardize", mean, scale, float(norms.max()) if norms.size and norms.max() > 0 else 1.0)

    def _standardize(self, dense: np.ndarray) -> np.ndarray:
        assert self.mean is not None and self.scale is not None
        return (dense - self.mean) / self.scale

    def transform(self, raw_rows: sp.csr_matrix, live: np.ndarray) -> np.ndarray:
        """Dense float64 C-contiguous rows; rows that are not ``live`` (deleted node / features) are 0."""
        dense = np.asarray(raw_rows.toarray(), dtype=np.float64)
        if self.kind == "row_l2":
            norms = np.linalg.norm(dense, axis=1, keepdims=True)
            dense = np.divide(dense, norms, out=np.zeros_like(dense), where=norms > 0)
        elif self.kind == "standardize":
            dense = self._standardize(dense) / self.divisor
        dense[~np.asarray(live, dtype=bool)] = 0.0
        return np.ascontiguousarray(dense)

    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {"scaler_divisor": np.asarray([self.divisor], dtype=np.float64)}
        if self.mean is not None and self.scale is not None:
            out["scaler_mean"] = self.mean.astype(np.float64)
            out["scaler_scale"] = self.scale.astype(np.float64)
        return out

    @classmethod
    def from_arrays(cls, kind: str, arrays: dict[str, np.ndarray]) -> FeatureScaler:
        divisor = float(np.asarray(arrays["scaler_divisor"]).reshape(-1)[0])
        return cls(kind, arrays.get("scaler_mean"), arrays.get("scaler_scale"), divisor)  # type: ignore[arg-type]


def propagation_rows(adjacency: sp.csr_matrix, rows: np.ndarray) -> sp.csr_matrix:
    """Rows ``rows`` of ``P = D~^{-1}(A + I)`` as a (len(rows), n) CSR matrix with sorted column indices.

    The full matrix is ``propagation_rows(A, arange(n))``; every row is built by the same arithmetic
    (``1.0 / (deg + 1)``), so a row extracted here equals the same row of the full matrix exactly.
    """
    rows = np.asarray(rows, dtype=np.int64)
    n = adjacency.shape[0]
    starts = adjacency.indptr[rows].astype(np.int64)
    counts = (adjacency.indptr[rows + 1] - adjacency.indptr[rows]).astype(np.int64)
    # Concatenated ranges starts[r]:starts[r]+counts[r] without a Python loop.
    offsets = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    neighbours = adjacency.indices[np.repeat(starts, counts) + offsets].astype(np.int64)
    row_of = np.repeat(np.arange(len(rows)), counts)
    cols = np.concatenate([neighbours, rows])
    owners = np.concatenate([row_of, np.arange(len(rows))])
    order = np.lexsort((cols, owners))
    cols, owners = cols[order], owners[order]
    weight = 1.0 / (counts + 1.0)
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts + 1, out=indptr[1:])
    return sp.csr_matrix((weight[owners], cols, indptr), shape=(len(rows), n))


def k_hop(adjacency: sp.csr_matrix, seeds: np.ndarray, hops: int) -> np.ndarray:
    """Sorted node indices within ``hops`` edges of any seed (seeds included)."""
    n = adjacency.shape[0]
    inside = np.zeros(n, dtype=bool)
    frontier = np.unique(np.asarray(seeds, dtype=np.int64))
    inside[frontier] = True
    for _ in range(hops):
        if len(frontier) == 0:
            break
        nbrs = np.unique(adjacency[frontier].indices)
        frontier = nbrs[~inside[nbrs]]
        inside[frontier] = True
    return np.flatnonzero(inside)


def _spmm(matrix: sp.csr_matrix, dense: np.ndarray) -> np.ndarray:
    """CSR @ dense through scipy's row-by-row kernel: each output row sums its non-zeros in index order."""
    return np.ascontiguousarray(matrix @ dense)


def _compose(powers: list[np.ndarray], spec: PropagationSpec) -> np.ndarray:
    if spec.kind == "sgc":
        return powers[-1]
    return np.ascontiguousarray(np.concatenate(powers, axis=1) / float(spec.hops + 1))


def full_features(graph: NodeGraph, scaler: FeatureScaler, spec: PropagationSpec) -> np.ndarray:
    """The (n, d) feature matrix of every node (SGC or GPR), computed over the whole graph."""
    n = graph.num_nodes
    P = propagation_rows(graph.adjacency, np.arange(n))
    level = scaler.transform(graph.features, graph.live_mask())
    powers = [level]
    for _ in range(spec.hops):
        level = _spmm(P, level)
        powers.append(level)
    return _compose(powers if spec.kind == "gpr" else [level], spec)


def local_features(graph: NodeGraph, scaler: FeatureScaler, spec: PropagationSpec, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` of :func:`full_features` (same order), computed from the K-hop region around them only.

    Level K is needed on ``rows``; level k-1 on every column that level k's rows of P touch (which
    include the rows themselves through the self-loops, as GPR needs). Cost: O(sum_k nnz(P[R_k]) F)
    instead of O(K nnz(P) F).
    """
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        return np.zeros((0, spec.dim(graph.num_features)))
    if np.any(np.diff(rows) <= 0):
        raise InvalidConfigError("local_features needs sorted, unique row indices")
    adjacency = graph.adjacency
    needed = [rows]  # needed[j] = rows of level K - j
    blocks: list[sp.csr_matrix] = []
    for _ in range(spec.hops):
        block = propagation_rows(adjacency, needed[-1])
        support = np.unique(block.indices)
        # Re-index the columns onto the support; searchsorted is monotone, so each row keeps its order.
        blocks.append(sp.csr_matrix((block.data, np.searchsorted(support, block.indices), block.indptr),
                                    shape=(block.shape[0], len(support))))
        needed.append(support)
    base = needed[-1]
    level = scaler.transform(graph.features[base], graph.live_mask()[base])
    powers: list[np.ndarray] = [level[np.searchsorted(base, rows)]] if spec.kind == "gpr" else []
    for j in range(spec.hops - 1, -1, -1):  # level K - j from level K - j - 1
        level = _spmm(blocks[j], level)
        if spec.kind == "gpr":
            powers.append(level[np.searchsorted(needed[j], rows)])
    if spec.kind == "sgc":
        return np.ascontiguousarray(level)
    return _compose(powers, spec)
