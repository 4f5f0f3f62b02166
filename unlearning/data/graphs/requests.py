"""What a graph deletion request names, and the canonical keys deleted graph items are reported by."""

from __future__ import annotations

import json
from typing import Protocol

__all__ = ["GraphRequest", "edge_key", "graph_node_key"]


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
