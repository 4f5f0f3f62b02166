"""Graph deletion requests (edges, node features, graphs, nodes): checked, then carried to ``forget``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from service.errors import ApiError, Conflict, Unprocessable, from_unlearning_error
from service.graphs.storage import AnyGraph, is_graph
from unlearning.data.graphs.collection import GraphCollection
from unlearning.data.graphs.node_graph import NodeGraph
from unlearning.data.graphs.requests import edge_key, graph_node_key
from unlearning.errors import UnknownSampleError, UnlearningError
from unlearning.methods.protocol import ForgetRequest
from unlearning.methods.registry import get_method

if TYPE_CHECKING:
    from service.db.tables import Model
    from service.jobs.state import BlobCache
    from service.subjects import SubjectHasher
    from service.uow import UnitOfWork

GRAPH_FIELDS = ("edges", "node_feature_ids", "graph_ids", "graph_nodes")


class DeletionBody(Protocol):
    owner_ids: list[str]
    sample_ids: list[str]
    edges: list[list[str]]  # [a, b] pairs, as JSON sends them
    node_feature_ids: list[str]
    graph_ids: list[str]
    graph_nodes: list[list[str]]  # [a, b] pairs, as JSON sends them


def _pairs(pairs: Sequence[Sequence[str]], *, undirected: bool) -> list[list[str]]:
    out: dict[tuple[str, str], None] = {}
    for a, b in pairs:
        out[tuple(sorted((a, b))) if undirected else (a, b)] = None  # type: ignore[index]
    return [list(p) for p in out]


def graph_subjects(body: DeletionBody) -> dict[str, Any]:
    """The request's graph items as stored in ``deletion_requests.subjects`` (deduplicated, edges sorted)."""
    out: dict[str, Any] = {}
    if body.edges:
        out["edges"] = _pairs(body.edges, undirected=True)
    if body.node_feature_ids:
        out["node_feature_ids"] = list(dict.fromkeys(body.node_feature_ids))
    if body.graph_ids:
        out["graph_ids"] = list(dict.fromkeys(body.graph_ids))
    if body.graph_nodes:
        out["graph_nodes"] = _pairs(body.graph_nodes, undirected=False)
    return out


def graph_hashes(hasher: SubjectHasher, body: DeletionBody) -> dict[str, str]:
    """Keyed hashes of the graph items a request names (``request_subjects`` and the audit log)."""
    subjects = graph_subjects(body)
    out = {hasher.sample(edge_key(u, v)): "edge" for u, v in subjects.get("edges", [])}
    out |= {hasher.sample(n): "features" for n in subjects.get("node_feature_ids", [])}
    out |= {hasher.sample(g): "graph" for g in subjects.get("graph_ids", [])}
    out |= {hasher.sample(graph_node_key(g, n)): "gnode" for g, n in subjects.get("graph_nodes", [])}
    return out


def _as_request(body: DeletionBody) -> ForgetRequest:
    return ForgetRequest(
        sample_ids=tuple(body.sample_ids),
        owner_ids=tuple(body.owner_ids),
        edges=tuple((u, v) for u, v in body.edges),
        node_feature_ids=tuple(body.node_feature_ids),
        graph_ids=tuple(body.graph_ids),
        graph_nodes=tuple((g, n) for g, n in body.graph_nodes),
    )


def has_graph_items(body: DeletionBody) -> bool:
    return any(getattr(body, name) for name in GRAPH_FIELDS)


def check_submissions(
    uow: UnitOfWork, cache: BlobCache, hasher: SubjectHasher, model_id: int, bodies: Sequence[DeletionBody]
) -> list[ApiError | None]:
    """Per request: None, or its error (an unforgettable kind, or graph items not in the graph)."""
    if not any(has_graph_items(b) for b in bodies):
        return [None] * len(bodies)  # owners and samples only: every method forgets those (no extra query)
    model = uow.models.get(model_id)
    if model is None:
        return [None] * len(bodies)  # submit_many answers 404
    method = get_method(model.method)
    graph: AnyGraph | None = None
    out: list[ApiError | None] = []
    for body in bodies:
        try:
            _as_request(body).require_kinds(model.method, method.request_kinds)
        except UnlearningError as exc:
            out.append(Unprocessable(f"model {model_id}: {exc}", code="unsupported_request"))
            continue
        if not has_graph_items(body) or not is_graph(model.training):
            out.append(None)
            continue
        if graph is None:
            graph = cache.dataset(model.training)
        out.append(_check_items(uow, hasher, model, graph, body))
    return out


