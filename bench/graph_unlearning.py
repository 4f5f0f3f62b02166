"""Certified graph unlearning by Newton steps, measured side by side with retraining (digests 001 and 000).

    python -m bench.graph_unlearning            # the full benchmark
    python -m bench.graph_unlearning --quick    # the same keys in under a minute (fewer Cora requests)

Cora (digest 001 section 5.1 defaults: SGC, K = 2, lam = 1e-2, alpha = 0.1, epsilon = 1, delta = 1e-4, the
code's standardisation, split "full": 1,208 training nodes). Three request streams, one request at a time
in a seeded random order, each from the same fitted model:

* ``cora``: delete 20% of the training nodes (features, label and edges);
* ``cora_edges``: delete as many random edges;
* ``cora_features``: delete the features (and labels) of as many random training nodes.

For each stream: ``removal_ms`` is the mean wall time of ``forget`` (local propagation, Newton step,
bound, and any retrain the budget forced, amortised); ``retrain_ms`` the mean wall time of one retrain from
scratch on the graph as it is at that point (full propagation, fresh noise, Newton-CG to the same
tolerance), measured at checkpoints interleaved with the requests so both see the same machine load;
``speedup`` their ratio. ``retrain_lbfgs_ms`` times the authors' training procedure instead (torch L-BFGS,
float32, 100 steps of up to 20 iterations, lr 0.5, on the mean-form objective). Accuracies are test
accuracies (1,000 nodes) at the end: the unlearned model, retraining with the same objective perturbation
(fresh noise, mean over seeds) and without noise. ``cora_no_graph`` is the same Newton method on the raw
features without the graph (Guo et al.; the paper's "+12%" comparison) for the node stream.

IMDB-BINARY (digest 000: GST J = 4, L = 3, Q = 3 on the one-hot degree signal, alpha = 0.1, lam = 1e-2;
10% / 10% / 80% split of the 1,000 graphs, seeded): one node is deleted from each of 90 of the 100
training graphs, one request at a time. ``acc_gin`` and ``gin_train_ms`` come from GIN trained from scratch
on the final training graphs (500 epochs, only the training epochs are timed); ``speedup_vs_gin`` is GIN's
training time over our mean time per removal. ``imdb_lam_1e-3`` (full run only) repeats the stream with
the paper's lam = 1e-3.

Timings run with one torch/BLAS thread by default (``--threads``): on this shared two-core machine, two-thread
BLAS spin-waits under other processes' load made a removal 3.7x and a GIN training 3.6x slower than one thread
did in the same minute, which would make ratios depend on the neighbours' load. Every side of every ratio runs
under the same setting. Every figure is measured in this run; the last printed line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from bench.baselines.gin import GINConfig, train_gin
from unlearning.data import Dataset
from unlearning.data.graphs.collection import GraphCollection
from unlearning.data.graphs.node_graph import NodeGraph
from unlearning.data.graphs.planetoid import load_cora
from unlearning.data.graphs.tu import load_imdb_binary
from unlearning.data.splits import split_indices
from unlearning.methods import graph_classification_newton as gcn
from unlearning.methods import graph_node_newton as gnn
from unlearning.methods.newton_tabular import NewtonTabular
from unlearning.methods.protocol import ForgetRequest, MethodState, PrivacyTarget
from unlearning.models.propagation import FeatureScaler, PropagationSpec, full_features
from unlearning.models.scattering import node_signal
from unlearning.newton import (
    DenseDesign,
    Objective,
    draw_noise,
    predict_labels,
    signed_targets,
    train_perturbed,
)

PRIVACY = PrivacyTarget(epsilon=1.0, delta=1e-4, release_mode="certified")
CORA_CONFIG: dict[str, Any] = {"lam": 1e-2, "alpha": 0.1, "propagation": "sgc", "hops": 2,
                               "normalization": "standardize"}
IMDB_CONFIG: dict[str, Any] = {"lam": 1e-2, "alpha": 0.1, "J": 4, "L": 3, "Q": 3, "signal": "degree"}


def _now() -> float:
    return time.perf_counter()


# --------------------------------------------------------------------------------------------------
# Cora


@dataclass
class Retrained:
    weights: torch.Tensor
    seconds: float
    propagation_seconds: float


def retrain_cora(graph: NodeGraph, config: dict[str, Any], alpha: float, seed: int) -> Retrained:
    """Retrain from scratch: scaler, full propagation, fresh noise, Newton-CG to the method's tolerance."""
    started = _now()
    scaler = FeatureScaler.fit(graph, str(config["normalization"]))
    spec = PropagationSpec(config["propagation"], int(config["hops"]))
    rows = np.flatnonzero(graph.training_mask())
    feats = torch.from_numpy(np.ascontiguousarray(full_features(graph, scaler, spec)[rows]))
    propagated = _now()
    objective = Objective(DenseDesign(feats), signed_targets(graph.labels[rows], graph.num_classes),
                          torch.ones(len(rows), dtype=torch.float64), float(config["lam"]))
    noise = draw_noise(feats.shape[1], objective.columns, alpha, seed)
    result = train_perturbed(objective, noise, tol=1e-9)
    return Retrained(result.weights, _now() - started, propagated - started)


