"""The gradient-residual budget of the Newton methods and its ledger, one budget epoch at a time.

Budget (digest 001 section 4.2(b), Guo et al. Algorithm 2)
----------------------------------------------------------
``budget = alpha * epsilon / sqrt(2 ln(1.5 / delta))``. Theorem 4.1: if the released weights satisfy
``||grad L_B(W; D')|| <= budget`` and ``B ~ N(0, alpha^2 I)``, the removal is (epsilon, delta)-certified
with ``delta = 1.5 exp(-c0^2 / 2)``. The noise is isotropic Gaussian over all d*C coordinates of ``W``,
so the theorem applies to the concatenated model and its JOINT gradient residual: the budget is NOT
multiplied by the number of classes (the public code compares the sum of per-class bounds with
``C * budget``, which certifies roughly ``C * epsilon``; digest 001 section 4.3).

Budget epochs
-------------
An epoch opens with a fresh training (:func:`start_epoch`: new noise, the optimiser's residual is its first
spending) and adds the charge of every Newton step after it until the next would cross the cap; then the
method retrains with fresh noise and a new epoch opens. :class:`NewtonAccounting` is the epoch's ledger:
the typed form of ``MethodState.accounting``, whose ``from_dict`` / ``to_dict`` keep the JSON keys that
stored versions have.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, Self

import torch

from unlearning.errors import InvalidConfigError, UnlearningError
from unlearning.methods.protocol import PrivacyTarget, ProgressCallback
from unlearning.newton.config import NewtonConfig
from unlearning.newton.objective import Objective, draw_noise, operator_norm_upper
from unlearning.newton.solvers import TrainResult, train_perturbed
from unlearning.newton.step import StepReport
from unlearning.privacy.certificate import ReleaseMode

__all__ = [
    "OP_NORM_SOURCES",
    "EpochStart",
    "NewtonAccounting",
    "OpNormSource",
    "c0",
    "integer_spec",
    "number_spec",
    "residual_budget",
    "start_epoch",
    "text_spec",
]


def c0(delta: float) -> float:
    """c0 = sqrt(2 ln(1.5 / delta)) of Theorem 4.1 (delta = 1.5 exp(-c0^2 / 2))."""
    if not 0 < delta < 1.5:
        raise InvalidConfigError(f"delta must lie in (0, 1.5) for the Gaussian objective perturbation, got {delta}")
    return math.sqrt(2.0 * math.log(1.5 / delta))


def residual_budget(alpha: float, epsilon: float, delta: float) -> float:
    """The gradient-residual budget ``alpha * epsilon / sqrt(2 ln(1.5/delta))`` (alpha = noise std)."""
    if not (alpha >= 0 and math.isfinite(alpha)):
        raise InvalidConfigError(f"alpha (the objective-perturbation std) must be finite and >= 0, got {alpha}")
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise InvalidConfigError(f"epsilon must be finite and > 0, got {epsilon}")
    return alpha * epsilon / c0(delta)



@dataclass(frozen=True)
class EpochStart:
    """A freshly trained model: what a new budget epoch starts from."""

    weights: torch.Tensor
    train: TrainResult
    op_norm: float | None
    noise_seed: int
    noise_std: float


def newton_progress(progress: ProgressCallback | None, max_newton: int) -> Callable[[int], None] | None:
    """``on_step`` for :func:`train_perturbed` reporting Newton step ``it`` of at most ``max_newton`` as
    phase ``training`` to a fit's ``progress`` (which may raise to stop the job)."""
    if progress is None:
        return None
    return lambda it: progress("training", min((it - 1) / max_newton, 0.999))


