"""One graph as one safetensors blob (an erased node's ids ``~erased:<i>``), and its bucket manifest."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeGuard

import numpy as np
from safetensors.numpy import load as np_load
from safetensors.numpy import save as np_save

from service.storage.artifacts import ArtifactStore
from service.storage.tensors import canonical, read_metadata
from unlearning.data import Dataset
from unlearning.data.graphs.codecs import (
    collection_from_arrays,
    collection_to_arrays,
    node_graph_from_arrays,
    node_graph_to_arrays,
)
from unlearning.data.graphs.collection import GraphCollection
from unlearning.data.graphs.node_graph import NodeGraph
from unlearning.methods.protocol import GRAPH_COLLECTION, NODE_GRAPH, TABLE

ERASED_PREFIX = "~erased:"  # + an index: the id of an erased node or graph; no uploaded id starts with it

AnyGraph = NodeGraph | GraphCollection


def kind_of(manifest: Mapping[str, Any] | None) -> str:
    """``table``, ``node_graph`` or ``graph_collection``: what a dataset or training manifest names."""
    if manifest is None:
        return TABLE
    return str(manifest.get("kind", TABLE))


def is_graph(manifest: Mapping[str, Any] | None) -> TypeGuard[Mapping[str, Any]]:
    """Whether ``manifest`` names a graph; ``None`` (no manifest) is a table's, so True means not None."""
    return kind_of(manifest) != TABLE


def kind_of_data(data: Any) -> str:
    if isinstance(data, NodeGraph):
        return NODE_GRAPH
    if isinstance(data, GraphCollection):
        return GRAPH_COLLECTION
    return TABLE


def _anonymised(graph: AnyGraph) -> dict[str, np.ndarray]:
    """The graph's arrays with erased nodes' ids replaced and removed graph ids dropped."""
    if isinstance(graph, NodeGraph):
        arrays = node_graph_to_arrays(graph)
        gone = np.flatnonzero(arrays["deleted"])
        if len(gone):
            ids, owners = arrays["node_ids"].tolist(), arrays["owner_ids"].tolist()
            for i in gone.tolist():
                ids[i] = owners[i] = f"{ERASED_PREFIX}{i}"
            arrays["node_ids"], arrays["owner_ids"] = (
                np.asarray(ids, dtype=str),
                np.asarray(owners, dtype=str),
            )
        return arrays
    arrays = collection_to_arrays(graph)
    arrays["removed_ids"] = np.asarray([], dtype=str)
    gone = np.flatnonzero(arrays["node_deleted"])
    if len(gone):
        ptr = arrays["node_ptr"]
        ids = arrays["node_ids"].tolist()
        for j in gone.tolist():
            graph_pos = int(np.searchsorted(ptr, j, side="right")) - 1
            ids[j] = f"{ERASED_PREFIX}{j - int(ptr[graph_pos])}"
        arrays["node_ids"] = np.asarray(ids, dtype=str)
    return arrays


def encode_graph(graph: AnyGraph) -> bytes:
    """The safetensors blob of a graph (numeric arrays as tensors, string arrays as JSON metadata)."""
    arrays = _anonymised(graph)
    tensors = {k: np.ascontiguousarray(v).reshape(v.shape) for k, v in arrays.items() if v.dtype.kind != "U"}
    strings = {k: v.tolist() for k, v in arrays.items() if v.dtype.kind == "U"}
    return canonical(np_save(tensors, metadata={"kind": kind_of_data(graph), "strings": json.dumps(strings)}))


def decode_graph(blob: bytes) -> AnyGraph:
    meta = read_metadata(blob)
    arrays: dict[str, np.ndarray] = dict(np_load(blob))
    for name, value in json.loads(meta["strings"]).items():
        arrays[name] = np.asarray(value, dtype=str)
    if meta.get("kind") == NODE_GRAPH:
        return node_graph_from_arrays(arrays)
    return collection_from_arrays(arrays)


def subjects_of(data: Dataset | AnyGraph) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(sample ids, owner ids) of a table's rows, a node graph's live nodes or a collection's graphs."""
    if isinstance(data, NodeGraph):
        live = np.flatnonzero(~data.deleted).tolist()
        return tuple(data.node_ids[i] for i in live), tuple(data.owner_ids[i] for i in live)
    if isinstance(data, GraphCollection):
        return data.graph_ids, tuple(g.owner_id for g in data.graphs)
    return data.sample_ids, data.owner_ids


def sample_count(data: Dataset | AnyGraph) -> int:
    """The training-set size a version reports: rows, training nodes, or graphs."""
    if isinstance(data, NodeGraph):
        return int(data.training_mask().sum())
    return len(data)


def sizes(graph: AnyGraph) -> dict[str, Any]:
    """The counts a manifest and a dataset response carry."""
    if isinstance(graph, NodeGraph):
        return {
            "num_samples": int((~graph.deleted).sum()),
            "num_train": int(graph.training_mask().sum()),
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "num_graphs": None,
            "num_features": graph.num_features,
        }
    return {
        "num_samples": len(graph),
        "num_train": len(graph),
        "num_nodes": sum(g.num_nodes for g in graph.graphs),
        "num_edges": sum(len(g.edges) for g in graph.graphs),
        "num_graphs": len(graph),
        "num_features": graph.num_node_features or graph.num_tags,
    }


def write_graph(artifacts: ArtifactStore, graph: AnyGraph) -> dict[str, Any]:
    digest = artifacts.put(encode_graph(graph))
    return {
        "kind": kind_of_data(graph),
        "buckets": {"graph": digest},
        "name": graph.name,
        "num_classes": graph.num_classes,
        **sizes(graph),
    }


def graph_digest(manifest: Mapping[str, Any]) -> str:
    return str(manifest["buckets"]["graph"])


def graph_nbytes(graph: AnyGraph) -> int:
    """About how much memory a decoded graph takes (for the blob cache's bound)."""
    if isinstance(graph, NodeGraph):
        f = graph.features
        return int(f.data.nbytes + f.indices.nbytes + f.indptr.nbytes + graph.edges.nbytes) + 100 * len(graph)
    return sum(int(g.edges.nbytes) + 100 * g.num_nodes for g in graph.graphs)
