"""Graph uploads and the bundled graphs: parsing (every input problem is a 4xx) and storing a dataset.

Formats (``POST /v1/datasets?format=...``; detected from the file name or content type otherwise):

* ``json`` (``.json``, ``.json.gz``): one node-classification graph in the JSON format of
  :mod:`unlearning.data.graphs.codecs` (``"format": "lethe.node_graph.v1"``);
* ``npz`` (``.npz``): a table, or a graph when the archive's ``format`` entry says
  ``lethe.node_graph.v1`` / ``lethe.graph_collection.v1``
  (:func:`~unlearning.data.graphs.codecs.save_npz`); read with ``allow_pickle=False``;
* ``tu`` (named explicitly: ``format=tu``; plain or gzip): a graph collection in the text format of
  IMDB-BINARY and PROTEINS.

Raw bodies keep the table upload's content types (JSON and plain-text bodies are refused with 415 as
before): send a graph as multipart (``file=@graph.json``) or as ``application/octet-stream`` with
``format``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from service.datasets.service import _gunzip_capped, add_dataset_row, check_npz_size, id_problem
from service.db.tables import ID_LENGTH
from service.db.tables import Dataset as DatasetRow
from service.db.uow import UnitOfWork
from service.errors import NotFound, Unprocessable, UnsupportedMediaType
from service.graphs.storage import ERASED_PREFIX, AnyGraph, subjects_of, write_graph
from service.storage.artifacts import ArtifactStore
from unlearning.data.graphs.codecs import (
    COLLECTION_FORMAT,
    NODE_GRAPH_FORMAT,
    collection_from_arrays,
    node_graph_from_arrays,
    node_graph_from_json,
)
from unlearning.data.graphs.collection import GraphCollection
from unlearning.data.graphs.node_graph import NodeGraph
from unlearning.data.graphs.planetoid import load_cora
from unlearning.data.graphs.tu import load_imdb_binary, load_proteins, load_tu_text
from unlearning.errors import UnlearningError

GRAPH_FORMATS = ("json", "tu")
BUNDLED = ("cora", "imdb-binary", "proteins")
_TU_HINT = (
    "expected the TU text format: the first line is the number of graphs; each graph is a line "
    "'<number of nodes> <label>' followed by one line per node '<tag> <m> <neighbour 1> .. <neighbour m>' "
    "(optionally followed by node attributes); a file that ends early is truncated"
)


def detect(explicit: str | None, filename: str | None) -> str | None:
    """The graph format named by the ``format`` parameter or the file name (``.json``, ``.json.gz``); None
    when the upload is not a graph by name (an NPZ is told apart by its contents, :func:`is_graph_npz`; a
    TU text file needs ``format=tu``)."""
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


def _maybe_gunzip(path: Path, limit: int) -> Path:
    with path.open("rb") as fh:
        head = fh.read(2)
    return _gunzip_capped(path, limit) if head == b"\x1f\x8b" else path


def _read_text(path: Path, filename: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise Unprocessable(
            f"{filename}: the file is not UTF-8 text ({exc})", code="invalid_dataset"
        ) from exc


def parse(path: Path, fmt: str, filename: str, name: str | None, max_decompressed: int) -> AnyGraph:
    """Read a graph upload into a validated NodeGraph or GraphCollection."""
    shown = name or Path(filename).name.split(".")[0] or "graph"
    try:
        if fmt == "json":
            graph: AnyGraph = _parse_json(
                _read_text(_maybe_gunzip(path, max_decompressed), filename), filename
            )
            if name:
                graph = dataclasses.replace(graph, name=name)
        elif fmt == "tu":
            source = _maybe_gunzip(path, max_decompressed)
            try:
                graph = load_tu_text(source, shown)
            except UnlearningError as exc:
                raise Unprocessable(
                    f"{filename}: {str(exc).replace(str(source), filename)}; {_TU_HINT}",
                    code="invalid_dataset",
                ) from exc
            except UnicodeDecodeError as exc:
                raise Unprocessable(
                    f"{filename}: the file is not text ({exc}); {_TU_HINT}", code="invalid_dataset"
                ) from exc
        elif fmt == "npz":
            graph = _parse_npz(path, filename, max_decompressed)
            if name:
                graph = dataclasses.replace(graph, name=name)
        else:
            raise UnsupportedMediaType(f"format {fmt!r} is not a graph format: use json, npz or tu")
    except UnlearningError as exc:
        raise Unprocessable(f"{filename}: {exc}", code="invalid_dataset") from exc
    check_ids(graph, filename)
    return graph


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


def _parse_npz(path: Path, filename: str, limit: int) -> AnyGraph:
    check_npz_size(path, limit)
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


def _bad_id(value: str) -> bool:
    return id_problem(value) is not None  # the rule table uploads follow too


def check_ids(graph: AnyGraph, filename: str) -> None:
    """Node, graph and owner ids become keys of deletion requests: printable, at most ID_LENGTH characters,
    and not the reserved prefix of erased tombstones."""
    if isinstance(graph, NodeGraph):
        named = [("node id", s) for s in subjects_of(graph)[0]] + [
            ("owner id", s) for s in subjects_of(graph)[1]
        ]
    else:
        named = [("graph id", g.graph_id) for g in graph.graphs] + [
            ("owner id", g.owner_id) for g in graph.graphs
        ]
        named += [("node id", n) for g in graph.graphs for n in g.node_ids]
    for what, value in named:
        if _bad_id(value):
            raise Unprocessable(
                f"{filename}: {what} {value[:80]!r} is not usable: ids are 1 to {ID_LENGTH} printable characters "
                f"and may not start with {ERASED_PREFIX!r}",
                code="invalid_dataset",
            )


# -- bundled ---------------------------------------------------------------------------------------


def load_bundled(name: str, n: int | None, seed: int, samples_per_owner: int) -> AnyGraph:
    """Cora (one node graph), IMDB-BINARY or PROTEINS (collections) from ``../shared/data``."""
    try:
        if name == "cora":
            if n is not None:
                raise Unprocessable(
                    "cora is one graph: n (draw rows) does not apply; leave it out", code="invalid_parameter"
                )
            return _grouped_nodes(load_cora(), samples_per_owner)
        collection = load_imdb_binary() if name == "imdb-binary" else load_proteins()
        if n is not None and n < len(collection):
            picked = np.sort(np.random.default_rng(seed).choice(len(collection), size=n, replace=False))
            collection = collection.take(picked)
        return _grouped_graphs(collection, samples_per_owner)
    except FileNotFoundError as exc:
        raise NotFound(f"the bundled dataset {name!r} is not available on this server: {exc}") from exc
    except UnlearningError as exc:
        raise Unprocessable(str(exc), code="invalid_dataset") from exc


def _owner(i: int, per_owner: int) -> str:
    return f"owner-{i // per_owner:05d}"


def _grouped_nodes(graph: NodeGraph, per_owner: int) -> NodeGraph:
    if per_owner == 1:
        return graph
    return dataclasses.replace(graph, owner_ids=tuple(_owner(i, per_owner) for i in range(graph.num_nodes)))


def _grouped_graphs(collection: GraphCollection, per_owner: int) -> GraphCollection:
    if per_owner == 1:
        return collection
    graphs = tuple(
        dataclasses.replace(g, owner_id=_owner(i, per_owner)) for i, g in enumerate(collection.graphs)
    )
    return dataclasses.replace(collection, graphs=graphs)


# -- storing -------------------------------------------------------------------------------------


def store(
    uow: UnitOfWork, artifacts: ArtifactStore, graph: AnyGraph, *, source: str, fmt: str, name: str
) -> DatasetRow:
    """Write the graph blob and the dataset row (the caller commits); the graph counterpart of
    :func:`service.datasets.service.store`."""
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