def start_epoch(
    objective: Objective, cfg: NewtonConfig, noise_std: float, noise_seed: int, init: torch.Tensor | None = None,
    on_step: Callable[[int], None] | None = None,
) -> EpochStart:
    """Train on ``objective`` with fresh noise ``B ~ N(0, noise_std^2)`` from ``noise_seed``; bound ||Z||_op.

    The result must be the minimiser of the new perturbed objective; a warm start only saves time (the
    minimiser does not depend on it, and the optimiser's residual is charged to the new epoch).
    """
    noise = draw_noise(objective.design.dim, objective.columns, noise_std, noise_seed,
                       device=objective.targets.device)
    result = train_perturbed(objective, noise, tol=cfg.opt_tol, max_iter=cfg.max_newton, init=init,
                             solver=cfg.solver, on_step=on_step)
    op = None
    if cfg.op_norm == "exact":
        op = operator_norm_upper(objective.design.materialize()[objective.weight > 0])
    return EpochStart(result.weights, result, op, int(noise_seed), noise_std)


# --------------------------------------------------------------------------------------------------
# the ledger

OpNormSource = Literal[
    "exact_at_epoch_start", "exact_remaining_rows", "epoch_value_rows_only_leave", "epoch_value_plus_row_changes",
    "none",
]
OP_NORM_SOURCES: tuple[OpNormSource, ...] = (
    "exact_at_epoch_start", "exact_remaining_rows", "epoch_value_rows_only_leave", "epoch_value_plus_row_changes",
    "none",
)
"""Where ``op_norm_bound`` comes from: exact on the epoch's rows at its start, exact on the remaining rows
(computed by the last step), the epoch's value carried while rows only leave (a row-submatrix never has a
larger norm), that value plus the Frobenius norm of every row change since, or none (no bound kept)."""
RELEASE_MODES: tuple[ReleaseMode, ...] = ("certified", "audited")

Check = Callable[[Any], "str | None"]


def _spec(parse: Callable[[Any], Any], check: Check, dump: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """A ledger field's metadata: ``parse`` reads its stored JSON value, ``check`` says what is wrong with a
    value (None: nothing), ``dump`` writes it back (identity when None)."""
    return {"parse": parse, "check": check, "dump": dump}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"{value!r} is not an integer")
    out = int(value)
    if isinstance(value, float) and out != value:
        raise ValueError(f"{value!r} is not a whole number")
    return out


def integer_spec(minimum: int | None = 0) -> dict[str, Any]:
    """``field(metadata=...)`` of an integer ledger field, at least ``minimum`` (None: any integer)."""

    def check(value: Any) -> str | None:
        if not _is_int(value):
            return "must be an integer"
        return None if minimum is None or value >= minimum else f"must be >= {minimum}"

    return _spec(_parse_int, check)


def number_spec(*, positive: bool = False, optional: bool = False) -> dict[str, Any]:
    """``field(metadata=...)`` of a real ledger field, >= 0 (> 0 when ``positive``; None allowed when
    ``optional``)."""

    def parse(value: Any) -> float | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise TypeError(f"{value!r} is not a number")
        return float(value)

    def check(value: Any) -> str | None:
        if value is None and optional:
            return None
        if not (_is_int(value) or isinstance(value, float)):
            return "must be a number" + (" or null" if optional else "")
        if positive:
            return None if value > 0 else "must be > 0"
        return None if value >= 0 else "must be >= 0"

    return _spec(parse, check)


def text_spec(choices: tuple[str, ...] | None = None) -> dict[str, Any]:
    """``field(metadata=...)`` of a string ledger field, one of ``choices`` when given."""

    def check(value: Any) -> str | None:
        if not isinstance(value, str):
            return "must be a string"
        return None if choices is None or value in choices else f"must be one of {list(choices)}"

    return _spec(lambda value: value, check)


_MAPPING = _spec(dict, lambda v: None if isinstance(v, dict) else "must be a mapping", dict)
_CONFIG = _spec(NewtonConfig.from_mapping, lambda v: None if isinstance(v, NewtonConfig) else "must be a NewtonConfig",
                NewtonConfig.to_dict)


_LEADING = ("method_config", "release_mode")


