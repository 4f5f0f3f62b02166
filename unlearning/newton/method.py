"""What the Newton methods share as methods: the model they release, predictions, and the protocol
functions, including ONE forget sequence that each method parametrises.

A method (``newton_removal``, ``graph_node_newton``, ``graph_classification_newton``) subclasses
:class:`NewtonMethodBase` with its ledger type and implements ``fit`` and :meth:`~NewtonMethodBase._removal`:
from a request and the current data, the objective after the removal, the gradient difference and what
the new state holds. :meth:`NewtonMethodBase.forget` does the rest the same way for all of them: the
Newton step, the retrain with fresh noise when its charge would pass the cap, the ledger, the new state
and the certificate.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np
import torch

from unlearning.errors import DimensionMismatchError, InvalidConfigError, UnsupportedRequestError
from unlearning.methods.hyperparameters import HyperParameter
from unlearning.methods.protocol import (
    BudgetPolicy,
    ForgetOutcome,
    ForgetRequest,
    MethodState,
    PrivacyTarget,
)
from unlearning.newton.budget import NewtonAccounting, OpNormSource, residual_budget
from unlearning.newton.certificate import newton_certificate, step_inputs, verify_newton_certificate
from unlearning.newton.config import FAMILIES, NewtonConfig
from unlearning.newton.objective import Objective
from unlearning.newton.step import newton_step
from unlearning.privacy.certificate import Certificate, ReleaseMode

__all__ = [
    "NewtonMethodBase",
    "NewtonModelSpec",
    "Removal",
    "Reopen",
    "columns_for",
    "one_source",
    "predict_labels",
    "released_weight_matrix",
]


@dataclass(frozen=True)
class NewtonModelSpec:
    """``MethodState.model`` of the Newton methods: a linear one-vs-rest model on a named feature map.

    ``weights`` are ``W`` (dim x columns) flattened row-major; ``columns`` is 1 for two classes (the
    logit of class 1 is ``z^T w``) and ``num_classes`` otherwise.
    """

    family: str
    feature_map: dict[str, Any]
    dim: int
    columns: int
    num_classes: int

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "feature_map": dict(self.feature_map), "dim": self.dim,
                "columns": self.columns, "num_classes": self.num_classes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NewtonModelSpec:
        return cls(str(data["family"]), dict(data["feature_map"]), int(data["dim"]),
                   int(data["columns"]), int(data["num_classes"]))

    def weight_matrix(self, flat: torch.Tensor) -> torch.Tensor:
        if flat.numel() != self.dim * self.columns:
            raise DimensionMismatchError(f"weights have {flat.numel()} entries, the model needs "
                                         f"{self.dim} x {self.columns}")
        return flat.reshape(self.dim, self.columns)


def columns_for(num_classes: int) -> int:
    return 1 if num_classes == 2 else num_classes


def released_weight_matrix(state: Any) -> torch.Tensor:
    """The released ``W`` (dim x columns, float64) of a Newton method's state: what predictions use."""
    return state.model.weight_matrix(state.released_weights.to(torch.float64))


def one_source(instances: Any | None, item_ids: Sequence[str], items: str) -> None:
    """A prediction names raw rows or items of the model's data, not both and not neither."""
    if (instances is None) == (not item_ids):
        raise UnsupportedRequestError(f"give either feature rows (instances) or {items} (sample_ids), not both")


def predict_labels(W: torch.Tensor, features: torch.Tensor) -> np.ndarray:
    """Class predictions of the one-vs-rest model ``W`` on feature rows (argmax; sign for one column)."""
    logits = features.to(W.dtype).to(W.device) @ W
    if W.shape[1] == 1:
        return (logits[:, 0] > 0).long().cpu().numpy()
    return logits.argmax(1).cpu().numpy()


class Reopen(Protocol):
    """Retrains on the data after a removal with fresh noise: the new budget epoch's state."""

    def __call__(self, seed: int, *, noise_seed: int, epoch: int, retrains: int, init: torch.Tensor) -> MethodState:
        ...


