"""The method protocol: the four questions every unlearning method answers (DESIGN.md, "the heart").

Nothing outside a method module branches on a method's name; the service only calls these functions
and stores the parts of :class:`MethodState` each in its own place.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, MutableSet, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import torch

from unlearning.data import Dataset
from unlearning.errors import EmptyRequestError, InvalidConfigError, UnsupportedRequestError
from unlearning.methods.hyperparameters import HyperParameter
from unlearning.methods.job_estimate import DataShape, JobEstimate
from unlearning.privacy.certificate import Certificate, ReleaseMode

ProgressCallback = Callable[[str, float], None]
"""Called as ``progress(phase, fraction_done)`` with fraction in [0, 1]."""


@dataclass(frozen=True)
class PrivacyTarget:
    """The (epsilon, delta) a model's releases must meet, and how they are released."""

    epsilon: float = 1.0
    delta: float = 1e-3
    release_mode: ReleaseMode = "audited"

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise InvalidConfigError(f"epsilon must be a finite number > 0, got {self.epsilon}")
        if not 0 < self.delta < 1:
            raise InvalidConfigError(f"delta must lie in (0, 1), got {self.delta}")
        if self.release_mode not in ("certified", "audited"):
            raise InvalidConfigError(f"release_mode must be 'certified' or 'audited', got {self.release_mode!r}")


@dataclass(frozen=True)
class BudgetPolicy:
    """When the guarantee (or utility) of the next update counts as exhausted, forcing a retrain.

    Each limit is optional; the first one the next update would cross triggers the retrain.
    - ``max_sigma``: the largest noise standard deviation a certified release may carry;
    - ``max_deletions``: the largest number of samples deleted within one budget epoch;
    - ``max_deletion_fraction``: the same as a fraction of the epoch's training set.
    """

    max_sigma: float | None = None
    max_deletions: int | None = None
    max_deletion_fraction: float | None = 0.3

    def __post_init__(self) -> None:
        if self.max_sigma is not None and not self.max_sigma > 0:
            raise InvalidConfigError(f"max_sigma must be > 0, got {self.max_sigma}")
        if self.max_deletions is not None and self.max_deletions < 1:
            raise InvalidConfigError(f"max_deletions must be >= 1, got {self.max_deletions}")
        if self.max_deletion_fraction is not None and not 0 < self.max_deletion_fraction <= 1:
            raise InvalidConfigError(f"max_deletion_fraction must lie in (0, 1], got {self.max_deletion_fraction}")


@dataclass(frozen=True)
class ForgetRequest:
    """One batch of deletions. Owners expand to every remaining sample they own.

    Graph methods also accept edges ``(u, v)``, node-feature deletions and whole graphs; a method
    rejects kinds outside its ``request_kinds`` with :class:`UnsupportedRequestError`.
    """

    sample_ids: tuple[str, ...] = ()
    owner_ids: tuple[str, ...] = ()
    edges: tuple[tuple[str, str], ...] = ()
    node_feature_ids: tuple[str, ...] = ()
    graph_ids: tuple[str, ...] = ()
    graph_nodes: tuple[tuple[str, str], ...] = ()  # (graph id, node id): a node inside a training graph

    def kinds(self) -> frozenset[str]:
        present = {
            "sample": self.sample_ids,
            "owner": self.owner_ids,
            "edge": self.edges,
            "node_features": self.node_feature_ids,
            "graph": self.graph_ids,
            "graph_node": self.graph_nodes,
        }
        return frozenset(k for k, v in present.items() if v)

    def require_nonempty(self) -> None:
        if not self.kinds():
            raise EmptyRequestError("the request names nothing to forget: give sample ids or owner ids")

    def require_kinds(self, method: str, allowed: frozenset[str]) -> None:
        """Non-empty, and only kinds ``method`` serves; otherwise a clear error naming both."""
        self.require_nonempty()
        unsupported = self.kinds() - allowed
        if unsupported:
            raise UnsupportedRequestError(
                f"the {method} method forgets {_kind_names(allowed)}, not {_kind_names(unsupported)}"
            )


_KIND_NAMES = {
    "sample": "samples",
    "owner": "owners",
    "edge": "edges",
    "node_features": "node features",
    "graph": "graphs",
    "graph_node": "nodes inside graphs",
}


def _kind_names(kinds: frozenset[str]) -> str:
    names = [name for kind, name in _KIND_NAMES.items() if kind in kinds]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