@dataclass(frozen=True, kw_only=True)
class NewtonAccounting:
    """The ledger of a Newton method's budget epoch: ``MethodState.accounting`` typed.

    :meth:`to_dict` writes the keys the methods have always stored (``method_config``, ``release_mode``,
    the fields a subclass adds, then the ledger below, then ``extra``) and :meth:`from_dict` reads them
    back, so stored versions load. A method with keys of its own subclasses this (frozen, keyword-only)
    and declares them as ``field(metadata=...)`` of :func:`integer_spec`, :func:`number_spec` or
    :func:`text_spec`, which state each field's type and constraint (checked on every construction). Keys
    no field names (a wrapper's, such as the table methods' ``feature_transform`` and ``quality``) travel
    in ``extra`` unchanged.
    """

    method_config: dict[str, Any] = field(metadata=_MAPPING)
    """The method's own hyperparameters (the keys beyond :class:`NewtonConfig`'s)."""
    release_mode: ReleaseMode = field(metadata=text_spec(RELEASE_MODES))
    deleted_count: int = field(metadata=integer_spec())
    """Items removed in this epoch (samples, nodes, edges, features, graphs: one each)."""
    train_size: int = field(metadata=integer_spec())
    """Training rows at the epoch's start."""
    remaining: int = field(metadata=integer_spec())
    """Training rows now (<= train_size: rows only leave within an epoch)."""
    epoch: int = field(metadata=integer_spec())
    retrains: int = field(metadata=integer_spec())
    fit_seed: int = field(metadata=integer_spec(None))
    noise_seed: int = field(metadata=integer_spec(None))
    """Seed of the epoch's objective perturbation B (secret-equivalent)."""
    noise_std: float = field(metadata=number_spec())
    """Std of B: alpha for a certified release, 0 for an audited one."""
    cap: float = field(metadata=number_spec(positive=True))
    """The residual budget alpha * epsilon / c0(delta)."""
    spent: float = field(metadata=number_spec())
    """The accumulated residual bound: the optimiser's residual plus every accepted charge."""
    optimizer_residual: float = field(metadata=number_spec())
    optimizer_iterations: int = field(metadata=integer_spec())
    optimizer_hessian_products: int = field(metadata=integer_spec())
    optimizer_seconds: float = field(metadata=number_spec())
    op_norm_bound: float | None = field(metadata=number_spec(optional=True))
    """An upper bound on ||Z'||_op of the current design, or None."""
    op_norm_source: OpNormSource = field(metadata=text_spec(OP_NORM_SOURCES))
    max_charge_per_item: float = field(metadata=number_spec())
    """The largest charge per removed item in this epoch (predicts the next charge)."""
    last_charge: float = field(metadata=number_spec())
    config: NewtonConfig = field(metadata=_CONFIG)
    extra: dict[str, Any] = field(default_factory=dict)
    """Stored keys no field names, kept as they are."""

    def __post_init__(self) -> None:
        for f in fields(self):
            check = f.metadata.get("check")
            value = getattr(self, f.name)
            problem = check(value) if check else None
            if problem:
                raise InvalidConfigError(f"the Newton accounting's {f.name} {problem}, got {value!r}")
        if self.remaining > self.train_size:
            raise InvalidConfigError(f"the Newton accounting has {self.remaining} remaining rows, more than the "
                                     f"{self.train_size} its epoch started with")
        clash = sorted(set(self.extra) & {f.name for f in fields(self)})
        if clash:
            raise InvalidConfigError(f"the Newton accounting's extra keys {clash} shadow its fields")

    # ------------------------------------------------------------------------------------ JSON form
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The ledger stored as ``data`` (a ``MethodState.accounting``)."""
        named = [f for f in fields(cls) if f.name != "extra"]
        missing = [f.name for f in named if f.name not in data]
        if missing:
            raise InvalidConfigError(f"the accounting of this Newton model lacks {missing}")
        values: dict[str, Any] = {}
        for f in named:
            try:
                values[f.name] = f.metadata["parse"](data[f.name])
            except UnlearningError:
                raise
            except (TypeError, ValueError) as exc:
                raise InvalidConfigError(f"the Newton accounting's {f.name} is unreadable: {exc}") from None
        names = {f.name for f in named}
        return cls(**values, extra={k: v for k, v in data.items() if k not in names})

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able dict stored as ``MethodState.accounting`` (the same keys as ever)."""
        base = {f.name for f in fields(NewtonAccounting)}
        own = [f for f in fields(self) if f.name not in base]
        ledger = [f for f in fields(NewtonAccounting) if f.name not in _LEADING and f.name != "extra"]
        leading = [f for f in fields(NewtonAccounting) if f.name in _LEADING]
        out: dict[str, Any] = {}
        for f in (*leading, *own, *ledger):
            dump = f.metadata.get("dump")
            value = getattr(self, f.name)
            out[f.name] = dump(value) if dump else value
        return {**out, **self.extra}

    # ------------------------------------------------------------------------------------ the epoch
    @classmethod
    def opening(
        cls, start: EpochStart, cfg: NewtonConfig, privacy: PrivacyTarget, train_size: int, *, fit_seed: int,
        epoch: int, retrains: int, method_config: Mapping[str, Any], **own: Any,
    ) -> Self:
        """The ledger of a new budget epoch that ``start`` opened on ``train_size`` rows; ``own``: the
        values of the fields a subclass adds. Refuses an epoch with no budget or whose training already
        left more residual than the whole budget."""
        cap = residual_budget(cfg.alpha, privacy.epsilon, privacy.delta)
        residual = start.train.residual_norm
        if cap == 0.0:
            raise InvalidConfigError("alpha = 0 leaves no gradient-residual budget: set alpha > 0 (the noise std)")
        if residual > cap:
            raise InvalidConfigError(
                f"training stopped at gradient norm {residual:.3g}, above the whole residual budget {cap:.3g}: "
                "raise max_newton, lower opt_tol or raise alpha"
            )
        return cls(
            method_config=dict(method_config),
            release_mode=privacy.release_mode,
            **own,
            deleted_count=0,
            train_size=int(train_size),
            remaining=int(train_size),
            epoch=int(epoch),
            retrains=int(retrains),
            fit_seed=int(fit_seed),
            noise_seed=int(start.noise_seed),
            noise_std=float(start.noise_std),
            cap=cap,
            spent=residual,
            optimizer_residual=residual,
            optimizer_iterations=start.train.iterations,
            optimizer_hessian_products=start.train.hessian_products,
            optimizer_seconds=start.train.seconds,
            op_norm_bound=start.op_norm,
            op_norm_source="exact_at_epoch_start" if start.op_norm is not None else "none",
            max_charge_per_item=0.0,
            last_charge=0.0,
            config=cfg,
        )

    def crosses_cap(self, charge: float) -> bool:
        """Whether spending ``charge`` more would pass the cap (the method then retrains instead)."""
        return self.spent + charge > self.cap

    def accepted(self, step: StepReport, items: int, remaining: int, carried_source: OpNormSource) -> Self:
        """The ledger after an accepted Newton step that removed ``items`` things, ``remaining`` rows left.

        The operator-norm bound kept for the next step is the step's (exact on the remaining rows when the
        step computed it, else ``carried_source`` names how the caller carried it forward).
        """
        charge = step.charge
        return replace(
            self,
            deleted_count=self.deleted_count + items,
            remaining=int(remaining),
            spent=self.spent + charge,
            last_charge=charge,
            max_charge_per_item=max(self.max_charge_per_item, charge / max(items, 1)),
            op_norm_bound=step.op_norm,
            op_norm_source="none" if step.op_norm is None else (
                "exact_remaining_rows" if step.op_norm_exact else carried_source),
        )
