"""Graph data types: the Planetoid and TU loaders, deletion semantics, clear errors and pickle-free
serialisation."""

from __future__ import annotations

import collections
import io
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from unlearning.data import shared_data_dir
from unlearning.data.graphs.codecs import (
    graph_from_json,
    graph_to_json,
    load_collection_npz,
    load_node_graph_npz,
    node_graph_from_json,
    node_graph_to_json,
    save_npz,
)
from unlearning.data.graphs.collection import Graph, GraphCollection
from unlearning.data.graphs.node_graph import NodeGraph
from unlearning.data.graphs.planetoid import _RestrictedUnpickler, load_cora
from unlearning.data.graphs.requests import edge_key, graph_node_key
from unlearning.data.graphs.tu import load_imdb_binary, load_proteins, load_tu_text
from unlearning.data.splits import split_indices
from unlearning.errors import AlreadyDeletedError, InvalidDatasetError, UnknownSampleError
from unlearning.methods.protocol import ForgetRequest

HAVE_CORA = (shared_data_dir() / "cora" / "ind.cora.graph").is_file()
HAVE_TU = (shared_data_dir() / "imdb-binary" / "IMDBBINARY.txt").is_file()


def tiny_graph() -> NodeGraph:
    """A path 0-1-2-3 plus edge 1-3 and an isolated node 4; nodes 0..2 train, 3 val, 4 test."""
    feats = sp.csr_matrix(np.arange(15, dtype=np.float64).reshape(5, 3) + 1.0)
    return NodeGraph(
        node_ids=("a", "b", "c", "d", "e"),
        features=feats,
        labels=np.array([0, 1, 0, 1, -1]),
        num_classes=2,
        edges=np.array([[1, 0], [1, 2], [2, 3], [3, 1], [0, 1]]),  # duplicates and both orders merge
        split=np.array([1, 1, 1, 2, 3]),
        owner_ids=("u1", "u1", "u2", "u3", "u3"),
        name="tiny",
    )


def tiny_collection() -> GraphCollection:
    g0 = Graph("0", ("0", "1", "2"), np.array([[0, 1], [1, 2]]), 0, np.array([0, 1, 0]))
    g1 = Graph("1", ("0", "1"), np.array([[0, 1]]), 1, np.array([1, 1]))
    g2 = Graph("2", ("0", "1", "2", "3"), np.array([[0, 1], [0, 2], [0, 3]]), 1, np.array([0, 0, 1, 1]))
    return GraphCollection((g0, g1, g2), num_classes=2, num_tags=2, name="toy")


# --------------------------------------------------------------------------------- node graphs


def test_node_graph_canonicalises_edges_and_validates_input() -> None:
    g = tiny_graph()
    assert g.edges.tolist() == [[0, 1], [1, 2], [1, 3], [2, 3]]
    assert g.adjacency.nnz == 8 and (g.adjacency != g.adjacency.T).nnz == 0
    assert g.training_mask().tolist() == [True, True, True, False, False]
    with pytest.raises(InvalidDatasetError, match="self-loop"):
        NodeGraph(
            ("a", "b"), sp.csr_matrix((2, 1)), np.array([0, 1]), 2, np.array([[0, 0]]), np.array([1, 1])
        )
    with pytest.raises(InvalidDatasetError, match="appears more than once"):
        NodeGraph(("a", "a"), sp.csr_matrix((2, 1)), np.array([0, 1]), 2, np.zeros((0, 2)), np.array([1, 1]))
    with pytest.raises(InvalidDatasetError, match="outside"):
        NodeGraph(("a", "b"), sp.csr_matrix((2, 1)), np.array([0, 5]), 2, np.zeros((0, 2)), np.array([1, 1]))
    with pytest.raises(InvalidDatasetError, match="outside 0..1"):
        NodeGraph(
            ("a", "b"), sp.csr_matrix((2, 1)), np.array([0, 1]), 2, np.array([[0, 2]]), np.array([1, 1])
        )


