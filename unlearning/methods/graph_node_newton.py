"""The ``graph_node_newton`` method: certified graph unlearning for node classification with SGC or GPR
features and one-vs-rest logistic regression (Chien, Pan, Milenkovic, "Certified Graph Unlearning";
digest 001).

Features: ``Z = P^K X`` (SGC) or ``[X, PX, .., P^K X]/(K+1)`` (GPR) with ``P = D~^{-1}(A + I)``
(:mod:`unlearning.models.propagation`). The model is trained on the training nodes' rows of ``Z`` with
objective perturbation (:mod:`unlearning.newton`).

Requests (digest 001 section 3):

* ``sample`` (= a node; ``owner`` = every live node of the owner): its features, label and edges go;
  it stays as an isolated zero-feature tombstone (Thm 4.8's setting).
* ``node_features``: its features and label go, its edges stay (Thm 4.3).
* ``edge``: one undirected edge goes (Thm 4.5).

A request may mix kinds and name several items: one Newton step covers all of them. Only the design rows
within K hops of a deleted node, feature or edge endpoint (in the graph before the deletion) can change;
exactly those are recomputed, locally (:func:`~unlearning.models.propagation.local_features`, equal to a
full recomputation bit for bit), and ``Delta`` is the exact gradient difference over every affected
training node plus the nodes leaving the training set.

State: the weights, the current design (the feature rows of the nodes still in the training set; a row
leaves the design with its node, which changes no number of a step since its weight would be 0, and
makes every later product cheaper), the node index of each row and its weight (1), the frozen feature statistics (``standardize``) and the accounting scalars. Everything in it is a
function of the remaining graph (a changed row is recomputed from the graph as it is now), so it holds
nothing of what was deleted. ``||Z'||_op`` is bounded by its exact value at the epoch's start plus the
Frobenius norm of every row change since (triangle inequality); the tight bound also has a form that
needs no operator norm (see :mod:`unlearning.newton.step`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from unlearning.data.graphs.node_graph import NodeGraph
from unlearning.data.graphs.requests import edge_key
from unlearning.device import default_device
from unlearning.errors import (
    DimensionMismatchError,
    InvalidConfigError,
    InvalidDatasetError,
    UnknownSampleError,
    UnsupportedRequestError,
)
from unlearning.methods.hyperparameters import HyperParameter
from unlearning.methods.job_estimate import FLOAT64, INDEX, DataShape, JobEstimate, estimate, hot_store_bytes
from unlearning.methods.protocol import (
    BudgetPolicy,
    ForgetRequest,
    MethodState,
    PrivacyTarget,
    ProgressCallback,
)
from unlearning.methods.registry import register
from unlearning.models.propagation import (
    MAX_HOPS,
    PROPAGATIONS,
    FeatureScaler,
    PropagationSpec,
    full_features,
    k_hop,
    local_features,
)
from unlearning.models.propagation import NORMALIZATIONS as PROPAGATION_NORMALIZATIONS
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
)
from unlearning.newton.estimate import newton_terms
from unlearning.privacy.certificate import Certificate

ASSUMED_DEGREE = 32
"""Mean degree a job estimate assumes when the data's shape gives no edge count (Cora: 3.9, ogbn-arxiv: 13.7)."""

_METHOD_KEYS = ("propagation", "hops", "normalization")


@dataclass(frozen=True, kw_only=True)
class NodeAccounting(NewtonAccounting):
    """The Newton ledger with how long the epoch's opening took."""

    epoch_seconds: float = field(metadata=number_spec())
    """The whole opening: features, training and the operator norm."""
    propagation_seconds: float = field(metadata=number_spec())
    """Computing the propagated features of every node."""


def _graph(data: Any, what: str) -> NodeGraph:
    if not isinstance(data, NodeGraph):
        raise InvalidDatasetError(
            f"the graph_node_newton method {what} a NodeGraph (unlearning.data.graphs), got {type(data).__name__}"
        )
    return data


