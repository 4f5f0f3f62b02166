"""Graph uploads (``json``, ``npz``, ``tu``) and the bundled graphs: parsing (problems are 4xx), storing."""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from service.datasets.service import add_dataset_row, checked_id, too_large
from service.db.tables import Dataset as DatasetRow
from service.errors import NotFound, PayloadTooLarge, Unprocessable, UnsupportedMediaType
from service.graphs.storage import AnyGraph, write_graph
from service.storage.artifacts import ArtifactStore
from service.uow import UnitOfWork
from unlearning.data.files import open_decompressed
from unlearning.data.graphs.codecs import (
    COLLECTION_FORMAT,
    NODE_GRAPH_FORMAT,
    collection_from_arrays,
    node_graph_from_arrays,
    node_graph_from_json,
)
from unlearning.data.graphs.node_graph import NodeGraph
from unlearning.data.graphs.planetoid import load_cora
from unlearning.data.graphs.tu import load_imdb_binary, load_proteins, tu_from_text
from unlearning.data.limits import SMALL_TABLE_CLASSES, ReadLimits, TooLargeError, class_limit
from unlearning.data.npz_table import check_npz
from unlearning.errors import UnlearningError

GRAPH_FORMATS = ("json", "tu")
BUNDLED = ("cora", "imdb-binary", "proteins")
_TU_HINT = (
    "expected the TU text format: the first line is the number of graphs; each graph is a line "
    "'<number of nodes> <label>' followed by one line per node '<tag> <m> <neighbour 1> .. <neighbour m>' "
    "(optionally followed by node attributes); a file that ends early is truncated"
)


def detect(explicit: str | None, filename: str | None) -> str | None:
    """The graph format from ``format`` or the file name (``.json[.gz]``); None otherwise."""
    if explicit:
        return explicit if explicit in GRAPH_FORMATS else None
    suffixes = [s.lower() for s in Path(filename).suffixes] if filename else []
    if suffixes[-1:] == [".gz"]:
        suffixes = suffixes[:-1]
    return "json" if suffixes[-1:] == [".json"] else None


def is_graph_npz(path: Path) -> bool:
    """Whether an NPZ upload holds a graph: its ``format`` entry is a graph format (read without pickle)."""
    try:
        with zipfile.ZipFile(path) as archive:
            if "format.npy" not in archive.namelist() or archive.getinfo("format.npy").file_size > 4096:
                return False
            value = np.lib.format.read_array(io.BytesIO(archive.read("format.npy")), allow_pickle=False)
    except (zipfile.BadZipFile, ValueError, OSError, KeyError):
        return False
    return str(value) in (NODE_GRAPH_FORMAT, COLLECTION_FORMAT)


MAX_GRAPH_TEXT_BYTES = 64 * 2**20  # a JSON or TU graph's text, parsed whole (413 above it: send NPZ)


def _text(path: Path, filename: str, limits: ReadLimits, hint: str = "") -> str:
    """The file's UTF-8 text (gunzipped): 413 past its bound or :data:`MAX_GRAPH_TEXT_BYTES`."""
    if limits.max_bytes is not None and limits.max_bytes <= MAX_GRAPH_TEXT_BYTES:
        bound = limits  # the deployment's bound is the tighter: its 413 names its setting
    else:
        bound = ReadLimits(max_bytes=MAX_GRAPH_TEXT_BYTES)
    try:
        with open_decompressed(path, bound) as stream:
            data = stream.read()
    except TooLargeError:
        if bound is limits:
            raise
        raise PayloadTooLarge(
            f"{filename}: a JSON or TU graph may hold at most {MAX_GRAPH_TEXT_BYTES:,} bytes of text once "
            "decompressed (it is parsed whole); send a larger graph in the NPZ graph format"
        ) from None
    except (OSError, EOFError, zlib.error) as exc:
        raise Unprocessable(
            f"{filename}: the file is not a readable gzip file: {exc}", code="invalid_dataset"
        ) from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unprocessable(
            f"{filename}: the file is not UTF-8 text ({exc}){hint}", code="invalid_dataset"
        ) from exc


def parse(path: Path, fmt: str, filename: str, name: str | None, limits: ReadLimits) -> AnyGraph:
    """A graph upload, validated, its ids in NFC and its class count bounded by its samples."""
    shown = name or Path(filename).name.split(".")[0] or "graph"
    try:
        if fmt == "json":
            graph: AnyGraph = _parse_json(_text(path, filename, limits), filename)
        elif fmt == "tu":
            text = _text(path, filename, limits, f"; {_TU_HINT}")
            try:
                graph = tu_from_text(text, shown)
            except UnlearningError as exc:
                raise Unprocessable(f"{filename}: {exc}; {_TU_HINT}", code="invalid_dataset") from exc
        elif fmt == "npz":
            graph = _parse_npz(path, filename, limits)
        else:
            raise UnsupportedMediaType(f"format {fmt!r} is not a graph format: use json, npz or tu")
        if name and fmt != "tu":
            graph = dataclasses.replace(graph, name=name)
    except TooLargeError as exc:
        raise too_large(exc, str(path), filename) from exc
    except UnlearningError as exc:
        message = str(exc)
        message = message.replace(str(path), filename) if str(path) in message else f"{filename}: {message}"
        raise Unprocessable(message, code="invalid_dataset") from exc
    _check_class_count(graph, filename)
    return normalized_ids(graph, filename)


def _parse_json(text: str, filename: str) -> NodeGraph:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Unprocessable(
            f"{filename}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
            code="invalid_dataset",
        ) from exc
    if not isinstance(obj, dict) or "nodes" not in obj:
        raise Unprocessable(
            f"{filename}: a node graph is a JSON object with 'num_classes', 'num_features', 'nodes' and "
            f"'edges' (format {NODE_GRAPH_FORMAT!r}; see docs/service.md)",
            code="invalid_dataset",
        )
    return node_graph_from_json(obj)