def test_node_deletion_removes_features_label_and_edges_but_keeps_the_index() -> None:
    g = tiny_graph()
    after = g.without(nodes=["b"])
    assert after.node_ids == g.node_ids and after.deleted.tolist() == [False, True, False, False, False]
    assert after.features[1].nnz == 0 and after.labels[1] == -1
    assert after.edges.tolist() == [[2, 3]]
    assert after.training_mask().tolist() == [True, False, True, False, False]
    assert g.edges.tolist() == [[0, 1], [1, 2], [1, 3], [2, 3]]  # the original is untouched


def test_feature_deletion_keeps_edges_and_edge_deletion_keeps_everything_else() -> None:
    g = tiny_graph()
    feat = g.without(node_features=["c"])
    assert feat.features[2].nnz == 0 and feat.labels[2] == -1 and feat.num_edges == 4
    assert feat.features_deleted[2] and not feat.deleted[2]
    edge = g.without(edges=[("d", "b")])  # either orientation names the edge
    assert edge.edges.tolist() == [[0, 1], [1, 2], [2, 3]]
    assert (edge.features != g.features).nnz == 0 and edge.labels.tolist() == g.labels.tolist()


def test_bad_node_requests_give_clear_errors() -> None:
    g = tiny_graph()
    with pytest.raises(UnknownSampleError, match="'zz' is not in graph"):
        g.without(nodes=["zz"])
    with pytest.raises(UnknownSampleError, match="not in graph"):
        g.without(edges=[("a", "c")])
    with pytest.raises(UnknownSampleError, match="self-loop"):
        g.without(edges=[("a", "a")])
    gone = g.without(nodes=["b"])
    with pytest.raises(AlreadyDeletedError, match="'b' of graph 'tiny' was already deleted"):
        gone.without(nodes=["b"])
    with pytest.raises(AlreadyDeletedError):
        gone.without(node_features=["b"])
    with pytest.raises(UnknownSampleError, match="already deleted"):
        gone.without(edges=[("a", "b")])
    with pytest.raises(AlreadyDeletedError, match="twice"):
        g.without(nodes=["a", "a"])
    with pytest.raises(AlreadyDeletedError, match="was already deleted"):
        g.without(node_features=["c"]).without(node_features=["c"])


def test_after_request_maps_the_protocol_request_and_owners() -> None:
    g = tiny_graph()
    after = g.after_request(ForgetRequest(owner_ids=("u1",), edges=(("c", "d"),)))
    assert after.deleted.tolist() == [True, True, False, False, False]
    assert after.num_edges == 0
    with pytest.raises(UnknownSampleError):
        g.after_request(ForgetRequest(graph_ids=("0",)))
    assert edge_key("b", "a") == edge_key("a", "b") == json.dumps(["a", "b"])


def test_node_graph_round_trips_through_npz_and_json_without_pickle(tmp_path: Path) -> None:
    g = tiny_graph().without(nodes=["d"], node_features=["a"])
    path = tmp_path / "g.npz"
    save_npz(g, path)
    with np.load(path, allow_pickle=False) as raw:  # every entry is a plain array
        assert all(raw[k].dtype != object for k in raw.files)
    for back in (load_node_graph_npz(path), node_graph_from_json(json.loads(json.dumps(node_graph_to_json(g))))):
        assert back.node_ids == g.node_ids and back.owner_ids == g.owner_ids
        assert (back.features != g.features).nnz == 0
        assert back.edges.tolist() == g.edges.tolist() and back.labels.tolist() == g.labels.tolist()
        assert back.deleted.tolist() == g.deleted.tolist()
        assert back.features_deleted.tolist() == g.features_deleted.tolist()
        assert back.split.tolist() == g.split.tolist()


