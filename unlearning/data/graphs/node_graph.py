"""One undirected graph for node classification (:class:`NodeGraph`), addressed by stable string node ids.

The graph is immutable. A deletion never edits a value in place: :meth:`NodeGraph.without` (or
:meth:`NodeGraph.after_request` for a :class:`~unlearning.methods.protocol.ForgetRequest`) validates the
request and returns the graph that remains, so the service can store what remains generically and a
method can compute the same thing from the data it is handed.

What a deletion removes (digest 001 section 3, digest 000 section 2.5):

* node: the node's features, its label and every incident edge. The node keeps its index as an isolated
  tombstone with zero features, so node indices never shift (the certified graph unlearning code does
  the same; the propagated features equal the paper's convention).
* node features: the features and the label of a node (the paper's "node feature unlearning"); its
  edges stay.
* edge: one undirected edge ``{u, v}``.

Nothing that was deleted is kept anywhere: no list of deleted edges, no old feature rows. Serialisation
is in :mod:`unlearning.data.graphs.codecs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from unlearning.data.graphs.requests import GraphRequest
from unlearning.data.graphs.structure import (
    canonical_edges,
    check_class_count,
    symmetric_adjacency,
    unique_ids,
)
from unlearning.errors import AlreadyDeletedError, InvalidDatasetError, UnknownSampleError

__all__ = ["SPLITS", "TEST", "TRAIN", "VAL", "NodeGraph"]

SPLITS = ("none", "train", "val", "test")
"""Split names; ``NodeGraph.split`` holds their index (int8)."""
TRAIN, VAL, TEST = 1, 2, 3


def _edge_codes(edges: np.ndarray, n: int) -> np.ndarray:
    return edges[:, 0] * np.int64(n) + edges[:, 1]


def _zero_rows(matrix: sp.csr_matrix, rows: np.ndarray) -> sp.csr_matrix:
    """A copy of ``matrix`` whose ``rows`` hold no entries (structurally removed, not stored zeros)."""
    if len(rows) == 0:
        return matrix
    lengths = np.diff(matrix.indptr)
    keep_rows = np.ones(matrix.shape[0], dtype=bool)
    keep_rows[rows] = False
    keep = np.repeat(keep_rows, lengths)
    indptr = np.zeros(matrix.shape[0] + 1, dtype=matrix.indptr.dtype)
    np.cumsum(lengths * keep_rows, out=indptr[1:])
    return sp.csr_matrix((matrix.data[keep], matrix.indices[keep], indptr), shape=matrix.shape)


@dataclass(frozen=True, eq=False)
class NodeGraph:
    """One undirected graph for node classification, addressed by stable string node ids.

    ``features`` is (n, F) CSR float64; ``labels`` int64 in [0, num_classes) or -1 (unlabelled or
    erased); ``edges`` (E, 2) int64 with u < v, unique, sorted; ``split`` int8 codes into
    :data:`SPLITS`; ``deleted`` marks node tombstones (no features, no label, no edges) and
    ``features_deleted`` nodes whose features and label were deleted (edges kept).
    """

    node_ids: tuple[str, ...]
    features: sp.csr_matrix
    labels: np.ndarray
    num_classes: int
    edges: np.ndarray
    split: np.ndarray
    deleted: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    features_deleted: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    owner_ids: tuple[str, ...] = ()
    name: str = "graph"

    def __post_init__(self) -> None:
        n = len(self.node_ids)
        where = f"graph {self.name!r}"
        if n == 0:
            raise InvalidDatasetError(f"{where} has no nodes")
        set_ = object.__setattr__
        set_(self, "node_ids", unique_ids(self.node_ids, "node id", where))
        owners = self.owner_ids or self.node_ids
        if len(owners) != n:
            raise InvalidDatasetError(f"{where}: {len(owners)} owner ids for {n} nodes: give one owner per node")
        set_(self, "owner_ids", tuple(str(o) for o in owners))
        feats = sp.csr_matrix(self.features, dtype=np.float64)
        if feats.shape[0] != n:
            raise InvalidDatasetError(f"{where}: features have {feats.shape[0]} rows for {n} nodes")
        if not np.isfinite(feats.data).all():
            raise InvalidDatasetError(f"{where}: features contain NaN or infinite values")
        feats.sum_duplicates()
        feats.eliminate_zeros()
        feats.sort_indices()
        set_(self, "features", feats)
        labels = np.asarray(self.labels).astype(np.int64).reshape(-1)
        if labels.shape != (n,):
            raise InvalidDatasetError(f"{where}: labels have shape {labels.shape}, expected ({n},)")
        if self.num_classes < 2:
            raise InvalidDatasetError(f"{where}: num_classes is {self.num_classes}: a classifier needs at least 2")
        check_class_count(self.num_classes, "num_classes", where)
        bad = (labels < -1) | (labels >= self.num_classes)
        if bad.any():
            i = int(np.argmax(bad))
            raise InvalidDatasetError(
                f"{where}: label {int(labels[i])} of node {self.node_ids[i]!r} is outside "
                f"[0, {self.num_classes - 1}] (use -1 for unlabelled)"
            )
        set_(self, "labels", labels)
        split = np.asarray(self.split).astype(np.int8).reshape(-1)
        if split.shape != (n,) or split.min() < 0 or split.max() >= len(SPLITS):
            raise InvalidDatasetError(f"{where}: split must be {n} codes in 0..{len(SPLITS) - 1} ({SPLITS})")
        set_(self, "split", split)
        for name in ("deleted", "features_deleted"):
            mask = np.asarray(getattr(self, name), dtype=bool).reshape(-1)
            if mask.size == 0:
                mask = np.zeros(n, dtype=bool)
            if mask.shape != (n,):
                raise InvalidDatasetError(f"{where}: {name} has shape {mask.shape}, expected ({n},)")
            set_(self, name, mask)
        set_(self, "edges", canonical_edges(self.edges, n, where))
        self._check_tombstones(where)
        for arr in (self.labels, self.split, self.deleted, self.features_deleted, self.edges):
            arr.setflags(write=False)

    def _check_tombstones(self, where: str) -> None:
        gone = self.deleted | self.features_deleted
        if not gone.any():
            return
        if (self.labels[gone] != -1).any():
            raise InvalidDatasetError(f"{where}: a deleted node (or deleted features) still carries a label")
        if self.features[np.flatnonzero(gone)].nnz:
            raise InvalidDatasetError(f"{where}: a deleted node (or deleted features) still carries features")
        if self.deleted.any() and len(self.edges) and self.deleted[self.edges].any():
            raise InvalidDatasetError(f"{where}: a deleted node still has edges")

    # ------------------------------------------------------------------------------------ views
    def __len__(self) -> int:
        return len(self.node_ids)

    @property
    def num_nodes(self) -> int:
        return len(self.node_ids)

    @property
    def num_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def num_edges(self) -> int:
        return len(self.edges)

    @cached_property
    def _index(self) -> dict[str, int]:
        return {nid: i for i, nid in enumerate(self.node_ids)}

    @cached_property
    def adjacency(self) -> sp.csr_matrix:
        """The symmetric 0/1 adjacency matrix (CSR, sorted indices, no self-loops)."""
        return symmetric_adjacency(self.num_nodes, self.edges)

    @cached_property
    def _edge_code_set(self) -> np.ndarray:
        return _edge_codes(self.edges, self.num_nodes)  # sorted because edges are sorted

    def index_of(self, node_ids: Iterable[str]) -> np.ndarray:
        """Node indices of ``node_ids``; :class:`UnknownSampleError` names the first unknown id."""
        out = []
        for nid in node_ids:
            try:
                out.append(self._index[str(nid)])
            except KeyError:
                raise UnknownSampleError(f"node id {nid!r} is not in graph {self.name!r}") from None
        return np.asarray(out, dtype=np.int64)

    def edge_positions(self, pairs: Iterable[tuple[str, str]]) -> np.ndarray:
        """Rows of ``edges`` holding the undirected edges ``pairs`` (either orientation)."""
        out = []
        for pair in pairs:
            if len(pair) != 2:
                raise UnknownSampleError(f"an edge is a pair of node ids, got {pair!r}")
            u, v = (int(i) for i in self.index_of(pair))
            if u == v:
                raise UnknownSampleError(f"edge ({pair[0]!r}, {pair[1]!r}) is a self-loop; the graph has none")
            code = min(u, v) * self.num_nodes + max(u, v)
            pos = int(np.searchsorted(self._edge_code_set, code))
            if pos >= len(self._edge_code_set) or self._edge_code_set[pos] != code:
                raise UnknownSampleError(
                    f"edge ({pair[0]!r}, {pair[1]!r}) is not in graph {self.name!r} (never there, or already deleted)"
                )
            out.append(pos)
        return np.asarray(out, dtype=np.int64)

    def training_mask(self) -> np.ndarray:
        """Nodes that are training samples now: split train, labelled, neither deleted nor feature-deleted."""
        return (self.split == TRAIN) & (self.labels >= 0) & ~self.deleted & ~self.features_deleted

    def live_mask(self) -> np.ndarray:
        """Nodes whose features are still present (not deleted, features not deleted)."""
        return ~self.deleted & ~self.features_deleted

    def nodes_of_owners(self, owner_ids: Iterable[str]) -> tuple[str, ...]:
        """Every live (not deleted) node owned by one of ``owner_ids``; an owner with none is an error."""
        wanted = {str(o) for o in owner_ids}
        found = dict.fromkeys(wanted, False)
        out = []
        for i, owner in enumerate(self.owner_ids):
            if owner in wanted and not self.deleted[i]:
                out.append(self.node_ids[i])
                found[owner] = True
        missing = sorted(o for o, ok in found.items() if not ok)
        if missing:
            raise UnknownSampleError(f"owner {missing[0]!r} has no live nodes in graph {self.name!r}")
        return tuple(out)

    # ---------------------------------------------------------------------------- deletions
    def validate_deletion(
        self, nodes: Sequence[str] = (), edges: Sequence[tuple[str, str]] = (), node_features: Sequence[str] = ()
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Resolve a deletion to (node indices, edge rows, feature-node indices) or raise a clear error.

        Errors: an unknown node id or an edge not in the graph (:class:`UnknownSampleError`); a node
        already deleted, features already deleted, or the same item named twice
        (:class:`AlreadyDeletedError`).
        """
        node_idx = self.index_of(nodes)
        feat_idx = self.index_of(node_features)
        for idx, ids, what in ((node_idx, nodes, "node"), (feat_idx, node_features, "node features of")):
            if len(set(idx.tolist())) != len(idx):
                raise AlreadyDeletedError(f"the request names the same {what} id twice")
            gone = self.deleted[idx] if what == "node" else (self.deleted[idx] | self.features_deleted[idx])
            if gone.any():
                nid = ids[int(np.argmax(gone))]
                raise AlreadyDeletedError(f"{what} {nid!r} of graph {self.name!r} was already deleted")
        edge_rows = self.edge_positions(edges)
        if len(set(edge_rows.tolist())) != len(edge_rows):
            raise AlreadyDeletedError("the request names the same edge twice")
        return node_idx, edge_rows, feat_idx

    def without(
        self, nodes: Sequence[str] = (), edges: Sequence[tuple[str, str]] = (), node_features: Sequence[str] = ()
    ) -> NodeGraph:
        """The graph after deleting ``nodes`` (features, label, edges), ``edges`` and ``node_features``
        (features and label); see the module docstring for the semantics and :meth:`validate_deletion`
        for the errors."""
        node_idx, edge_rows, feat_idx = self.validate_deletion(nodes, edges, node_features)
        return self._apply(node_idx, edge_rows, feat_idx)

    def _apply(self, node_idx: np.ndarray, edge_rows: np.ndarray, feat_idx: np.ndarray) -> NodeGraph:
        deleted = self.deleted.copy()
        deleted[node_idx] = True
        feats_deleted = self.features_deleted.copy()
        feats_deleted[node_idx] = True
        feats_deleted[feat_idx] = True
        erased = np.union1d(node_idx, feat_idx)
        labels = self.labels.copy()
        labels[erased] = -1
        keep = np.ones(len(self.edges), dtype=bool)
        keep[edge_rows] = False
        if len(node_idx):
            keep &= ~deleted[self.edges].any(1)
        # Derived from validated data by deletions only, so the result is valid by construction: skip the
        # O(E log E) re-validation of __post_init__ (it dominated the cost of a deletion on Cora).
        out = object.__new__(NodeGraph)
        fields = {
            "node_ids": self.node_ids, "features": _zero_rows(self.features, erased), "labels": labels,
            "num_classes": self.num_classes, "edges": np.ascontiguousarray(self.edges[keep]), "split": self.split,
            "deleted": deleted, "features_deleted": feats_deleted, "owner_ids": self.owner_ids, "name": self.name,
        }
        for key, value in fields.items():
            object.__setattr__(out, key, value)
        for arr in (labels, deleted, feats_deleted, fields["edges"]):
            arr.setflags(write=False)
        if "_index" in self.__dict__:
            out.__dict__["_index"] = self._index  # node ids never change: share the id -> index map
        return out

    def after_request(self, request: GraphRequest) -> NodeGraph:
        """What remains after ``request``: its sample ids (and owners' nodes) are node deletions, its
        edges edge deletions and its node_feature_ids feature deletions. Graph-level kinds are errors."""
        if getattr(request, "graph_ids", ()) or getattr(request, "graph_nodes", ()):
            raise UnknownSampleError(f"graph {self.name!r} is one node-classification graph: it has no graph ids")
        nodes = list(dict.fromkeys(request.sample_ids))
        if getattr(request, "owner_ids", ()):
            for nid in self.nodes_of_owners(request.owner_ids):
                if nid not in nodes:
                    nodes.append(nid)
        return self.without(nodes, tuple(request.edges), tuple(request.node_feature_ids))