def _parse_npz(path: Path, filename: str, limits: ReadLimits) -> AnyGraph:
    check_npz(path, ReadLimits(max_bytes=limits.max_bytes))  # every header, before any array is allocated
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        if str(arrays.get("format")) == COLLECTION_FORMAT:
            return collection_from_arrays(arrays)
        return node_graph_from_arrays(arrays)
    except (ValueError, TypeError, OSError, zipfile.BadZipFile) as exc:  # e.g. a pickled (object) array
        raise Unprocessable(
            f"{filename}: could not read the graph arrays: {exc}", code="invalid_dataset"
        ) from exc


def _check_class_count(graph: AnyGraph, filename: str) -> None:
    """At most :func:`class_limit` of the samples (nodes, or graphs) classes, as for tables."""
    samples = graph.num_nodes if isinstance(graph, NodeGraph) else len(graph.graphs)
    if graph.num_classes > class_limit(samples):
        raise Unprocessable(
            f"{filename}: num_classes is {graph.num_classes:,} for {samples:,} "
            f"{'nodes' if isinstance(graph, NodeGraph) else 'graphs'}: a dataset has at most as many classes "
            f"as samples (at least {SMALL_TABLE_CLASSES:,}), {class_limit(samples):,} here: number the "
            "classes 0 to k-1",
            code="invalid_dataset",
        )


def normalized_ids(graph: AnyGraph, filename: str) -> AnyGraph:
    """The graph with its ids in Unicode NFC; a 422 naming the first unusable (or duplicated) one."""
    try:
        if isinstance(graph, NodeGraph):
            nodes = tuple(checked_id(v, "node id", filename) for v in graph.node_ids)
            owners = tuple(checked_id(v, "owner id", filename) for v in graph.owner_ids)
            if nodes == graph.node_ids and owners == graph.owner_ids:
                return graph
            return dataclasses.replace(graph, node_ids=nodes, owner_ids=owners)
        graphs = tuple(_normalized_graph(g, filename) for g in graph.graphs)
        if all(new is old for new, old in zip(graphs, graph.graphs)):
            return graph
        return dataclasses.replace(graph, graphs=graphs)
    except UnlearningError as exc:
        raise Unprocessable(
            f"{filename}: {exc} (ids are compared in Unicode NFC, so two ids that differ only in their "
            "normalisation are one id)",
            code="invalid_dataset",
        ) from exc


def _normalized_graph(g: Any, filename: str) -> Any:
    graph_id = checked_id(g.graph_id, "graph id", filename)
    owner = checked_id(g.owner_id, "owner id", filename)
    nodes = tuple(checked_id(n, "node id", filename) for n in g.node_ids)
    if (graph_id, owner, nodes) == (g.graph_id, g.owner_id, g.node_ids):
        return g
    return dataclasses.replace(g, graph_id=graph_id, owner_id=owner, node_ids=nodes)


def load_bundled(name: str, n: int | None, seed: int, samples_per_owner: int) -> AnyGraph:
    """Cora (one node graph), IMDB-BINARY or PROTEINS (collections) from ``../shared/data``."""
    try:
        if name == "cora":
            if n is not None:
                raise Unprocessable(
                    "cora is one graph: n (draw rows) does not apply; leave it out", code="invalid_parameter"
                )
            return _grouped(load_cora(), samples_per_owner)
        collection = load_imdb_binary() if name == "imdb-binary" else load_proteins()
        if n is not None and n < len(collection):
            picked = np.sort(np.random.default_rng(seed).choice(len(collection), size=n, replace=False))
            collection = collection.take(picked)
        return _grouped(collection, samples_per_owner)
    except FileNotFoundError as exc:
        raise NotFound(f"the bundled dataset {name!r} is not available on this server: {exc}") from exc
    except UnlearningError as exc:
        raise Unprocessable(str(exc), code="invalid_dataset") from exc


def _grouped(graph: AnyGraph, per_owner: int) -> AnyGraph:
    """``per_owner`` nodes (of a node graph) or graphs (of a collection) per owner: owner-00000, ..."""
    if per_owner == 1:
        return graph
    if isinstance(graph, NodeGraph):
        owners = tuple(f"owner-{i // per_owner:05d}" for i in range(graph.num_nodes))
        return dataclasses.replace(graph, owner_ids=owners)
    graphs = (
        dataclasses.replace(g, owner_id=f"owner-{i // per_owner:05d}") for i, g in enumerate(graph.graphs)
    )
    return dataclasses.replace(graph, graphs=tuple(graphs))


def store(
    uow: UnitOfWork, artifacts: ArtifactStore, graph: AnyGraph, *, source: str, fmt: str, name: str
) -> DatasetRow:
    """Write the graph blob and the dataset row; the caller commits."""
    arrays = write_graph(artifacts, graph)
    return add_dataset_row(
        uow,
        arrays,
        name=name,
        source=source,
        fmt=fmt,
        num_rows=int(arrays["num_samples"]),
        num_classes=graph.num_classes,
        feature_shape=[int(arrays["num_features"])],
        kind=arrays["kind"],
    )


def out_fields(arrays: dict[str, Any] | None) -> dict[str, Any]:
    """The kind and sizes a dataset response shows (tables: kind only)."""
    if not arrays or "kind" not in arrays:
        return {"kind": "table"}
    return {k: arrays.get(k) for k in ("kind", "num_nodes", "num_edges", "num_graphs")}
