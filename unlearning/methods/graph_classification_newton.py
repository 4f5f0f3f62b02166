"""The ``graph_classification_newton`` method: certified unlearning for graph classification with graph
scattering transform (GST) embeddings and logistic regression (Pan, Chien, Milenkovic, WWW 2023; digest 000).

Every training graph is embedded by the fixed, non-trainable geometric scattering transform
(:mod:`unlearning.models.scattering`); a one-vs-rest logistic regression with objective perturbation is
trained on the embeddings (:mod:`unlearning.newton`). Because the transform has no trainable
part, a deletion inside graph n changes row n of the design and nothing else (paper Section 4).

Requests:

* ``graph`` (or ``sample``, whose ids are graph ids here; ``owner`` = the owner's graphs): the whole
  training graph leaves (Guo et al.'s case: Delta = its gradient plus lam W).
* ``graph_node`` ((graph id, node id) pairs): the node's signal and incident edges go, the node stays as
  an isolated zero tombstone (paper Alg. 2); only that graph's embedding is recomputed. The degree
  signal of its former neighbours is recomputed too (the code keeps their stale degrees, which would
  leave a trace of the deleted node; digest 000 section 8.4). A graph whose last live node goes is
  removed whole.

Node signal: ``degree`` (one-hot of the current degree, IMDB-BINARY), ``tag`` (one-hot node tag,
PROTEINS) or ``features`` (continuous attributes); ``auto`` picks features, else tags when there are
several, else degree. The code's StandardScaler over all nodes is NOT applied: its statistics depend on
every graph (a leak), and on IMDB-BINARY with alpha = 0.1 it costs accuracy (measured: 55% vs 69% test
accuracy over 5 splits at 10% training ratio), because the standardised embeddings are ~14x smaller while
the noise is not.

State: the weights, the current embeddings of the epoch's training graphs (rows of graphs that left are
zero), their norms, which rows are live, and scalars. Rows map to the remaining collection by order: the
remaining collection's graphs are the live rows in order (checked through a digest of their ids).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from unlearning.data.graphs.collection import GraphCollection
from unlearning.data.graphs.requests import graph_node_key
from unlearning.device import default_device
from unlearning.errors import (
    DimensionMismatchError,
    InvalidConfigError,
    InvalidDatasetError,
    UnsupportedRequestError,
)
from unlearning.methods.hyperparameters import HyperParameter, check_declared
from unlearning.methods.job_estimate import FLOAT64, DataShape, JobEstimate, estimate, hot_store_bytes
from unlearning.methods.protocol import (
    BudgetPolicy,
    ForgetRequest,
    MethodState,
    PrivacyTarget,
    ProgressCallback,
)
from unlearning.methods.registry import register
from unlearning.models.scattering import ScatteringConfig, SignalKind, embed_graph, scattering_dim
from unlearning.newton import (
    DenseDesign,
    NewtonAccounting,
    NewtonConfig,
    NewtonMethodBase,
    NewtonModelSpec,
    Objective,
    Removal,
    columns_for,
    gradient_difference,
    newton_hyperparameters,
    newton_progress,
    number_spec,
    predict_labels,
    signed_targets,
    start_epoch,
    text_spec,
)
from unlearning.newton.estimate import newton_terms
from unlearning.privacy.certificate import Certificate

_METHOD_KEYS = ("J", "L", "Q", "nonlinear", "signal", "max_degree")
# Bounds on the scattering settings (digest 000 uses J 3 to 5, L 2 or 3, Q 2 to 4, one-hot degrees up to COLLAB's
# 491). The embedding has (sum_{l<L} J^l) * channels * Q entries per graph and every layer applies the walk
# 2^(J-1) times, so these keep one value from sizing a design no training can hold.
MAX_SCALES = 8  # J: 2^7 = 128 walk applications per layer
MAX_LAYERS = 5  # L: 4,681 tree nodes at J = 8
MAX_MOMENTS = 8  # Q
MAX_DEGREE = 4_096  # one-hot degree channels; the authors' code switches to a scalar degree above 1,000
# What a job estimate assumes when the data's shape does not say: the one-hot degree width of a null
# max_degree (COLLAB's largest degree is 491, IMDB-BINARY's 135) and the mean nodes per graph (IMDB-BINARY: 20,
# PROTEINS: 39, COLLAB: 74); and the fixed cost of one graph's embedding and of one numpy call in it.
ASSUMED_DEGREE_CHANNELS = 256
ASSUMED_NODES_PER_GRAPH = 64.0
GRAPH_SECONDS = 3e-4
CALL_SECONDS = 2e-5


@dataclass(frozen=True, kw_only=True)
class GraphAccounting(NewtonAccounting):
    """The Newton ledger with the digest of the epoch's current graph ids and the opening's timings."""

    ids_digest: str = field(metadata=text_spec())
    """SHA-256 of the remaining training graphs' ids, in order (the rows map to them by order)."""
    embed_seconds: float = field(metadata=number_spec())
    """Computing the scattering embeddings at the epoch's opening."""
    epoch_seconds: float = field(metadata=number_spec())
    """The whole opening: embeddings, training and the operator norm."""