def test_node_graph_json_accepts_dense_features_and_rejects_bad_input() -> None:
    obj: dict[str, Any] = {
        "num_classes": 2,
        "num_features": 3,
        "nodes": [
            {"id": "x", "label": 0, "split": "train", "features": [0, 1.5, 0]},
            {"id": "y", "label": None, "split": "test", "features": {"indices": [2], "values": [1.0]}},
        ],
        "edges": [["y", "x"]],
    }
    g = node_graph_from_json(obj)
    assert g.features.toarray().tolist() == [[0, 1.5, 0], [0, 0, 1.0]] and g.labels.tolist() == [0, -1]
    with pytest.raises(InvalidDatasetError, match="not in the node list"):
        node_graph_from_json({**obj, "edges": [["x", "q"]]})
    with pytest.raises(InvalidDatasetError, match="split"):
        node_graph_from_json({**obj, "nodes": [{**obj["nodes"][0], "split": "holdout"}]})
    with pytest.raises(InvalidDatasetError, match="features, expected 3"):
        node_graph_from_json({**obj, "nodes": [{**obj["nodes"][0], "features": [1, 2]}]})



def test_node_graph_json_infers_its_counts_and_names_what_is_missing() -> None:
    nodes = [
        {"id": "a", "label": 0, "split": "train", "features": [1, 0]},
        {"id": "b", "label": 2.0, "split": "train", "features": [0, 1]},
    ]
    g = node_graph_from_json({"nodes": nodes, "edges": [["a", "b"]]})
    assert g.num_features == 2 and g.num_classes == 3 and g.labels.tolist() == [0, 2]
    sparse = [{**nodes[0], "features": {"indices": [0], "values": [1.0]}}]
    for bad, message in [
        ({"nodes": sparse}, "give 'num_features'"),
        ({"nodes": [{**nodes[0], "label": None}], "num_features": 2}, "give 'num_classes'"),
        ({"nodes": nodes, "num_features": 0}, "'num_features' must be a whole number >= 1"),
        ({"nodes": [{**nodes[0], "label": "cat"}]}, "node 'a': label 'cat' is not a class index"),
        ({"nodes": [{**nodes[0], "label": -1}]}, "node 'a': label -1 is not a class index"),
        ({"nodes": [nodes[0], {"label": 1}]}, "node 1 \\(0-based\\) has no 'id'"),
        ({"nodes": "x"}, "'nodes' must be a list"),
    ]:
        with pytest.raises(InvalidDatasetError, match=message):
            node_graph_from_json(bad)


# ---------------------------------------------------------------------------------- collections


def test_collection_deletions_and_errors() -> None:
    c = tiny_collection()
    after = c.without(graph_ids=["1"], graph_nodes=[("0", "1")])
    assert after.graph_ids == ("0", "2") and after.removed_ids == frozenset({"1"})
    g0 = after.graphs[0]
    assert g0.deleted.tolist() == [False, True, False] and len(g0.edges) == 0 and g0.node_tags[1] == -1
    assert g0.num_nodes == 3  # the tombstone keeps the graph's size
    with pytest.raises(UnknownSampleError, match="out of range"):
        c.without(graph_ids=["3"])
    with pytest.raises(AlreadyDeletedError, match="graph '1' of collection 'toy' was already deleted"):
        after.without(graph_ids=["1"])
    with pytest.raises(AlreadyDeletedError, match="node '1' of graph '0' was already deleted"):
        after.without(graph_nodes=[("0", "1")])
    with pytest.raises(UnknownSampleError, match="node id '9' is not in graph '2'"):
        c.without(graph_nodes=[("2", "9")])
    with pytest.raises(UnknownSampleError):
        c.after_request(ForgetRequest(edges=(("0", "1"),)))


def test_deleting_the_last_live_node_removes_the_graph() -> None:
    c = tiny_collection()
    after = c.without(graph_nodes=[("1", "0"), ("1", "1")])
    assert after.graph_ids == ("0", "2") and "1" in after.removed_ids
    assert graph_node_key("1", "0") == '["1", "0"]'