def _check_items(
    uow: UnitOfWork, hasher: SubjectHasher, model: Model, graph: AnyGraph, body: DeletionBody
) -> ApiError | None:
    def erased(keys: dict[str, str]) -> dict[str, int | None]:
        """key -> the request that erased it, for the keys with a tombstone."""
        hashes = {hasher.sample(k): k for k in keys}
        found = uow.models.erased_among(model.id, list(hashes))
        return {hashes[h]: request for h, request in found.items()}

    try:
        if isinstance(graph, NodeGraph):
            return _check_node_graph(graph, body, erased)
        return _check_collection(graph, body, erased)
    except UnlearningError as exc:
        return from_unlearning_error(exc)


Erased = Callable[[dict[str, str]], dict[str, "int | None"]]


def _missing(missing: dict[str, str], erased: Erased, where: str) -> ApiError | None:
    """``missing``: key -> how to name it. 409 when every missing item was forgotten earlier, else 422."""
    if not missing:
        return None
    gone = erased(missing)
    unknown = [name for k, name in missing.items() if k not in gone]
    if unknown:
        more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
        return Unprocessable(
            f"{unknown[0]}{more} not in {where}: check the ids (node ids, graph ids and owner ids are the "
            "values of the uploaded dataset)",
            code="unknown_subject",
        )
    key = next(iter(missing))
    by = f" by request {gone[key]}" if gone[key] else ""
    return Conflict(
        f"{missing[key]} was already forgotten{by}: remove the forgotten items and submit again",
        code="already_forgotten",
    )


def _node_known(graph: NodeGraph, node_id: str) -> bool:
    try:
        graph.index_of([node_id])
        return True
    except UnknownSampleError:
        return False


def _check_node_graph(graph: NodeGraph, body: DeletionBody, erased: Erased) -> ApiError | None:
    subjects = graph_subjects(body)
    edges = [tuple(e) for e in subjects.get("edges", [])]
    features = subjects.get("node_feature_ids", [])
    where = f"graph {graph.name!r}"
    nodes = dict.fromkeys([*(n for e in edges for n in e), *features])
    error = _missing({n: f"node {n!r}" for n in nodes if not _node_known(graph, n)}, erased, where)
    if error is not None:
        return error
    absent: dict[str, str] = {}
    for u, v in edges:
        if u == v:
            return Unprocessable(
                f"edge [{u!r}, {v!r}] is a self-loop: an edge joins two nodes", code="unknown_subject"
            )
        try:
            graph.edge_positions([(u, v)])
        except UnknownSampleError:
            absent[edge_key(u, v)] = f"edge [{u!r}, {v!r}]"
    error = _missing(absent, erased, where)
    if error is not None:
        return error
    graph.validate_deletion((), edges, features)  # features already deleted: 409
    return None