def scaler_of(state: MethodState) -> FeatureScaler:
    spec: NewtonModelSpec = state.model
    arrays = {k.removeprefix("feature_"): v.cpu().numpy() for k, v in state.artifacts.items() if k.startswith("feature_")}
    named = {"scaler_divisor": np.asarray([float(spec.feature_map["scaler_divisor"])])}
    if "mean" in arrays:
        named["scaler_mean"], named["scaler_scale"] = arrays["mean"], arrays["scale"]
    return FeatureScaler.from_arrays(str(spec.feature_map["normalization"]), named)


def propagation_of(state: MethodState) -> PropagationSpec:
    fm = state.model.feature_map
    return PropagationSpec(str(fm["propagation"]), int(fm["hops"]))  # type: ignore[arg-type]


def node_features(state: MethodState, graph: NodeGraph) -> np.ndarray:
    """The model's (n, d) input features for every node of ``graph`` (for evaluation and prediction)."""
    return full_features(graph, scaler_of(state), propagation_of(state))


def predict(state: MethodState, graph: NodeGraph, nodes: np.ndarray | None = None,
            features: np.ndarray | None = None) -> np.ndarray:
    """Predicted classes of ``nodes`` (all nodes when None) under the released weights."""
    feats = node_features(state, graph) if features is None else features
    if nodes is not None:
        feats = feats[np.asarray(nodes, dtype=np.int64)]
    W = state.model.weight_matrix(state.released_weights.to(torch.float64))
    return predict_labels(W, torch.from_numpy(np.ascontiguousarray(feats)))