def test_collection_round_trips_through_npz_and_one_graph_through_json(tmp_path: Path) -> None:
    c = tiny_collection().without(graph_ids=["1"], graph_nodes=[("2", "3")])
    save_npz(c, tmp_path / "c.npz")
    back = load_collection_npz(tmp_path / "c.npz")
    assert back.graph_ids == c.graph_ids and back.removed_ids == c.removed_ids and back.num_tags == 2
    for a, b in zip(back.graphs, c.graphs):
        assert a.edges.tolist() == b.edges.tolist() and a.deleted.tolist() == b.deleted.tolist()
        assert a.node_tags.tolist() == b.node_tags.tolist() and a.label == b.label
    one = c.graphs[1]
    again = graph_from_json(json.loads(json.dumps(graph_to_json(one))))
    assert again.edges.tolist() == one.edges.tolist() and again.deleted.tolist() == one.deleted.tolist()
    with pytest.raises(InvalidDatasetError, match="self-loop"):
        graph_from_json({"graph_id": "x", "label": 0, "nodes": [{"id": "a"}], "edges": [["a", "a"]]})


def test_tu_text_parser_reads_tags_labels_and_neighbours(tmp_path: Path) -> None:
    text = "2\n3 5\n0 1 1\n2 2 0 2\n0 1 1\n2 7\n1 1 1\n1 1 0\n"
    path = tmp_path / "toy.txt"
    path.write_text(text)
    c = load_tu_text(path)
    assert len(c) == 2 and c.labels.tolist() == [0, 1] and c.num_tags == 3  # raw labels 5, 7 -> 0, 1
    assert c.graphs[0].edges.tolist() == [[0, 1], [1, 2]] and c.graphs[0].node_tags.tolist() == [0, 2, 0]
    path.write_text("2\n3 5\n0 1\n")
    with pytest.raises(InvalidDatasetError, match="malformed"):
        load_tu_text(path)


def test_split_indices_partition() -> None:
    parts = split_indices(1000, [0.1, 0.1, 0.8], seed=3)
    assert [len(p) for p in parts] == [100, 100, 800]
    assert len(np.unique(np.concatenate(parts))) == 1000
    assert all(np.array_equal(a, b) for a, b in zip(parts, split_indices(1000, [0.1, 0.1, 0.8], seed=3)))


# --------------------------------------------------------------------------------- real files


def test_restricted_unpickler_refuses_anything_but_the_planetoid_classes() -> None:
    payload = pickle.dumps(print)  # a pickle naming builtins.print
    with pytest.raises(InvalidDatasetError, match="does not admit"):
        _RestrictedUnpickler(io.BytesIO(payload)).load()
    adjacency = collections.defaultdict(list, {0: [1, 2], 1: [0]})  # what ind.cora.graph holds
    back = _RestrictedUnpickler(io.BytesIO(pickle.dumps(adjacency, protocol=2))).load()
    assert back == adjacency and back.default_factory is list


@pytest.mark.skipif(not HAVE_CORA, reason="the shared Cora files are not here")
def test_cora_loads_with_the_full_split() -> None:
    g = load_cora()
    assert (g.num_nodes, g.num_features, g.num_classes, g.num_edges) == (2708, 1433, 7, 5278)
    assert [(g.split == code).sum() for code in (1, 2, 3)] == [1208, 500, 1000]
    assert (g.split[140:640] == 2).all() and (g.labels >= 0).all()
    test_ids = [int(x) for x in (shared_data_dir() / "cora" / "ind.cora.test.index").read_text().split()]
    assert (g.split[test_ids] == 3).all()
    assert set(np.unique(g.features.data).tolist()) == {1.0}


@pytest.mark.skipif(not HAVE_TU, reason="the shared graph collections are not here")
def test_imdb_and_proteins_load() -> None:
    imdb = load_imdb_binary()
    assert len(imdb) == 1000 and imdb.num_classes == 2 and imdb.num_tags == 1 and imdb.max_degree == 135
    assert imdb.labels.mean() == 0.5
    proteins = load_proteins()
    assert len(proteins) == 1113 and proteins.num_tags == 3 and proteins.num_classes == 2
