"""Validation of uploaded graph documents: the fields of the JSON formats and the entries of the NPZ
arrays (:mod:`unlearning.data.graphs.codecs`).

Every function raises :class:`~unlearning.errors.InvalidDatasetError` with a message that names the
node, edge or entry to fix; null, booleans and other values of the wrong JSON type are refused rather
than coerced.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from unlearning.data.graphs.node_graph import SPLITS
from unlearning.data.graphs.structure import check_class_count
from unlearning.data.limits import MAX_CLASSES
from unlearning.errors import InvalidDatasetError

__all__ = [
    "check_collection_arrays",
    "check_format",
    "dense_width",
    "json_class",
    "json_count",
    "json_edges",
    "json_feature_row",
    "json_id",
    "json_label",
    "json_owner",
    "split_code",
]


def dense_width(nodes: Sequence[Mapping[str, Any]]) -> int | None:
    """The length of the first dense feature list, if any node gives one."""
    return next((len(nd["features"]) for nd in nodes if isinstance(nd.get("features"), list)), None)


def json_count(obj: Mapping[str, Any], key: str, inferred: int | None) -> int:
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
        check_class_count(value, key, "node-graph JSON")
    return value


def json_label(label: Any, node: str) -> int:
    """A node's class index; null (unlabelled) is -1."""
    if label is None:
        return -1
    return json_class(
        label, f"node {node!r}: label", "a class index (a whole number >= 0, or null for unlabelled)"
    )


def json_feature_row(value: Any, num_features: int, node: str) -> tuple[list[int], list[float]]:
    """A node's features (a dense list, or a sparse ``{"indices", "values"}`` object) as the column
    indices and values of its nonzero entries."""
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


def split_code(name: Any, node: str) -> int:
    """The index into :data:`SPLITS` of a split name."""
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


def json_id(value: Any, what: str) -> str:
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


def json_owner(value: Any, default: str, where: str) -> str:
    """An owner id; absent or null means ``default`` (the node id, or the graph id)."""
    return default if value is None else json_id(value, f"{where}: 'owner'")


def json_edges(edges: Any, index: Mapping[str, int]) -> list[list[int]]:
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


def check_format(arrays: Mapping[str, np.ndarray], expected: str) -> None:
    """The arrays' ``format`` entry is ``expected``."""
    got = str(arrays["format"]) if "format" in arrays else None
    if got != expected:
        raise InvalidDatasetError(f"expected arrays of format {expected!r}, got {got!r}")


def json_class(value: Any, what: str, expected: str = "a whole number >= 0") -> int:
    """A class label or node tag in JSON: a whole number in 0..MAX_CLASSES-1."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 0:
        raise InvalidDatasetError(f"{what} {value!r} is not {expected}")
    if value >= MAX_CLASSES:
        raise InvalidDatasetError(f"{what} {value!r} is too large: it must be below {MAX_CLASSES:,}")
    return int(value)


def check_collection_arrays(arrays: Mapping[str, np.ndarray]) -> None:
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