def _collection(data: Any, what: str) -> GraphCollection:
    if not isinstance(data, GraphCollection):
        raise InvalidDatasetError(
            f"the graph_classification_newton method {what} a GraphCollection (unlearning.data.graphs), "
            f"got {type(data).__name__}"
        )
    return data


def _ids_digest(ids: Sequence[str]) -> str:
    return hashlib.sha256("\x1f".join(ids).encode()).hexdigest()


_SIGNALS = ("auto", "degree", "tag", "features")


def _resolve_signal(collection: GraphCollection, signal: str) -> SignalKind:
    if signal == "auto":
        if collection.num_node_features:
            return "features"
        return "tag" if collection.num_tags > 1 else "degree"
    if signal not in _SIGNALS:
        raise InvalidConfigError(f"signal must be one of {_SIGNALS}, got {signal!r}")
    return signal  # type: ignore[return-value]


def embedding_settings(state: MethodState) -> tuple[ScatteringConfig, SignalKind, int, int]:
    fm = state.model.feature_map
    cfg = ScatteringConfig(int(fm["J"]), int(fm["L"]), int(fm["Q"]), bool(fm["nonlinear"]))
    return cfg, fm["signal"], int(fm["max_degree"]), int(fm["num_tags"])


def embed_collection(state: MethodState, collection: GraphCollection) -> np.ndarray:
    """The (G, d) GST embeddings of ``collection`` under this model's settings (evaluation, prediction)."""
    cfg, signal, max_degree, num_tags = embedding_settings(state)
    return np.stack([embed_graph(g, cfg, signal, max_degree=max_degree, num_tags=num_tags)
                     for g in collection.graphs])


def predict(state: MethodState, collection: GraphCollection, features: np.ndarray | None = None) -> np.ndarray:
    feats = embed_collection(state, collection) if features is None else features
    W = state.model.weight_matrix(state.released_weights.to(torch.float64))
    return predict_labels(W, torch.from_numpy(np.ascontiguousarray(feats)))