@dataclass(frozen=True)
class Removal:
    """One request's removal as a method prepared it (:meth:`NewtonMethodBase._removal`): what the shared
    forget sequence needs to take the Newton step, or retrain instead, and to record the result."""

    objective: Objective
    """The loss on the training data after the removal (weight 0 for rows that left)."""
    weights: torch.Tensor
    """``W``, the clean weights before the removal (dim x columns, on the objective's device)."""
    delta: torch.Tensor
    """``grad L(W; D) - grad L(W; D')`` over the rows that changed or left."""
    op_norm: float | None
    """An upper bound on ``||Z'||_op`` for the step (None: only the row-norm form of the tight bound)."""
    op_norm_source: OpNormSource
    """How ``op_norm`` was carried forward from the epoch's value (recorded if the step keeps it)."""
    items: int
    """How many things the request removes (the ledger's ``deleted_count`` grows by this)."""
    forgotten: tuple[str, ...]
    """The ids the outcome reports as forgotten."""
    reopen: Reopen
    """The retrain on the data after the removal, for a step whose charge would pass the cap."""
    row_norms: torch.Tensor | None = None
    """The norms of the objective's design rows, when the method keeps them (saves a pass)."""
    artifacts: Mapping[str, torch.Tensor] | None = None
    """The new state's artifacts after an accepted step (None: the state's own, unchanged)."""
    ledger: Mapping[str, Any] = field(default_factory=dict)
    """Fields of the method's ledger to set after an accepted step, beyond what the step changes."""
    inputs: Mapping[str, Any] = field(default_factory=dict)
    """Certificate inputs beyond the step's summaries and the design's shape."""
    measured: Mapping[str, float] | None = None
    """The method's timings for the certificate's ``measured``, then the step's ``newton_seconds`` and the
    whole ``forget_seconds``; None: the method reports no timings."""


AccountingT = TypeVar("AccountingT", bound=NewtonAccounting)


