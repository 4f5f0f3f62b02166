"""``check_config``: every method refuses, before any training, the hyperparameters its ``fit`` would."""

from __future__ import annotations

from typing import Any

import pytest

from unlearning.errors import InvalidConfigError
from unlearning.methods.registry import get_method, method_names

# Values of every JSON shape, most of them wrong for most keys.
PROBES: list[Any] = [None, -1, 0, -0.5, 2.5, "x", True, [], [0], {}, float("inf"), float("nan")]


@pytest.mark.parametrize("name", method_names())
def test_defaults_pass(name: str) -> None:
    method = get_method(name)
    method.check_config(method.default_config())
    method.check_config({})


@pytest.mark.parametrize("name", method_names())
def test_a_bad_value_is_an_invalid_config_error_and_nothing_else(name: str) -> None:
    """Whatever a client sends for any key, the answer is accepted or InvalidConfigError (a 422 in the
    service), never a TypeError or ValueError from deep inside (a 500)."""
    method = get_method(name)
    for key in method.default_config():
        for value in PROBES:
            try:
                method.check_config({key: value})
            except InvalidConfigError:
                pass


@pytest.mark.parametrize(
    ("name", "override", "needle"),
    [
        ("hessian_free", {"epochs": -1}, "epochs"),
        ("hessian_free", {"batch_size": 0}, "batch_size"),
        ("hessian_free", {"lr": 0.0}, "lr"),
        ("hessian_free", {"l2": float("nan")}, "l2"),
        ("hessian_free", {"clip_mode": "per_sample", "clip_norm": None}, "clip_norm"),
        ("hessian_free", {"family": "mlp", "hidden": [64, -3]}, "hidden"),
        ("hessian_free", {"family": "transformer"}, "family"),
        ("hessian_free", {"rho_iterations": 0}, "rho_iterations"),
        ("hessian_free", {"audit_probe_fraction": 1.5}, "audit_probe_fraction"),
        ("mini_unlearning", {"m": 0}, "m (the L-BFGS memory)"),
        ("mini_unlearning", {"k": 10**9}, "k (the number of replayed steps) must be at most"),
        ("mini_unlearning", {"m": 51}, "m (the L-BFGS memory) must be at most"),
        ("mini_unlearning", {"dtype": "float16"}, "dtype"),
        ("mini_unlearning", {"max_deletion_fraction": 0}, "max_deletion_fraction"),
        ("newton_removal", {"alpha": -0.1}, "alpha"),
        ("newton_removal", {"normalization": "zscore"}, "normalization"),
        ("newton_removal", {"intercept": -1.0}, "intercept"),
        ("newton_removal", {"family": "mlp"}, "family"),
        ("graph_node_newton", {"hops": -1}, "hops"),
        ("graph_node_newton", {"propagation": "gcn"}, "propagation"),
        ("graph_node_newton", {"normalization": "clip"}, "normalization"),
        ("graph_node_newton", {"max_newton": True}, "max_newton"),
        ("graph_classification_newton", {"J": 0}, "J"),
        ("graph_classification_newton", {"signal": "pagerank"}, "signal"),
        ("graph_classification_newton", {"max_degree": -2}, "max_degree"),
        ("graph_classification_newton", {"nonlinear": 1}, "nonlinear"),
        ("langevin", {"radius": 0.0}, "radius"),
        ("langevin", {"sigma": -0.03}, "sigma"),
        ("langevin", {"batch_size": -1}, "batch_size"),
        ("langevin", {"epochs": 0}, "epochs"),
        ("langevin", {"pabi": "loose"}, "pabi"),
        ("langevin", {"intercept": 1}, "intercept"),
        ("langevin", {"family": "mlp"}, "family"),
    ],
)
def test_refuses_what_fit_would(name: str, override: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        get_method(name).check_config(override)
