"""Collections of small node-labelled graphs for graph classification (:class:`GraphCollection` of
:class:`Graph`), addressed by stable string graph ids.

Both types are immutable. A deletion never edits a value in place: :meth:`GraphCollection.without` (or
:meth:`GraphCollection.after_request` for a :class:`~unlearning.methods.protocol.ForgetRequest`)
validates the request and returns the collection that remains.

What a deletion removes (digest 001 section 3, digest 000 section 2.5):

* graph: a whole graph; its id stays as a tombstone so a repeated request is told "already deleted"
  instead of "unknown".
* node inside a graph: the node's tag, continuous attributes and incident edges; the node stays as an
  isolated tombstone so the graph's size (the scattering transform's mean-pool denominator) is kept.
  A graph whose last live node goes is removed as a whole.

Nothing that was deleted is kept anywhere. Serialisation is in :mod:`unlearning.data.graphs.codecs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
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

__all__ = ["Graph", "GraphCollection"]


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
        set_(self, "node_ids", unique_ids(self.node_ids, "node id", where))
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
        set_(self, "edges", canonical_edges(self.edges, g, where))
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
        return symmetric_adjacency(self.num_nodes, self.edges)

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
        unique_ids([g.graph_id for g in self.graphs], "graph id", where)
        if self.num_classes < 2:
            raise InvalidDatasetError(f"{where}: num_classes is {self.num_classes}: a classifier needs at least 2")
        check_class_count(self.num_classes, "num_classes", where)
        check_class_count(self.num_tags, "num_tags", where)
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
