"""Malformed graph input is an InvalidDatasetError (HTTP 422) that names the item to fix, never an
IndexError, a silently dropped value or an id made up from null/true/{...}."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.errors import ApiError
from service.graphs import upload
from unlearning.data.graphs.codecs import (
    collection_from_arrays,
    collection_to_arrays,
    graph_from_json,
    node_graph_from_arrays,
    node_graph_from_json,
    node_graph_to_arrays,
)
from unlearning.data.graphs.tu import load_tu_text
from unlearning.data.limits import MAX_CLASSES, ReadLimits
from unlearning.errors import InvalidDatasetError

TOY = "2\n3 5\n0 1 1\n2 2 0 2\n0 1 1\n2 7\n1 1 1\n1 1 0\n"


def _node_graph(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "num_classes": 2,
        "num_features": 1,
        "nodes": [{"id": "a", "label": 0, "features": [1.0]}, {"id": "b", "label": 1, "features": [0.0]}],
        "edges": [["a", "b"]],
    }
    obj.update(changes)
    return obj


def _graph(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "graph_id": "g",
        "label": 1,
        "nodes": [{"id": "a", "tag": 0}, {"id": "b", "tag": 1}],
        "edges": [["a", "b"]],
    }
    obj.update(changes)
    return obj


def _collection_arrays(tmp_path: Path) -> dict[str, np.ndarray]:
    path = tmp_path / "toy.txt"
    path.write_text(TOY)
    return collection_to_arrays(load_tu_text(path))


# -- 1. collection arrays whose lengths disagree ---------------------------------------------------


@pytest.mark.parametrize("name", ["node_ptr", "edge_ptr", "graph_labels", "owner_ids"])
def test_collection_arrays_shorter_than_the_graph_count_name_the_array(tmp_path: Path, name: str) -> None:
    arrays = _collection_arrays(tmp_path)
    arrays[name] = arrays[name][:-1]
    with pytest.raises(InvalidDatasetError, match=name):
        collection_from_arrays(arrays)


@pytest.mark.parametrize(
    ("name", "value"),
    [("node_ptr", [0, 4, 3]), ("node_ptr", [0, 3, 9]), ("node_ptr", [1, 3, 5]), ("edge_ptr", [0, 3, 2])],
)
def test_collection_pointers_must_rise_within_bounds(tmp_path: Path, name: str, value: list[int]) -> None:
    arrays = _collection_arrays(tmp_path)
    arrays[name] = np.asarray(value, dtype=np.int64)
    with pytest.raises(InvalidDatasetError, match=f"'{name}' must rise"):
        collection_from_arrays(arrays)


def test_collection_node_arrays_must_match_the_node_ids(tmp_path: Path) -> None:
    again = collection_from_arrays(_collection_arrays(tmp_path))  # consistent arrays still load
    assert again.graph_ids == ("0", "1") and again.labels.tolist() == [0, 1]
    arrays = _collection_arrays(tmp_path)
    arrays["node_tags"] = arrays["node_tags"][:-1]
    with pytest.raises(InvalidDatasetError, match="'node_tags' has 4 entries for 5 nodes"):
        collection_from_arrays(arrays)


# -- 2. JSON ids and owners -------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [None, True, {"a": 1}, [1], 1.5])
def test_node_graph_ids_must_be_strings_or_integers(bad: Any) -> None:
    obj = _node_graph()
    obj["nodes"][1]["id"] = bad
    with pytest.raises(InvalidDatasetError, match=r"node 1 \(0-based\): 'id' is .*strings or integers"):
        node_graph_from_json(obj)


@pytest.mark.parametrize("bad", [True, {"a": 1}, [1]])
def test_node_graph_owners_must_be_strings_or_integers(bad: Any) -> None:
    obj = _node_graph()
    obj["nodes"][0]["owner"] = bad
    with pytest.raises(InvalidDatasetError, match="node 'a': 'owner'"):
        node_graph_from_json(obj)


def test_integer_ids_become_their_decimal_text_and_null_owners_default_to_the_node() -> None:
    obj = _node_graph(edges=[[7, "b"]])
    obj["nodes"][0]["id"] = 7
    obj["nodes"][0]["owner"] = None
    obj["nodes"][1]["owner"] = None
    graph = node_graph_from_json(obj)
    assert graph.node_ids == ("7", "b") and graph.owner_ids == ("7", "b")
    obj["nodes"][1]["owner"] = 42
    assert node_graph_from_json(obj).owner_ids == ("7", "42")


@pytest.mark.parametrize("bad", [None, False, {"a": 1}, ["x"]])
def test_collection_graph_node_and_owner_ids_must_be_strings_or_integers(bad: Any) -> None:
    with pytest.raises(InvalidDatasetError, match="'graph_id'"):
        graph_from_json(_graph(graph_id=bad))
    obj = _graph()
    obj["nodes"][0]["id"] = bad
    with pytest.raises(InvalidDatasetError, match=r"graph 'g': node 0 \(0-based\): 'id'"):
        graph_from_json(obj)
    if bad is not None:
        with pytest.raises(InvalidDatasetError, match="graph 'g': 'owner'"):
            graph_from_json(_graph(owner=bad))


def test_a_null_graph_owner_defaults_to_the_graph_id() -> None:
    assert graph_from_json(_graph(owner=None)).owner_id == "g"
    assert graph_from_json(_graph(graph_id=3, owner=9)).owner_id == "9"


# -- 3. JSON edges are pairs ------------------------------------------------------------------------


@pytest.mark.parametrize("edge", [["a"], ["a", "b", "c"], "ab", []])
def test_node_graph_edges_must_be_pairs(edge: Any) -> None:
    with pytest.raises(InvalidDatasetError, match=r"edge 1 \(0-based\) is .*pair"):
        node_graph_from_json(_node_graph(edges=[["a", "b"], edge]))


@pytest.mark.parametrize("edge", [["a"], ["a", "b", "c"]])
def test_collection_graph_edges_must_be_pairs(edge: Any) -> None:
    with pytest.raises(InvalidDatasetError, match=r"edge 0 \(0-based\) is .*pair"):
        graph_from_json(_graph(edges=[edge]))


# -- 4. TU text -------------------------------------------------------------------------------------


def _tu(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "g.txt"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("1\n2 0\n0 2 1\n0 1 0\n", "line 3: the node declares 2 neighbours but the line lists 1"),
        ("1\n2 0\n0 -1\n0 0\n", "line 3: the neighbour count m is -1"),
        ("1\n2 0\n0\n0 0\n", "line 3: a node line is"),
        ("1\n2 0\n0 1 1\n0 1 0\n\n1 0\n0 0\n", "line 6: the file declares 1 graph(s) on line 1"),
        ("1\n2 0\n0 1 1 0.5\n0 1 0\n", "line 4: the node has 0 attribute value(s)"),
        ("1\n2 0\n0 1 1\n0 1 0 0.5\n", "line 4: the node has 1 attribute value(s)"),
        ("2\n1 0\n0 0 0.5 1.5\n1 1\n0 0 0.5\n", "line 5: the node has 1 attribute value(s)"),
    ],
)
def test_tu_text_refuses_bad_lines_naming_the_line(tmp_path: Path, text: str, words: str) -> None:
    path = _tu(tmp_path, text)
    with pytest.raises(InvalidDatasetError) as info:
        load_tu_text(path)
    assert words in str(info.value)
    assert str(path) not in str(info.value)


def test_tu_attributes_are_kept_when_every_node_has_them_and_refused_otherwise(tmp_path: Path) -> None:
    c = load_tu_text(_tu(tmp_path, "1\n2 0\n0 1 1 0.5 2\n0 1 0 1.5 3\n"))
    assert c.graphs[0].node_features is not None
    assert c.graphs[0].node_features.tolist() == [[0.5, 2.0], [1.5, 3.0]]
    with pytest.raises(InvalidDatasetError, match="line 4: the node has 1 attribute value"):
        load_tu_text(_tu(tmp_path, "1\n2 0\n0 1 1 0.5 2\n0 1 0 1.5\n"))


def test_a_tu_upload_names_the_file_once(tmp_path: Path) -> None:
    path = _tu(tmp_path, "1\n2 0\n0 2 1\n0 1 0\n")
    with pytest.raises(ApiError) as info:
        upload.parse(path, "tu", "set.txt", None, ReadLimits(max_bytes=10 * 1024 * 1024))
    assert info.value.status == 422 and "line 3" in info.value.message
    assert info.value.message.count("set.txt") == 1, info.value.message


# -- 5. class-count bound ---------------------------------------------------------------------------


def test_node_graph_labels_and_class_counts_are_bounded() -> None:
    obj = _node_graph()
    del obj["num_classes"]
    obj["nodes"][1]["label"] = 10**9
    with pytest.raises(InvalidDatasetError, match="node 'b': label 1000000000 is too large"):
        node_graph_from_json(obj)
    with pytest.raises(InvalidDatasetError, match="JSON: num_classes is 1,000,000,000"):
        node_graph_from_json(_node_graph(num_classes=10**9))
    arrays = node_graph_to_arrays(node_graph_from_json(_node_graph()))
    arrays["num_classes"] = np.asarray(MAX_CLASSES + 1, dtype=np.int64)
    with pytest.raises(InvalidDatasetError, match="num_classes"):
        node_graph_from_arrays(arrays)


def test_graph_labels_tags_and_class_counts_are_bounded(tmp_path: Path) -> None:
    with pytest.raises(InvalidDatasetError, match="graph 'g': label 1000000000 is too large"):
        graph_from_json(_graph(label=10**9))
    obj = _graph()
    obj["nodes"][1]["tag"] = MAX_CLASSES
    with pytest.raises(InvalidDatasetError, match="graph 'g': node 'b': tag"):
        graph_from_json(obj)
    for name in ("num_classes", "num_tags"):
        arrays = _collection_arrays(tmp_path)
        arrays[name] = np.asarray(10**9, dtype=np.int64)
        with pytest.raises(InvalidDatasetError, match=f"{name} is 1,000,000,000"):
            collection_from_arrays(arrays)