def _check_collection(collection: GraphCollection, body: DeletionBody, erased: Erased) -> ApiError | None:
    subjects = graph_subjects(body)
    graph_ids = subjects.get("graph_ids", [])
    pairs = [tuple(p) for p in subjects.get("graph_nodes", [])]
    present = set(collection.graph_ids)
    named = dict.fromkeys([*graph_ids, *(g for g, _ in pairs)])
    missing = {g: f"graph id {g!r}" for g in named if g not in present}
    if missing:
        gone = erased(missing)
        unknown = [g for g in missing if g not in gone]
        if unknown:  # not the library's message: it names the collection's first and last graph ids
            return Unprocessable(
                f"graph id {unknown[0]!r} is not in collection {collection.name!r} (out of range: it holds "
                f"{len(collection.graphs)} graphs)",
                code="unknown_subject",
            )
        return _missing(missing, erased, f"collection {collection.name!r}")
    absent: dict[str, str] = {}
    for g, n in pairs:
        graph = collection.graphs[int(collection.index_of([g])[0])]
        try:
            graph.node_index(n)
        except UnknownSampleError:
            absent[graph_node_key(g, n)] = f"node {n!r} of graph {g!r}"
    error = _missing(absent, erased, f"collection {collection.name!r}")
    if error is not None:
        return error
    collection.validate_deletion(graph_ids, pairs)
    return None


def submit_checked(
    checks: list[ApiError | None], bodies: Sequence[Any], submit: Callable[[list[Any]], list[Any]]
) -> list[Any]:
    """``submit`` on the bodies that passed ``checks``; the results merged back in request order."""
    passing = [b for b, error in zip(bodies, checks) if error is None]
    results = iter(submit(passing) if passing else [])
    return [error if error is not None else next(results) for error in checks]


@dataclass
class GraphItems:
    """The graph items one request contributes to a batch (each item once per batch)."""

    edges: list[tuple[str, str]] = field(default_factory=list)
    node_features: list[str] = field(default_factory=list)
    graph_ids: list[str] = field(default_factory=list)
    graph_nodes: list[tuple[str, str]] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)  # added to the plan's ``samples``, as the method names them


class PlanLike(Protocol):
    request: Any
    samples: dict[str, str]
    graph: GraphItems


def plan_graph_items(uow: UnitOfWork, model_id: int, plans: Sequence[PlanLike], covered: set[str]) -> None:
    """Add each request's graph items to its plan, skipping those the batch forgets (``covered``: updated)."""
    named = [(p, p.request.subjects or {}) for p in plans]
    if not any(s.get(f) for _, s in named for f in GRAPH_FIELDS):
        return
    ids = (x for _, s in named for k in ("node_feature_ids", "graph_ids") for x in s.get(k, []))
    owner_of = uow.models.owners_of(model_id, list(dict.fromkeys(ids)))
    seen: set[str] = set()
    for plan, subjects in named:
        items = plan.graph
        for u, v in subjects.get("edges", []):
            key = edge_key(u, v)
            if key not in seen:
                seen.add(key)
                items.edges.append((u, v))
                _attribute(plan, key, "")
        for n in subjects.get("node_feature_ids", []):  # a node deleted whole loses its features
            if n in owner_of and n not in covered and n not in seen:
                seen.add(n)
                items.node_features.append(n)
                _attribute(plan, n, owner_of[n])
        for g in subjects.get("graph_ids", []):
            if g in owner_of and g not in covered:
                covered.add(g)
                items.graph_ids.append(g)
                _attribute(plan, g, owner_of[g])
        for g, n in subjects.get("graph_nodes", []):
            key = graph_node_key(g, n)
            if g not in covered and key not in seen:
                seen.add(key)
                items.graph_nodes.append((g, n))
                _attribute(plan, key, "")


def _attribute(plan: PlanLike, key: str, owner: str) -> None:
    plan.samples[key] = owner
    plan.graph.keys.add(key)


def with_graph_items(request: ForgetRequest, items: Sequence[GraphItems]) -> ForgetRequest:
    """``request`` plus the batch's graph items; keys entered only as graph items leave ``sample_ids``."""
    if not any(i.keys for i in items):
        return request
    keys = {k for i in items for k in i.keys}
    return ForgetRequest(
        sample_ids=tuple(s for s in request.sample_ids if s not in keys),
        owner_ids=request.owner_ids,
        edges=tuple(e for i in items for e in i.edges),
        node_feature_ids=tuple(n for i in items for n in i.node_features),
        graph_ids=tuple(g for i in items for g in i.graph_ids),
        graph_nodes=tuple(p for i in items for p in i.graph_nodes),
    )
