"""Geometric graph scattering transform (GST) embeddings for graph classification (digest 000 section 2.3).

Pan, Chien, Milenkovic, "Unlearning Graph Classifiers with Limited Data Resources" (WWW 2023) embed every
graph with a fixed, non-trainable scattering transform and train a linear classifier on top, so deleting
a node of one graph changes that graph's embedding only. This module follows the authors' code
(``gst.py::GeometricScattering``), which produced the paper's numbers:

* Operator: the lazy random walk ``P x = 1/2 (x + D^{-1} A x)`` (self value plus neighbour mean; an
  isolated node has ``D^{-1} = 0`` so ``P x_v = x_v / 2``). The paper writes ``1/2 (I + A D^{-1})``, the
  transpose; digest 000 section 8.1 flags it and the issue says to follow the code's operator, which is
  what every reported number used.
* Wavelets (diffusion / geometric scattering, paper Appendix E): ``Psi_0 = I - P`` and
  ``Psi_j = P^{2^{j-1}} - P^{2^j}`` for j = 1..J-1, computed incrementally so a parent costs
  ``2^{J-1}`` applications of P in total.
* Tree: root (layer 0) = the node signal itself, no absolute value; each tree node of layer l-1
  (l = 1..L-1) is filtered by every wavelet and the children store ``|Psi_j s|^q`` for q = 1..Q
  (``tmp**q`` without the absolute value for the linear GST). Children are fed the parent's q = 1
  entry, i.e. ``|Psi s|`` (signed ``Psi s`` for the linear GST).
* Aggregation: the mean over the graph's nodes, with the ORIGINAL node count as denominator: a deleted
  node stays as an isolated zero node (digest 000 section 2.5).
* Layout: the per-node tensor ``[g, T, f, Q]`` flattened tree-node-major, then channel, then moment,
  then averaged; the embedding has ``d = (sum_{l<L} J^l) * f * Q`` entries (J=4, L=3, Q=3, f=1: 63).

Node signals (:func:`node_signal`): a one-hot of the current node degree (IMDB-BINARY has no node
features; digest 000 uses PyG's ``OneHotDegree``), a one-hot of the node tag (PROTEINS), or the
continuous node attributes. The degree signal is computed from the graph as it is now: after a node
deletion its neighbours' degrees drop and their signal changes too, so the deleted node leaves no trace
in the embedding (the authors' code keeps the stale degrees, digest 000 section 8.4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp

from unlearning.data.graphs.collection import Graph
from unlearning.errors import InvalidConfigError
from unlearning.validation import integer_at_least

__all__ = [
    "ScatteringConfig",
    "SignalKind",
    "embed_graph",
    "lazy_walk",
    "node_signal",
    "scattering_dim",
    "scattering_transform",
]

SignalKind = Literal["degree", "tag", "features"]
_DENSE_LIMIT = 256  # graphs up to this size use a dense operator (faster than sparse for tiny graphs)


@dataclass(frozen=True)
class ScatteringConfig:
    """J wavelet scales, L tree layers (root = layer 0), Q moments, absolute-value nonlinearity or not."""

    J: int = 4
    L: int = 3
    Q: int = 3
    nonlinear: bool = True

    def __post_init__(self) -> None:
        for name in ("J", "L", "Q"):
            value = getattr(self, name)
            integer_at_least(f"scattering {name}", value, 1)

    @property
    def tree_nodes(self) -> int:
        """T = sum_{l=0}^{L-1} J^l."""
        return sum(self.J**layer for layer in range(self.L))


def scattering_dim(config: ScatteringConfig, channels: int) -> int:
    """Embedding length d = T * f * Q."""
    return config.tree_nodes * channels * config.Q


def lazy_walk(num_nodes: int, edges: np.ndarray) -> np.ndarray | sp.csr_matrix:
    """``P = 1/2 (I + D^{-1} A)`` (the code's operator); dense for small graphs, CSR otherwise."""
    rows = np.concatenate([edges[:, 0], edges[:, 1]]) if len(edges) else np.zeros(0, np.int64)
    cols = np.concatenate([edges[:, 1], edges[:, 0]]) if len(edges) else np.zeros(0, np.int64)
    deg = np.bincount(rows, minlength=num_nodes).astype(np.float64)
    inv = np.divide(1.0, deg, out=np.zeros_like(deg), where=deg > 0)
    if num_nodes <= _DENSE_LIMIT:
        walk = np.zeros((num_nodes, num_nodes))
        walk[rows, cols] = 0.5 * inv[rows]  # edges are unique, so no entry is assigned twice
        walk[np.arange(num_nodes), np.arange(num_nodes)] = 0.5
        return walk
    sparse = sp.csr_matrix((0.5 * inv[rows], (rows, cols)), shape=(num_nodes, num_nodes))
    return sp.csr_matrix(sparse + sp.identity(num_nodes, format="csr") * 0.5)


def scattering_transform(
    signal: np.ndarray, walk: np.ndarray | sp.csr_matrix, config: ScatteringConfig
) -> np.ndarray:
    """The GST embedding of one graph: ``signal`` (g, f) -> (T * f * Q,), mean over all g nodes.

    All tree nodes of a layer are filtered together (their signals side by side as channels), which is
    the code's parent-by-parent loop with the children in the same order: child ``p * J + j`` of the
    layer is wavelet j applied to parent p.
    """
    x = np.asarray(signal, dtype=np.float64)
    if x.ndim != 2:
        raise InvalidConfigError(f"the node signal must be a (nodes, channels) array, got shape {x.shape}")
    g, f = x.shape
    active = np.flatnonzero(np.any(x != 0.0, axis=0))
    if len(active) < f:
        # An all-zero channel has all-zero coefficients (every operation maps 0 to 0): a one-hot degree
        # signal of a small graph uses a handful of its channels, so skip the rest (exactly).
        out = np.zeros((config.tree_nodes, f, config.Q))
        if len(active):
            part = scattering_transform(x[:, active], walk, config).reshape(config.tree_nodes, len(active), config.Q)
            out[:, active, :] = part
        return out.reshape(-1)
    J, Q = config.J, config.Q
    res = np.empty((g, config.tree_nodes, f, Q))
    for q in range(1, Q + 1):
        res[:, 0, :, q - 1] = x**q  # the root: no absolute value
    parents_signal = x[:, None, :]
    nxt = 1
    for _layer in range(1, config.L):
        parents = parents_signal.shape[1]
        last = parents_signal.reshape(g, parents * f)
        children = np.empty((g, parents, J, f))
        for j in range(J):
            after = last
            for _ in range(1 if j == 0 else 2 ** (j - 1)):
                after = walk @ after
            children[:, :, j, :] = (last - after).reshape(g, parents, f)  # Psi_j of every parent
            last = after
        block = children.reshape(g, parents * J, f)
        for q in range(1, Q + 1):
            power = block**q
            res[:, nxt:nxt + parents * J, :, q - 1] = np.abs(power) if config.nonlinear else power
        parents_signal = np.abs(block) if config.nonlinear else block  # children see the q = 1 entry
        nxt += parents * J
    return res.reshape(g, -1).mean(axis=0)


def node_signal(
    graph: Graph, kind: SignalKind, *, max_degree: int = 0, num_tags: int = 1
) -> np.ndarray:
    """The (g, f) input signal of ``graph``; deleted nodes get zero rows.

    ``degree``: one-hot of the current degree, width ``max_degree + 1`` (larger degrees fall into the
    last bucket). ``tag``: one-hot of the node tag, width ``num_tags``. ``features``: the node attributes.
    """
    g = graph.num_nodes
    live = ~graph.deleted
    if kind == "degree":
        width = max_degree + 1
        out = np.zeros((g, width))
        deg = np.minimum(graph.degrees(), max_degree)
        out[np.flatnonzero(live), deg[live]] = 1.0
        return out
    if kind == "tag":
        out = np.zeros((g, num_tags))
        tags = graph.node_tags
        out[np.flatnonzero(live), tags[live]] = 1.0
        return out
    if kind == "features":
        if graph.node_features is None:
            raise InvalidConfigError(f"graph {graph.graph_id!r} has no node features; use the degree or tag signal")
        out = graph.node_features.copy()
        out[~live] = 0.0
        return out
    raise InvalidConfigError(f"node signal must be 'degree', 'tag' or 'features', got {kind!r}")


def embed_graph(
    graph: Graph,
    config: ScatteringConfig,
    kind: SignalKind,
    *,
    max_degree: int = 0,
    num_tags: int = 1,
    mean: np.ndarray | None = None,
    scale: np.ndarray | None = None,
) -> np.ndarray:
    """Signal -> optional column standardisation ``(x - mean) / scale`` on live nodes -> GST embedding."""
    x = node_signal(graph, kind, max_degree=max_degree, num_tags=num_tags)
    if mean is not None and scale is not None:
        live = ~graph.deleted
        x[live] = (x[live] - mean) / scale
    return scattering_transform(x, lazy_walk(graph.num_nodes, graph.edges), config)
