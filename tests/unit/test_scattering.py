"""Geometric scattering transform: the code's operator and tree layout, against a direct transcription of
the authors' loop (digest 000 section 2.3), dimensions, invariances and deletion semantics."""

from __future__ import annotations

import numpy as np
import pytest

from unlearning.data.graphs.collection import Graph
from unlearning.errors import InvalidConfigError
from unlearning.models.scattering import (
    ScatteringConfig,
    embed_graph,
    lazy_walk,
    node_signal,
    scattering_dim,
    scattering_transform,
)


def reference_gst(X: np.ndarray, P: np.ndarray, J: int, Q: int, L: int, nonlin: bool = True) -> np.ndarray:
    """The digest's numpy transcription of ``gst.py::GeometricScattering`` (parent by parent)."""
    g, f = X.shape
    T = sum(J**layer for layer in range(L))
    res = np.empty((g, T, f, Q))
    for q in range(1, Q + 1):
        res[:, 0, :, q - 1] = X**q
    nxt, start = 1, 0
    for layer in range(1, L):
        for off in range(J ** (layer - 1)):
            last = res[:, start + off, :, 0].copy()
            for j in range(J):
                after = last
                for _ in range(1 if j == 0 else 2 ** (j - 1)):
                    after = P @ after
                tmp = last - after
                last = after
                for q in range(1, Q + 1):
                    res[:, nxt, :, q - 1] = np.abs(tmp**q) if nonlin else tmp**q
                nxt += 1
        start += J ** (layer - 1)
    return res.reshape(g, -1).mean(0)


def random_graph(seed: int, g: int = 12) -> Graph:
    rng = np.random.default_rng(seed)
    edges = np.argwhere(np.triu(rng.random((g, g)) < 0.3, 1))
    return Graph(
        str(seed),
        tuple(str(i) for i in range(g)),
        edges,
        seed % 2,
        rng.integers(0, 3, g),
        node_features=rng.normal(size=(g, 2)),
    )


@pytest.mark.parametrize("nonlinear", [True, False])
@pytest.mark.parametrize(("J", "L", "Q"), [(4, 3, 3), (3, 2, 2), (2, 4, 1)])
def test_matches_the_authors_loop(J: int, L: int, Q: int, nonlinear: bool) -> None:
    for seed in range(3):
        graph = random_graph(seed)
        X = np.random.default_rng(seed).normal(size=(graph.num_nodes, 3))
        P = lazy_walk(graph.num_nodes, graph.edges)
        got = scattering_transform(X, P, ScatteringConfig(J, L, Q, nonlinear))
        np.testing.assert_allclose(
            got, reference_gst(X, np.asarray(P), J, Q, L, nonlinear), rtol=1e-12, atol=1e-14
        )


def test_operator_is_the_codes_half_identity_plus_neighbour_mean() -> None:
    # Star: centre 0 with 3 leaves, plus an isolated node 4.
    P = lazy_walk(5, np.array([[0, 1], [0, 2], [0, 3]]))
    x = np.array([4.0, 1.0, 2.0, 3.0, 8.0])
    expected = 0.5 * (x + np.array([2.0, 4.0, 4.0, 4.0, 0.0]))  # self + mean of neighbours; isolated: x/2
    np.testing.assert_allclose(P @ x, expected)
    np.testing.assert_allclose(np.asarray(P)[:4].sum(1), 1.0)  # D^-1 A (not A D^-1): rows of P sum to 1


def test_dimension_and_layout() -> None:
    cfg = ScatteringConfig(4, 3, 3)
    assert cfg.tree_nodes == 21 and scattering_dim(cfg, 1) == 63 and scattering_dim(cfg, 136) == 8568
    graph = random_graph(1)
    x = np.random.default_rng(0).normal(size=(graph.num_nodes, 2))
    z = scattering_transform(x, lazy_walk(graph.num_nodes, graph.edges), cfg).reshape(21, 2, 3)
    np.testing.assert_allclose(z[0, :, 1], (x**2).mean(0))  # root entries: mean of x^q, channel-major
    assert (z[1:] >= 0).all()  # absolute values below the root


def test_sparse_operator_for_large_graphs_agrees_with_dense() -> None:
    rng = np.random.default_rng(2)
    g = 300
    edges = np.argwhere(np.triu(rng.random((g, g)) < 0.02, 1))
    x = rng.normal(size=(g, 1))
    sparse = lazy_walk(g, edges)
    assert not isinstance(sparse, np.ndarray)
    cfg = ScatteringConfig(3, 3, 2)
    np.testing.assert_allclose(
        scattering_transform(x, sparse, cfg), reference_gst(x, sparse.toarray(), 3, 2, 3), rtol=1e-11
    )


def test_zero_channels_are_skipped_exactly() -> None:
    graph = random_graph(3)
    signal = node_signal(graph, "degree", max_degree=20)
    cfg = ScatteringConfig(4, 3, 3)
    P = lazy_walk(graph.num_nodes, graph.edges)
    np.testing.assert_allclose(
        scattering_transform(signal, P, cfg),
        reference_gst(signal, np.asarray(P), 4, 3, 3),
        rtol=1e-12,
        atol=1e-15,
    )


def test_permutation_invariance() -> None:
    graph = random_graph(4)
    perm = np.random.default_rng(0).permutation(graph.num_nodes)
    inv = np.argsort(perm)
    permuted = Graph("p", graph.node_ids, inv[graph.edges], graph.label, graph.node_tags[perm])
    cfg = ScatteringConfig()
    np.testing.assert_allclose(
        embed_graph(graph, cfg, "tag", num_tags=3),
        embed_graph(permuted, cfg, "tag", num_tags=3),
        rtol=1e-10,
        atol=1e-13,
    )


def test_node_deletion_keeps_the_denominator_and_updates_neighbour_degrees() -> None:
    graph = Graph("s", tuple("abcd"), np.array([[0, 1], [0, 2], [0, 3]]), 0, np.zeros(4, dtype=np.int64))
    after = graph.without_nodes([1])
    signal = node_signal(after, "degree", max_degree=3)
    assert signal[1].sum() == 0 and signal[0].argmax() == 2  # the centre's degree drops to 2
    cfg = ScatteringConfig(2, 2, 1)
    z = embed_graph(after, cfg, "degree", max_degree=3)
    # Root, q = 1: the mean of the one-hot degrees over all 4 nodes (the tombstone counts as zero).
    np.testing.assert_allclose(z.reshape(cfg.tree_nodes, 4, 1)[0, :, 0], [0.0, 2 / 4, 1 / 4, 0.0])


def test_bad_inputs() -> None:
    with pytest.raises(InvalidConfigError):
        ScatteringConfig(J=0)
    with pytest.raises(InvalidConfigError, match="no node features"):
        node_signal(Graph("x", ("a",), np.zeros((0, 2)), 0, np.zeros(1)), "features")
    with pytest.raises(InvalidConfigError, match="signal"):
        node_signal(random_graph(0), "pagerank")  # type: ignore[arg-type]
