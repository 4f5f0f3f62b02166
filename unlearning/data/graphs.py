"""Graph data: one node-classification graph (:class:`NodeGraph`) and collections of small graphs
(:class:`GraphCollection`), with stable string ids, deletion requests and pickle-free serialisation.

Both types are immutable. A deletion never edits a value in place: ``without(...)`` (or
``after_request(request)`` for a :class:`~unlearning.methods.protocol.ForgetRequest`) validates the
request and returns the data that remains, so the service can store what remains generically and a
method can compute the same thing from the data it is handed.

What a deletion removes (digest 001 section 3, digest 000 section 2.5):

* node (``NodeGraph``): the node's features, its label and every incident edge. The node keeps its
  index as an isolated tombstone with zero features, so node indices never shift (the certified
  graph unlearning code does the same; the propagated features equal the paper's convention).
* node features: the features and the label of a node (the paper's "node feature unlearning"); its
  edges stay.
* edge: one undirected edge ``{u, v}``.
* graph (``GraphCollection``): a whole graph; its id stays as a tombstone so a repeated request is
  told "already deleted" instead of "unknown".
* node inside a graph: the node's tag, continuous attributes and incident edges; the node stays as an
  isolated tombstone so the graph's size (the scattering transform's mean-pool denominator) is kept.
  A graph whose last live node goes is removed as a whole.

Nothing that was deleted is kept anywhere: no list of deleted edges, no old feature rows.

Loaders: :func:`load_planetoid` (the Planetoid pickles of Cora/Citeseer/PubMed, through a restricted
unpickler that admits only the numpy, scipy.sparse and collections classes those files contain),
:func:`load_tu_text` (the IMDB-BINARY / PROTEINS text format of ``../shared/data``), and the
shortcuts :func:`load_cora`, :func:`load_imdb_binary`, :func:`load_proteins`.

Serialisation (never pickle)
----------------------------

NPZ (``save_npz`` / ``load_npz``, ``numpy.savez`` with ``allow_pickle=False``; every entry is a plain
array):

* ``NodeGraph``: ``format`` = ``"lethe.node_graph.v1"``; ``name``; ``num_classes`` (int64 scalar);
  ``node_ids``, ``owner_ids`` (unicode arrays, n); ``labels`` (int64, n, -1 = no label);
  ``split`` (int8, n: 0 none, 1 train, 2 val, 3 test); ``deleted``, ``features_deleted`` (bool, n);
  ``edges`` (int64, E x 2, 0 <= u < v < n, unique, sorted); the features as CSR:
  ``feat_data`` (float64), ``feat_indices`` (int64), ``feat_indptr`` (int64, n + 1) and
  ``feat_shape`` (int64, 2).
* ``GraphCollection``: ``format`` = ``"lethe.graph_collection.v1"``; ``name``; ``num_classes``;
  ``num_tags``; ``graph_ids``, ``owner_ids`` (unicode, G); ``graph_labels`` (int64, G);
  ``node_ptr`` (int64, G + 1: graph g owns concatenated node rows node_ptr[g]:node_ptr[g+1]);
  ``node_ids`` (unicode), ``node_tags`` (int64, -1 = erased), ``node_deleted`` (bool) over all nodes;
  ``edge_ptr`` (int64, G + 1) and ``edges`` (int64, local node indices); optional
  ``node_features`` (float64, total nodes x f); ``removed_ids`` (unicode, tombstoned graph ids).

JSON, one node-labelled graph of a collection (:meth:`Graph.to_json` / :meth:`Graph.from_json`)::

    {"format": "lethe.graph.v1", "graph_id": "17", "label": 1, "owner": "17",
     "nodes": [{"id": "0", "tag": 0}, {"id": "1", "tag": 2, "features": [0.5, 1.0]},
               {"id": "2", "tag": 0, "deleted": true}],
     "edges": [["0", "1"], ["1", "2"]]}

``tag`` is the node's discrete label (>= 0; the TU files' first number), ``features`` optional
continuous attributes (same length for every node), ``deleted`` optional (default false). Edges are
undirected pairs of node ids; duplicates and both directions are merged, self-loops are rejected.

JSON, a node-classification graph (:meth:`NodeGraph.to_json` / :meth:`NodeGraph.from_json`)::

    {"format": "lethe.node_graph.v1", "name": "cora", "num_classes": 7, "num_features": 1433,
     "nodes": [{"id": "n0", "label": 3, "split": "train", "owner": "alice",
                "features": {"indices": [19, 81], "values": [1.0, 1.0]}},
               {"id": "n1", "label": null, "split": "test", "features": [0.0, 1.0, ...]}],
     "edges": [["n0", "n1"]]}

``features`` is either a dense list of ``num_features`` numbers or a sparse
``{"indices": [...], "values": [...]}`` object; ``label`` null means unlabelled; ``split`` one of
``train``, ``val``, ``test``, ``none``; ``owner`` defaults to the node id; ``deleted`` /
``features_deleted`` optional booleans. ``num_features`` may be left out when features are dense
lists (their length), ``num_classes`` when some node has a label (the largest label plus one).
"""

from __future__ import annotations

import collections
import json
import math
import pickle
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from unlearning.data.loaders import MAX_CLASSES, shared_data_dir
from unlearning.errors import AlreadyDeletedError, InvalidDatasetError, UnknownSampleError

__all__ = [
    "SPLITS",
    "Graph",
    "GraphCollection",
    "GraphRequest",
    "NodeGraph",
    "edge_key",
    "graph_node_key",
    "load_cora",
    "load_imdb_binary",
    "load_planetoid",
    "load_proteins",
    "load_tu_text",
]

SPLITS = ("none", "train", "val", "test")
"""Split names; ``NodeGraph.split`` holds their index (int8)."""
TRAIN, VAL, TEST = 1, 2, 3

NODE_GRAPH_FORMAT = "lethe.node_graph.v1"
GRAPH_FORMAT = "lethe.graph.v1"
COLLECTION_FORMAT = "lethe.graph_collection.v1"


