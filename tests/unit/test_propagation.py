"""SGC/GPR propagation: the row-normalised operator, Lemma 4.4's row norms, and local recomputation that
equals the full recomputation exactly (bit for bit) for node, edge and feature deletions."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from unlearning.data.graphs.node_graph import NodeGraph
from unlearning.errors import InvalidConfigError
from unlearning.models.propagation import (
    FeatureScaler,
    PropagationSpec,
    full_features,
    k_hop,
    local_features,
    propagation_rows,
)


def random_graph(seed: int, n: int = 150, f: int = 12, p_in: float = 0.05, p_out: float = 0.01) -> NodeGraph:
    """A two-block SBM with sparse non-negative features (bag-of-words-like) and a 60/20/20 split."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    block = labels[:, None] == labels[None, :]
    upper = np.triu(rng.random((n, n)) < np.where(block, p_in, p_out), 1)
    edges = np.argwhere(upper)
    feats = sp.random(n, f, density=0.3, random_state=seed, format="csr") * 3.0
    split = rng.choice([1, 2, 3], size=n, p=[0.6, 0.2, 0.2])
    return NodeGraph(tuple(f"n{i}" for i in range(n)), feats, labels, 3, edges, split, name=f"sbm{seed}")


SPECS = [
    PropagationSpec("sgc", 2),
    PropagationSpec("gpr", 2),
    PropagationSpec("sgc", 3),
    PropagationSpec("sgc", 0),
]


def test_propagation_matrix_is_row_stochastic_with_self_loops() -> None:
    g = random_graph(0)
    P = propagation_rows(g.adjacency, np.arange(g.num_nodes))
    np.testing.assert_allclose(np.asarray(P.sum(1)).ravel(), 1.0, rtol=0, atol=1e-14)
    assert (P.diagonal() > 0).all()
    deg = np.asarray(g.adjacency.sum(1)).ravel()
    np.testing.assert_array_equal(P.diagonal(), 1.0 / (deg + 1.0))
    # A sub-block of rows equals the same rows of the full matrix exactly.
    rows = np.array([3, 17, 99])
    assert (propagation_rows(g.adjacency, rows) != P[rows]).nnz == 0


@pytest.mark.parametrize("kind", ["row_l2", "standardize"])
def test_lemma_4_4_row_norms_stay_at_most_one(kind: str) -> None:
    g = random_graph(1)
    scaler = FeatureScaler.fit(g, kind)
    x0 = scaler.transform(g.features, g.live_mask())
    assert np.linalg.norm(x0, axis=1).max() <= 1.0 + 1e-12
    for spec in (PropagationSpec("sgc", 4), PropagationSpec("gpr", 3)):
        z = full_features(g, scaler, spec)
        assert np.linalg.norm(z, axis=1).max() <= 1.0 + 1e-12
    gpr = full_features(g, scaler, PropagationSpec("gpr", 2))
    sgc = [full_features(g, scaler, PropagationSpec("sgc", k)) for k in range(3)]
    np.testing.assert_allclose(gpr, np.concatenate(sgc, axis=1) / 3.0, rtol=1e-13, atol=1e-15)


def _deletions(g: NodeGraph, rng: np.random.Generator) -> list[dict[str, list]]:
    nodes = [g.node_ids[i] for i in rng.choice(g.num_nodes, 3, replace=False)]
    u, v = g.edges[rng.integers(len(g.edges))]
    return [
        {"nodes": [nodes[0]]},
        {"edges": [(g.node_ids[u], g.node_ids[v])]},
        {"node_features": [nodes[1]]},
        {"nodes": [nodes[2]], "edges": [(g.node_ids[u], g.node_ids[v])], "node_features": [nodes[1]]},
    ]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.kind}{s.hops}")
@pytest.mark.parametrize("kind", ["row_l2", "standardize", "none"])
def test_local_recomputation_equals_full_recomputation_exactly(spec: PropagationSpec, kind: str) -> None:
    rng = np.random.default_rng(5)
    g = random_graph(2)
    scaler = FeatureScaler.fit(g, kind)
    before = full_features(g, scaler, spec)
    for request in _deletions(g, rng):
        after_graph = g.without(
            request.get("nodes", []), request.get("edges", []), request.get("node_features", [])
        )
        after = full_features(after_graph, scaler, spec)
        seeds = np.concatenate(
            [
                g.index_of(request.get("nodes", [])),
                g.index_of(request.get("node_features", [])),
                g.index_of([x for e in request.get("edges", []) for x in e]),
            ]
        )
        region = k_hop(g.adjacency, seeds, spec.hops)
        local = local_features(after_graph, scaler, spec, region)
        assert np.array_equal(local, after[region])  # bit for bit
        changed = np.flatnonzero((before != after).any(1))
        assert set(changed.tolist()) <= set(region.tolist())  # only the K-hop region can change


def test_an_edge_changes_only_rows_within_k_minus_1_hops_of_its_endpoints() -> None:
    g = random_graph(3)
    scaler = FeatureScaler.fit(g, "row_l2")
    spec = PropagationSpec("sgc", 2)
    u, v = g.edges[10]
    after_graph = g.without(edges=[(g.node_ids[u], g.node_ids[v])])
    changed = np.flatnonzero(
        (full_features(g, scaler, spec) != full_features(after_graph, scaler, spec)).any(1)
    )
    assert set(changed.tolist()) <= set(k_hop(after_graph.adjacency, np.array([u, v]), 1).tolist())


def test_a_deleted_node_has_a_zero_row_and_no_influence_on_others() -> None:
    g = random_graph(4)
    scaler = FeatureScaler.fit(g, "row_l2")
    spec = PropagationSpec("sgc", 2)
    m = int(np.argmax(np.asarray(g.adjacency.sum(1)).ravel()))
    after_graph = g.without(nodes=[g.node_ids[m]])
    z = full_features(after_graph, scaler, spec)
    assert not z[m].any()
    # Nothing reaches the others from a non-live row, whatever its raw values (the transform zeroes it).
    live = after_graph.live_mask()
    assert not scaler.transform(g.features, live)[m].any() and g.features[m].nnz > 0
    before = full_features(g, scaler, spec)
    far = np.setdiff1d(np.arange(g.num_nodes), k_hop(g.adjacency, np.array([m]), 2))
    assert np.array_equal(z[far], before[far])


def test_k_hop_on_a_path() -> None:
    g = NodeGraph(
        tuple("abcdef"),
        sp.csr_matrix((6, 1)),
        np.zeros(6),
        2,
        np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]]),
        np.ones(6),
    )
    assert k_hop(g.adjacency, np.array([2]), 0).tolist() == [2]
    assert k_hop(g.adjacency, np.array([2]), 2).tolist() == [0, 1, 2, 3, 4]
    assert k_hop(g.adjacency, np.array([0, 5]), 1).tolist() == [0, 1, 4, 5]


def test_bad_specs_are_rejected() -> None:
    with pytest.raises(InvalidConfigError):
        PropagationSpec("gcn", 2)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError):
        PropagationSpec("sgc", -1)
    with pytest.raises(InvalidConfigError):
        FeatureScaler.fit(random_graph(0), "minmax")
    with pytest.raises(InvalidConfigError, match="sorted"):
        local_features(random_graph(0), FeatureScaler("none"), PropagationSpec(), np.array([3, 1]))
