"""Graph unlearning through the service: a node graph uploaded as JSON with graph_node_newton (edges,
node features, nodes), a TU-text collection with graph_classification_newton (whole graphs, nodes inside
graphs); each deletion completes with a certificate and a ledger charge, bad requests get a 4xx that
says what to fix, and erased items are gone from the stored graphs of the model and the dataset."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.graphs.storage import decode_graph
from service.runtime import Runtime
from tests.integration.conftest import Client, key
from unlearning.data.graphs.codecs import node_graph_from_json, save_npz

pytestmark = pytest.mark.integration


# -- data ------------------------------------------------------------------------------------------


def _node_graph(tag: str, n: int = 60, seed: int = 3) -> dict[str, Any]:
    """Two classes, 8 features, a ring plus random chords; nodes 0-39 train, 40-49 val, 50-59 test;
    owners hold two nodes each."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=n)
    feats = rng.normal(size=(n, 8)) + labels[:, None] * 0.8
    nodes = [
        {
            "id": f"{tag}-n{i}",
            "label": int(labels[i]),
            "split": "train" if i < 40 else ("val" if i < 50 else "test"),
            "owner": f"{tag}-u{i // 2}",
            "features": [round(float(v), 4) for v in feats[i]],
        }
        for i in range(n)
    ]
    edges = {(i, (i + 1) % n) for i in range(n)}
    edges |= {tuple(sorted(map(int, rng.choice(n, size=2, replace=False)))) for _ in range(40)}
    return {
        "format": "lethe.node_graph.v1",
        "name": f"{tag}-graph",
        "num_classes": 2,
        "num_features": 8,
        "nodes": nodes,
        "edges": [[f"{tag}-n{u}", f"{tag}-n{v}"] for u, v in sorted(edges)],
    }


