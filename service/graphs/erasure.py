"""The remaining graph after an update, a retrain or an erasure from the source, rewritten as one blob."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from service.graphs.storage import AnyGraph, subjects_of, write_graph
from service.storage.artifacts import ArtifactStore
from unlearning.data.graphs.collection import GraphCollection
from unlearning.data.graphs.node_graph import NodeGraph
from unlearning.errors import UnknownSampleError
from unlearning.methods.protocol import ForgetRequest

if TYPE_CHECKING:
    from service.jobs.state import BlobCache


def forget_graph(
    artifacts: ArtifactStore, cache: BlobCache, manifest: Mapping[str, Any], request: ForgetRequest | None
) -> tuple[dict[str, Any], int]:
    """Write the model's graph after ``request``; returns (manifest, new training-set size)."""
    if request is None:
        raise RuntimeError("a graph update needs the batch's ForgetRequest to rewrite the remaining graph")
    after = cache.dataset(manifest).after_request(request)
    written = write_graph(artifacts, after)
    return written, int(written["num_train"])


def departed(cache: BlobCache, before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, str]:
    """Subjects (sample id -> owner id) of graph ``before`` that graph ``after`` no longer holds."""
    old_ids, old_owners = subjects_of(cache.dataset(before))
    kept = set(subjects_of(cache.dataset(after))[0])
    return {sid: owner for sid, owner in zip(old_ids, old_owners) if sid not in kept}


def after_present(graph: AnyGraph, request: ForgetRequest) -> AnyGraph:
    """``graph.after_request`` restricted to the items still in ``graph`` (absent items are skipped)."""
    if isinstance(graph, NodeGraph):
        present = _present_in_node_graph(graph, request)
    else:
        present = _present_in_collection(graph, request)
    return graph.after_request(present) if present.kinds() else graph


def _live(graph: NodeGraph, node_id: str) -> int | None:
    try:
        i = int(graph.index_of([node_id])[0])
    except UnknownSampleError:
        return None
    return None if graph.deleted[i] else i


def _present_in_node_graph(graph: NodeGraph, request: ForgetRequest) -> ForgetRequest:
    live_owners = {graph.owner_ids[i] for i in np.flatnonzero(~graph.deleted).tolist()}
    edges = []
    for u, v in request.edges:
        try:
            graph.edge_positions([(u, v)])
            edges.append((u, v))
        except UnknownSampleError:
            continue
    features = [
        n
        for n in request.node_feature_ids
        if (i := _live(graph, n)) is not None and not graph.features_deleted[i]
    ]
    return ForgetRequest(
        sample_ids=tuple(n for n in request.sample_ids if _live(graph, n) is not None),
        owner_ids=tuple(o for o in request.owner_ids if o in live_owners),
        edges=tuple(edges),
        node_feature_ids=tuple(features),
    )


def _present_in_collection(collection: GraphCollection, request: ForgetRequest) -> ForgetRequest:
    ids = set(collection.graph_ids)
    owners = {g.owner_id for g in collection.graphs}
    nodes = []
    for gid, nid in request.graph_nodes:
        if gid not in ids:
            continue
        graph = collection.graphs[int(collection.index_of([gid])[0])]
        try:
            if not graph.deleted[graph.node_index(nid)]:
                nodes.append((gid, nid))
        except UnknownSampleError:
            continue
    return ForgetRequest(
        sample_ids=tuple(s for s in request.sample_ids if s in ids),
        owner_ids=tuple(o for o in request.owner_ids if o in owners),
        graph_ids=tuple(g for g in request.graph_ids if g in ids),
        graph_nodes=tuple(nodes),
    )


def graph_after_erasure(
    cache: BlobCache,
    old: Mapping[str, Any],
    request: ForgetRequest | None,
    *,
    old_training: Mapping[str, Any] | None,
    new_training: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The source dataset's graph manifest without ``request``'s items (``old`` if unchanged)."""
    if old_training is not None and new_training is not None and old["buckets"] == old_training["buckets"]:
        arrays = dict(new_training)
    elif request is not None and request.kinds():
        arrays = write_graph(cache.store, after_present(cache.dataset(old), request))
    else:
        return dict(old)
    return dict(old) if arrays["buckets"] == old["buckets"] else arrays