class GraphRequest(Protocol):
    """What a deletion request names (duck-typed so this module does not import the method protocol)."""

    @property
    def sample_ids(self) -> tuple[str, ...]: ...

    @property
    def owner_ids(self) -> tuple[str, ...]: ...

    @property
    def edges(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def node_feature_ids(self) -> tuple[str, ...]: ...

    @property
    def graph_ids(self) -> tuple[str, ...]: ...

    @property
    def graph_nodes(self) -> tuple[tuple[str, str], ...]: ...


def edge_key(u: str, v: str) -> str:
    """The canonical string for the undirected edge {u, v} (a JSON pair, smaller id first)."""
    a, b = sorted((str(u), str(v)))
    return json.dumps([a, b])


def graph_node_key(graph_id: str, node_id: str) -> str:
    """The canonical string for node ``node_id`` of graph ``graph_id`` (a JSON pair)."""
    return json.dumps([str(graph_id), str(node_id)])


# --------------------------------------------------------------------------------------------------
# shared validation helpers


def _canonical_edges(edges: np.ndarray, n: int, where: str) -> np.ndarray:
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


def _unique_ids(ids: Sequence[str], what: str, where: str) -> tuple[str, ...]:
    out = tuple(str(s) for s in ids)
    if len(set(out)) != len(out):
        seen: set[str] = set()
        dup = next(s for s in out if s in seen or seen.add(s))  # type: ignore[func-returns-value]
        raise InvalidDatasetError(f"{where}: {what} {dup!r} appears more than once: {what}s must be unique")
    if any(s == "" for s in out):
        raise InvalidDatasetError(f"{where}: {what}s must be non-empty strings")
    return out


def _symmetric_adjacency(n: int, edges: np.ndarray) -> sp.csr_matrix:
    rows = np.concatenate([edges[:, 0], edges[:, 1]])
    cols = np.concatenate([edges[:, 1], edges[:, 0]])
    adj = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    adj.sum_duplicates()
    adj.sort_indices()
    return adj


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


# --------------------------------------------------------------------------------------------------
# node classification


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
        set_(self, "node_ids", _unique_ids(self.node_ids, "node id", where))
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
        _check_class_count(self.num_classes, "num_classes", where)
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
        set_(self, "edges", _canonical_edges(self.edges, n, where))
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
        return _symmetric_adjacency(self.num_nodes, self.edges)

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

    # ------------------------------------------------------------------------ serialisation
    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain numpy arrays (no object dtype) describing the graph; see the module docstring."""
        f = self.features
        return {
            "format": np.asarray(NODE_GRAPH_FORMAT),
            "name": np.asarray(self.name),
            "num_classes": np.asarray(self.num_classes, dtype=np.int64),
            "node_ids": np.asarray(self.node_ids, dtype=str),
            "owner_ids": np.asarray(self.owner_ids, dtype=str),
            "labels": self.labels.copy(),
            "split": self.split.copy(),
            "deleted": self.deleted.copy(),
            "features_deleted": self.features_deleted.copy(),
            "edges": self.edges.copy(),
            "feat_data": f.data.astype(np.float64),
            "feat_indices": f.indices.astype(np.int64),
            "feat_indptr": f.indptr.astype(np.int64),
            "feat_shape": np.asarray(f.shape, dtype=np.int64),
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> NodeGraph:
        _check_format(arrays, NODE_GRAPH_FORMAT)
        try:
            shape = tuple(int(s) for s in arrays["feat_shape"])
            feats = sp.csr_matrix(
                (arrays["feat_data"], arrays["feat_indices"], arrays["feat_indptr"]), shape=shape
            )
            return cls(
                node_ids=tuple(str(s) for s in arrays["node_ids"]),
                features=feats,
                labels=arrays["labels"],
                num_classes=int(arrays["num_classes"]),
                edges=arrays["edges"],
                split=arrays["split"],
                deleted=arrays["deleted"],
                features_deleted=arrays["features_deleted"],
                owner_ids=tuple(str(s) for s in arrays["owner_ids"]),
                name=str(arrays["name"]),
            )
        except KeyError as exc:
            raise InvalidDatasetError(f"node-graph arrays lack the entry {exc.args[0]!r}") from None

    def save_npz(self, path: str | Path) -> None:
        np.savez_compressed(path, **self.to_arrays())  # type: ignore[arg-type]

    @classmethod
    def load_npz(cls, path: str | Path) -> NodeGraph:
        with np.load(path, allow_pickle=False) as data:
            return cls.from_arrays({k: data[k] for k in data.files})

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the module docstring (sparse feature rows)."""
        f = self.features
        nodes = []
        for i, nid in enumerate(self.node_ids):
            lo, hi = f.indptr[i], f.indptr[i + 1]
            node: dict[str, Any] = {
                "id": nid,
                "label": int(self.labels[i]) if self.labels[i] >= 0 else None,
                "split": SPLITS[int(self.split[i])],
                "owner": self.owner_ids[i],
                "features": {"indices": f.indices[lo:hi].tolist(), "values": f.data[lo:hi].tolist()},
            }
            if self.deleted[i]:
                node["deleted"] = True
            if self.features_deleted[i]:
                node["features_deleted"] = True
            nodes.append(node)
        edges = [[self.node_ids[u], self.node_ids[v]] for u, v in self.edges.tolist()]
        return {"format": NODE_GRAPH_FORMAT, "name": self.name, "num_classes": self.num_classes,
                "num_features": self.num_features, "nodes": nodes, "edges": edges}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> NodeGraph:
        """Parse the JSON object of the module docstring; malformed input raises InvalidDatasetError
        naming what to fix. ``num_features`` may be left out when the nodes' features are dense lists
        (their length), ``num_classes`` when labels are given (the largest label plus one)."""
        if not isinstance(obj, Mapping):
            raise InvalidDatasetError("a node-graph JSON document is an object with a 'nodes' list")
        if obj.get("format", NODE_GRAPH_FORMAT) != NODE_GRAPH_FORMAT:
            raise InvalidDatasetError(f"expected format {NODE_GRAPH_FORMAT!r}, got {obj.get('format')!r}")
        nodes = obj.get("nodes")
        if not isinstance(nodes, list) or not all(isinstance(nd, Mapping) for nd in nodes):
            raise InvalidDatasetError("'nodes' must be a list of node objects, each with an 'id'")
        missing = next((i for i, nd in enumerate(nodes) if "id" not in nd), None)
        if missing is not None:
            raise InvalidDatasetError(f"node {missing} (0-based) has no 'id'")
        ids = [_json_id(nd["id"], f"node {i} (0-based): 'id'") for i, nd in enumerate(nodes)]
        try:
            num_features = _json_count(obj, "num_features", _dense_width(nodes))
            labels = [_json_label(nd.get("label"), ids[i]) for i, nd in enumerate(nodes)]
            num_classes = _json_count(obj, "num_classes", max(labels, default=-1) + 1 or None)
            rows, cols, vals = [], [], []
            for i, nd in enumerate(nodes):
                c, v = _json_feature_row(nd.get("features", []), num_features, ids[i])
                rows.extend([i] * len(c))
                cols.extend(c)
                vals.extend(v)
            feats = sp.csr_matrix((vals, (rows, cols)), shape=(len(nodes), num_features), dtype=np.float64)
            split = [_split_code(nd.get("split", "none"), ids[i]) for i, nd in enumerate(nodes)]
            index = {nid: i for i, nid in enumerate(ids)}
            edges = _json_edges(obj.get("edges", []), index)
            owners = [_json_owner(nd.get("owner"), ids[i], f"node {ids[i]!r}") for i, nd in enumerate(nodes)]
            return cls(
                node_ids=tuple(ids),
                features=feats,
                labels=np.asarray(labels, dtype=np.int64),
                num_classes=num_classes,
                edges=np.asarray(edges, dtype=np.int64).reshape(-1, 2),
                split=np.asarray(split, dtype=np.int8),
                deleted=np.asarray([bool(nd.get("deleted", False)) for nd in nodes]),
                features_deleted=np.asarray([bool(nd.get("features_deleted", False)) for nd in nodes]),
                owner_ids=tuple(owners),
                name=str(obj.get("name", "graph")),
            )
        except InvalidDatasetError:
            raise  # already says what to fix
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise InvalidDatasetError(f"malformed node-graph JSON: {type(exc).__name__}: {exc}") from None


def _dense_width(nodes: Sequence[Mapping[str, Any]]) -> int | None:
    """The length of the first dense feature list, if any node gives one."""
    return next((len(nd["features"]) for nd in nodes if isinstance(nd.get("features"), list)), None)


def _json_count(obj: Mapping[str, Any], key: str, inferred: int | None) -> int:
    """``obj[key]`` as a whole number >= 1, or what the nodes imply when it is left out."""
    value = obj.get(key, inferred)
    if value is None:
        raise InvalidDatasetError(
            f"node-graph JSON: give {key!r} (the nodes do not imply it: "
            + ("features are sparse or absent" if key == "num_features" else "no node has a label")
            + ")"
        )
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidDatasetError(f"node-graph JSON: {key!r} must be a whole number >= 1, got {value!r}")
    if key == "num_classes":
        _check_class_count(value, key, "node-graph JSON")
    return value


def _json_label(label: Any, node: str) -> int:
    """A node's class index; null (unlabelled) is -1."""
    if label is None:
        return -1
    return _json_class(
        label, f"node {node!r}: label", "a class index (a whole number >= 0, or null for unlabelled)"
    )


def _json_feature_row(value: Any, num_features: int, node: str) -> tuple[list[int], list[float]]:
    if isinstance(value, Mapping):
        cols = [int(c) for c in value.get("indices", [])]
        vals = [float(v) for v in value.get("values", [])]
        if len(cols) != len(vals):
            raise InvalidDatasetError(f"node {node!r}: feature indices and values differ in length")
    else:
        dense = [float(v) for v in value]
        if dense and len(dense) != num_features:
            raise InvalidDatasetError(f"node {node!r} has {len(dense)} features, expected {num_features}")
        cols = [j for j, v in enumerate(dense) if v != 0.0]
        vals = [dense[j] for j in cols]
    if any(c < 0 or c >= num_features for c in cols):
        raise InvalidDatasetError(f"node {node!r}: a feature index is outside 0..{num_features - 1}")
    return cols, vals


def _split_code(name: Any, node: str) -> int:
    try:
        return SPLITS.index(str(name))
    except ValueError:
        raise InvalidDatasetError(f"node {node!r}: split {name!r} is not one of {SPLITS}") from None


def _lookup(index: Mapping[str, int], node: Any) -> int:
    if isinstance(node, bool) or not isinstance(node, str | int):
        raise InvalidDatasetError(f"an edge names node {node!r}: node ids are strings or integers")
    try:
        return index[str(node)]
    except KeyError:
        raise InvalidDatasetError(f"an edge names node {node!r}, which is not in the node list") from None


def _check_class_count(count: int, what: str, where: str) -> None:
    """At most MAX_CLASSES classes (or tags), as the table loaders allow: a label of 10**9 must not size a
    model with a billion outputs."""
    if count > MAX_CLASSES:
        raise InvalidDatasetError(f"{where}: {what} is {count:,}; at most {MAX_CLASSES:,} are supported")


def _json_id(value: Any, what: str) -> str:
    """A JSON id: a string, or an integer (its decimal text); null, booleans, numbers with a fraction,
    lists and objects are refused rather than turned into text like "None" or "True"."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise InvalidDatasetError(f"{what} is {_shown(value)}: ids must be strings or integers")


def _shown(value: Any) -> str:
    """A JSON value as the uploader wrote it (null, true, {...}), cut to 80 characters."""
    try:
        return json.dumps(value)[:80]
    except (TypeError, ValueError):
        return repr(value)[:80]


def _json_owner(value: Any, default: str, where: str) -> str:
    """An owner id; absent or null means ``default`` (the node id, or the graph id)."""
    return default if value is None else _json_id(value, f"{where}: 'owner'")


def _json_edges(edges: Any, index: Mapping[str, int]) -> list[list[int]]:
    """JSON edges as index pairs: each edge is a list of exactly two node ids."""
    if not isinstance(edges, list):
        raise InvalidDatasetError("'edges' must be a list of [u, v] pairs of node ids")
    out = []
    for k, e in enumerate(edges):
        if not isinstance(e, list) or len(e) != 2:
            raise InvalidDatasetError(
                f"edge {k} (0-based) is {_shown(e)}: an edge is a pair [u, v] of two node ids"
            )
        out.append([_lookup(index, e[0]), _lookup(index, e[1])])
    return out


def _check_format(arrays: Mapping[str, np.ndarray], expected: str) -> None:
    got = str(arrays["format"]) if "format" in arrays else None
    if got != expected:
        raise InvalidDatasetError(f"expected arrays of format {expected!r}, got {got!r}")


# --------------------------------------------------------------------------------------------------
# graph collections


@dataclass(frozen=True, eq=False)
class Graph:
    """One small node-labelled graph of a collection (graph classification).

    ``edges`` are local node indices (u < v, unique, sorted); ``node_tags`` the discrete node labels
    (>= 0, -1 for an erased tombstone); ``node_features`` optional continuous attributes (g, f);
    ``deleted`` the node tombstones.
    """

    graph_id: str
    node_ids: tuple[str, ...]
    edges: np.ndarray
    label: int
    node_tags: np.ndarray
    node_features: np.ndarray | None = None
    deleted: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    owner_id: str = ""

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        where = f"graph {self.graph_id!r}"
        g = len(self.node_ids)
        if g == 0:
            raise InvalidDatasetError(f"{where} has no nodes")
        set_(self, "graph_id", str(self.graph_id))
        set_(self, "node_ids", _unique_ids(self.node_ids, "node id", where))
        set_(self, "owner_id", str(self.owner_id or self.graph_id))
        tags = np.asarray(self.node_tags, dtype=np.int64).reshape(-1)
        if tags.shape != (g,) or (tags < -1).any():
            raise InvalidDatasetError(f"{where}: node_tags must be {g} integers >= 0 (-1 for erased)")
        set_(self, "node_tags", tags)
        if self.node_features is not None:
            feats = np.asarray(self.node_features, dtype=np.float64)
            if feats.ndim != 2 or feats.shape[0] != g or not np.isfinite(feats).all():
                raise InvalidDatasetError(f"{where}: node_features must be a finite ({g}, f) array")
            set_(self, "node_features", feats)
        mask = np.asarray(self.deleted, dtype=bool).reshape(-1)
        mask = np.zeros(g, dtype=bool) if mask.size == 0 else mask
        if mask.shape != (g,):
            raise InvalidDatasetError(f"{where}: deleted has shape {mask.shape}, expected ({g},)")
        set_(self, "deleted", mask)
        set_(self, "edges", _canonical_edges(self.edges, g, where))
        if mask.any() and len(self.edges) and mask[self.edges].any():
            raise InvalidDatasetError(f"{where}: a deleted node still has edges")
        if mask.all():
            raise InvalidDatasetError(f"{where}: every node is deleted; remove the whole graph instead")
        for arr in (self.edges, self.node_tags, self.deleted):
            arr.setflags(write=False)

    @property
    def num_nodes(self) -> int:
        return len(self.node_ids)

    @cached_property
    def _index(self) -> dict[str, int]:
        return {nid: i for i, nid in enumerate(self.node_ids)}

    def node_index(self, node_id: str) -> int:
        try:
            return self._index[str(node_id)]
        except KeyError:
            raise UnknownSampleError(
                f"node id {node_id!r} is not in graph {self.graph_id!r} (it has nodes "
                f"{self.node_ids[0]!r}..{self.node_ids[-1]!r})"
            ) from None

    def adjacency(self) -> sp.csr_matrix:
        return _symmetric_adjacency(self.num_nodes, self.edges)

    def degrees(self) -> np.ndarray:
        deg = np.zeros(self.num_nodes, dtype=np.int64)
        np.add.at(deg, self.edges.reshape(-1), 1)
        return deg

    def without_nodes(self, nodes: Sequence[int]) -> Graph:
        """This graph with ``nodes`` (local indices) turned into isolated, erased tombstones."""
        idx = np.asarray(nodes, dtype=np.int64)
        deleted = self.deleted.copy()
        deleted[idx] = True
        tags = self.node_tags.copy()
        tags[idx] = -1
        feats = None
        if self.node_features is not None:
            feats = self.node_features.copy()
            feats[idx] = 0.0
        keep = ~deleted[self.edges].any(1) if len(self.edges) else np.zeros(0, bool)
        return Graph(self.graph_id, self.node_ids, self.edges[keep], self.label, tags, feats, deleted, self.owner_id)

    def to_json(self) -> dict[str, Any]:
        nodes: list[dict[str, Any]] = []
        for i, nid in enumerate(self.node_ids):
            node: dict[str, Any] = {"id": nid, "tag": int(self.node_tags[i])}
            if self.node_features is not None:
                node["features"] = self.node_features[i].tolist()
            if self.deleted[i]:
                node["deleted"] = True
            nodes.append(node)
        edges = [[self.node_ids[u], self.node_ids[v]] for u, v in self.edges.tolist()]
        return {"format": GRAPH_FORMAT, "graph_id": self.graph_id, "label": int(self.label),
                "owner": self.owner_id, "nodes": nodes, "edges": edges}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Graph:
        if not isinstance(obj, Mapping):
            raise InvalidDatasetError("a graph JSON document is an object with 'graph_id', 'label', 'nodes'")
        if obj.get("format", GRAPH_FORMAT) != GRAPH_FORMAT:
            raise InvalidDatasetError(f"expected format {GRAPH_FORMAT!r}, got {obj.get('format')!r}")
        try:
            graph_id = _json_id(obj["graph_id"], "graph JSON: 'graph_id'")
            where = f"graph {graph_id!r}"
            nodes = list(obj["nodes"])
            if not all(isinstance(nd, Mapping) for nd in nodes):
                raise InvalidDatasetError(f"{where}: 'nodes' must be a list of node objects with an 'id'")
            ids = [_json_id(nd["id"], f"{where}: node {i} (0-based): 'id'") for i, nd in enumerate(nodes)]
            index = {nid: i for i, nid in enumerate(ids)}
            has_feats = any("features" in nd for nd in nodes)
            feats = None
            if has_feats:
                feats = np.asarray([[float(v) for v in nd["features"]] for nd in nodes], dtype=np.float64)
            deleted = np.asarray([bool(nd.get("deleted", False)) for nd in nodes])
            tags = np.asarray(
                [-1 if deleted[i] else _json_class(nd.get("tag", 0), f"{where}: node {ids[i]!r}: tag")
                 for i, nd in enumerate(nodes)], dtype=np.int64)
            edges = _json_edges(obj.get("edges", []), index)
            return cls(
                graph_id=graph_id,
                node_ids=tuple(ids),
                edges=np.asarray(edges, dtype=np.int64).reshape(-1, 2),
                label=_json_class(obj["label"], f"{where}: label"),
                node_tags=tags,
                node_features=feats,
                deleted=deleted,
                owner_id=_json_owner(obj.get("owner"), graph_id, where),
            )
        except InvalidDatasetError:
            raise  # already says what to fix
        except KeyError as exc:
            raise InvalidDatasetError(f"malformed graph JSON: the entry {exc.args[0]!r} is missing") from None
        except (TypeError, ValueError) as exc:
            raise InvalidDatasetError(f"malformed graph JSON: {exc}") from None


def _json_class(value: Any, what: str, expected: str = "a whole number >= 0") -> int:
    """A class label or node tag in JSON: a whole number in 0..MAX_CLASSES-1."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 0:
        raise InvalidDatasetError(f"{what} {value!r} is not {expected}")
    if value >= MAX_CLASSES:
        raise InvalidDatasetError(f"{what} {value!r} is too large: it must be below {MAX_CLASSES:,}")
    return int(value)


@dataclass(frozen=True, eq=False)
class GraphCollection:
    """Graphs for graph classification, addressed by stable string graph ids.

    ``num_tags`` is the number of distinct node tags (the one-hot width of a tag signal);
    ``removed_ids`` the tombstones of whole graphs deleted earlier.
    """

    graphs: tuple[Graph, ...]
    num_classes: int
    num_tags: int = 1
    removed_ids: frozenset[str] = frozenset()
    name: str = "graphs"

    def __post_init__(self) -> None:
        where = f"collection {self.name!r}"
        object.__setattr__(self, "graphs", tuple(self.graphs))
        if not self.graphs:
            raise InvalidDatasetError(f"{where} has no graphs")
        _unique_ids([g.graph_id for g in self.graphs], "graph id", where)
        if self.num_classes < 2:
            raise InvalidDatasetError(f"{where}: num_classes is {self.num_classes}: a classifier needs at least 2")
        _check_class_count(self.num_classes, "num_classes", where)
        _check_class_count(self.num_tags, "num_tags", where)
        for g in self.graphs:
            if not 0 <= g.label < self.num_classes:
                raise InvalidDatasetError(
                    f"{where}: label {g.label} of graph {g.graph_id!r} is outside [0, {self.num_classes - 1}]"
                )
            if g.node_tags.size and g.node_tags.max() >= self.num_tags:
                raise InvalidDatasetError(
                    f"{where}: graph {g.graph_id!r} has node tag {int(g.node_tags.max())} >= num_tags {self.num_tags}"
                )
        widths = {g.node_features.shape[1] for g in self.graphs if g.node_features is not None}
        has = {g.node_features is not None for g in self.graphs}
        if len(widths) > 1 or len(has) > 1:
            raise InvalidDatasetError(f"{where}: either every graph has node features of one width or none has")
        object.__setattr__(self, "removed_ids", frozenset(str(s) for s in self.removed_ids))
        clash = self.removed_ids & set(self._index)
        if clash:
            raise InvalidDatasetError(f"{where}: graph {min(clash)!r} is both present and removed")

    def __len__(self) -> int:
        return len(self.graphs)

    @property
    def graph_ids(self) -> tuple[str, ...]:
        return tuple(g.graph_id for g in self.graphs)

    @property
    def labels(self) -> np.ndarray:
        return np.asarray([g.label for g in self.graphs], dtype=np.int64)

    @property
    def num_node_features(self) -> int:
        first = self.graphs[0].node_features
        return 0 if first is None else int(first.shape[1])

    @property
    def max_degree(self) -> int:
        return max(int(g.degrees().max(initial=0)) for g in self.graphs)

    @cached_property
    def _index(self) -> dict[str, int]:
        return {g.graph_id: i for i, g in enumerate(self.graphs)}

    def index_of(self, graph_ids: Iterable[str]) -> np.ndarray:
        """Positions of ``graph_ids``: a removed graph is :class:`AlreadyDeletedError`, any other unknown id
        :class:`UnknownSampleError` (out of range)."""
        out = []
        for gid in graph_ids:
            gid = str(gid)
            if gid in self._index:
                out.append(self._index[gid])
            elif gid in self.removed_ids:
                raise AlreadyDeletedError(f"graph {gid!r} of collection {self.name!r} was already deleted")
            else:
                raise UnknownSampleError(
                    f"graph id {gid!r} is not in collection {self.name!r} (out of range: it holds "
                    f"{len(self.graphs)} graphs, ids {self.graphs[0].graph_id!r}..{self.graphs[-1].graph_id!r})"
                )
        return np.asarray(out, dtype=np.int64)

    def graphs_of_owners(self, owner_ids: Iterable[str]) -> tuple[str, ...]:
        wanted = {str(o) for o in owner_ids}
        out = tuple(g.graph_id for g in self.graphs if g.owner_id in wanted)
        missing = wanted - {g.owner_id for g in self.graphs}
        if missing:
            raise UnknownSampleError(f"owner {min(missing)!r} has no graphs in collection {self.name!r}")
        return out

    def validate_deletion(
        self, graph_ids: Sequence[str] = (), graph_nodes: Sequence[tuple[str, str]] = ()
    ) -> tuple[np.ndarray, dict[int, list[int]]]:
        """Resolve to (graph positions, {graph position: local node indices}) or raise a clear error.

        A node of a graph that this same request removes whole is ignored (the graph goes anyway).
        """
        whole = self.index_of(graph_ids)
        if len(set(whole.tolist())) != len(whole):
            raise AlreadyDeletedError("the request names the same graph twice")
        nodes: dict[int, list[int]] = {}
        for pair in graph_nodes:
            if len(pair) != 2:
                raise UnknownSampleError(f"a graph node is a (graph id, node id) pair, got {pair!r}")
            pos = int(self.index_of([pair[0]])[0])
            graph = self.graphs[pos]
            v = graph.node_index(pair[1])
            if graph.deleted[v]:
                raise AlreadyDeletedError(f"node {pair[1]!r} of graph {pair[0]!r} was already deleted")
            if v in nodes.get(pos, []):
                raise AlreadyDeletedError(f"the request names node {pair[1]!r} of graph {pair[0]!r} twice")
            nodes.setdefault(pos, []).append(v)
        whole_set = set(whole.tolist())
        return whole, {p: v for p, v in nodes.items() if p not in whole_set}

    def without(self, graph_ids: Sequence[str] = (), graph_nodes: Sequence[tuple[str, str]] = ()) -> GraphCollection:
        """The collection after removing whole graphs and nodes inside graphs (module docstring)."""
        whole, nodes = self.validate_deletion(graph_ids, graph_nodes)
        return self._apply(whole, nodes)

    def emptied_by(self, nodes: Mapping[int, Sequence[int]]) -> set[int]:
        """Positions of graphs whose last live nodes ``nodes`` would delete (removed whole instead)."""
        out = set()
        for pos, vs in nodes.items():
            graph = self.graphs[pos]
            if int((~graph.deleted).sum()) == len(set(vs)):
                out.add(pos)
        return out

    def _apply(self, whole: np.ndarray, nodes: Mapping[int, Sequence[int]]) -> GraphCollection:
        drop = set(whole.tolist()) | self.emptied_by(nodes)
        graphs = []
        for pos, graph in enumerate(self.graphs):
            if pos in drop:
                continue
            graphs.append(graph.without_nodes(nodes[pos]) if pos in nodes else graph)
        if not graphs:
            raise InvalidDatasetError("removing these graphs would leave the collection empty")
        removed = self.removed_ids | {self.graphs[p].graph_id for p in drop}
        return GraphCollection(tuple(graphs), self.num_classes, self.num_tags, frozenset(removed), self.name)

    def after_request(self, request: GraphRequest) -> GraphCollection:
        """What remains after ``request``: graph ids (and owners' graphs) and graph nodes; node-graph kinds
        (samples, edges, node features) are errors because this collection's samples are graphs."""
        if request.edges or request.node_feature_ids:
            raise UnknownSampleError(
                f"collection {self.name!r} holds whole graphs: name graphs or (graph id, node id) pairs"
            )
        graph_ids = list(dict.fromkeys([*request.graph_ids, *request.sample_ids]))
        if request.owner_ids:
            graph_ids.extend(g for g in self.graphs_of_owners(request.owner_ids) if g not in graph_ids)
        return self.without(graph_ids, tuple(request.graph_nodes))

    def take(self, positions: Sequence[int] | np.ndarray, name: str | None = None) -> GraphCollection:
        """The graphs at ``positions`` (in that order) as a new collection (tombstones are not carried)."""
        return GraphCollection(
            tuple(self.graphs[int(p)] for p in positions), self.num_classes, self.num_tags, frozenset(),
            name or self.name,
        )

    # ------------------------------------------------------------------------ serialisation
    def to_arrays(self) -> dict[str, np.ndarray]:
        node_ptr = np.cumsum([0] + [g.num_nodes for g in self.graphs]).astype(np.int64)
        edge_ptr = np.cumsum([0] + [len(g.edges) for g in self.graphs]).astype(np.int64)
        out = {
            "format": np.asarray(COLLECTION_FORMAT),
            "name": np.asarray(self.name),
            "num_classes": np.asarray(self.num_classes, dtype=np.int64),
            "num_tags": np.asarray(self.num_tags, dtype=np.int64),
            "graph_ids": np.asarray(self.graph_ids, dtype=str),
            "owner_ids": np.asarray([g.owner_id for g in self.graphs], dtype=str),
            "graph_labels": self.labels,
            "node_ptr": node_ptr,
            "node_ids": np.asarray([nid for g in self.graphs for nid in g.node_ids], dtype=str),
            "node_tags": np.concatenate([g.node_tags for g in self.graphs]),
            "node_deleted": np.concatenate([g.deleted for g in self.graphs]),
            "edge_ptr": edge_ptr,
            "edges": np.concatenate([g.edges for g in self.graphs]).reshape(-1, 2),
            "removed_ids": np.asarray(sorted(self.removed_ids), dtype=str),
        }
        if self.graphs[0].node_features is not None:
            out["node_features"] = np.concatenate([g.node_features for g in self.graphs if g.node_features is not None])
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> GraphCollection:
        _check_format(arrays, COLLECTION_FORMAT)
        try:
            _check_collection_arrays(arrays)
            node_ptr, edge_ptr = arrays["node_ptr"], arrays["edge_ptr"]
            node_ids, tags, deleted = arrays["node_ids"], arrays["node_tags"], arrays["node_deleted"]
            feats = arrays.get("node_features", None)
            graphs = []
            for i, gid in enumerate(arrays["graph_ids"]):
                a, b = int(node_ptr[i]), int(node_ptr[i + 1])
                graphs.append(Graph(
                    graph_id=str(gid),
                    node_ids=tuple(str(s) for s in node_ids[a:b]),
                    edges=arrays["edges"][int(edge_ptr[i]):int(edge_ptr[i + 1])],
                    label=int(arrays["graph_labels"][i]),
                    node_tags=tags[a:b],
                    node_features=None if feats is None else feats[a:b],
                    deleted=deleted[a:b],
                    owner_id=str(arrays["owner_ids"][i]),
                ))
            return cls(tuple(graphs), int(arrays["num_classes"]), int(arrays["num_tags"]),
                       frozenset(str(s) for s in arrays["removed_ids"]), str(arrays["name"]))
        except KeyError as exc:
            raise InvalidDatasetError(f"graph-collection arrays lack the entry {exc.args[0]!r}") from None

    def save_npz(self, path: str | Path) -> None:
        np.savez_compressed(path, **self.to_arrays())  # type: ignore[arg-type]

    @classmethod
    def load_npz(cls, path: str | Path) -> GraphCollection:
        with np.load(path, allow_pickle=False) as data:
            return cls.from_arrays({k: data[k] for k in data.files})


def _check_collection_arrays(arrays: Mapping[str, np.ndarray]) -> None:
    """The lengths of a collection's arrays agree: one graph id, label and owner per graph, pointers of
    G+1 non-decreasing offsets from 0 to the number of nodes (edges), and one tag and deleted flag (and
    feature row) per node. A missing entry raises KeyError (reported by the caller)."""
    where = "graph-collection arrays"

    def length(name: str, dims: int = 1) -> int:
        shape = np.shape(arrays[name])
        if len(shape) != dims:
            raise InvalidDatasetError(f"{where}: {name!r} has shape {shape}; expected {dims} dimension(s)")
        return int(shape[0])

    count, nodes = length("graph_ids"), length("node_ids")
    for names, total, item, source in (
        (("graph_labels", "owner_ids"), count, "graph", "graph_ids"),
        (("node_tags", "node_deleted"), nodes, "node", "node_ids"),
    ):
        for name in names:
            if length(name) != total:
                raise InvalidDatasetError(
                    f"{where}: {name!r} has {length(name)} entries for {total} {item}s ({source!r}): "
                    f"give one per {item}"
                )
    if "node_features" in arrays and length("node_features", 2) != nodes:
        raise InvalidDatasetError(
            f"{where}: 'node_features' has {length('node_features', 2)} rows for {nodes} nodes ('node_ids')"
        )
    pointers = (("node_ptr", "node_ids", nodes), ("edge_ptr", "edges", length("edges", 2)))
    for ptr_name, total_name, total in pointers:
        ptr = np.asarray(arrays[ptr_name])
        if length(ptr_name) != count + 1:
            raise InvalidDatasetError(
                f"{where}: {ptr_name!r} has {len(ptr)} entries for {count} graphs: it needs {count + 1} "
                "(the start offset of every graph, then the total)"
            )
        if ptr.dtype.kind not in "iu":
            raise InvalidDatasetError(f"{where}: {ptr_name!r} must hold integer offsets, not {ptr.dtype}")
        if int(ptr[0]) != 0 or int(ptr[-1]) != total or (np.diff(ptr) < 0).any():
            raise InvalidDatasetError(
                f"{where}: {ptr_name!r} must rise (never fall) from 0 to {total}, "
                f"the length of {total_name!r}"
            )


# --------------------------------------------------------------------------------------------------
# loaders

_PLANETOID_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph")


def _planetoid_classes() -> dict[tuple[str, str], Any]:
    # numpy moved _reconstruct to numpy._core in 2.0; the pickles name the old module path.
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]
    return {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("scipy.sparse.csr", "csr_matrix"): sp.csr_matrix,
        ("scipy.sparse._csr", "csr_matrix"): sp.csr_matrix,
        ("collections", "defaultdict"): collections.defaultdict,
        ("__builtin__", "list"): list,
        ("builtins", "list"): list,
    }