class SampleStatistics(Protocol):
    """Per-sample statistics a method keeps between requests (HF: one d-vector per sample).

    Implemented in memory by the library and over Redis by the service; both keep per-owner sums over
    the owner's *remaining* samples so that forgetting a whole user is one vector read.
    """

    dim: int

    def has(self, sample_id: str) -> bool: ...

    def owner_of(self, sample_id: str) -> str: ...

    def remaining_of_owner(self, owner_id: str) -> tuple[str, ...]: ...

    def sum_samples(self, sample_ids: Sequence[str]) -> torch.Tensor: ...

    def sum_owner(self, owner_id: str) -> torch.Tensor: ...

    def remove(self, sample_ids: Sequence[str]) -> None: ...

    def export(self) -> StatisticsSnapshot: ...


@dataclass(frozen=True)
class StatisticsSnapshot:
    """The remaining per-sample vectors as plain arrays, for durable storage and rebuilding a hot store."""

    sample_ids: tuple[str, ...]
    owner_ids: tuple[str, ...]
    vectors: torch.Tensor  # (len(sample_ids), dim), row i belongs to sample_ids[i]


@dataclass
class MethodState:
    """Everything a method needs between requests, split the way the service stores it.

    - ``clean_weights`` (w̄) and ``released_weights`` (w̃ = w̄ + noise) are versioned blobs;
    - ``statistics`` are the per-sample vectors (hot store), or None for methods that keep none;
    - ``accounting`` holds small JSON-able scalars (the ledger's inputs), including ``deleted_count``
      and ``train_size`` of the current budget epoch;
    - ``artifacts`` are method-specific tensors kept between requests (e.g. Mini-Unlearning's recorded
      weight snapshots); the service stores each as a content-addressed safetensors blob;
    - ``deleted_ids`` are the samples forgotten in this budget epoch (never applied twice).
    """

    method: str
    model: Any  # unlearning.models.ModelSpec; kept loose so methods on other feature maps can extend it
    clean_weights: torch.Tensor
    released_weights: torch.Tensor
    statistics: SampleStatistics | None
    accounting: dict[str, Any]
    artifacts: dict[str, torch.Tensor] = field(default_factory=dict)
    deleted_ids: MutableSet[str] = field(default_factory=set)  # or the service's HashedIdSet of keyed hashes


@dataclass(frozen=True)
class ForgetOutcome:
    state: MethodState
    certificate: Certificate
    forgotten_ids: tuple[str, ...]


@runtime_checkable
class UnlearningMethod(Protocol):
    """One module per method implements this; the registry maps names to instances."""

    name: ClassVar[str]
    request_kinds: ClassVar[frozenset[str]]
    needs_training_data: ClassVar[bool]
    """Whether ``forget`` needs the remaining training data (HF: no; Newton, Langevin: yes). A method whose
    answer depends on the model's configuration or release mode also implements
    :class:`NeedsRemainingData`; ask :func:`needs_remaining_data`, which knows both."""

    def default_config(self) -> dict[str, Any]: ...

    def hyperparameters(self) -> tuple[HyperParameter, ...]:
        """One declaration per key of :meth:`default_config` (and no other): type, bounds and choices as
        :meth:`check_config` enforces them, whether null is accepted and a one-line description."""
        ...

    def families(self) -> tuple[str, ...]:
        """The model families (``config["family"]``) the method trains."""
        ...

    def release_modes(self) -> tuple[ReleaseMode, ...]:
        """The release modes the method serves (``certified``: a noisy release with an (epsilon, delta)
        guarantee; ``audited``: an empirical one)."""
        ...

    def check_config(self, config: Mapping[str, Any]) -> None:
        """Raise :class:`InvalidConfigError` for a value ``fit`` would refuse that can be judged without
        the data (a range, a choice, a type), so that a bad hyperparameter is refused when the model is
        registered, not when its training runs. ``config`` overrides :meth:`default_config`."""
        ...

    def restore_model(self, data: Mapping[str, Any]) -> Any:
        """``MethodState.model`` rebuilt from its ``to_dict()`` (what the service stores per version)."""
        ...

    def estimate_job(self, config: Mapping[str, Any], shape: DataShape) -> JobEstimate:
        """The training job's peak working memory beyond the process baseline and its single-core time,
        pessimistic, for ``config`` overriding :meth:`default_config` and ``shape`` the training data
        (the dominant terms of ``fit``'s algorithm: model, per-sample statistics, data copies, the loops'
        flops; a null that ``fit`` derives is estimated by the same derivation or an upper bound of it).
        Never raises for a configuration :meth:`check_config` accepts."""
        ...

    def fit(
        self,
        dataset: Dataset,
        config: Mapping[str, Any],
        privacy: PrivacyTarget,
        seed: int,
        progress: ProgressCallback | None = None,
        policy: BudgetPolicy | None = None,
    ) -> tuple[MethodState, Certificate]: ...

    def forget(
        self,
        state: MethodState,
        request: ForgetRequest,
        noise_seed: int,
        privacy: PrivacyTarget,
        remaining: Dataset | None = None,
        policy: BudgetPolicy | None = None,
    ) -> ForgetOutcome: ...

    def must_retrain(
        self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget, pending_deletions: int = 0
    ) -> str | None: ...

    def budget_cap(self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget) -> float:
        """The most budget (in the certificate's ``budget_unit``) one epoch may spend under ``policy``."""
        ...

    def verify_certificate(self, certificate: Certificate) -> list[str]:
        """Recompute the bound and noise from the certificate's inputs; returns the discrepancies."""
        ...