class NewtonMethodBase(ABC, Generic[AccountingT]):
    """The protocol functions every Newton method shares (budget, retrain policy, forget, verification).

    Subclasses set ``name``, ``request_kinds``, ``accounting_type`` (their ledger: :class:`NewtonAccounting`
    or a subclass with their own keys) and ``forget_needs``, and implement ``default_config``,
    ``hyperparameters``, ``fit``, :meth:`_removal` and :meth:`_notes`.
    """

    needs_training_data: ClassVar[bool] = True
    name: ClassVar[str] = "newton_base"
    request_kinds: ClassVar[frozenset[str]] = frozenset()
    forget_needs: ClassVar[str] = "the remaining training data"
    """What ``remaining`` must be, in the error for a forget without it."""
    accounting_type: type[AccountingT]

    @abstractmethod
    def default_config(self) -> dict[str, Any]:
        """Every configuration key the method accepts, with its default."""

    @abstractmethod
    def hyperparameters(self) -> tuple[HyperParameter, ...]:
        """One declaration per key of :meth:`default_config`: :func:`newton_hyperparameters` and the method's own."""

    def families(self) -> tuple[str, ...]:
        return FAMILIES

    def release_modes(self) -> tuple[ReleaseMode, ...]:
        """Both: ``certified`` trains with the objective perturbation, ``audited`` without it."""
        return ("certified", "audited")

    def check_config(self, config: Mapping[str, Any]) -> None:
        self._configs(config)

    def _configs(self, config: Mapping[str, Any]) -> tuple[dict[str, Any], NewtonConfig]:
        """The defaults overlaid with ``config`` (the service's ``family`` key checked and dropped), and
        the Newton settings they hold; unknown keys are an error naming them."""
        merged = {**self.default_config(), **dict(config)}
        family = merged.pop("family", "logistic_regression")  # the service passes the model family along
        if family not in FAMILIES:
            raise InvalidConfigError(f"{self.name} trains a (one-vs-rest) logistic regression, not family {family!r}")
        unknown = sorted(set(merged) - set(self.default_config()))
        if unknown:
            raise InvalidConfigError(f"unknown config keys for {self.name}: {unknown}")
        return merged, NewtonConfig.from_mapping(merged)

    def restore_model(self, data: Mapping[str, Any]) -> NewtonModelSpec:
        """``MethodState.model`` from its ``to_dict()``."""
        return NewtonModelSpec.from_dict(dict(data))

    def ledger(self, state: MethodState) -> AccountingT:
        """The typed accounting of ``state`` (its budget epoch's ledger)."""
        return self.accounting_type.from_dict(state.accounting)

    def budget_cap(self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget) -> float:
        """The gradient-residual budget alpha * epsilon / sqrt(2 ln(1.5/delta)) (one, for all classes)."""
        return residual_budget(self.ledger(state).config.alpha, privacy.epsilon, privacy.delta)

    def must_retrain(
        self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget, pending_deletions: int = 0
    ) -> str | None:
        """Retrain when the policy's deletion limits would be crossed, or when the residual budget would be:
        the next charge is predicted as ``pending x`` the largest charge per deleted item seen in this
        epoch (``forget`` itself retrains with fresh noise when an actual charge would cross the cap)."""
        acc = self.ledger(state)
        after = acc.deleted_count + pending_deletions
        train_size = acc.train_size
        max_deletions, fraction = policy.max_deletions, policy.max_deletion_fraction
        if pending_deletions > 0 and max_deletions is not None and after > max_deletions:
            return f"forgetting {pending_deletions} more item(s) would exceed the policy's max_deletions {max_deletions}"
        if pending_deletions > 0 and fraction is not None and after > math.floor(fraction * train_size):
            return (f"forgetting {pending_deletions} more item(s) would bring this budget epoch to {after} deletions, "
                    f"above the policy's max_deletion_fraction {fraction} of {train_size}")
        cap = self.budget_cap(state, policy, privacy)
        spent = acc.spent
        predicted = spent + pending_deletions * acc.max_charge_per_item
        if pending_deletions > 0 and predicted > cap:
            return (f"the gradient-residual budget would be exceeded: spent {spent:.4g} + predicted "
                    f"{predicted - spent:.4g} > cap {cap:.4g}")
        return None

    def verify_certificate(self, certificate: Certificate) -> list[str]:
        return verify_newton_certificate(certificate)

    # -------------------------------------------------------------------------------- certificates
    @abstractmethod
    def _notes(self, state: MethodState, privacy: PrivacyTarget) -> str:
        """The certificate's notes for a release of ``state``."""

    def _opening_certificate(self, state: MethodState, privacy: PrivacyTarget, **extra: Any) -> Certificate:
        """The certificate of a budget epoch's first release (spent: the optimiser's residual, charge 0)."""
        return newton_certificate(self.name, self.ledger(state), privacy, charge=0.0,
                                  inputs={"kind": "opening", **extra}, notes=self._notes(state, privacy))

    # -------------------------------------------------------------------------------------- forget
    @abstractmethod
    def _removal(
        self, state: MethodState, acc: AccountingT, request: ForgetRequest, remaining: Any, privacy: PrivacyTarget
    ) -> Removal:
        """Check ``remaining`` against the epoch and ``request`` against ``remaining``, and prepare the removal
        (the objective after it, the gradient difference, and what the new state holds)."""

    def forget(
        self,
        state: MethodState,
        request: ForgetRequest,
        noise_seed: int,
        privacy: PrivacyTarget,
        remaining: Any = None,
        policy: BudgetPolicy | None = None,
    ) -> ForgetOutcome:
        """One request, one Newton step ``W + H^{-1} Delta`` on the method's :meth:`_removal`, its charge added
        to the epoch's ledger; when the charge would pass the cap the method retrains on what remains with
        fresh noise from ``noise_seed`` (a new budget epoch, warm-started at the step) instead."""
        started = time.perf_counter()
        request.require_kinds(self.name, self.request_kinds)
        if remaining is None:
            raise InvalidConfigError(f"{self.name} needs {self.forget_needs} to forget (remaining=...)")
        acc = self.ledger(state)
        removal = self._removal(state, acc, request, remaining, privacy)
        cfg = acc.config
        step = newton_step(removal.objective, removal.weights, removal.delta, op_norm=removal.op_norm,
                           variant=cfg.bound, solver=cfg.solver, rtol=cfg.cg_rtol, row_norms=removal.row_norms)
        if acc.crosses_cap(step.charge):
            new_state = removal.reopen(acc.fit_seed, noise_seed=noise_seed, epoch=acc.epoch + 1,
                                       retrains=acc.retrains + 1, init=step.weights)
            cert = self._opening_certificate(
                new_state, privacy, retrained_in_forget=True,
                retrain_reason=f"the step's charge {step.charge:.4g} would bring the epoch to "
                               f"{acc.spent + step.charge:.4g} > cap {acc.cap:.4g}",
            )
            return ForgetOutcome(new_state, cert, removal.forgotten)
        objective = removal.objective
        accounting = replace(acc.accepted(step, removal.items, int(objective.count), removal.op_norm_source),
                             **removal.ledger)
        flat = step.weights.detach().reshape(-1).cpu()
        artifacts = state.artifacts if removal.artifacts is None else dict(removal.artifacts)
        new_state = replace(state, clean_weights=flat, released_weights=flat.clone(), accounting=accounting.to_dict(),
                            artifacts=artifacts, deleted_ids=set(state.deleted_ids) | set(removal.forgotten))
        inputs = step_inputs(step, acc.spent, objective.count, cfg.lam)
        inputs.update(design_rows=objective.design.rows, design_dim=objective.design.dim, **removal.inputs)
        cert = newton_certificate(self.name, accounting, privacy, charge=step.charge, inputs=inputs,
                                  notes=self._notes(new_state, privacy))
        if removal.measured is not None:
            cert.measured.update({**removal.measured, "newton_seconds": step.seconds,
                                  "forget_seconds": time.perf_counter() - started})
        return ForgetOutcome(new_state, cert, removal.forgotten)
