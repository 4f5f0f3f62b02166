"""The Hessian-free method's accounting, typed.

:class:`HFAccounting` reads and writes exactly the JSON keys ``MethodState.accounting`` has always held
(stored model versions load unchanged); keys it does not know (a wrapper's ``feature_transform`` and
``quality``) pass through in ``extra``. A certified gradient-residual model adds one nested object,
``gradient_residual`` (:class:`GradientResidualAccount`); a state without it is an Eq. 56 or audited one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

GRADIENT_RESIDUAL_KEY = "gradient_residual"
EQ56_INPUT_KEYS = ("eta", "q", "G", "G_source", "rho", "rho_source", "batch_size", "batches_per_epoch",
                   "total_steps", "epochs", "clip_mode", "clip_norm", "l2", "training_seed")
"""The recorded inputs of the Eq. 56 bound, as its certificates carry them."""


@dataclass(frozen=True)
class Work:
    """What the certified deletions of a budget epoch cost, summed over its forgets: passes over the
    remaining rows (a gradient or a Hessian-vector product each), Newton-CG steps and exact solves. This is
    operator metadata: it is stored with the version, never put in a certificate (docs/hessian_free.md,
    threat model)."""

    forgets: int = 0
    passes: int = 0
    newton_steps: int = 0
    exact_solves: int = 0

    def plus(self, passes: int, newton_steps: int, exact: bool) -> Work:
        return Work(self.forgets + 1, self.passes + passes, self.newton_steps + newton_steps,
                    self.exact_solves + int(exact))

    @staticmethod
    def from_dict(data: Mapping[str, Any] | None) -> Work:
        data = data or {}
        return Work(**{f.name: int(data.get(f.name, 0)) for f in fields(Work)})


@dataclass(frozen=True)
class GradientResidualAccount:
    """The certified release of a gradient-residual model: fixed at training from the registration's
    (epsilon, delta) and sensitivity cap alone, never from the data."""

    sensitivity_cap: float  # Delta_max: every release's clean weights are within it of the exact minimiser
    sigma: float  # analytic Gaussian mechanism for (epsilon, delta) at sensitivity Delta_max
    epsilon: float
    delta: float
    max_newton_steps: int
    fit_noise_seed: int  # the noise of the training release
    vectors_stale: bool = False  # an exact solve ran: the vectors no longer track; a retrain refreshes them
    work: Work = field(default_factory=Work)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> GradientResidualAccount:
        return GradientResidualAccount(
            sensitivity_cap=float(data["sensitivity_cap"]), sigma=float(data["sigma"]),
            epsilon=float(data["epsilon"]), delta=float(data["delta"]),
            max_newton_steps=int(data["max_newton_steps"]), fit_noise_seed=int(data["fit_noise_seed"]),
            vectors_stale=bool(data.get("vectors_stale", False)), work=Work.from_dict(data.get("work")),
        )


@dataclass(frozen=True)
class HFAccounting:
    """``MethodState.accounting`` of a ``hessian_free`` state (module docstring)."""

    eta: float
    q: float
    G: float
    G_source: str
    rho: float
    rho_source: str
    batch_size: int
    batches_per_epoch: int
    total_steps: int
    epochs: int
    clip_mode: str
    clip_norm: float | None
    l2: float
    training_seed: int
    per_sample_bound: float  # Eq. 56's delta_1 (kept for every state; vacuous on real data)
    deleted_count: int
    train_size: int
    config: dict[str, Any]
    measured: dict[str, float]
    seconds_precompute: float
    repaired: bool = False
    repair_epochs: int | None = None
    repair_seed: int | None = None
    gradient_residual: GradientResidualAccount | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def certified_residual(self) -> bool:
        """Whether releases are certified by the gradient residual (else Eq. 56 or audited)."""
        return self.gradient_residual is not None and not self.repaired

    def eq56_inputs(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in EQ56_INPUT_KEYS}

    def with_deleted(self, count: int) -> HFAccounting:
        return replace(self, deleted_count=self.deleted_count + count)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k) for k in EQ56_INPUT_KEYS}
        out.update(per_sample_bound=self.per_sample_bound, deleted_count=self.deleted_count,
                   train_size=self.train_size, config=dict(self.config), measured=dict(self.measured),
                   seconds_precompute=self.seconds_precompute)
        if self.repaired:
            out.update(repaired=True, repair_epochs=self.repair_epochs, repair_seed=self.repair_seed)
        if self.gradient_residual is not None:
            out[GRADIENT_RESIDUAL_KEY] = self.gradient_residual.to_dict()
        return {**self.extra, **out}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> HFAccounting:
        known = {f.name for f in fields(HFAccounting)} - {"extra"}
        residual = data.get(GRADIENT_RESIDUAL_KEY)
        return HFAccounting(
            **{k: data[k] for k in EQ56_INPUT_KEYS},
            per_sample_bound=float(data["per_sample_bound"]),
            deleted_count=int(data["deleted_count"]),
            train_size=int(data["train_size"]),
            config=dict(data.get("config", {})),
            measured=dict(data.get("measured", {})),
            seconds_precompute=float(data.get("seconds_precompute", float("nan"))),
            repaired=bool(data.get("repaired", False)),
            repair_epochs=data.get("repair_epochs"),
            repair_seed=data.get("repair_seed"),
            gradient_residual=None if residual is None else GradientResidualAccount.from_dict(residual),
            extra={k: v for k, v in data.items() if k not in known},
        )