DatasetKind = Literal["table", "node_graph", "graph_collection"]
TABLE: DatasetKind = "table"
NODE_GRAPH: DatasetKind = "node_graph"
GRAPH_COLLECTION: DatasetKind = "graph_collection"
DATASET_KINDS: tuple[DatasetKind, ...] = (TABLE, NODE_GRAPH, GRAPH_COLLECTION)


def dataset_kind(method: UnlearningMethod) -> DatasetKind:
    """The kind of dataset ``method`` trains on, read from what it forgets (never from its name): a
    method that forgets edges or node features trains on one node graph; one that forgets graphs or nodes
    inside graphs on a graph collection; any other on a table."""
    kinds = method.request_kinds
    if kinds & {"edge", "node_features"}:
        return NODE_GRAPH
    if kinds & {"graph", "graph_node"}:
        return GRAPH_COLLECTION
    return TABLE


@runtime_checkable
class PredictsOwnData(Protocol):
    """Optional: a method whose model works on derived features (a fitted row transform, graph
    propagation, scattering embeddings) answers predictions itself, since the raw rows alone are not
    the model's input. The service asks a method for predictions only when it implements this."""

    def predict(
        self,
        state: MethodState,
        data: Any,
        *,
        instances: Any | None = None,
        item_ids: Sequence[str] = (),
    ) -> Any:
        """Class labels (an int array) of raw feature rows ``instances``, or of the items of ``data`` (the
        remaining training data: rows, nodes or graphs) named by ``item_ids``. A forgotten item is unknown
        (:class:`UnknownSampleError`); an input the model cannot take raises another UnlearningError."""
        ...


@runtime_checkable
class ChecksRegistration(Protocol):
    """Optional: a method with checks that need the release mode or the data's width (a table model's
    feature scaling) answers them at registration, before anything trains."""

    def check_registration(self, config: Mapping[str, Any], privacy: PrivacyTarget, num_features: int) -> None:
        """Raise an :class:`~unlearning.errors.UnlearningError` saying what to change."""
        ...


@runtime_checkable
class NeedsRemainingData(Protocol):
    """Optional: a method that needs the remaining training rows at ``forget`` for some models only (a
    certified Hessian-free model checks its bound on them; an audited one does not)."""

    def needs_remaining_data(self, config: Mapping[str, Any], privacy: PrivacyTarget) -> bool:
        """Whether ``forget`` of a model registered with ``config`` and ``privacy`` needs ``remaining``."""
        ...


def needs_remaining_data(method: UnlearningMethod, config: Mapping[str, Any], privacy: PrivacyTarget) -> bool:
    """Whether ``method.forget`` of a model registered with ``config`` and ``privacy`` needs the remaining
    training rows: the method's :class:`NeedsRemainingData` answer, else its ``needs_training_data``."""
    if isinstance(method, NeedsRemainingData):
        return method.needs_remaining_data(config, privacy)
    return method.needs_training_data


@runtime_checkable
class PredictsProbabilities(Protocol):
    """Optional, beside :class:`PredictsOwnData`: class probabilities (n, classes) of the same rows, or
    None when the model gives none (one-vs-rest margins)."""

    def predict_probabilities(
        self, state: MethodState, data: Any, *, instances: Any | None = None, item_ids: Sequence[str] = ()
    ) -> Any: ...
