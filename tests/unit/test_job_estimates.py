"""Every method's job estimate (``estimate_job``): what a training will hold and how long it runs, judged
before anything trains. The estimates follow the algorithms' dominant terms (per-sample vectors,
trajectory windows, Newton's per-row arrays, the burn-in's epochs), grow with the data and the work asked
for, never raise for a configuration ``check_config`` accepts, and are pessimistic: a real fit on one core
takes no longer than its estimate. The calibration behind the constants is in docs/decisions.md ("Job
estimates")."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from unlearning.data.builtin import make_synthetic
from unlearning.methods.hyperparameters import HyperParameter
from unlearning.methods.job_estimate import DataShape, JobEstimate, model_size
from unlearning.methods.protocol import (
    GRAPH_COLLECTION,
    NODE_GRAPH,
    PrivacyTarget,
    UnlearningMethod,
    dataset_kind,
)
from unlearning.methods.registry import get_method, method_names
from unlearning.methods.table_model import TableModel

GIB = 2**30
TABLE = DataShape(2_000, 20, 5)
GRAPHS = DataShape(1_000, 8, 2, nodes=40_000)
NODES = DataShape(3_000, 100, 7, nodes=3_000, edges=10_000)
# The key that sets each method's amount of work, and two values of it (the second the larger).
WORK: dict[str, tuple[str, Any, Any]] = {
    "hessian_free": ("epochs", 2, 20),
    "mini_unlearning": ("epochs", 2, 20),
    "langevin": ("epochs", 10, 1_000),
    "newton_removal": ("max_newton", 2, 20),
    "graph_node_newton": ("max_newton", 2, 20),
    "graph_classification_newton": ("max_newton", 2, 20),
}


def _shape(method: UnlearningMethod, rows_factor: int = 1) -> DataShape:
    kind = dataset_kind(method)
    base = NODES if kind == NODE_GRAPH else GRAPHS if kind == GRAPH_COLLECTION else TABLE
    if rows_factor == 1:
        return base
    nodes = None if base.nodes is None else base.nodes * rows_factor
    edges = None if base.edges is None else base.edges * rows_factor
    return DataShape(base.rows * rows_factor, base.features, base.classes, nodes, edges)


def _sane(estimate: JobEstimate) -> None:
    assert isinstance(estimate, JobEstimate)
    assert estimate.memory_bytes > 0 and math.isfinite(estimate.seconds) and estimate.seconds > 0
    assert "MiB" in estimate.dominant and " s)" in estimate.dominant


def test_every_registered_method_estimates_its_jobs() -> None:
    assert set(WORK) == set(method_names()), "a new method needs its work key in WORK"
    for name in method_names():
        assert isinstance(get_method(name), UnlearningMethod)
        _sane(get_method(name).estimate_job({}, _shape(get_method(name))))


@pytest.mark.parametrize("name", method_names())
def test_the_estimate_grows_with_the_rows_and_with_the_work_asked_for(name: str) -> None:
    method = get_method(name)
    small, large = method.estimate_job({}, _shape(method)), method.estimate_job({}, _shape(method, 4))
    assert large.seconds > small.seconds and large.memory_bytes > small.memory_bytes
    key, little, much = WORK[name]
    assert (
        method.estimate_job({key: much}, _shape(method)).seconds
        > method.estimate_job({key: little}, _shape(method)).seconds
    )


def _bounded(name: str) -> Iterator[tuple[str, HyperParameter, Any]]:
    """Every numeric key of ``name`` at its minimum and at its maximum (just inside an exclusive bound)."""
    for p in get_method(name).hyperparameters():
        if p.kind not in ("integer", "number", "integer_list") or p.name == "min_quality":
            continue
        for bound, exclusive, step in (
            (p.minimum, p.exclusive_minimum, 1),
            (p.maximum, p.exclusive_maximum, -1),
        ):
            assert bound is not None
            value: Any = (
                bound
                if not exclusive
                else (bound + step if p.kind == "integer" else math.nextafter(bound, step * math.inf))
            )
            value = int(value) if p.kind != "number" else value
            yield name, p, [value] if p.kind == "integer_list" else value


BOUNDED = [case for name in method_names() for case in _bounded(name)]


@pytest.mark.parametrize(("name", "p", "value"), BOUNDED, ids=[f"{n}.{p.name}={v}" for n, p, v in BOUNDED])
def test_a_configuration_check_config_accepts_is_estimated_without_error(
    name: str, p: HyperParameter, value: Any
) -> None:
    method = get_method(name)
    context: dict[str, Any] = {"family": "mlp"} if p.name == "hidden" else {}
    config = {**context, p.name: value}
    method.check_config(config)
    _sane(method.estimate_job(config, _shape(method)))


def test_the_most_work_a_registration_may_ask_for_is_estimated_as_such() -> None:
    """The bounds of check_config stop absurd values; within them, the estimate is what refuses a job
    that would run for days: the langevin burn-in at its maximum on a million rows is far more than an
    hour, and every method's estimate for the most work its bounds allow is well above the default's."""
    langevin = get_method("langevin")
    most = {
        p.name: p.maximum for p in langevin.hyperparameters() if p.name in ("epochs", "max_burn_in_epochs")
    }
    assert langevin.estimate_job(most, DataShape(1_000_000, 20, 2)).seconds > 100 * 3600
    for name in method_names():
        method = get_method(name)
        declared = {p.name: p for p in method.hyperparameters()}
        # The SGD methods' work is their epochs; Newton's steps and CG products grow as lam shrinks
        # (max_newton only caps them; an explicit Hessian's cost does not depend on lam).
        most: dict[str, object] = (
            {"lam": declared["lam"].minimum, "solver": "cg"}
            if "lam" in declared
            else {"epochs": int(declared["epochs"].maximum or 0)}
        )
        assert (
            method.estimate_job(most, _shape(method)).seconds
            > 2 * method.estimate_job({}, _shape(method)).seconds
        )


@pytest.mark.parametrize("name", [n for n in method_names() if isinstance(get_method(n), TableModel)])
def test_a_model_with_a_hundred_thousand_classes_is_estimated_large(name: str) -> None:
    """Every table method's parameters scale with the classes ((features + 1) x classes weights): on a
    100,000-class, 2,000-row, 20-feature table each estimate is at least a GiB (Hessian-free: a vector of
    2.1M weights per row; Mini-Unlearning: its window of snapshots, and the probe's baseline; Newton and
    Langevin: arrays of rows x classes), and the model alone is counted at least once."""
    method = get_method(name)
    huge = DataShape(2_000, 20, 100_000)
    assert method.estimate_job({}, huge).memory_bytes >= GIB
    weights = model_size("logistic_regression", 20, 100_000).parameters * 4
    assert method.inner.estimate_job({}, huge).memory_bytes >= weights  # type: ignore[attr-defined]
    assert (
        method.estimate_job({}, huge).seconds
        > 100 * method.estimate_job({}, DataShape(2_000, 20, 10)).seconds
    )


def test_the_table_wrapper_adds_the_quality_probe_to_the_wrapped_estimate() -> None:
    for name in method_names():
        method = get_method(name)
        if isinstance(method, TableModel):
            inner = method.inner.estimate_job(
                {"epochs": 3} if "epochs" in method.default_config() else {}, TABLE
            )
            outer = method.estimate_job({"epochs": 3} if "epochs" in method.default_config() else {}, TABLE)
            assert outer.seconds > inner.seconds and outer.memory_bytes >= inner.memory_bytes


def _single_core_seconds(fit: Any) -> float:
    """CPU seconds of ``fit()`` with torch and BLAS on one thread (what an estimate is for)."""
    from threadpoolctl import threadpool_limits

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            started = time.process_time()
            fit()
            return time.process_time() - started
    finally:
        torch.set_num_threads(threads)


def _node_graph(n: int = 300, f: int = 16, seed: int = 0) -> Any:
    """A seeded three-block graph with sparse features, every node in the training split."""
    import numpy as np
    import scipy.sparse as sp

    from unlearning.data.graphs.node_graph import NodeGraph

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    same = labels[:, None] == labels[None, :]
    edges = np.argwhere(np.triu(rng.random((n, n)) < np.where(same, 0.05, 0.005), 1))
    feats = np.abs(rng.normal(size=(3, f))[labels] + rng.normal(size=(n, f))) * (rng.random((n, f)) < 0.5)
    return NodeGraph(
        tuple(f"v{i}" for i in range(n)), sp.csr_matrix(feats), labels, 3, edges, np.ones(n, int)
    )


def test_real_fits_take_no_longer_than_their_estimates() -> None:
    """Pessimism, measured: a table method (through the service's wrapper, quality probe included) and a
    graph method fitted on one core finish within their estimates (CPU time, so a busy machine does not
    decide it)."""
    privacy = PrivacyTarget(1.0, 1e-3, "audited")
    table = make_synthetic(600, 10, 3, 0)
    newton = get_method("newton_removal")
    spent = _single_core_seconds(lambda: newton.fit(table, {}, privacy, seed=0))
    estimated = newton.estimate_job({}, DataShape(len(table), table.num_features, table.num_classes)).seconds
    assert spent <= estimated, (spent, estimated)

    graph = _node_graph()
    nodes = get_method("graph_node_newton")
    spent = _single_core_seconds(lambda: nodes.fit(graph, {}, PrivacyTarget(1.0, 1e-3, "certified"), seed=0))
    estimated = nodes.estimate_job(
        {}, DataShape(graph.num_nodes, graph.num_features, graph.num_classes)
    ).seconds
    assert spent <= estimated, (spent, estimated)