class GraphClassificationNewton(NewtonMethodBase[GraphAccounting]):
    """The ``graph_classification_newton`` method; see the module docstring."""

    name: ClassVar[str] = "graph_classification_newton"
    request_kinds: ClassVar[frozenset[str]] = frozenset({"graph", "graph_node", "sample", "owner"})
    needs_training_data: ClassVar[bool] = True
    forget_needs: ClassVar[str] = "the current training graphs"
    accounting_type = GraphAccounting

    def default_config(self) -> dict[str, Any]:
        """Digest 000 Table 4's IMDB unlearning setting (J=4, L=3, Q=3, alpha 0.1) with lam 1e-2 instead of the
        paper's 1e-3: on IMDB-BINARY the test accuracy is the same (68.95% both, 5 splits) and the sound budget
        forces about 40% fewer retrains (31 vs 53 per 90 node deletions, bench.graph_unlearning)."""
        return {**NewtonConfig(lam=1e-2).to_dict(), "J": 4, "L": 3, "Q": 3, "nonlinear": True,
                "signal": "auto", "max_degree": None}

    def hyperparameters(self) -> tuple[HyperParameter, ...]:
        return (
            *newton_hyperparameters(),
            HyperParameter("J", "integer", "Wavelet scales of the graph scattering transform", minimum=1,
                           maximum=MAX_SCALES),
            HyperParameter("L", "integer", "Layers of the scattering tree (root = layer 0)", minimum=1,
                           maximum=MAX_LAYERS),
            HyperParameter("Q", "integer", "Moments taken of each scattering channel", minimum=1, maximum=MAX_MOMENTS),
            HyperParameter("nonlinear", "boolean", "Absolute-value nonlinearity between scattering layers"),
            HyperParameter("signal", "string", "The graph signal scattered: degree, tag, features, or auto (the "
                           "collection's features, else tags, else degrees)", choices=_SIGNALS),
            HyperParameter("max_degree", "integer", "Largest degree of the one-hot degree signal", minimum=0,
                           maximum=MAX_DEGREE, nullable=True, null_means="derived from the data: the training graphs' largest degree"),
        )

    def check_config(self, config: Mapping[str, Any]) -> None:
        merged, _ = self._configs(config)
        ScatteringConfig(merged["J"], merged["L"], merged["Q"], merged["nonlinear"])
        if not isinstance(merged["nonlinear"], bool):
            raise InvalidConfigError(f"nonlinear must be true or false, got {merged['nonlinear']!r}")
        if merged["signal"] not in _SIGNALS:
            raise InvalidConfigError(f"signal must be one of {_SIGNALS}, got {merged['signal']!r}")
        check_declared(self.hyperparameters(), merged)

    def estimate_job(self, config: Mapping[str, Any], shape: DataShape) -> JobEstimate:
        """The scattering embeddings of every graph (walks of the assumed or given graph size), then Newton-CG on the (graphs,
        T x channels x Q) design (:mod:`unlearning.newton.estimate`)."""
        merged = {**self.default_config(), **dict(config)}
        gst = ScatteringConfig(int(merged["J"]), int(merged["L"]), int(merged["Q"]), bool(merged["nonlinear"]))
        degree = merged["signal"] == "degree" or (merged["signal"] == "auto" and shape.features <= 1)
        if degree:
            channels = ASSUMED_DEGREE_CHANNELS if merged["max_degree"] is None else int(merged["max_degree"]) + 1
        else:
            channels = max(shape.features, 1)
        dim = scattering_dim(gst, channels)
        memory, flops, fixed = newton_terms(shape.rows, dim, shape.classes, merged)
        memory["the embeddings (stacked: 2 float64 copies)"] = 2.0 * shape.rows * dim * FLOAT64
        nodes = ASSUMED_NODES_PER_GRAPH if not shape.nodes else max(shape.nodes / max(shape.rows, 1), 1.0)
        active = min(channels, nodes) if degree or merged["signal"] == "tag" else channels  # one-hot: <= nodes used
        walks = 2 ** (gst.J - 1) * sum(gst.J**layer for layer in range(gst.L - 1))
        per_graph = 2.0 * walks * min(nodes, 256.0) * nodes * active + 3.0 * nodes * gst.tree_nodes * active * gst.Q
        flops["scattering embeddings (graphs x walks x nodes^2 x channels)"] = shape.rows * per_graph
        memory["one graph's scattering tensor"] = 2.0 * nodes * gst.tree_nodes * active * gst.Q * FLOAT64
        fixed["scattering embeddings' small steps"] = shape.rows * (
            GRAPH_SECONDS + (gst.L - 1) * (2 ** (gst.J - 1) + 2 * gst.Q) * CALL_SECONDS
        )
        return estimate(memory, flops, fixed, hot_store=hot_store_bytes(dim * shape.classes, FLOAT64))

    # ----------------------------------------------------------------------------------------- fit
    def fit(
        self,
        dataset: Any,
        config: Mapping[str, Any],
        privacy: PrivacyTarget,
        seed: int,
        progress: ProgressCallback | None = None,
        policy: BudgetPolicy | None = None,
    ) -> tuple[MethodState, Certificate]:
        collection = _collection(dataset, "trains on")
        self.check_config(config)
        merged, cfg = self._configs(config)
        state = self._open_epoch(collection, merged, cfg, privacy, seed, noise_seed=seed, epoch=0, retrains=0,
                                 progress=progress)
        if progress:
            progress("done", 1.0)
        return state, self._opening_certificate(state, privacy)

    def _feature_map(self, collection: GraphCollection, merged: Mapping[str, Any]) -> dict[str, Any]:
        gst = ScatteringConfig(int(merged["J"]), int(merged["L"]), int(merged["Q"]), bool(merged["nonlinear"]))
        signal = _resolve_signal(collection, str(merged["signal"]))
        max_degree = merged["max_degree"]
        if max_degree is None:
            max_degree = collection.max_degree  # a public width: later deletions only lower degrees
        channels = {"degree": int(max_degree) + 1, "tag": collection.num_tags,
                    "features": collection.num_node_features}[signal]
        return {"kind": "graph_scattering", "J": gst.J, "L": gst.L, "Q": gst.Q, "nonlinear": gst.nonlinear,
                "signal": signal, "max_degree": int(max_degree), "num_tags": collection.num_tags,
                "channels": channels, "dim": scattering_dim(gst, channels)}

    def _open_epoch(
        self, collection: GraphCollection, merged: Mapping[str, Any], cfg: NewtonConfig, privacy: PrivacyTarget,
        seed: int, *, noise_seed: int, epoch: int, retrains: int, init: torch.Tensor | None = None,
        feature_map: dict[str, Any] | None = None, embeddings: np.ndarray | None = None,
        progress: ProgressCallback | None = None,
    ) -> MethodState:
        started = time.perf_counter()
        fmap = feature_map or self._feature_map(collection, merged)
        gst = ScatteringConfig(fmap["J"], fmap["L"], fmap["Q"], fmap["nonlinear"])
        if embeddings is None:
            embeddings = np.stack([embed_graph(g, gst, fmap["signal"], max_degree=fmap["max_degree"],
                                               num_tags=fmap["num_tags"]) for g in collection.graphs])
        embed_seconds = time.perf_counter() - started
        device = default_device()
        design = torch.from_numpy(np.ascontiguousarray(embeddings)).to(device)
        targets = signed_targets(collection.labels, collection.num_classes, device)
        weight = torch.ones(len(collection), dtype=torch.float64, device=device)
        objective = Objective(DenseDesign(design), targets, weight, cfg.lam)
        noise_std = cfg.alpha if privacy.release_mode == "certified" else 0.0
        start = start_epoch(objective, cfg, noise_std, noise_seed, init=init,
                            on_step=newton_progress(progress, cfg.max_newton))
        spec = NewtonModelSpec("logistic_regression_ovr", fmap, objective.design.dim,
                               columns_for(collection.num_classes), collection.num_classes)
        accounting = GraphAccounting.opening(
            start, cfg, privacy, len(collection), fit_seed=seed, epoch=epoch, retrains=retrains,
            method_config={k: merged[k] for k in _METHOD_KEYS}, ids_digest=_ids_digest(collection.graph_ids),
            embed_seconds=embed_seconds, epoch_seconds=time.perf_counter() - started,
        )
        artifacts = {
            "design": design.cpu(),
            "row_norms": torch.linalg.vector_norm(design, dim=1).cpu(),
            "row_weight": weight.cpu(),
        }
        flat = start.weights.detach().reshape(-1).cpu()
        return MethodState(method=self.name, model=spec, clean_weights=flat, released_weights=flat.clone(),
                           statistics=None, accounting=accounting.to_dict(), artifacts=artifacts, deleted_ids=set())

    def predict(self, state: MethodState, data: Any, *, instances: Any | None = None,
                item_ids: Sequence[str] = ()) -> np.ndarray:
        """Labels of graphs of the remaining collection named by id (their scattering embeddings)."""
        if instances is not None or not item_ids:
            raise UnsupportedRequestError("a graph classification model predicts on graph ids (sample_ids)")
        collection = _collection(data, "predicts on")
        return predict(state, collection.take(collection.index_of(item_ids)))

    # -------------------------------------------------------------------------------------- forget
    def _removal(
        self, state: MethodState, acc: GraphAccounting, request: ForgetRequest, remaining: Any,
        privacy: PrivacyTarget,
    ) -> Removal:
        """A graph that leaves zeroes its row; a graph that loses nodes gets its embedding recomputed;
        ``Delta`` over those rows."""
        collection = _collection(remaining, "forgets from")
        if len(collection) != acc.remaining or _ids_digest(collection.graph_ids) != acc.ids_digest:
            raise DimensionMismatchError(
                "the collection differs from this model's budget epoch: pass the current training graphs (the "
                "result of every earlier deletion, and nothing else)"
            )
        merged, cfg = self._configs({**acc.config.to_dict(), **acc.method_config})
        graph_ids = list(dict.fromkeys([*request.graph_ids, *request.sample_ids]))
        if request.owner_ids:
            graph_ids += [g for g in collection.graphs_of_owners(request.owner_ids) if g not in graph_ids]
        whole, nodes = collection.validate_deletion(graph_ids, request.graph_nodes)
        emptied = collection.emptied_by(nodes)
        leaving = sorted(set(whole.tolist()) | emptied)
        changing = sorted(p for p in nodes if p not in emptied)

        weight_old = state.artifacts["row_weight"].to(torch.float64)
        live_rows = np.flatnonzero(weight_old.cpu().numpy() > 0)
        gst, signal, max_degree, num_tags = embedding_settings(state)
        embed_started = time.perf_counter()
        fresh = [embed_graph(collection.graphs[p].without_nodes(nodes[p]), gst, signal, max_degree=max_degree,
                             num_tags=num_tags) for p in changing]
        embed_seconds = time.perf_counter() - embed_started

        device = default_device()
        Z_old = state.artifacts["design"].to(device)
        touched = np.asarray(sorted(live_rows[leaving + changing]), dtype=np.int64)
        t_idx = torch.from_numpy(touched).to(device)
        old_rows = Z_old[t_idx]
        new_rows = torch.zeros_like(old_rows)
        if changing:
            pos = torch.from_numpy(np.searchsorted(touched, live_rows[changing])).to(device)
            new_rows[pos] = torch.from_numpy(np.stack(fresh)).to(device)
        weight_new = weight_old.to(device).clone()
        weight_new[torch.from_numpy(live_rows[leaving]).to(device)] = 0.0
        Z_new = Z_old.clone()
        Z_new[t_idx] = new_rows
        labels = np.zeros(len(weight_old), dtype=np.int64)  # rows that left have weight 0: any label will do
        labels[live_rows] = collection.labels
        targets = signed_targets(labels, state.model.num_classes, device)
        W = state.model.weight_matrix(state.clean_weights.to(torch.float64)).to(device)
        objective = Objective(DenseDesign(Z_new), targets, weight_new, cfg.lam)
        if objective.count == 0:
            raise InvalidDatasetError("forgetting these graphs would leave no training graphs")
        w_old = weight_old.to(device)
        delta = gradient_difference(W, targets[t_idx], old_rows, w_old[t_idx], new_rows, weight_new[t_idx],
                                    cfg.lam, float(w_old.sum()), objective.count)
        op = acc.op_norm_bound
        if op is not None and changing:
            op = float(op) + float(torch.linalg.vector_norm(new_rows[pos] - old_rows[pos]))
        row_norms = state.artifacts["row_norms"].to(device).clone()
        row_norms[t_idx] = torch.linalg.vector_norm(new_rows, dim=1)

        after = collection.without(graph_ids, request.graph_nodes)
        items = len(whole) + sum(len(v) for v in nodes.values())
        # A graph emptied node by node leaves the collection like a whole-graph deletion, so its id is
        # reported too: the caller then erases it as a sample (no later request can name it).
        forgotten = tuple(dict.fromkeys([
            *(collection.graphs[p].graph_id for p in leaving),
            *(graph_node_key(collection.graphs[p].graph_id, collection.graphs[p].node_ids[v])
              for p, vs in nodes.items() for v in vs),
        ]))

        def reopen(seed: int, *, noise_seed: int, epoch: int, retrains: int, init: torch.Tensor) -> MethodState:
            # The embeddings are a fixed function of each graph, and the live rows of the new design are exactly
            # the embeddings of the graphs that remain (in order): the retrain reuses them.
            live_new = torch.nonzero(weight_new > 0).squeeze(1)
            return self._open_epoch(
                after, merged, cfg, privacy, seed, noise_seed=noise_seed, epoch=epoch, retrains=retrains, init=init,
                feature_map=dict(state.model.feature_map), embeddings=Z_new[live_new].cpu().numpy(),
            )

        artifacts = {**state.artifacts, "design": Z_new.cpu(), "row_weight": weight_new.cpu(),
                     "row_norms": row_norms.cpu()}
        return Removal(
            objective, W, delta, op, "epoch_value_plus_row_changes", items, forgotten, reopen, row_norms=row_norms,
            artifacts=artifacts, ledger={"ids_digest": _ids_digest(after.graph_ids)}, inputs={"items": items},
            measured={"embed_seconds": embed_seconds},
        )

    def _notes(self, state: MethodState, privacy: PrivacyTarget) -> str:
        return _notes(privacy)


def _notes(privacy: PrivacyTarget) -> str:
    base = (
        "Certified graph-classifier unlearning (Pan et al.): fixed geometric scattering embeddings (lazy walk "
        "1/2(I + D^-1 A), the code's operator), one Newton step per request; only the affected graph's embedding "
        "is recomputed. The bound is the accumulated data-dependent gradient-residual bound of this budget epoch, "
        "starting at the optimiser's residual; the budget alpha*epsilon/sqrt(2 ln(1.5/delta)) covers the joint "
        "model (not multiplied by the number of classes; a two-class task uses one logistic column). The noise "
        "seed is secret-equivalent: keep certificates from model users."
    )
    if privacy.release_mode != "certified":
        base += " Audited release: trained without noise, so no (epsilon, delta) guarantee holds."
    return base


register(GraphClassificationNewton())