def _tu_text(graphs: int = 30, seed: int = 4) -> str:
    """``graphs`` small graphs (5-8 nodes, a ring plus a chord), two labels, node tags 0-2."""
    rng = np.random.default_rng(seed)
    lines = [str(graphs)]
    for g in range(graphs):
        size = int(rng.integers(5, 9))
        label = g % 2
        nbrs: list[set[int]] = [set() for _ in range(size)]
        for v in range(size):
            nbrs[v].add((v + 1) % size)
            nbrs[(v + 1) % size].add(v)
        if label:
            nbrs[0].add(size // 2)
            nbrs[size // 2].add(0)
        lines.append(f"{size} {label}")
        for v in range(size):
            tag = int(rng.integers(0, 3))
            lines.append(" ".join(str(x) for x in (tag, len(nbrs[v]), *sorted(nbrs[v]))))
    return "\n".join(lines) + "\n"


# -- helpers ---------------------------------------------------------------------------------------


def _register(client: Client, dataset_id: int, method: str) -> int:
    body = {
        "name": method,
        "dataset_id": dataset_id,
        "method": method,
        "release_mode": "certified",
        "privacy": {"epsilon": 1.0, "delta": 1e-3},
        "budget_policy": {"max_deletion_fraction": 0.5},
    }
    r = client.http.post("/v1/models", json=body)
    assert r.status_code == 202, r.text
    return int(r.json()["id"])


def _submit(client: Client, model_id: int, **subjects: Any) -> Any:
    return client.http.post(f"/v1/models/{model_id}/deletions", json=subjects, headers=key())


def _predict(client: Client, model_id: int, **body: Any) -> Any:
    return client.http.post(f"/v1/models/{model_id}/predictions", json=body)


def _forget(client: Client, model_id: int, seq: int, **subjects: Any) -> dict[str, Any]:
    """Submit, wait for completion; the version excludes it and carries the method's certificate, and the
    ledger has a charge for that version."""
    r = _submit(client, model_id, **subjects)
    assert r.status_code == 202, r.text
    done = client.done(r.json()["id"], timeout=120)
    version = done["version"]
    assert version["seq"] == seq and version["kind"] in ("unlearned", "retrained"), version
    cert = version["certificate"]
    assert cert["guarantee"] == "certified" and cert["epsilon"] == 1.0, cert
    budget = client.http.get(f"/v1/models/{model_id}/budget").json()
    charges = [c for c in budget["charges"] if c["version_seq"] == seq]
    assert charges and charges[0]["kind"] in ("charge", "retrain"), budget
    assert budget["spent"] <= budget["cap"]
    return done


def _error(r: Any, status: int, *words: str) -> None:
    assert r.status_code == status, r.text
    message = r.json()["error"]["message"]
    for word in words:
        assert word in message, message


def _stored_graphs(runtime: Runtime, model_id: int) -> tuple[bytes, bytes, list[str]]:
    """The blobs of the model's remaining graph and of its dataset's graph, and every digest stored."""
    with runtime.uow() as uow:
        model = uow.models.get(model_id)
        dataset = uow.datasets.get(model.dataset_id)
        model_blob = runtime.artifacts.get(model.training["buckets"]["graph"])
        dataset_blob = runtime.artifacts.get(dataset.arrays["buckets"]["graph"])
    return model_blob, dataset_blob, list(runtime.artifacts.digests())


# -- node graph ------------------------------------------------------------------------------------


def test_node_graph_deletions_through_the_service(client: Client, runtime: Runtime) -> None:
    tag = f"g{uuid.uuid4().hex[:8]}"
    data = _node_graph(tag)
    r = client.http.post(
        "/v1/datasets", files={"file": (f"{tag}.json", json.dumps(data).encode(), "application/json")}
    )
    assert r.status_code == 201, r.text
    dataset = r.json()
    assert dataset["kind"] == "node_graph" and dataset["num_nodes"] == 60
    assert dataset["num_edges"] == len(data["edges"]) and dataset["num_graphs"] is None
    original = _stored_graphs_digest(runtime, dataset["id"])

    # A method for tables on a graph, and a collection method on a node graph: a clear 422.
    for method in ("hessian_free", "graph_classification_newton"):
        r = client.http.post("/v1/models", json={"name": "x", "dataset_id": dataset["id"], "method": method})
        _error(r, 422, "graph_node_newton")

    model_id = _register(client, dataset["id"], "graph_node_newton")
    model = client.ready(model_id, timeout=180)
    assert model["train_size"] == 40

    n = lambda i: f"{tag}-n{i}"
    edge = data["edges"][0]
    assert edge == [n(0), n(1)]
    _forget(client, model_id, 2, edges=[[n(1), n(0)]])  # either orientation
    _forget(client, model_id, 3, node_feature_ids=[n(7)])
    done = _forget(client, model_id, 4, owner_ids=[f"{tag}-u5"])  # nodes 10 and 11
    assert done["num_samples"] == 2

    # Bad requests: what to fix, before anything is queued.
    _error(_submit(client, model_id, edges=[[n(3), f"{tag}-nope"]]), 422, f"{tag}-nope")
    _error(_submit(client, model_id, edges=[[n(3), n(30)]]), 422, "edge", "not in")
    _error(_submit(client, model_id, edges=[[n(0), n(1)]]), 409, "already forgotten")
    _error(_submit(client, model_id, edges=[[n(10), n(9)]]), 409, "already forgotten")  # node 10 was deleted
    _error(_submit(client, model_id, sample_ids=[n(11)]), 409, "already forgotten")
    _error(_submit(client, model_id, node_feature_ids=[n(10)]), 409, "already forgotten")
    _error(_submit(client, model_id, node_feature_ids=[f"{tag}-ghost"]), 422, f"{tag}-ghost")
    _error(_submit(client, model_id, graph_ids=["0"]), 422, "graph_node_newton", "not graphs")
    bulk = client.http.post(
        f"/v1/models/{model_id}/deletions/bulk",
        json={"items": [{"edges": [[n(20), n(21)]]}, {"graph_nodes": [["0", "1"]]}]},
        headers=key(),
    )
    assert bulk.status_code == 207, bulk.text
    assert [i["status"] for i in bulk.json()["results"]] == [202, 422]
    client.done(bulk.json()["results"][0]["id"], timeout=120)

    # Predictions of the served version on nodes of the remaining graph, by id; a deleted node is unknown.
    predicted = _predict(client, model_id, sample_ids=[n(3), n(40)])
    assert predicted.status_code == 200 and len(predicted.json()["predictions"]) == 2, predicted.text
    assert predicted.json()["version"] == 5
    _error(_predict(client, model_id, sample_ids=[n(10)]), 422, n(10))
    _error(_predict(client, model_id, instances=[[0.0] * 8]), 422, "node ids")

    # The erased node, its owner and the deleted edge are in no stored graph; the original blob is gone.
    model_blob, dataset_blob, stored = _stored_graphs(runtime, model_id)
    for blob in (model_blob, dataset_blob):
        for secret in (n(10), n(11), f"{tag}-u5"):
            assert f'"{secret}"'.encode() not in blob
        graph = decode_graph(blob)
        assert n(10) not in graph.node_ids and n(12) in graph.node_ids
        assert graph.num_edges == len(data["edges"]) - 2 - sum(
            1 for u, v in data["edges"] if {u, v} & {n(10), n(11)} and [u, v] != edge
        )
        assert graph.features_deleted[7] and not graph.features[7].nnz
    assert model_blob == dataset_blob
    assert original not in stored
    got = client.http.get(f"/v1/datasets/{dataset['id']}").json()
    assert got["num_rows"] == 58 and got["erased_rows"] == 2

    # The audit log holds keyed hashes, never the ids.
    audit = client.http.get(f"/v1/audit/events?model_id={model_id}&limit=1000").text
    assert "deletion.completed" in audit
    assert n(10) not in audit and f"{tag}-u5" not in audit and n(7) not in audit


def _stored_graphs_digest(runtime: Runtime, dataset_id: int) -> str:
    with runtime.uow() as uow:
        return str(uow.datasets.get(dataset_id).arrays["buckets"]["graph"])


# -- graph collection ------------------------------------------------------------------------------


def _headers() -> list[str]:
    """The per-graph header lines (``size label``) of :func:`_tu_text`, in order."""
    lines = _tu_text().splitlines()[1:]
    out, pos = [], 0
    while pos < len(lines):
        out.append(lines[pos])
        pos += 1 + int(lines[pos].split()[0])
    return out


def test_graph_collection_deletions_through_the_service(client: Client, runtime: Runtime) -> None:
    tag = f"c{uuid.uuid4().hex[:8]}"
    r = client.http.post(
        "/v1/datasets?format=tu", files={"file": (f"{tag}.txt", _tu_text().encode(), "text/plain")}
    )
    assert r.status_code == 201, r.text
    dataset = r.json()
    assert dataset["kind"] == "graph_collection" and dataset["num_graphs"] == 30 and dataset["num_rows"] == 30

    model_id = _register(client, dataset["id"], "graph_classification_newton")
    assert client.ready(model_id, timeout=180)["train_size"] == 30

    _forget(client, model_id, 2, graph_ids=["3"])
    _forget(client, model_id, 3, graph_nodes=[["5", "0"], ["6", "2"]])
    _forget(client, model_id, 4, sample_ids=["8"])  # a sample of a collection is a graph
    nine = int(_headers()[9].split()[0])  # graph 9's node count
    # every node of graph 9 named: the graph leaves the collection and counts as forgotten, like graph 3
    _forget(client, model_id, 5, graph_nodes=[["9", str(v)] for v in range(nine)])
    _error(_submit(client, model_id, graph_ids=["9"]), 409, "already forgotten")
    _error(_submit(client, model_id, owner_ids=["9"]), 409, "already forgotten")  # its owner too

    _error(_submit(client, model_id, graph_ids=["99"]), 422, "out of range")
    _error(_submit(client, model_id, graph_nodes=[["7", "42"]]), 422, "42")
    _error(_submit(client, model_id, graph_ids=["3"]), 409, "already forgotten")
    _error(_submit(client, model_id, graph_nodes=[["5", "0"]]), 409, "already forgotten")
    _error(_submit(client, model_id, edges=[["0", "1"]]), 422, "graph_classification_newton", "not edges")
    predicted = _predict(client, model_id, sample_ids=["0", "5"])
    assert predicted.status_code == 200 and len(predicted.json()["predictions"]) == 2, predicted.text
    _error(_predict(client, model_id, sample_ids=["3"]), 422, "3")  # a forgotten graph

    model_blob, dataset_blob, _ = _stored_graphs(runtime, model_id)
    assert model_blob == dataset_blob
    collection = decode_graph(model_blob)
    assert {"3", "8", "9"}.isdisjoint(collection.graph_ids) and len(collection) == 27
    five = collection.graphs[collection.graph_ids.index("5")]
    assert five.deleted[0] and "0" not in five.node_ids
    got = client.http.get(f"/v1/datasets/{dataset['id']}").json()
    assert got["num_rows"] == 27 and got["erased_rows"] == 3


def test_bundled_graphs(client: Client) -> None:
    r = client.http.post("/v1/datasets/bundled", json={"name": "cora", "samples_per_owner": 2})
    assert r.status_code == 201, r.text
    cora = r.json()
    assert (cora["kind"], cora["num_nodes"], cora["num_edges"], cora["num_classes"]) == (
        "node_graph",
        2708,
        5278,
        7,
    )
    assert cora["feature_shape"] == [1433]
    r = client.http.post("/v1/datasets/bundled", json={"name": "proteins", "n": 40, "seed": 1})
    assert r.status_code == 201, r.text
    assert (r.json()["kind"], r.json()["num_graphs"], r.json()["num_rows"]) == ("graph_collection", 40, 40)
    _error(client.http.post("/v1/datasets/bundled", json={"name": "cora", "n": 100}), 422, "cora")
    assert "imdb-binary" in client.http.get("/v1/datasets/bundled").json()["names"]


def test_two_models_on_one_graph_both_erase_from_the_dataset(
    client: Client, runtime: Runtime, tmp_path: Path
) -> None:
    """An NPZ upload; the second model's deletions reach the dataset's graph even after the first model
    replaced it (the items it already lost are skipped)."""
    tag = f"m{uuid.uuid4().hex[:8]}"
    path = tmp_path / "g.npz"
    save_npz(node_graph_from_json(_node_graph(tag)), path)
    r = client.http.post(
        "/v1/datasets", files={"file": ("g.npz", path.read_bytes(), "application/octet-stream")}
    )
    assert r.status_code == 201, r.text
    assert r.json()["kind"] == "node_graph" and r.json()["format"] == "npz"
    dataset_id = r.json()["id"]
    first, second = (_register(client, dataset_id, "graph_node_newton") for _ in range(2))
    client.ready(first, timeout=180)
    client.ready(second, timeout=180)
    n = lambda i: f"{tag}-n{i}"
    _forget(client, first, 2, edges=[[n(2), n(3)]])
    _forget(client, second, 2, edges=[[n(2), n(3)]], sample_ids=[n(20)])
    with runtime.uow() as uow:
        arrays = uow.datasets.get(dataset_id).arrays
    graph = decode_graph(runtime.artifacts.get(arrays["buckets"]["graph"]))
    assert n(20) not in graph.node_ids and n(21) in graph.node_ids
    with pytest.raises(Exception, match="not in graph"):
        graph.edge_positions([(n(2), n(3))])
    got = client.http.get(f"/v1/datasets/{dataset_id}").json()
    assert got["num_rows"] == 59 and got["erased_rows"] == 1