class _RestrictedUnpickler(pickle.Unpickler):
    """Admits only the numpy / scipy.sparse / collections classes the Planetoid files contain.

    A pickle can name any importable callable; refusing every other global means a crafted file cannot
    run code while loading.
    """

    _allowed = _planetoid_classes()

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise InvalidDatasetError(
                f"the Planetoid file references {module}.{name}, which this loader does not admit "
                "(only numpy arrays, scipy CSR matrices and adjacency dicts are allowed)"
            ) from None


def _unpickle(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"Planetoid file not found at {path}")
    with path.open("rb") as fh:
        # The files were written by Python 2: latin1 decodes their numpy buffers byte for byte.
        return _RestrictedUnpickler(fh, encoding="latin1").load()


def load_planetoid(name: str = "cora", root: str | Path | None = None) -> NodeGraph:
    """A Planetoid citation graph (``ind.<name>.*``) with the "full" split.

    Node order is the usual Planetoid reordering: ``allx`` rows first, then the test rows placed at
    their sorted test ids. Split "full" (as graph libraries define it and the certified graph unlearning
    paper uses): validation = nodes len(y)..len(y)+499, test = the ids in ``ind.<name>.test.index``,
    train = every other node. Edges are symmetrised, self-loops and duplicates dropped. Node ids are the
    strings ``"0"``..``"n-1"``.
    """
    folder = Path(root) if root is not None else shared_data_dir() / name
    parts = {p: _unpickle(folder / f"ind.{name}.{p}") for p in _PLANETOID_PARTS}
    index_file = folder / f"ind.{name}.test.index"
    if not index_file.is_file():
        raise FileNotFoundError(f"Planetoid file not found at {index_file}")
    test_idx = np.asarray([int(line) for line in index_file.read_text().split()], dtype=np.int64)
    test_sorted = np.sort(test_idx)
    n_all = parts["allx"].shape[0]
    n = max(int(test_sorted.max()) + 1, n_all + len(test_idx))
    num_features = parts["allx"].shape[1]
    # Citeseer has test ids with no row (isolated nodes): they keep zero features and no label.
    tx = sp.lil_matrix((n - n_all, num_features))
    ty = np.zeros((n - n_all, parts["ally"].shape[1]))
    tx[test_sorted - n_all, :] = parts["tx"]
    ty[test_sorted - n_all, :] = parts["ty"]
    feats = sp.vstack([sp.csr_matrix(parts["allx"]), sp.csr_matrix(tx)]).tolil()
    onehot = np.vstack([parts["ally"], ty])
    feats[test_idx, :] = feats[test_sorted, :]
    onehot[test_idx, :] = onehot[test_sorted, :]
    labels = np.where(onehot.sum(1) > 0, onehot.argmax(1), -1).astype(np.int64)
    edges = [(u, v) for u, nbrs in parts["graph"].items() for v in nbrs if u != v and max(u, v) < n]
    split = np.full(n, TRAIN, dtype=np.int8)
    num_train_public = parts["y"].shape[0]
    split[num_train_public:num_train_public + 500] = VAL
    split[test_idx] = TEST
    return NodeGraph(
        node_ids=tuple(str(i) for i in range(n)),
        features=sp.csr_matrix(feats, dtype=np.float64),
        labels=labels,
        num_classes=int(parts["ally"].shape[1]),
        edges=np.asarray(edges, dtype=np.int64).reshape(-1, 2),
        split=split,
        name=name,
    )