def retrain_cora_lbfgs(graph: NodeGraph, config: dict[str, Any], alpha: float, seed: int) -> float:
    """The authors' training procedure (sgc_unlearn ``lr_optimize``): seconds, propagation included."""
    started = _now()
    scaler = FeatureScaler.fit(graph, str(config["normalization"]))
    spec = PropagationSpec(config["propagation"], int(config["hops"]))
    rows = np.flatnonzero(graph.training_mask())
    X = torch.from_numpy(full_features(graph, scaler, spec)[rows]).float()
    Y = signed_targets(graph.labels[rows], graph.num_classes).float()
    m = X.shape[0]
    B = draw_noise(X.shape[1], Y.shape[1], alpha, seed).float()
    W = torch.zeros(X.shape[1], Y.shape[1], requires_grad=True)
    lam = float(config["lam"])
    optimiser = torch.optim.LBFGS([W], lr=0.5, tolerance_grad=1e-32, tolerance_change=1e-32)

    def closure() -> torch.Tensor:
        optimiser.zero_grad()
        loss = torch.nn.functional.softplus(-Y * (X @ W)).mean(0).sum() + lam / 2 * (W * W).sum() + (B * W).sum() / m
        loss.backward()
        return loss

    for _ in range(100):
        optimiser.step(closure)
    return _now() - started


def retrain_same_noise(state: MethodState, graph: NodeGraph) -> torch.Tensor:
    """The exact minimiser the unlearned model approximates: the same features (the epoch's frozen
    statistics), the same noise B, the remaining training nodes."""
    rows = np.flatnonzero(graph.training_mask())
    feats = torch.from_numpy(np.ascontiguousarray(gnn.node_features(state, graph)[rows]))
    objective = Objective(DenseDesign(feats), signed_targets(graph.labels[rows], graph.num_classes),
                          torch.ones(len(rows), dtype=torch.float64), float(state.accounting["config"]["lam"]))
    noise = draw_noise(feats.shape[1], objective.columns, float(state.accounting["noise_std"]),
                       int(state.accounting["noise_seed"]))
    return train_perturbed(objective, noise, tol=1e-10).weights


def _accuracy(state: MethodState, graph: NodeGraph, test: np.ndarray) -> float:
    return float((gnn.predict(state, graph, test) == graph.labels[test]).mean())


def _weights_accuracy(W: torch.Tensor, graph: NodeGraph, config: dict[str, Any], test: np.ndarray) -> float:
    scaler = FeatureScaler.fit(graph, str(config["normalization"]))
    feats = full_features(graph, scaler, PropagationSpec(config["propagation"], int(config["hops"])))[test]
    return float((predict_labels(W, torch.from_numpy(feats)) == graph.labels[test]).mean())


def cora_requests(graph: NodeGraph, kind: str, count: int, seed: int) -> list[ForgetRequest]:
    rng = np.random.default_rng([seed, {"nodes": 1, "edges": 2, "features": 3}[kind]])
    if kind == "edges":
        rows = rng.permutation(graph.num_edges)[:count]
        return [ForgetRequest(edges=((graph.node_ids[u], graph.node_ids[v]),)) for u, v in graph.edges[rows]]
    nodes = rng.permutation(np.flatnonzero(graph.training_mask()))[:count]
    if kind == "nodes":
        return [ForgetRequest(sample_ids=(graph.node_ids[i],)) for i in nodes]
    return [ForgetRequest(node_feature_ids=(graph.node_ids[i],)) for i in nodes]


