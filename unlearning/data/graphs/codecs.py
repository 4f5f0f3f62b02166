"""Pickle-free serialisation of the graph types: NPZ arrays and JSON documents.

NPZ (:func:`save_npz` / :func:`load_node_graph_npz` / :func:`load_collection_npz`, ``numpy.savez`` with
``allow_pickle=False``; every entry is a plain array; :func:`node_graph_to_arrays` and
:func:`collection_to_arrays` give the arrays without a file):

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

JSON, one node-labelled graph of a collection (:func:`graph_to_json` / :func:`graph_from_json`)::

    {"format": "lethe.graph.v1", "graph_id": "17", "label": 1, "owner": "17",
     "nodes": [{"id": "0", "tag": 0}, {"id": "1", "tag": 2, "features": [0.5, 1.0]},
               {"id": "2", "tag": 0, "deleted": true}],
     "edges": [["0", "1"], ["1", "2"]]}

``tag`` is the node's discrete label (>= 0; the TU files' first number), ``features`` optional
continuous attributes (same length for every node), ``deleted`` optional (default false). Edges are
undirected pairs of node ids; duplicates and both directions are merged, self-loops are rejected.

JSON, a node-classification graph (:func:`node_graph_to_json` / :func:`node_graph_from_json`)::

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

Every reader raises :class:`~unlearning.errors.InvalidDatasetError` naming what to fix for malformed
input (:mod:`unlearning.data.graphs.validation`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from unlearning.data.graphs.collection import Graph, GraphCollection
from unlearning.data.graphs.node_graph import SPLITS, NodeGraph
from unlearning.data.graphs.validation import (
    check_collection_arrays,
    check_format,
    dense_width,
    json_class,
    json_count,
    json_edges,
    json_feature_row,
    json_id,
    json_label,
    json_owner,
    split_code,
)
from unlearning.errors import InvalidDatasetError

__all__ = [
    "COLLECTION_FORMAT",
    "GRAPH_FORMAT",
    "NODE_GRAPH_FORMAT",
    "collection_from_arrays",
    "collection_to_arrays",
    "graph_from_json",
    "graph_to_json",
    "load_collection_npz",
    "load_node_graph_npz",
    "node_graph_from_arrays",
    "node_graph_from_json",
    "node_graph_to_arrays",
    "node_graph_to_json",
    "save_npz",
]

NODE_GRAPH_FORMAT = "lethe.node_graph.v1"
GRAPH_FORMAT = "lethe.graph.v1"
COLLECTION_FORMAT = "lethe.graph_collection.v1"


# --------------------------------------------------------------------------------------------------
# NPZ


def node_graph_to_arrays(graph: NodeGraph) -> dict[str, np.ndarray]:
    """Plain numpy arrays (no object dtype) describing the graph; see the module docstring."""
    f = graph.features
    return {
        "format": np.asarray(NODE_GRAPH_FORMAT),
        "name": np.asarray(graph.name),
        "num_classes": np.asarray(graph.num_classes, dtype=np.int64),
        "node_ids": np.asarray(graph.node_ids, dtype=str),
        "owner_ids": np.asarray(graph.owner_ids, dtype=str),
        "labels": graph.labels.copy(),
        "split": graph.split.copy(),
        "deleted": graph.deleted.copy(),
        "features_deleted": graph.features_deleted.copy(),
        "edges": graph.edges.copy(),
        "feat_data": f.data.astype(np.float64),
        "feat_indices": f.indices.astype(np.int64),
        "feat_indptr": f.indptr.astype(np.int64),
        "feat_shape": np.asarray(f.shape, dtype=np.int64),
    }


def node_graph_from_arrays(arrays: Mapping[str, np.ndarray]) -> NodeGraph:
    """The graph the arrays of :func:`node_graph_to_arrays` describe."""
    check_format(arrays, NODE_GRAPH_FORMAT)
    try:
        shape = tuple(int(s) for s in arrays["feat_shape"])
        feats = sp.csr_matrix(
            (arrays["feat_data"], arrays["feat_indices"], arrays["feat_indptr"]), shape=shape
        )
        return NodeGraph(
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


def collection_to_arrays(collection: GraphCollection) -> dict[str, np.ndarray]:
    """Plain numpy arrays (no object dtype) describing the collection; see the module docstring."""
    graphs = collection.graphs
    node_ptr = np.cumsum([0] + [g.num_nodes for g in graphs]).astype(np.int64)
    edge_ptr = np.cumsum([0] + [len(g.edges) for g in graphs]).astype(np.int64)
    out = {
        "format": np.asarray(COLLECTION_FORMAT),
        "name": np.asarray(collection.name),
        "num_classes": np.asarray(collection.num_classes, dtype=np.int64),
        "num_tags": np.asarray(collection.num_tags, dtype=np.int64),
        "graph_ids": np.asarray(collection.graph_ids, dtype=str),
        "owner_ids": np.asarray([g.owner_id for g in graphs], dtype=str),
        "graph_labels": collection.labels,
        "node_ptr": node_ptr,
        "node_ids": np.asarray([nid for g in graphs for nid in g.node_ids], dtype=str),
        "node_tags": np.concatenate([g.node_tags for g in graphs]),
        "node_deleted": np.concatenate([g.deleted for g in graphs]),
        "edge_ptr": edge_ptr,
        "edges": np.concatenate([g.edges for g in graphs]).reshape(-1, 2),
        "removed_ids": np.asarray(sorted(collection.removed_ids), dtype=str),
    }
    if graphs[0].node_features is not None:
        out["node_features"] = np.concatenate([g.node_features for g in graphs if g.node_features is not None])
    return out


def collection_from_arrays(arrays: Mapping[str, np.ndarray]) -> GraphCollection:
    """The collection the arrays of :func:`collection_to_arrays` describe."""
    check_format(arrays, COLLECTION_FORMAT)
    try:
        check_collection_arrays(arrays)
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
        return GraphCollection(tuple(graphs), int(arrays["num_classes"]), int(arrays["num_tags"]),
                               frozenset(str(s) for s in arrays["removed_ids"]), str(arrays["name"]))
    except KeyError as exc:
        raise InvalidDatasetError(f"graph-collection arrays lack the entry {exc.args[0]!r}") from None


def save_npz(data: NodeGraph | GraphCollection, path: str | Path) -> None:
    """Write the arrays of ``data`` as a compressed NPZ file."""
    arrays = node_graph_to_arrays(data) if isinstance(data, NodeGraph) else collection_to_arrays(data)
    np.savez_compressed(path, **arrays)  # type: ignore[arg-type]


def _read_npz(path: str | Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def load_node_graph_npz(path: str | Path) -> NodeGraph:
    """The node graph of an NPZ file written by :func:`save_npz`."""
    return node_graph_from_arrays(_read_npz(path))


def load_collection_npz(path: str | Path) -> GraphCollection:
    """The graph collection of an NPZ file written by :func:`save_npz`."""
    return collection_from_arrays(_read_npz(path))


# --------------------------------------------------------------------------------------------------
# JSON


def node_graph_to_json(graph: NodeGraph) -> dict[str, Any]:
    """The JSON object of the module docstring (sparse feature rows)."""
    f = graph.features
    nodes = []
    for i, nid in enumerate(graph.node_ids):
        lo, hi = f.indptr[i], f.indptr[i + 1]
        node: dict[str, Any] = {
            "id": nid,
            "label": int(graph.labels[i]) if graph.labels[i] >= 0 else None,
            "split": SPLITS[int(graph.split[i])],
            "owner": graph.owner_ids[i],
            "features": {"indices": f.indices[lo:hi].tolist(), "values": f.data[lo:hi].tolist()},
        }
        if graph.deleted[i]:
            node["deleted"] = True
        if graph.features_deleted[i]:
            node["features_deleted"] = True
        nodes.append(node)
    edges = [[graph.node_ids[u], graph.node_ids[v]] for u, v in graph.edges.tolist()]
    return {"format": NODE_GRAPH_FORMAT, "name": graph.name, "num_classes": graph.num_classes,
            "num_features": graph.num_features, "nodes": nodes, "edges": edges}


def node_graph_from_json(obj: Mapping[str, Any]) -> NodeGraph:
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
    ids = [json_id(nd["id"], f"node {i} (0-based): 'id'") for i, nd in enumerate(nodes)]
    try:
        num_features = json_count(obj, "num_features", dense_width(nodes))
        labels = [json_label(nd.get("label"), ids[i]) for i, nd in enumerate(nodes)]
        num_classes = json_count(obj, "num_classes", max(labels, default=-1) + 1 or None)
        rows, cols, vals = [], [], []
        for i, nd in enumerate(nodes):
            c, v = json_feature_row(nd.get("features", []), num_features, ids[i])
            rows.extend([i] * len(c))
            cols.extend(c)
            vals.extend(v)
        feats = sp.csr_matrix((vals, (rows, cols)), shape=(len(nodes), num_features), dtype=np.float64)
        split = [split_code(nd.get("split", "none"), ids[i]) for i, nd in enumerate(nodes)]
        index = {nid: i for i, nid in enumerate(ids)}
        edges = json_edges(obj.get("edges", []), index)
        owners = [json_owner(nd.get("owner"), ids[i], f"node {ids[i]!r}") for i, nd in enumerate(nodes)]
        return NodeGraph(
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


def graph_to_json(graph: Graph) -> dict[str, Any]:
    """The JSON object of one graph of a collection (module docstring)."""
    nodes: list[dict[str, Any]] = []
    for i, nid in enumerate(graph.node_ids):
        node: dict[str, Any] = {"id": nid, "tag": int(graph.node_tags[i])}
        if graph.node_features is not None:
            node["features"] = graph.node_features[i].tolist()
        if graph.deleted[i]:
            node["deleted"] = True
        nodes.append(node)
    edges = [[graph.node_ids[u], graph.node_ids[v]] for u, v in graph.edges.tolist()]
    return {"format": GRAPH_FORMAT, "graph_id": graph.graph_id, "label": int(graph.label),
            "owner": graph.owner_id, "nodes": nodes, "edges": edges}


def graph_from_json(obj: Mapping[str, Any]) -> Graph:
    """Parse the JSON object of one graph of a collection; malformed input raises InvalidDatasetError
    naming what to fix."""
    if not isinstance(obj, Mapping):
        raise InvalidDatasetError("a graph JSON document is an object with 'graph_id', 'label', 'nodes'")
    if obj.get("format", GRAPH_FORMAT) != GRAPH_FORMAT:
        raise InvalidDatasetError(f"expected format {GRAPH_FORMAT!r}, got {obj.get('format')!r}")
    try:
        graph_id = json_id(obj["graph_id"], "graph JSON: 'graph_id'")
        where = f"graph {graph_id!r}"
        nodes = list(obj["nodes"])
        if not all(isinstance(nd, Mapping) for nd in nodes):
            raise InvalidDatasetError(f"{where}: 'nodes' must be a list of node objects with an 'id'")
        ids = [json_id(nd["id"], f"{where}: node {i} (0-based): 'id'") for i, nd in enumerate(nodes)]
        index = {nid: i for i, nid in enumerate(ids)}
        has_feats = any("features" in nd for nd in nodes)
        feats = None
        if has_feats:
            feats = np.asarray([[float(v) for v in nd["features"]] for nd in nodes], dtype=np.float64)
        deleted = np.asarray([bool(nd.get("deleted", False)) for nd in nodes])
        tags = np.asarray(
            [-1 if deleted[i] else json_class(nd.get("tag", 0), f"{where}: node {ids[i]!r}: tag")
             for i, nd in enumerate(nodes)], dtype=np.int64)
        edges = json_edges(obj.get("edges", []), index)
        return Graph(
            graph_id=graph_id,
            node_ids=tuple(ids),
            edges=np.asarray(edges, dtype=np.int64).reshape(-1, 2),
            label=json_class(obj["label"], f"{where}: label"),
            node_tags=tags,
            node_features=feats,
            deleted=deleted,
            owner_id=json_owner(obj.get("owner"), graph_id, where),
        )
    except InvalidDatasetError:
        raise  # already says what to fix
    except KeyError as exc:
        raise InvalidDatasetError(f"malformed graph JSON: the entry {exc.args[0]!r} is missing") from None
    except (TypeError, ValueError) as exc:
        raise InvalidDatasetError(f"malformed graph JSON: {exc}") from None
