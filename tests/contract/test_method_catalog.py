"""GET /v1/methods: per method, the dataset kinds, release modes, families and every hyperparameter with its
type, default, bounds and choices, as the library declares them (tests/unit/test_method_catalog.py checks
the declarations against check_config)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from unlearning.methods.hessian_free import MAX_LR
from unlearning.methods.registry import get_method, method_names


def _methods(client: TestClient) -> dict[str, dict[str, Any]]:
    r = client.get("/v1/methods")
    assert r.status_code == 200, r.text
    return {m["name"]: m for m in r.json()["methods"]}


def test_every_method_says_what_it_takes(client: TestClient) -> None:
    methods = _methods(client)
    assert sorted(methods) == sorted(method_names())
    for name, m in methods.items():
        assert m["dataset_kinds"] and set(m["dataset_kinds"]) <= {"table", "node_graph", "graph_collection"}
        assert m["release_modes"] and set(m["release_modes"]) <= {"certified", "audited"}
        assert m["families"] and set(m["families"]) <= {"logistic_regression", "mlp", "cnn"}
        shown = {p["name"]: p for p in m["hyperparameters"]}
        assert set(shown) == set(m["default_hyperparameters"]) == set(get_method(name).default_config())
        for key, p in shown.items():
            assert p["default"] == m["default_hyperparameters"][key]
            assert p["description"]
            if p["default"] is None:
                assert p["nullable"] and p["default_note"], (name, key)
            else:
                assert p["default_note"] is None


def test_the_catalogue_shows_the_enforced_values(client: TestClient) -> None:
    methods = _methods(client)
    assert methods["graph_node_newton"]["dataset_kinds"] == ["node_graph"]
    assert methods["graph_classification_newton"]["dataset_kinds"] == ["graph_collection"]
    assert methods["hessian_free"]["dataset_kinds"] == ["table"]
    assert methods["mini_unlearning"]["release_modes"] == ["audited"]
    assert methods["newton_removal"]["families"] == ["logistic_regression"]
    assert sorted(methods["hessian_free"]["families"]) == ["cnn", "logistic_regression", "mlp"]
    lr = next(p for p in methods["hessian_free"]["hyperparameters"] if p["name"] == "lr")
    assert lr["type"] == "number"
    assert (lr["minimum"], lr["exclusive_minimum"], lr["maximum"], lr["exclusive_maximum"]) == (0, True, MAX_LR, False)
    family = next(p for p in methods["hessian_free"]["hyperparameters"] if p["name"] == "family")
    assert sorted(family["choices"]) == sorted(methods["hessian_free"]["families"])
    clip_mode = next(p for p in methods["hessian_free"]["hyperparameters"] if p["name"] == "clip_mode")
    assert clip_mode["choices"] == ["none", "batch", "per_sample"]
    feature_bound = next(p for p in methods["langevin"]["hyperparameters"] if p["name"] == "feature_bound")
    assert feature_bound["default"] is None and feature_bound["default_note"].startswith("derived from the data")