class GraphNodeNewton(NewtonMethodBase[NodeAccounting]):
    """The ``graph_node_newton`` method; see the module docstring."""

    name: ClassVar[str] = "graph_node_newton"
    request_kinds: ClassVar[frozenset[str]] = frozenset({"sample", "owner", "edge", "node_features"})
    needs_training_data: ClassVar[bool] = True
    forget_needs: ClassVar[str] = "the current graph"
    accounting_type = NodeAccounting

    def default_config(self) -> dict[str, Any]:
        """Digest 001 section 5.1 defaults: SGC, K = 2, lam 1e-2, alpha 0.1; the code's standardisation."""
        return {**NewtonConfig().to_dict(), "propagation": "sgc", "hops": 2, "normalization": "standardize"}

    def hyperparameters(self) -> tuple[HyperParameter, ...]:
        return (
            *newton_hyperparameters(),
            HyperParameter("propagation", "string", "Node features: sgc (P^K X) or gpr ([X, PX, .., P^K X] / (K+1)), "
                           "P = D~^-1 (A + I)", choices=PROPAGATIONS),
            HyperParameter("hops", "integer", "K, the number of propagation hops", minimum=0, maximum=MAX_HOPS),
            HyperParameter("normalization", "string", "Feature transform before propagation: row_l2, standardize "
                           "(statistics fitted at each budget epoch's start) or none",
                           choices=PROPAGATION_NORMALIZATIONS),
        )

    def check_config(self, config: Mapping[str, Any]) -> None:
        self._node_configs(config)

    def estimate_job(self, config: Mapping[str, Any], shape: DataShape) -> JobEstimate:
        """K sparse products over the graph for the features (``shape.edges``, else ``ASSUMED_DEGREE`` per
        node), float64 copies of the (nodes, features) rows while they are scaled and propagated (every
        power kept for GPR), then Newton-CG on every node's row (:mod:`unlearning.newton.estimate`)."""
        merged = {**self.default_config(), **dict(config)}
        hops, gpr = int(merged["hops"]), merged["propagation"] == "gpr"
        n, f = shape.rows, shape.features
        dim = f * (hops + 1) if gpr else f
        nonzeros = n + 2 * (shape.edges if shape.edges is not None else ASSUMED_DEGREE * n // 2)
        memory, flops, fixed = newton_terms(n, dim, shape.classes, merged)
        copies = 4 + (2 * (hops + 1) if gpr else 2)
        memory["scaled and propagated features (float64 copies)"] = copies * n * f * FLOAT64 + n * dim * FLOAT64
        memory["propagation matrix"] = 3.0 * nonzeros * (FLOAT64 + INDEX)
        flops["propagation (hops x edges x features)"] = 2.0 * hops * nonzeros * f
        return estimate(memory, flops, fixed, hot_store=hot_store_bytes(dim * shape.classes, FLOAT64))

    def _node_configs(self, config: Mapping[str, Any]) -> tuple[dict[str, Any], NewtonConfig, PropagationSpec]:
        merged, cfg = self._configs(config)
        prop = PropagationSpec(str(merged["propagation"]), merged["hops"])  # type: ignore[arg-type]
        if merged["normalization"] not in PROPAGATION_NORMALIZATIONS:
            raise InvalidConfigError(
                f"normalization must be one of {PROPAGATION_NORMALIZATIONS}, got {merged['normalization']!r}"
            )
        return merged, cfg, prop

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
        graph = _graph(dataset, "trains on")
        merged, cfg, prop = self._node_configs(config)
        state = self._open_epoch(graph, merged, cfg, prop, privacy, seed, noise_seed=seed, epoch=0, retrains=0,
                                 progress=progress)
        if progress:
            progress("done", 1.0)
        return state, self._opening_certificate(state, privacy)

    def _open_epoch(
        self, graph: NodeGraph, merged: Mapping[str, Any], cfg: NewtonConfig, prop: PropagationSpec,
        privacy: PrivacyTarget, seed: int, *, noise_seed: int, epoch: int, retrains: int,
        init: torch.Tensor | None = None, progress: ProgressCallback | None = None,
    ) -> MethodState:
        started = time.perf_counter()
        rows = np.flatnonzero(graph.training_mask())
        if len(rows) == 0:  # before the scaler, which would divide by the zero live nodes of an emptied graph
            raise InvalidDatasetError(f"graph {graph.name!r} has no training nodes (split 'train' with a label)")
        scaler = FeatureScaler.fit(graph, str(merged["normalization"]))
        feats = full_features(graph, scaler, prop)[rows]
        device = default_device()
        design = torch.from_numpy(np.ascontiguousarray(feats)).to(device)
        targets = signed_targets(graph.labels[rows], graph.num_classes, device)
        weight = torch.ones(len(rows), dtype=torch.float64, device=device)
        objective = Objective(DenseDesign(design), targets, weight, cfg.lam)
        propagation_seconds = time.perf_counter() - started
        noise_std = cfg.alpha if privacy.release_mode == "certified" else 0.0
        start = start_epoch(objective, cfg, noise_std, noise_seed, init=init,
                            on_step=newton_progress(progress, cfg.max_newton))
        feature_map: dict[str, Any] = {"kind": "node_propagation", "propagation": prop.kind, "hops": prop.hops,
                                       "normalization": scaler.kind, "scaler_divisor": scaler.divisor,
                                       "num_nodes": graph.num_nodes, "num_features": graph.num_features}
        spec = NewtonModelSpec("logistic_regression_ovr", feature_map, objective.design.dim,
                               columns_for(graph.num_classes), graph.num_classes)
        accounting = NodeAccounting.opening(
            start, cfg, privacy, len(rows), fit_seed=seed, epoch=epoch, retrains=retrains,
            method_config={k: merged[k] for k in _METHOD_KEYS}, epoch_seconds=time.perf_counter() - started,
            propagation_seconds=propagation_seconds,
        )
        artifacts = {
            "design": design.cpu(),
            "row_norms": torch.linalg.vector_norm(design, dim=1).cpu(),
            "row_nodes": torch.from_numpy(rows.astype(np.int64)),
            "row_weight": weight.cpu(),
        }
        if scaler.mean is not None and scaler.scale is not None:
            artifacts["feature_mean"] = torch.from_numpy(scaler.mean.copy())
            artifacts["feature_scale"] = torch.from_numpy(scaler.scale.copy())
        flat = start.weights.detach().reshape(-1).cpu()
        return MethodState(method=self.name, model=spec, clean_weights=flat, released_weights=flat.clone(),
                           statistics=None, accounting=accounting.to_dict(), artifacts=artifacts, deleted_ids=set())

    def predict(self, state: MethodState, data: Any, *, instances: Any | None = None,
                item_ids: Sequence[str] = ()) -> np.ndarray:
        """Labels of nodes of the remaining graph named by id (a node's input is its propagated features,
        so a node model predicts on node ids, not raw rows)."""
        if instances is not None or not item_ids:
            raise UnsupportedRequestError("a node classification model predicts on node ids (sample_ids)")
        graph = _graph(data, "predicts on")
        nodes = graph.index_of(item_ids)
        if graph.deleted[nodes].any():
            gone = next(i for i, n in zip(item_ids, nodes) if graph.deleted[n])
            raise UnknownSampleError(f"node {gone!r} was deleted from graph {graph.name!r}")
        return predict(state, graph, nodes)

    # -------------------------------------------------------------------------------------- forget
    def _removal(
        self, state: MethodState, acc: NodeAccounting, request: ForgetRequest, remaining: Any, privacy: PrivacyTarget
    ) -> Removal:
        """Recompute the design rows within K hops of what goes, locally; ``Delta`` over every touched
        training row (old row and weight against new)."""
        graph = _graph(remaining, "forgets from")
        merged, cfg, prop = self._node_configs({**acc.config.to_dict(), **acc.method_config})
        row_nodes = state.artifacts["row_nodes"].cpu().numpy()
        weight_old = state.artifacts["row_weight"].to(torch.float64)
        self._check_matches(state, graph, row_nodes, weight_old)

        nodes = list(dict.fromkeys(request.sample_ids))
        if request.owner_ids:
            nodes += [n for n in graph.nodes_of_owners(request.owner_ids) if n not in nodes]
        node_idx, edge_rows, feat_idx = graph.validate_deletion(nodes, request.edges, request.node_feature_ids)
        after = graph.without(nodes, request.edges, request.node_feature_ids)
        seeds = np.concatenate([node_idx, feat_idx, graph.edges[edge_rows].reshape(-1)])
        affected = k_hop(graph.adjacency, seeds, prop.hops)

        weight_new_np = after.training_mask()[row_nodes].astype(np.float64)
        touched = np.flatnonzero(np.isin(row_nodes, affected) & (weight_old.cpu().numpy() > 0))
        stay = touched[weight_new_np[touched] > 0]
        prop_started = time.perf_counter()
        fresh = local_features(after, scaler_of(state), prop, row_nodes[stay])
        propagation_seconds = time.perf_counter() - prop_started

        design_old = state.artifacts["design"]
        device = default_device()
        Z_old = design_old.to(device)
        t_idx = torch.from_numpy(touched).to(device)
        old_rows = Z_old[t_idx]
        new_rows = torch.zeros_like(old_rows)
        stay_pos = torch.from_numpy(np.searchsorted(touched, stay)).to(device)
        new_rows[stay_pos] = torch.from_numpy(fresh).to(device)
        weight_old_d = weight_old.to(device)
        weight_new = torch.from_numpy(weight_new_np).to(device)
        targets = signed_targets(graph.labels[row_nodes], graph.num_classes, device)
        W = state.model.weight_matrix(state.clean_weights.to(torch.float64)).to(device)
        # The new design keeps only the rows still in the training set: a row that left has weight 0 and
        # adds nothing to the loss, its gradient or its Hessian, so dropping it changes no number of the
        # step, but every product over the design gets cheaper (20% fewer rows after deleting 20% of the
        # training nodes). The gather is also the copy that keeps the previous state's design intact.
        keep = np.flatnonzero(weight_new_np > 0)
        if len(keep) == 0:
            raise InvalidDatasetError("forgetting these items would leave no training nodes")
        keep_t = torch.from_numpy(keep).to(device)
        Z_new = Z_old[keep_t]
        stay_new = torch.from_numpy(np.searchsorted(keep, stay)).to(device)
        Z_new[stay_new] = new_rows[stay_pos]
        objective = Objective(DenseDesign(Z_new), targets[keep_t], weight_new[keep_t], cfg.lam)
        delta = gradient_difference(W, targets[t_idx], old_rows, weight_old_d[t_idx], new_rows, weight_new[t_idx],
                                    cfg.lam, float(weight_old_d.sum()), objective.count)
        op = acc.op_norm_bound
        if op is not None and len(stay):
            op = float(op) + float(torch.linalg.vector_norm(new_rows[stay_pos] - old_rows[stay_pos]))
        row_norms = state.artifacts["row_norms"].to(device)[keep_t]
        row_norms[stay_new] = torch.linalg.vector_norm(new_rows[stay_pos], dim=1)

        items = len(node_idx) + len(edge_rows) + len(feat_idx)
        forgotten = tuple(dict.fromkeys([*(graph.node_ids[i] for i in node_idx),
                                         *(graph.node_ids[i] for i in feat_idx),
                                         *(edge_key(graph.node_ids[u], graph.node_ids[v])
                                           for u, v in graph.edges[edge_rows].tolist())]))

        def reopen(seed: int, *, noise_seed: int, epoch: int, retrains: int, init: torch.Tensor) -> MethodState:
            return self._open_epoch(after, merged, cfg, prop, privacy, seed, noise_seed=noise_seed, epoch=epoch,
                                    retrains=retrains, init=init)

        artifacts = {**state.artifacts, "design": Z_new.cpu(), "row_weight": objective.weight.cpu(),
                     "row_norms": row_norms.cpu(), "row_nodes": torch.from_numpy(row_nodes[keep].astype(np.int64))}
        return Removal(
            objective, W, delta, op, "epoch_value_plus_row_changes", items, forgotten, reopen, row_norms=row_norms,
            artifacts=artifacts, inputs={"items": items},
            measured={"propagation_seconds": propagation_seconds, "affected_nodes": float(len(affected)),
                      "recomputed_rows": float(len(stay))},
        )

    def _notes(self, state: MethodState, privacy: PrivacyTarget) -> str:
        mc = self.ledger(state).method_config
        base = (
            f"Certified graph unlearning (Chien et al.): {str(mc['propagation']).upper()} features, K={mc['hops']}, "
            "P = D~^-1 (A + I); one Newton step per request, rows recomputed locally. The bound is the accumulated "
            "data-dependent gradient-residual bound of this budget epoch, starting at the optimiser's residual; the "
            "budget alpha*epsilon/sqrt(2 ln(1.5/delta)) covers the joint one-vs-rest model (not multiplied by the "
            "number of classes). The noise seed is secret-equivalent: keep certificates from model users."
        )
        if mc["normalization"] == "standardize":
            base += (" Feature statistics (column means/stds, max row norm) were fitted at this epoch's start over the "
                     "live nodes then; deleted nodes influence these 2F+1 numbers until the next retrain (use "
                     "normalization 'row_l2' for a data-independent transform).")
        if privacy.release_mode != "certified":
            base += " Audited release: trained without noise, so no (epsilon, delta) guarantee holds."
        return base

    @staticmethod
    def _check_matches(state: MethodState, graph: NodeGraph, row_nodes: np.ndarray, weight: torch.Tensor) -> None:
        fm = state.model.feature_map
        if graph.num_nodes != int(fm["num_nodes"]) or graph.num_features != int(fm["num_features"]):
            raise DimensionMismatchError(
                f"the graph has {graph.num_nodes} nodes x {graph.num_features} features, the model was trained on "
                f"{fm['num_nodes']} x {fm['num_features']}: pass the current graph of this model"
            )
        # The graph's training nodes must be exactly this epoch's rows of weight > 0 (the design drops a
        # row when its node leaves, so a stale graph shows up as training nodes the design no longer has).
        if not np.array_equal(np.flatnonzero(graph.training_mask()), np.sort(row_nodes[weight.cpu().numpy() > 0])):
            raise DimensionMismatchError(
                "the graph's training nodes differ from this model's budget epoch: pass the current graph (the "
                "result of every earlier deletion, and nothing else)"
            )


register(GraphNodeNewton())
