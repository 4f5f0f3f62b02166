"""Graph uploads: bad files are a 4xx that says what to fix; stored graphs round-trip without pickle and
keep no id of an erased node."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from service.errors import ApiError
from service.graphs import upload
from service.graphs.requests import GraphItems, with_graph_items
from service.graphs.storage import ERASED_PREFIX, decode_graph, encode_graph, sizes
from unlearning.data.graphs.codecs import node_graph_to_arrays, save_npz
from unlearning.data.graphs.node_graph import NodeGraph
from unlearning.data.graphs.tu import load_tu_text
from unlearning.data.limits import ReadLimits
from unlearning.methods.protocol import ForgetRequest

LIMIT = ReadLimits(max_bytes=10 * 1024 * 1024)


def _node_graph_json() -> dict:
    return {
        "format": "lethe.node_graph.v1",
        "name": "tiny",
        "num_classes": 2,
        "num_features": 2,
        "nodes": [
            {"id": "a", "label": 0, "split": "train", "owner": "alice", "features": [1.0, 0.0]},
            {"id": "b", "label": 1, "split": "train", "owner": "bob", "features": [0.0, 1.0]},
            {"id": "c", "label": None, "split": "test", "features": {"indices": [1], "values": [0.5]}},
        ],
        "edges": [["a", "b"], ["c", "b"]],
    }


TU = "2\n3 0\n0 2 1 2\n1 1 0\n0 1 0\n2 1\n1 1 1\n0 1 0\n"


def _write(tmp_path: Path, data: bytes | str, name: str = "upload") -> Path:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def _rejected(call, status: int, *words: str) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(ApiError) as info:
        call()
    assert info.value.status == status, info.value.message
    for word in words:
        assert word in info.value.message, info.value.message
    return info.value.message


def test_a_node_graph_json_upload_parses(tmp_path: Path) -> None:
    graph = upload.parse(_write(tmp_path, json.dumps(_node_graph_json())), "json", "g.json", None, LIMIT)
    assert isinstance(graph, NodeGraph) and graph.num_nodes == 3 and graph.num_edges == 2
    assert graph.owner_ids == ("alice", "bob", "c")
    gz = _write(tmp_path, gzip.compress(json.dumps(_node_graph_json()).encode()), "gz")
    assert upload.parse(gz, "json", "g.json.gz", "named", LIMIT).name == "named"


def test_malformed_json_is_a_422_with_the_position(tmp_path: Path) -> None:
    bad = _write(tmp_path, '{"nodes": [1, 2,')
    _rejected(
        lambda: upload.parse(bad, "json", "g.json", None, LIMIT), 422, "g.json", "not valid JSON", "line 1"
    )
    table = _write(tmp_path, "[1, 2]", "list")
    _rejected(lambda: upload.parse(table, "json", "g.json", None, LIMIT), 422, "num_features", "nodes")


def test_an_edge_naming_an_unknown_node_is_a_422(tmp_path: Path) -> None:
    data = _node_graph_json()
    data["edges"].append(["a", "zed"])
    path = _write(tmp_path, json.dumps(data))
    _rejected(lambda: upload.parse(path, "json", "g.json", None, LIMIT), 422, "'zed'", "not in the node list")


def test_reserved_and_unusable_ids_are_a_422(tmp_path: Path) -> None:
    data = _node_graph_json()
    data["nodes"][0]["id"] = f"{ERASED_PREFIX}0"
    data["edges"] = []
    path = _write(tmp_path, json.dumps(data))
    _rejected(lambda: upload.parse(path, "json", "g.json", None, LIMIT), 422, ERASED_PREFIX)
    data["nodes"][0]["id"] = "x" * 300
    path = _write(tmp_path, json.dumps(data), "long")
    _rejected(lambda: upload.parse(path, "json", "g.json", None, LIMIT), 422, "256")


def test_a_tu_file_parses_plain_or_gzipped(tmp_path: Path) -> None:
    for data, name in ((TU, "plain"), (gzip.compress(TU.encode()), "gz")):
        collection = upload.parse(_write(tmp_path, data, name), "tu", "set.txt", None, LIMIT)
        assert len(collection) == 2 and collection.graph_ids == ("0", "1") and collection.name == "set"


def test_a_truncated_tu_file_is_a_422_that_says_so(tmp_path: Path) -> None:
    truncated = _write(tmp_path, TU[: TU.index("2 1\n") + 4])
    message = _rejected(
        lambda: upload.parse(truncated, "tu", "set.txt", None, LIMIT), 422, "set.txt", "truncated"
    )
    assert str(truncated) not in message
    bad_neighbour = _write(tmp_path, "1\n2 0\n0 1 7\n0 1 0\n", "nbr")
    _rejected(lambda: upload.parse(bad_neighbour, "tu", "set.txt", None, LIMIT), 422, "outside")
    _rejected(lambda: upload.parse(_write(tmp_path, b"\xff\xfe\x00", "bin"), "tu", "x.txt", None, LIMIT), 422)


def test_graph_npz_is_detected_and_never_unpickled(tmp_path: Path) -> None:
    graph = upload.parse(_write(tmp_path, json.dumps(_node_graph_json())), "json", "g.json", None, LIMIT)
    good = tmp_path / "g.npz"
    save_npz(graph, good)
    assert upload.is_graph_npz(good)
    assert upload.parse(good, "npz", "g.npz", None, LIMIT).node_ids == graph.node_ids
    arrays = node_graph_to_arrays(graph)
    arrays["labels"] = np.asarray([{"x": 1}, None, None], dtype=object)
    evil = tmp_path / "evil.npz"
    np.savez(evil, **arrays)
    _rejected(lambda: upload.parse(evil, "npz", "evil.npz", None, LIMIT), 422, "evil.npz")
    table = tmp_path / "t.npz"
    np.savez(table, features=np.zeros((2, 2)), labels=np.zeros(2))
    assert not upload.is_graph_npz(table)


def test_format_detection() -> None:
    assert upload.detect(None, "x.json") == "json"
    assert upload.detect(None, "x.JSON.gz") == "json"
    assert upload.detect(None, "PROTEINS.txt") is None  # TU text: format=tu
    assert upload.detect(None, "x.csv.gz") is None
    assert upload.detect(None, None) is None
    assert upload.detect("tu", "x.csv") == "tu"
    assert upload.detect("csv", "x.json") is None


def test_stored_graphs_round_trip_and_forget_erased_ids(tmp_path: Path) -> None:
    graph = upload.parse(_write(tmp_path, json.dumps(_node_graph_json())), "json", "g.json", None, LIMIT)
    after = graph.without(["a"], (), ["c"])
    blob = encode_graph(after)
    assert b'"alice"' not in blob and b'"a"' not in blob
    back = decode_graph(blob)
    assert isinstance(back, NodeGraph)
    assert back.node_ids == (f"{ERASED_PREFIX}0", "b", "c") and back.deleted[0] and back.num_edges == 1
    assert sizes(back)["num_samples"] == 2 and sizes(back)["num_train"] == 1
    collection = load_tu_text(_write(tmp_path, TU, "tu.txt"))
    gone = decode_graph(encode_graph(collection.without(["0"], [("1", "0")])))
    assert (
        gone.graph_ids == ("1",)
        and not gone.removed_ids
        and gone.graphs[0].node_ids[0] == f"{ERASED_PREFIX}0"
    )


def test_a_batch_request_names_graph_items_once_and_not_as_samples() -> None:
    items = [
        GraphItems(edges=[("a", "b")], keys={'["a", "b"]'}),
        GraphItems(node_features=["c"], keys={"c"}),
    ]
    base = ForgetRequest(sample_ids=('["a", "b"]', "c", "d"), owner_ids=("o",))
    request = with_graph_items(base, items)
    assert request.sample_ids == ("d",) and request.edges == (("a", "b"),)
    assert request.node_feature_ids == ("c",) and request.owner_ids == ("o",)
    assert with_graph_items(base, [GraphItems()]) is base