def run_cora_stream(
    graph: NodeGraph, fitted: MethodState, kind: str, count: int, seed: int, checkpoints: int, lbfgs: int,
    retrain_seeds: int,
) -> dict[str, Any]:
    method = gnn.GraphNodeNewton()
    test = np.flatnonzero(graph.split == 3)
    requests = cora_requests(graph, kind, count, seed)
    every = max(1, count // checkpoints)
    state, current = fitted, graph
    times: list[float] = []
    newton: list[float] = []
    retrain_times: list[float] = []
    retrain_prop: list[float] = []
    lbfgs_times: list[float] = []
    for k, request in enumerate(requests):
        started = _now()
        outcome = method.forget(state, request, noise_seed=seed * 100_003 + k, privacy=PRIVACY, remaining=current)
        times.append(_now() - started)
        newton.append(outcome.certificate.measured.get("newton_seconds", float("nan")))
        state = outcome.state
        current = current.after_request(request)  # the data store's bookkeeping (not the method's cost)
        if (k + 1) % every == 0 and len(retrain_times) < checkpoints:
            r = retrain_cora(current, CORA_CONFIG, float(CORA_CONFIG["alpha"]), seed + 7 * k)
            retrain_times.append(r.seconds)
            retrain_prop.append(r.propagation_seconds)
            if len(lbfgs_times) < lbfgs:
                lbfgs_times.append(retrain_cora_lbfgs(current, CORA_CONFIG, float(CORA_CONFIG["alpha"]), seed + k))
    retrains = [retrain_cora(current, CORA_CONFIG, float(CORA_CONFIG["alpha"]), 10_000 + seed + s)
                for s in range(retrain_seeds)]
    retrain_accs = [_weights_accuracy(r.weights, current, CORA_CONFIG, test) for r in retrains]
    noiseless = retrain_cora(current, CORA_CONFIG, 0.0, 0)
    same = retrain_same_noise(state, current)
    W_state = state.model.weight_matrix(state.released_weights.to(torch.float64))
    same_feats = torch.from_numpy(gnn.node_features(state, current)[test])
    removal = float(np.mean(times))
    retrain = float(np.mean(retrain_times))
    out = {
        "requests": count,
        "fraction_of_training_nodes": count / len(fitted.artifacts["row_nodes"]),
        "acc_initial": _accuracy(fitted, graph, test),
        "acc_unlearned": _accuracy(state, current, test),
        "acc_retrain": float(np.mean(retrain_accs)),
        "acc_retrain_std": float(np.std(retrain_accs)),
        "acc_retrain_seeds": len(retrain_accs),
        "acc_retrain_noiseless": _weights_accuracy(noiseless.weights, current, CORA_CONFIG, test),
        "acc_retrain_same_noise": float((predict_labels(same, same_feats) == current.labels[test]).mean()),
        "distance_to_same_noise_retrain": float((W_state - same).norm()),
        "distance_bound": float(state.accounting["spent"]) / (float(CORA_CONFIG["lam"]) * int(state.accounting["remaining"])),
        "retrains": int(state.accounting["retrains"]),
        "removal_ms": 1e3 * removal,
        "removal_median_ms": 1e3 * float(np.median(times)),
        "newton_step_ms": 1e3 * float(np.nanmean(newton)),
        "retrain_ms": 1e3 * retrain,
        "retrain_propagation_ms": 1e3 * float(np.mean(retrain_prop)),
        "speedup": retrain / removal,
        "speedup_training_only": (retrain - float(np.mean(retrain_prop))) / removal,
        "budget_spent": float(state.accounting["spent"]),
        "budget_cap": float(state.accounting["cap"]),
    }
    if lbfgs_times:
        out["retrain_lbfgs_ms"] = 1e3 * float(np.mean(lbfgs_times))
        out["speedup_vs_lbfgs_retrain"] = float(np.mean(lbfgs_times)) / removal
    return out


def run_cora_no_graph(graph: NodeGraph, count: int, seed: int) -> dict[str, Any]:
    """Guo et al.'s Newton removal on the raw features (no propagation) for the node stream."""
    method = NewtonTabular()
    rows = np.flatnonzero(graph.training_mask())
    ids = tuple(graph.node_ids[i] for i in rows)
    data = Dataset(ids, ids, graph.features[rows].toarray(), graph.labels[rows], graph.num_classes, name="cora-raw")
    config = {"lam": CORA_CONFIG["lam"], "alpha": CORA_CONFIG["alpha"], "normalization": "standardize"}
    state, _ = method.fit(data, config, PRIVACY, seed=seed)
    test = np.flatnonzero(graph.split == 3)
    test_x = graph.features[test].toarray()
    fmap_state = state
    requests = cora_requests(graph, "nodes", count, seed)
    times = []
    for k, request in enumerate(requests):
        started = _now()
        outcome = method.forget(state, request, noise_seed=seed * 7919 + k, privacy=PRIVACY, remaining=data)
        times.append(_now() - started)
        state = outcome.state
        data = data.without(request.sample_ids)
    from unlearning.methods.newton_tabular import TabularFeatureMap

    def acc(st: MethodState) -> float:
        fmap = TabularFeatureMap.restore(st.model.feature_map, st.artifacts)
        W = st.model.weight_matrix(st.released_weights.to(torch.float64))
        return float((predict_labels(W, torch.from_numpy(fmap.transform(test_x))) == graph.labels[test]).mean())

    return {"requests": count, "acc_initial": acc(fmap_state), "acc_unlearned": acc(state),
            "retrains": int(state.accounting["retrains"]), "removal_ms": 1e3 * float(np.mean(times))}


# --------------------------------------------------------------------------------------------------
# IMDB-BINARY


def _degree_signal(max_degree: int) -> Callable[[Any], np.ndarray]:
    return lambda graph: node_signal(graph, "degree", max_degree=max_degree)


def run_imdb_split(collection: GraphCollection, config: dict[str, Any], seed: int, gin_epochs: int | None
                   ) -> dict[str, Any]:
    """One 10/10/80 split: fit, delete one node from each of 90 of the 100 training graphs, retrain, GIN."""
    method = gcn.GraphClassificationNewton()
    tr, va, te = split_indices(len(collection), [0.1, 0.1, 0.8], seed)
    train, val, test = collection.take(tr, "train"), collection.take(va, "val"), collection.take(te, "test")
    config = {**config, "max_degree": collection.max_degree}
    started = _now()
    fitted, _ = method.fit(train, config, PRIVACY, seed=seed)
    fit_seconds = _now() - started
    test_z = gcn.embed_collection(fitted, test)
    rng = np.random.default_rng([seed, 90])
    order = rng.permutation(len(train))[:90]
    state, current = fitted, train
    times, newton = [], []
    for k, pos in enumerate(order):
        graph = train.graphs[pos]
        node = int(rng.choice(np.flatnonzero(~graph.deleted)))
        request = ForgetRequest(graph_nodes=((graph.graph_id, graph.node_ids[node]),))
        t0 = _now()
        outcome = method.forget(state, request, noise_seed=seed * 100_019 + k, privacy=PRIVACY, remaining=current)
        times.append(_now() - t0)
        newton.append(outcome.certificate.measured.get("newton_seconds", float("nan")))
        state = outcome.state
        current = current.after_request(request)
    t0 = _now()
    retrained, _ = method.fit(current, config, PRIVACY, seed=seed + 1)
    retrain_seconds = _now() - t0
    # The exact minimiser the unlearned model approximates: same embeddings, same noise B (this epoch's seed).
    same, _ = method.fit(current, config, PRIVACY, seed=int(state.accounting["noise_seed"]))
    out: dict[str, Any] = {
        "times": times,
        "newton": newton,
        "fit_seconds": fit_seconds,
        "retrain_seconds": retrain_seconds,
        "dim": int(fitted.model.dim),
        "acc_initial": float((gcn.predict(fitted, test, test_z) == test.labels).mean()),
        "acc_unlearned": float((gcn.predict(state, test, test_z) == test.labels).mean()),
        "acc_retrain": float((gcn.predict(retrained, test, test_z) == test.labels).mean()),
        "acc_retrain_same_noise": float((gcn.predict(same, test, test_z) == test.labels).mean()),
        "distance_to_same_noise_retrain": float((state.released_weights - same.released_weights).norm()),
        "retrains": int(state.accounting["retrains"]),
    }
    if gin_epochs:
        gin = train_gin(list(current.graphs), list(val.graphs), list(test.graphs), collection.num_classes,
                        _degree_signal(collection.max_degree), GINConfig(epochs=gin_epochs), seed=seed)
        out.update({"acc_gin": gin.test_accuracy, "gin_seconds": gin.train_seconds, "gin_epochs": gin.epochs})
    return out


def run_imdb(collection: GraphCollection, config: dict[str, Any], splits: list[int], gin_epochs: int | None
             ) -> dict[str, Any]:
    """Means over ``splits`` (the paper averages over random splits; one split's accuracy moves by points)."""
    runs = [run_imdb_split(collection, config, s, gin_epochs) for s in splits]
    times = [t for r in runs for t in r["times"]]
    removal = float(np.mean(times))
    out: dict[str, Any] = {
        "splits": len(runs),
        "train_graphs": 100,
        "requests_per_split": 90,
        "dim": runs[0]["dim"],
        "acc_initial": float(np.mean([r["acc_initial"] for r in runs])),
        "acc_unlearned": float(np.mean([r["acc_unlearned"] for r in runs])),
        "acc_unlearned_per_split": [r["acc_unlearned"] for r in runs],
        "acc_retrain": float(np.mean([r["acc_retrain"] for r in runs])),
        "acc_retrain_same_noise": float(np.mean([r["acc_retrain_same_noise"] for r in runs])),
        "distance_to_same_noise_retrain_max": float(max(r["distance_to_same_noise_retrain"] for r in runs)),
        "retrains": float(np.mean([r["retrains"] for r in runs])),
        "retrains_per_split": [r["retrains"] for r in runs],
        "removal_ms": 1e3 * removal,
        "removal_median_ms": 1e3 * float(np.median(times)),
        "newton_step_ms": 1e3 * float(np.nanmean([t for r in runs for t in r["newton"]])),
        "fit_ms": 1e3 * float(np.mean([r["fit_seconds"] for r in runs])),
        "retrain_ms": 1e3 * float(np.mean([r["retrain_seconds"] for r in runs])),
    }
    if gin_epochs:
        gin_seconds = float(np.mean([r["gin_seconds"] for r in runs]))
        out.update({
            "acc_gin": float(np.mean([r["acc_gin"] for r in runs])),
            "acc_gin_per_split": [r["acc_gin"] for r in runs],
            "gin_epochs": gin_epochs,
            "gin_train_ms": 1e3 * gin_seconds,
            "speedup_vs_gin": gin_seconds / removal,
        })
    return out


# --------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="2.5%% of the Cora training nodes per stream, one IMDB split, no L-BFGS or no-graph runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="threads for torch and BLAS (default 1: on a shared machine two-thread BLAS spin-waits "
                             "inflate small operations several-fold; every side of every ratio runs under the same "
                             "setting)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with threadpool_limits(limits=args.threads):
        run(args)


def run(args: argparse.Namespace) -> None:
    started = _now()
    seed = args.seed
    graph = load_cora()
    train_nodes = int(graph.training_mask().sum())
    count = max(1, math.ceil((0.025 if args.quick else 0.2) * train_nodes))
    checkpoints, lbfgs, retrain_seeds = (2, 0, 1) if args.quick else (10, 2, 3)
    t0 = _now()
    fitted, fit_cert = gnn.GraphNodeNewton().fit(graph, CORA_CONFIG, PRIVACY, seed=seed)
    cora_fit_ms = 1e3 * (_now() - t0)
    print(f"cora: fitted in {cora_fit_ms:.0f} ms; {count} requests per stream", flush=True)
    result: dict[str, Any] = {"quick": bool(args.quick), "seed": seed}
    for key, kind in (("cora", "nodes"), ("cora_edges", "edges"), ("cora_features", "features")):
        result[key] = run_cora_stream(graph, fitted, kind, count, seed, checkpoints, lbfgs if kind == "nodes" else 0,
                                      retrain_seeds)
        result[key]["fit_ms"] = cora_fit_ms
        print(f"{key}: {json.dumps(result[key])}", flush=True)
    if not args.quick:
        result["cora_no_graph"] = run_cora_no_graph(graph, count, seed)
        print(f"cora_no_graph: {json.dumps(result['cora_no_graph'])}", flush=True)
    imdb = load_imdb_binary()
    splits = [seed] if args.quick else [seed + s for s in range(5)]
    result["imdb"] = run_imdb(imdb, IMDB_CONFIG, splits, gin_epochs=500)
    print(f"imdb: {json.dumps(result['imdb'])}", flush=True)
    if not args.quick:
        result["imdb_lam_1e-3"] = run_imdb(imdb, {**IMDB_CONFIG, "lam": 1e-3}, splits, gin_epochs=None)
        print(f"imdb_lam_1e-3: {json.dumps(result['imdb_lam_1e-3'])}", flush=True)
    result["config"] = {"privacy": {"epsilon": PRIVACY.epsilon, "delta": PRIVACY.delta}, "cora": CORA_CONFIG,
                        "imdb": IMDB_CONFIG, "cora_initial_residual": fit_cert.budget_spent}
    result["machine"] = {"python": platform.python_version(), "torch": torch.__version__,
                         "threads": torch.get_num_threads(), "processor": platform.machine()}
    result["seconds"] = _now() - started
    print(json.dumps(result))


if __name__ == "__main__":
    main()
