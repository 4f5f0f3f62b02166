"""The three Newton methods behind the protocol: certified bounds against the true residual along request
sequences, local updates equal to a full recomputation, budget-forced retrains, clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from bench.baselines.gin import GINConfig, train_gin
from unlearning.data import Dataset, make_synthetic
from unlearning.data.graphs.collection import Graph, GraphCollection
from unlearning.data.graphs.node_graph import NodeGraph
from unlearning.errors import (
    AlreadyDeletedError,
    DimensionMismatchError,
    EmptyRequestError,
    InvalidConfigError,
    InvalidDatasetError,
    UnknownSampleError,
    UnsupportedRequestError,
)
from unlearning.methods import graph_classification_newton as gcn
from unlearning.methods import graph_node_newton as gnn
from unlearning.methods.protocol import BudgetPolicy, ForgetRequest, MethodState, PrivacyTarget
from unlearning.methods.registry import get_method
from unlearning.models.scattering import embed_graph, node_signal
from unlearning.newton import DenseDesign, Objective, draw_noise, signed_targets, train_perturbed

CERTIFIED = PrivacyTarget(epsilon=1.0, delta=1e-4, release_mode="certified")
AUDITED = PrivacyTarget(epsilon=1.0, delta=1e-4, release_mode="audited")


def sbm_graph(seed: int = 0, n: int = 160, f: int = 16) -> NodeGraph:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    block = labels[:, None] == labels[None, :]
    edges = np.argwhere(np.triu(rng.random((n, n)) < np.where(block, 0.06, 0.01), 1))
    centers = rng.normal(size=(3, f))
    feats = np.abs(centers[labels] + rng.normal(size=(n, f))) * (rng.random((n, f)) < 0.5)
    split = np.where(np.arange(n) < 100, 1, np.where(np.arange(n) < 130, 2, 3))
    return NodeGraph(
        tuple(f"v{i}" for i in range(n)),
        sp.csr_matrix(feats),
        labels,
        3,
        edges,
        split,
        owner_ids=tuple(f"o{i // 2}" for i in range(n)),
        name="sbm",
    )


def toy_collection(seed: int = 0, count: int = 30, classes: int = 2) -> GraphCollection:
    rng = np.random.default_rng(seed)
    graphs = []
    for i in range(count):
        label = i % classes
        g = int(rng.integers(6, 12))
        p = 0.25 + 0.25 * label
        edges = np.argwhere(np.triu(rng.random((g, g)) < p, 1))
        graphs.append(Graph(str(i), tuple(str(v) for v in range(g)), edges, label, rng.integers(0, 2, g)))
    return GraphCollection(tuple(graphs), classes, num_tags=2, name="toy")


def true_residual(state: MethodState, targets: torch.Tensor) -> float:
    """||grad L_B(W; D')|| with the epoch's noise B rebuilt from its recorded seed."""
    acc = state.accounting
    design = state.artifacts["design"].to(torch.float64)
    objective = Objective(
        DenseDesign(design),
        targets,
        state.artifacts["row_weight"].to(torch.float64),
        float(acc["config"]["lam"]),
    )
    W = state.model.weight_matrix(state.released_weights.to(torch.float64))
    B = draw_noise(design.shape[1], W.shape[1], float(acc["noise_std"]), int(acc["noise_seed"]))
    return float((objective.gradient(W, objective.margins(W)) + B).norm())


def node_targets(state: MethodState, graph: NodeGraph) -> torch.Tensor:
    rows = state.artifacts["row_nodes"].numpy()
    return signed_targets(graph.labels[rows], graph.num_classes)


# ------------------------------------------------------------------------------------- node method


@pytest.fixture(scope="module")
def node_fit() -> tuple[NodeGraph, MethodState]:
    graph = sbm_graph()
    state, cert = gnn.GraphNodeNewton().fit(graph, {"lam": 1e-2, "alpha": 0.5}, CERTIFIED, seed=3)
    assert (
        cert.guarantee == "certified"
        and cert.epsilon == 1.0
        and gnn.GraphNodeNewton().verify_certificate(cert) == []
    )
    assert cert.budget_spent == pytest.approx(cert.inputs["optimizer_residual"]) and cert.budget_spent < 1e-8
    return graph, state


def test_node_method_is_registered_and_serves_the_three_request_kinds() -> None:
    method = get_method("graph_node_newton")
    assert {"sample", "edge", "node_features"} <= method.request_kinds and method.needs_training_data


@pytest.mark.parametrize(
    "config",
    [
        {"normalization": "standardize"},
        {"normalization": "row_l2", "lam": 1e-3},
        {"propagation": "gpr", "bound": "paper"},
    ],
)
def test_node_sequence_keeps_bound_above_residual_and_design_equal_to_full_recomputation(
    config: dict,
) -> None:
    graph = sbm_graph(1)
    method = gnn.GraphNodeNewton()
    state, _ = method.fit(graph, {"alpha": 0.5, **config}, CERTIFIED, seed=1)
    rng = np.random.default_rng(0)
    train = np.flatnonzero(graph.training_mask())
    picks = rng.permutation(train)
    requests = [
        ForgetRequest(sample_ids=(graph.node_ids[picks[0]],)),
        ForgetRequest(edges=((graph.node_ids[graph.edges[5][0]], graph.node_ids[graph.edges[5][1]]),)),
        ForgetRequest(node_feature_ids=(graph.node_ids[picks[1]],)),
        ForgetRequest(
            sample_ids=(graph.node_ids[picks[2]], graph.node_ids[picks[3]]),
            node_feature_ids=(graph.node_ids[picks[4]],),
        ),  # several removals, one step
        ForgetRequest(owner_ids=(graph.owner_ids[picks[5]],)),
        ForgetRequest(sample_ids=(graph.node_ids[140],)),  # a test node: only its neighbours change
    ]
    for request in requests:
        outcome = method.forget(state, request, noise_seed=7, privacy=CERTIFIED, remaining=graph)
        graph, state = graph.after_request(request), outcome.state
        assert method.verify_certificate(outcome.certificate) == []
        assert true_residual(state, node_targets(state, graph)) <= state.accounting["spent"]
        rows = state.artifacts["row_nodes"].numpy()
        live = state.artifacts["row_weight"].numpy() > 0
        full = gnn.node_features(state, graph)[rows]
        design = state.artifacts["design"].numpy()
        assert np.array_equal(design[live], full[live]) and not design[~live].any()
        # A row leaves the design with its node: the design holds exactly the current training nodes.
        assert live.all() and np.array_equal(rows, np.flatnonzero(graph.training_mask()))
    assert state.accounting["epoch"] == state.accounting["retrains"]  # retrains (if any) opened new epochs


def test_node_unlearning_lands_within_the_certified_distance_of_the_same_noise_retrain(node_fit) -> None:
    graph, state = node_fit
    method = gnn.GraphNodeNewton()
    for nid in [graph.node_ids[i] for i in np.flatnonzero(graph.training_mask())[:8]]:
        request = ForgetRequest(sample_ids=(nid,))
        state = method.forget(state, request, 1, CERTIFIED, remaining=graph).state
        graph = graph.after_request(request)
    rows = np.flatnonzero(graph.training_mask())
    feats = torch.from_numpy(gnn.node_features(state, graph)[rows])
    objective = Objective(
        DenseDesign(feats),
        signed_targets(graph.labels[rows], 3),
        torch.ones(len(rows), dtype=torch.float64),
        1e-2,
    )
    B = draw_noise(
        feats.shape[1], 3, float(state.accounting["noise_std"]), int(state.accounting["noise_seed"])
    )
    exact = train_perturbed(objective, B, tol=1e-12).weights
    W = state.model.weight_matrix(state.released_weights.to(torch.float64))
    assert float((W - exact).norm()) <= state.accounting["spent"] / (1e-2 * len(rows))


def test_forget_leaves_its_input_state_untouched(node_fit) -> None:
    graph, state = node_fit
    design = state.artifacts["design"].clone()
    weights = state.clean_weights.clone()
    request = ForgetRequest(sample_ids=(graph.node_ids[0],))
    first = gnn.GraphNodeNewton().forget(state, request, 1, CERTIFIED, remaining=graph)
    second = gnn.GraphNodeNewton().forget(state, request, 1, CERTIFIED, remaining=graph)
    assert torch.equal(state.artifacts["design"], design) and torch.equal(state.clean_weights, weights)
    assert torch.equal(first.state.clean_weights, second.state.clean_weights)
    assert first.forgotten_ids == ("v0",)


def test_bad_node_requests_give_clear_errors(node_fit) -> None:
    graph, state = node_fit
    method = gnn.GraphNodeNewton()

    def forget(request: ForgetRequest, remaining: object = graph) -> None:
        method.forget(state, request, 1, CERTIFIED, remaining=remaining)

    with pytest.raises(UnknownSampleError, match="'nope' is not in graph"):
        forget(ForgetRequest(sample_ids=("nope",)))
    absent = next(j for j in range(1, graph.num_nodes) if not graph.adjacency[0, j])
    with pytest.raises(UnknownSampleError, match=r"edge \('v0', 'v\d+'\) is not in graph"):
        forget(ForgetRequest(edges=(("v0", graph.node_ids[absent]),)))
    with pytest.raises(UnsupportedRequestError, match="graph"):
        forget(ForgetRequest(graph_ids=("0",)))
    with pytest.raises(EmptyRequestError):
        forget(ForgetRequest())
    with pytest.raises(InvalidConfigError, match="remaining"):
        method.forget(state, ForgetRequest(sample_ids=("v1",)), 1, CERTIFIED)
    with pytest.raises(InvalidDatasetError, match="NodeGraph"):
        forget(
            ForgetRequest(sample_ids=("v1",)),
            remaining=make_synthetic(n=20, num_features=3, num_classes=2, seed=0),
        )
    request = ForgetRequest(sample_ids=("v1",))
    later = method.forget(state, request, 1, CERTIFIED, remaining=graph).state
    with pytest.raises(AlreadyDeletedError, match="'v1' of graph 'sbm' was already deleted"):
        method.forget(later, request, 1, CERTIFIED, remaining=graph.after_request(request))
    with pytest.raises(DimensionMismatchError, match="current graph"):
        method.forget(later, ForgetRequest(sample_ids=("v2",)), 1, CERTIFIED, remaining=graph)  # stale graph
    with pytest.raises(InvalidConfigError, match="unknown config"):
        method.fit(graph, {"learning_rate": 1.0}, CERTIFIED, seed=0)
    with pytest.raises(InvalidDatasetError, match="NodeGraph"):
        method.fit(make_synthetic(n=20, num_features=3, num_classes=2, seed=0), {}, CERTIFIED, seed=0)


def test_a_graph_whose_every_node_was_deleted_is_refused_by_name_not_by_a_division_by_zero() -> None:
    graph = sbm_graph(n=20)
    emptied = graph.without(nodes=list(graph.node_ids))
    with pytest.raises(InvalidDatasetError, match="has no training nodes"):
        gnn.GraphNodeNewton().fit(emptied, {"lam": 1e-2, "alpha": 0.5}, CERTIFIED, seed=3)


def test_propagation_depth_is_bounded() -> None:
    with pytest.raises(InvalidConfigError, match="at most 64"):
        gnn.GraphNodeNewton().check_config({"hops": 1_000_000})
    gnn.GraphNodeNewton().check_config({"hops": 64})


def test_budget_exhaustion_retrains_with_fresh_noise_in_a_new_epoch() -> None:
    graph = sbm_graph(2)
    method = gnn.GraphNodeNewton()
    state, _ = method.fit(graph, {"alpha": 1e-3, "lam": 1e-3}, CERTIFIED, seed=5)  # a tiny budget
    seen_retrain = False
    for i in np.flatnonzero(graph.training_mask())[:6]:
        request = ForgetRequest(sample_ids=(graph.node_ids[i],))
        outcome = method.forget(state, request, noise_seed=100 + int(i), privacy=CERTIFIED, remaining=graph)
        cert = outcome.certificate
        graph, state = graph.after_request(request), outcome.state
        assert method.verify_certificate(cert) == [] and cert.budget_spent <= cert.budget_cap
        assert true_residual(state, node_targets(state, graph)) <= state.accounting["spent"]
        if cert.inputs.get("retrained_in_forget"):
            seen_retrain = True
            assert cert.inputs["kind"] == "opening" and cert.noise_seed == 100 + int(i)
            assert (
                state.accounting["deleted_count"] == 0
                and state.accounting["train_size"] == graph.training_mask().sum()
            )
    assert seen_retrain and state.accounting["retrains"] >= 1 and state.accounting["epoch"] >= 1


def test_must_retrain_follows_the_policy_and_the_predicted_budget(node_fit) -> None:
    graph, state = node_fit
    method = gnn.GraphNodeNewton()
    after = method.forget(state, ForgetRequest(sample_ids=("v3",)), 1, CERTIFIED, remaining=graph).state
    assert (
        method.must_retrain(after, BudgetPolicy(max_deletions=1), CERTIFIED, pending_deletions=1) is not None
    )
    assert (
        method.must_retrain(after, BudgetPolicy(max_deletion_fraction=None), CERTIFIED, pending_deletions=1)
        is None
    )
    per_item = after.accounting["max_charge_per_item"]
    many = int(after.accounting["cap"] / per_item) + 1
    reason = method.must_retrain(
        after, BudgetPolicy(max_deletion_fraction=None), CERTIFIED, pending_deletions=many
    )
    assert reason is not None and "budget" in reason
    assert method.budget_cap(after, BudgetPolicy(), CERTIFIED) == pytest.approx(0.5 / 4.385386, rel=1e-6)


def test_audited_release_adds_no_noise_and_says_empirical() -> None:
    graph = sbm_graph(3)
    method = gnn.GraphNodeNewton()
    state, cert = method.fit(graph, {}, AUDITED, seed=0)
    assert cert.guarantee == "empirical" and cert.epsilon is None and cert.sigma == 0.0
    outcome = method.forget(state, ForgetRequest(sample_ids=("v0",)), 1, AUDITED, remaining=graph)
    assert (
        outcome.certificate.guarantee == "empirical" and method.verify_certificate(outcome.certificate) == []
    )
    assert "distance_to_same_noise_retrain_bound" in outcome.certificate.measured


def test_verification_catches_a_tampered_certificate(node_fit) -> None:
    graph, state = node_fit
    method = gnn.GraphNodeNewton()
    cert = method.forget(state, ForgetRequest(sample_ids=("v4",)), 1, CERTIFIED, remaining=graph).certificate
    from dataclasses import replace

    assert any("charge" in p for p in method.verify_certificate(replace(cert, charge=cert.charge * 0.5)))
    assert any("cap" in p for p in method.verify_certificate(replace(cert, budget_cap=10.0)))
    assert method.verify_certificate(replace(cert, sigma=0.01)) != []


# ---------------------------------------------------------------------------------- graph method


@pytest.fixture(scope="module")
def graph_fit() -> tuple[GraphCollection, MethodState]:
    collection = toy_collection()
    state, cert = gcn.GraphClassificationNewton().fit(
        collection, {"J": 3, "L": 2, "Q": 2, "lam": 1e-2}, CERTIFIED, seed=0
    )
    assert gcn.GraphClassificationNewton().verify_certificate(cert) == []
    assert state.model.columns == 1  # two classes: one logistic column
    return collection, state


def test_graph_node_deletion_changes_only_that_graphs_row(graph_fit) -> None:
    collection, state = graph_fit
    method = gcn.GraphClassificationNewton()
    request = ForgetRequest(graph_nodes=(("4", "2"),))
    outcome = method.forget(state, request, 1, CERTIFIED, remaining=collection)
    before, after = state.artifacts["design"].numpy(), outcome.state.artifacts["design"].numpy()
    changed = np.flatnonzero((before != after).any(1))
    assert changed.tolist() == [4]
    remaining = collection.after_request(request)
    cfg, signal, max_degree, num_tags = gcn.embedding_settings(state)
    np.testing.assert_array_equal(
        after[4], embed_graph(remaining.graphs[4], cfg, signal, max_degree=max_degree, num_tags=num_tags)
    )
    assert outcome.forgotten_ids == ('["4", "2"]',)


def test_graph_sequence_keeps_bound_above_residual(graph_fit) -> None:
    collection, state = graph_fit
    method = gcn.GraphClassificationNewton()
    requests = [
        ForgetRequest(graph_nodes=(("1", "0"),)),
        ForgetRequest(graph_ids=("2",)),
        ForgetRequest(graph_nodes=(("3", "1"), ("5", "0"))),
        ForgetRequest(sample_ids=("7",)),
        ForgetRequest(owner_ids=("9",)),
    ]
    for request in requests:
        outcome = method.forget(state, request, 11, CERTIFIED, remaining=collection)
        collection, state = collection.after_request(request), outcome.state
        assert method.verify_certificate(outcome.certificate) == []
        live = np.flatnonzero(state.artifacts["row_weight"].numpy() > 0)
        labels = np.zeros(len(state.artifacts["row_weight"]), dtype=np.int64)
        labels[live] = collection.labels
        assert true_residual(state, signed_targets(labels, 2)) <= state.accounting["spent"]
    assert len(collection) == 27


def test_bad_graph_requests_give_clear_errors(graph_fit) -> None:
    collection, state = graph_fit
    method = gcn.GraphClassificationNewton()
    with pytest.raises(UnknownSampleError, match="out of range"):
        method.forget(state, ForgetRequest(graph_ids=("30",)), 1, CERTIFIED, remaining=collection)
    with pytest.raises(UnknownSampleError, match="node id '99'"):
        method.forget(state, ForgetRequest(graph_nodes=(("1", "99"),)), 1, CERTIFIED, remaining=collection)
    with pytest.raises(UnsupportedRequestError, match="edge"):
        method.forget(state, ForgetRequest(edges=(("0", "1"),)), 1, CERTIFIED, remaining=collection)
    request = ForgetRequest(graph_nodes=(("1", "0"),))
    later = method.forget(state, request, 1, CERTIFIED, remaining=collection).state
    with pytest.raises(AlreadyDeletedError, match="node '0' of graph '1' was already deleted"):
        method.forget(later, request, 1, CERTIFIED, remaining=collection.after_request(request))
    gone = ForgetRequest(graph_ids=("3",))
    later = method.forget(state, gone, 1, CERTIFIED, remaining=collection).state
    with pytest.raises(AlreadyDeletedError, match="graph '3'"):
        method.forget(later, gone, 1, CERTIFIED, remaining=collection.after_request(gone))
    with pytest.raises(DimensionMismatchError):
        method.forget(later, ForgetRequest(graph_ids=("4",)), 1, CERTIFIED, remaining=collection)


def test_multiclass_tags_and_budget_retrain_for_graphs() -> None:
    collection = toy_collection(1, count=24, classes=3)
    method = gcn.GraphClassificationNewton()
    state, _ = method.fit(
        collection, {"J": 2, "L": 2, "Q": 2, "alpha": 1e-3, "signal": "tag"}, CERTIFIED, seed=2
    )
    assert state.model.columns == 3 and state.model.feature_map["signal"] == "tag"
    retrained = False
    for k in range(5):
        request = ForgetRequest(graph_nodes=((str(k), "0"),))
        outcome = method.forget(state, request, 50 + k, CERTIFIED, remaining=collection)
        collection, state = collection.after_request(request), outcome.state
        assert method.verify_certificate(outcome.certificate) == []
        retrained |= bool(outcome.certificate.inputs.get("retrained_in_forget"))
    assert retrained and state.accounting["retrains"] >= 1


# ---------------------------------------------------------------------------------- tabular method


def test_tabular_newton_removal_samples_owners_and_errors() -> None:
    data = make_synthetic(n=200, num_features=6, num_classes=3, seed=0, samples_per_owner=4)
    method = get_method("newton_removal")
    state, cert = method.fit(data, {"lam": 1e-2, "alpha": 1.0}, CERTIFIED, seed=0)
    assert method.verify_certificate(cert) == []
    remaining = data
    for request in (
        ForgetRequest(sample_ids=(data.sample_ids[0], data.sample_ids[5])),
        ForgetRequest(owner_ids=(data.owner_ids[40],)),
    ):
        outcome = method.forget(state, request, 3, CERTIFIED, remaining=remaining)
        assert method.verify_certificate(outcome.certificate) == []
        remaining, state = remaining.without(outcome.forgotten_ids), outcome.state
        assert len(outcome.forgotten_ids) in (2, 4)
    with pytest.raises(AlreadyDeletedError, match="already forgotten"):
        method.forget(
            state, ForgetRequest(sample_ids=(data.sample_ids[0],)), 3, CERTIFIED, remaining=remaining
        )
    with pytest.raises(UnknownSampleError):
        method.forget(state, ForgetRequest(sample_ids=("nobody",)), 3, CERTIFIED, remaining=remaining)
    with pytest.raises(UnsupportedRequestError, match="edge"):
        method.forget(state, ForgetRequest(edges=(("a", "b"),)), 3, CERTIFIED, remaining=remaining)
    with pytest.raises(DimensionMismatchError):
        method.forget(state, ForgetRequest(sample_ids=(data.sample_ids[1],)), 3, CERTIFIED, remaining=data)
    with pytest.raises(InvalidDatasetError, match="tabular Dataset"):
        method.fit(toy_collection(), {}, CERTIFIED, seed=0)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------- GIN


def test_gin_trains_and_reports_timed_epochs() -> None:
    collection = toy_collection(2, count=40)
    graphs = list(collection.graphs)
    result = train_gin(
        graphs[:24],
        graphs[24:32],
        graphs[32:],
        2,
        lambda g: node_signal(g, "degree", max_degree=12),
        GINConfig(epochs=20, hidden=16),
        seed=0,
    )
    assert 0.0 <= result.test_accuracy <= 1.0 and 1 <= result.best_epoch <= 20
    assert result.train_seconds > 0 and result.epochs == 20
    with pytest.raises(InvalidConfigError):
        GINConfig(epochs=0)


def test_methods_refuse_datasets_of_the_wrong_kind() -> None:
    tab = Dataset(("a", "b", "c"), ("a", "b", "c"), np.eye(3), np.array([0, 1, 0]), 2)
    with pytest.raises(InvalidDatasetError, match="GraphCollection"):
        gcn.GraphClassificationNewton().fit(tab, {}, CERTIFIED, seed=0)


def test_a_graph_emptied_node_by_node_is_forgotten_as_a_graph(graph_fit) -> None:
    collection, state = graph_fit
    graph = collection.graphs[5]
    request = ForgetRequest(graph_nodes=tuple((graph.graph_id, node) for node in graph.node_ids))
    outcome = gcn.GraphClassificationNewton().forget(state, request, 1, CERTIFIED, remaining=collection)
    # Its id is reported with the node keys, so the service erases it as a sample and refuses it later.
    assert graph.graph_id in outcome.forgotten_ids
    assert graph.graph_id not in collection.after_request(request).graph_ids


def test_newton_methods_predict_on_their_own_data_and_refuse_what_was_forgotten(node_fit, graph_fit) -> None:
    graph, state = node_fit
    method = gnn.GraphNodeNewton()
    victim, other = graph.node_ids[3], graph.node_ids[4]
    outcome = method.forget(state, ForgetRequest(sample_ids=(victim,)), 1, CERTIFIED, remaining=graph)
    remaining = graph.without([victim])
    labels = method.predict(outcome.state, remaining, item_ids=[other])
    expected = gnn.predict(outcome.state, remaining, remaining.index_of([other]))
    np.testing.assert_array_equal(labels, expected)
    with pytest.raises(UnknownSampleError, match="deleted"):
        method.predict(outcome.state, remaining, item_ids=[victim])
    with pytest.raises(UnsupportedRequestError, match="node ids"):
        method.predict(outcome.state, remaining, instances=np.zeros((1, 16)))

    collection, gstate = graph_fit
    assert len(gcn.GraphClassificationNewton().predict(gstate, collection, item_ids=["1", "2"])) == 2

    data = make_synthetic(n=80, num_features=6, num_classes=3, seed=0, samples_per_owner=4)
    tabular = get_method("newton_removal")
    tstate, _ = tabular.fit(data, {"lam": 1e-2, "alpha": 1.0}, CERTIFIED, seed=0)
    by_id = tabular.predict(tstate, data, item_ids=[data.sample_ids[5]])
    by_row = tabular.predict(tstate, data, instances=data.features[5:6])
    np.testing.assert_array_equal(by_id, by_row)
    with pytest.raises(UnsupportedRequestError, match="not both"):
        tabular.predict(tstate, data, instances=data.features[:1], item_ids=[data.sample_ids[0]])
    with pytest.raises(DimensionMismatchError, match="6 features"):
        tabular.predict(tstate, data, instances=np.zeros((1, 4)))