def load_cora(root: str | Path | None = None) -> NodeGraph:
    """Cora (2,708 nodes, 1,433 binary features, 7 classes, 5,278 undirected edges), split "full"."""
    return load_planetoid("cora", root)


def load_tu_text(path: str | Path, name: str | None = None) -> GraphCollection:
    """The graph-collection text format of ``../shared/data`` (the DGCNN files of IMDB-BINARY, PROTEINS).

    First line: the number of graphs. Per graph a line ``g label``, then g lines ``tag m nbr_1 .. nbr_m``
    (node tag, then neighbour count and neighbour indices), optionally followed by continuous node
    attributes. Graph ids are ``"0".."G-1"`` in file order, node ids ``"0".."g-1"``; labels are remapped
    to 0..C-1 in sorted order of the raw values and tags to 0..T-1 likewise.
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"graph collection file not found at {file}")
    # (1-based line number, values) of every non-blank line; messages name the line, not the file (the
    # caller knows which file it passed, and the upload service prefixes the name it was uploaded as).
    lines = [(k, ln.split()) for k, ln in enumerate(file.read_text().splitlines(), 1) if ln.strip()]
    raw: list[tuple[int, list[int], list[list[int]], list[list[float]]]] = []
    width: tuple[int, int] | None = None  # (attribute count, line that set it)
    lineno = 0
    try:
        it = iter(lines)
        lineno, row = next(it)
        count = int(row[0])
        if count < 0:
            raise _tu_error(lineno, f"the number of graphs is {count}; it must be >= 0")
        for gi in range(count):
            lineno, row = next(it)
            if len(row) < 2:
                raise _tu_error(
                    lineno, f"graph {gi} (0-based) starts with a line '<number of nodes> <label>'"
                )
            g, label = int(row[0]), int(row[1])
            if g < 0:
                raise _tu_error(lineno, f"graph {gi} (0-based) has {g} nodes; it must be >= 0")
            tags, nbrs, attrs = [], [], []
            for _v in range(g):
                lineno, row = next(it)
                if len(row) < 2:
                    raise _tu_error(
                        lineno,
                        f"a node line is '<tag> <m> <neighbour 1> .. <neighbour m>', got {len(row)} value(s)",
                    )
                m = int(row[1])
                if m < 0:
                    raise _tu_error(lineno, f"the neighbour count m is {m}; it must be >= 0")
                if len(row) < 2 + m:
                    raise _tu_error(
                        lineno, f"the node declares {m} neighbours but the line lists {len(row) - 2}"
                    )
                extra = [float(x) for x in row[2 + m:]]
                if width is None:
                    width = (len(extra), lineno)
                elif len(extra) != width[0]:
                    raise _tu_error(
                        lineno, f"the node has {len(extra)} attribute value(s) after its neighbours but the "
                        f"node on line {width[1]} has {width[0]}: every node needs the same number of "
                        "attributes"
                    )
                tags.append(int(row[0]))
                nbrs.append([int(x) for x in row[2:2 + m]])
                attrs.append(extra)
            raw.append((label, tags, nbrs, attrs))
    except StopIteration:
        raise InvalidDatasetError(
            f"malformed graph-collection text: the file ends after line {lineno}, before all the declared "
            "graphs and nodes (truncated?)"
        ) from None
    except InvalidDatasetError:
        raise  # names its line already
    except (IndexError, ValueError) as exc:
        raise _tu_error(lineno, str(exc)) from None
    leftover = next(it, None)
    if leftover is not None:
        raise _tu_error(
            leftover[0], f"the file declares {count} graph(s) on line {lines[0][0]} but goes on after "
            "them: fix the count or remove the extra lines"
        )
    label_values = sorted({r[0] for r in raw})
    tag_values = sorted({t for r in raw for t in r[1]})
    label_map = {v: i for i, v in enumerate(label_values)}
    tag_map = {v: i for i, v in enumerate(tag_values)}
    graphs = []
    for gi, (label, tags, nbrs, attrs) in enumerate(raw):
        edges = [(u, v) for u, ns in enumerate(nbrs) for v in ns if u != v]
        has_attrs = bool(width and width[0])
        graphs.append(Graph(
            graph_id=str(gi),
            node_ids=tuple(str(v) for v in range(len(tags))),
            edges=np.asarray(edges, dtype=np.int64).reshape(-1, 2),
            label=label_map[label],
            node_tags=np.asarray([tag_map[t] for t in tags], dtype=np.int64),
            node_features=np.asarray(attrs, dtype=np.float64) if has_attrs else None,
        ))
    _check_class_count(len(label_values), "the number of distinct graph labels", "graph-collection text")
    _check_class_count(len(tag_values), "the number of distinct node tags", "graph-collection text")
    return GraphCollection(tuple(graphs), max(len(label_values), 2), max(len(tag_values), 1),
                           name=name or file.stem)


def _tu_error(lineno: int, problem: str) -> InvalidDatasetError:
    return InvalidDatasetError(f"malformed graph-collection text: line {lineno}: {problem}")


def load_imdb_binary(root: str | Path | None = None) -> GraphCollection:
    """IMDB-BINARY: 1,000 ego-networks, 2 classes, no node features (use a one-hot degree signal)."""
    folder = Path(root) if root is not None else shared_data_dir() / "imdb-binary"
    return load_tu_text(folder / "IMDBBINARY.txt", "imdb-binary")


def load_proteins(root: str | Path | None = None) -> GraphCollection:
    """PROTEINS: 1,113 graphs, 2 classes, 3 node tags (use a one-hot tag signal)."""
    folder = Path(root) if root is not None else shared_data_dir() / "proteins"
    return load_tu_text(folder / "PROTEINS.txt", "proteins")


def split_indices(n: int, fractions: Sequence[float], seed: int) -> list[np.ndarray]:
    """A seeded random partition of range(n) into consecutive parts of the given fractions (last takes the rest)."""
    if not math.isclose(sum(fractions), 1.0, abs_tol=1e-9) or any(f <= 0 for f in fractions):
        raise InvalidDatasetError(f"split fractions must be positive and sum to 1, got {list(fractions)}")
    perm = np.random.default_rng(seed).permutation(n)
    cuts = np.round(np.cumsum(fractions)[:-1] * n).astype(int)
    return [np.sort(part) for part in np.split(perm, cuts)]
