"""The ``mini_unlearning`` method: fit records the trajectory, forget applies the Eq. 10 correction.

- ``fit`` trains by plain SGD and records the window (:mod:`.trajectory`); the state is clean = released
  = w_T, the window in ``artifacts``, the run in the accounting (:class:`.accounting.WindowAccounting`).
- ``forget`` recomputes Delta of Eq. 10 (:mod:`.correction`) on the ORIGINAL recorded trajectory with
  the cumulative deleted set of the budget epoch (digest 004 section 6.4, option (a)), so forgetting A
  then B equals forgetting A and B at once: w* = w_T + Delta(D_U). The recorded window (snapshots and
  step directions) still carries the deleted samples' influence until the next retrain; forgotten sample
  ids are scrubbed from it.
- Budget: a largest number of deletions per budget epoch, min(n, policy.max_deletions,
  floor(fraction n)), with the policy's deletion ratio or else the model's ``max_deletion_fraction``;
  beyond it ``must_retrain`` asks for a retrain.

Guarantee: none. There is no (epsilon, delta) (epsilon is infinite) and no noise; Theorem 1 only bounds
the truncation error of the linearised recursion by r^k ||Delta w_{T-k}||, which is vacuous at the
paper's step size (digest 2.3). Only deleted samples that fall in the window's k batches change G
directly; each certificate records how many did. Releases are audited only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, MutableSet, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from unlearning.data import Dataset
from unlearning.device import default_device
from unlearning.errors import AlreadyDeletedError, InvalidConfigError, InvalidDatasetError, UnknownSampleError
from unlearning.methods.hessian_free import check_sgd_config, model_spec_for, sgd_config, sgd_hyperparameters
from unlearning.methods.hyperparameters import HyperParameter
from unlearning.methods.job_estimate import DataShape, JobEstimate
from unlearning.methods.mini_unlearning.accounting import WindowAccounting
from unlearning.methods.mini_unlearning.config import (
    DEFAULT_MAX_DELETION_FRACTION,
    HVP_MODES,
    WindowConfig,
    check_fraction,
    window_hyperparameters,
)
from unlearning.methods.mini_unlearning.correction import ReplayStats, forward_correction, split_window
from unlearning.methods.mini_unlearning.estimate import mini_unlearning_estimate
from unlearning.methods.mini_unlearning.trajectory import (
    RecordedWindow,
    TrajectoryWindow,
    check_data,
    train_with_window,
)
from unlearning.methods.protocol import (
    BudgetPolicy,
    ForgetOutcome,
    ForgetRequest,
    MethodState,
    PrivacyTarget,
    ProgressCallback,
)
from unlearning.models import ModelSpec, build_model
from unlearning.models.families import family_names
from unlearning.privacy.certificate import Certificate, ReleaseMode
from unlearning.sgd_defaults import SGDRule, resolve_sgd

NAME = "mini_unlearning"
BOUND_NAME = "none"
# The data-derived SGD defaults (unlearning.sgd_defaults): batch min(256, n), at least 2000 steps within
# 1000 epochs, lr 4 / mean ||[x, 1]||^2 (constant: lr_decay stays 1).
SGD_RULE = SGDRule(batch_size=256, min_steps=2000, max_epochs=1000, lr_scale=4.0)


def state_from_window(
    dataset: Dataset, spec: ModelSpec, window: TrajectoryWindow, config: Mapping[str, Any], seed: int
) -> MethodState:
    """The method state after training: clean = released = w_T, the window in ``artifacts``."""
    wc = WindowConfig.from_config(config)
    weights = window.weights.detach().cpu()
    accounting = WindowAccounting(
        deleted_count=0,
        train_size=len(dataset),
        config=dict(config),
        training_seed=seed,
        schedule_seed=window.schedule.seed,
        total_steps=window.schedule.steps,
        batch_size=window.schedule.batch_size,
        k=window.k,
        m=wc.m,
        hvp=wc.hvp,
        snapshots=int(window.snapshots.shape[0]),
        first_window_step=window.schedule.steps - window.k + 1,
        window_deleted_cumulative=0,
        seconds_fit=window.seconds,
    )
    return MethodState(
        method=NAME,
        model=spec,
        clean_weights=weights,
        released_weights=weights.clone(),
        statistics=None,
        accounting=accounting.to_dict(),
        artifacts=window.artifacts(),
    )


# ---------------------------------------------------------------------------------- request logic
def _resolve_request(
    request: ForgetRequest, remaining: Dataset, deleted: MutableSet[str] | set[str]
) -> list[str]:
    """The sample ids this request forgets: the named owners' remaining samples, then the named samples."""
    if len(set(request.sample_ids)) != len(request.sample_ids):
        raise AlreadyDeletedError("the request names the same sample id twice: name each sample once")
    for sid in request.sample_ids:
        if sid in deleted:
            raise AlreadyDeletedError(f"sample {sid!r} was already forgotten in this budget epoch")
        if not remaining.contains(sid):
            raise UnknownSampleError(f"sample {sid!r} is not in the model's remaining training data")
    owners = list(dict.fromkeys(request.owner_ids))
    out: list[str] = []
    if owners:
        try:
            out.extend(remaining.samples_of_owners(owners))
        except UnknownSampleError as exc:
            raise UnknownSampleError(f"{exc}: the owner is unknown or was already forgotten") from None
    covered = set(out)
    out.extend(s for s in request.sample_ids if s not in covered)
    return out


def _with_added(deleted: MutableSet[str], ids: Sequence[str]) -> MutableSet[str]:
    """The deleted set plus ``ids``: a new set for a plain set; a service's own MutableSet (e.g. of
    keyed hashes that never hold plaintext ids) is updated in place through its ``add``."""
    if type(deleted) is set:
        return deleted | set(ids)
    for sid in ids:
        deleted.add(sid)
    return deleted


# ------------------------------------------------------------------------------------- the method
class MiniUnlearning:
    """The ``mini_unlearning`` method; see the module docstring."""

    name: ClassVar[str] = NAME
    request_kinds: ClassVar[frozenset[str]] = frozenset({"sample", "owner"})
    needs_training_data: ClassVar[bool] = True

    def hyperparameters(self) -> tuple[HyperParameter, ...]:
        return (*sgd_hyperparameters(), *window_hyperparameters())

    def families(self) -> tuple[str, ...]:
        return family_names()

    def release_modes(self) -> tuple[ReleaseMode, ...]:
        """Audited only: the method carries no (epsilon, delta) guarantee."""
        return ("audited",)

    def restore_model(self, data: Mapping[str, Any]) -> ModelSpec:
        """``MethodState.model`` from its ``to_dict()``."""
        return ModelSpec.from_dict(dict(data))

    def default_config(self) -> dict[str, Any]:
        """The paper's setting (Sec. 5.1): L2 logistic regression, plain SGD at a constant step, k 10, m 2.

        None means "derive it from the data" by :data:`SGD_RULE` (:mod:`unlearning.sgd_defaults`):
        l2 = 1/n (the coefficient of (l2/2)||w||^2), batch_size = min(256, n),
        epochs = min(1000, max(1, ceil(2000 / ceil(n / batch_size)))) and lr = 4 / mean_i ||[x_i, 1]||^2.
        ``max_deletion_fraction`` is the retrain ratio used only when the budget policy sets no limit of
        its own (15%, the largest ratio the paper evaluates).
        """
        return {
            "family": "logistic_regression",
            "hidden": [64],
            "epochs": None,
            "batch_size": None,
            "lr": None,
            "lr_decay": 1.0,
            "l2": None,
            "clip_norm": None,
            "clip_mode": "none",
            "k": 10,
            "m": 2,
            "hvp": "exact",
            "dtype": "float32",
            "max_deletion_fraction": DEFAULT_MAX_DELETION_FRACTION,
        }

    def check_config(self, config: Mapping[str, Any]) -> None:
        """:class:`InvalidConfigError` for a value ``fit`` would refuse, the upper bounds of
        :mod:`.config` and of the recorded SGD included."""
        self._merged(config)

    def estimate_job(self, config: Mapping[str, Any], shape: DataShape) -> JobEstimate:
        """Plain SGD and the recorded window (:mod:`.estimate`)."""
        return mini_unlearning_estimate({**self.default_config(), **dict(config)}, shape, SGD_RULE)

    def _merged(self, config: Mapping[str, Any]) -> dict[str, Any]:
        merged = {**self.default_config(), **dict(config)}
        check_sgd_config(merged)
        WindowConfig.from_config(merged)
        check_fraction(merged["max_deletion_fraction"])
        return merged

    # ----------------------------------------------------------------------------------------- fit
    def fit(
        self,
        dataset: Dataset,
        config: Mapping[str, Any],
        privacy: PrivacyTarget,
        seed: int,
        progress: ProgressCallback | None = None,
        policy: BudgetPolicy | None = None,
    ) -> tuple[MethodState, Certificate]:
        """Plain SGD on ``dataset`` recording the last k + m + 1 iterates; released = w_T."""
        _require_audited(privacy)
        merged = resolve_sgd(self._merged(config), dataset, SGD_RULE)
        wc = WindowConfig.from_config(merged)
        spec = model_spec_for(dataset, merged)
        model = build_model(spec)
        window = train_with_window(
            model, dataset, sgd_config(merged), seed, k=wc.k, m=wc.m, device=default_device(), dtype=wc.dtype,
            progress=progress,
        )
        state = state_from_window(dataset, spec, window, merged, seed)
        if progress:
            progress("done", 1.0)
        measured = {"window_rows_fraction": sum(len(b) for b in window.window_ids) / len(dataset)}
        return state, self._certificate(state, privacy, policy, charge=0, inputs={}, measured=measured)

    # -------------------------------------------------------------------------------------- forget
    def forget(
        self,
        state: MethodState,
        request: ForgetRequest,
        noise_seed: int,
        privacy: PrivacyTarget,
        remaining: Dataset | None = None,
        policy: BudgetPolicy | None = None,
    ) -> ForgetOutcome:
        """Recompute Eq. 10 on the recorded window for the cumulative deleted set; no noise is drawn."""
        started = time.perf_counter()
        request.require_kinds(self.name, self.request_kinds)
        if remaining is None:
            raise InvalidDatasetError(
                "mini_unlearning needs the remaining training data (every sample not yet forgotten, "
                "including those this request names)"
            )
        _require_audited(privacy)
        window = RecordedWindow.of(state)
        model = build_model(state.model)
        check_data(model, remaining)
        forgotten = _resolve_request(request, remaining, state.deleted_ids)
        steps, scrubbed, in_window = split_window(window, remaining, set(forgotten))
        acc = WindowAccounting.from_dict(state.accounting)
        delta, stats = forward_correction(
            model, sgd_config({**self.default_config(), **acc.config}), window, steps, remaining,
            hvp=acc.hvp, m=acc.m, device=default_device(),
        )
        clean = window.snapshots[-1] + delta.cpu()
        after = acc.after_forgetting(len(forgotten), in_window)
        new_state = replace(
            state,
            clean_weights=clean,
            released_weights=clean.clone(),
            accounting=after.to_dict(),
            artifacts={**state.artifacts, "window_sample_ids": scrubbed},
            deleted_ids=_with_added(state.deleted_ids, forgotten),
        )
        measured = _measured(stats, in_window, after, float(delta.norm()), time.perf_counter() - started)
        inputs = {"deleted_per_step": stats.deleted_per_step, "recorded_per_step": stats.recorded_per_step}
        cert = self._certificate(
            new_state, privacy, policy, charge=len(forgotten), inputs=inputs, measured=measured
        )
        return ForgetOutcome(state=new_state, certificate=cert, forgotten_ids=tuple(forgotten))

    # -------------------------------------------------------------------------------------- budget
    def budget_cap(self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget) -> float:
        """The most samples one budget epoch may forget before a retrain: the tightest policy limit.

        ``policy.max_sigma`` does not apply (no noise is ever added). A policy with neither a count nor a
        ratio limit falls back to the model's ``max_deletion_fraction`` (a heuristic without any limit
        would never be retrained).
        """
        acc = WindowAccounting.from_dict(state.accounting)
        caps = [float(acc.train_size)]
        if policy.max_deletions is not None:
            caps.append(float(policy.max_deletions))
        fraction = _fraction(acc, policy)
        if fraction is not None:
            caps.append(float(math.floor(fraction * acc.train_size)))
        return min(caps)

    def must_retrain(
        self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget, pending_deletions: int = 0
    ) -> str | None:
        """A reason to retrain when ``pending_deletions`` more would exceed :meth:`budget_cap`, else None."""
        acc = WindowAccounting.from_dict(state.accounting)
        after = acc.deleted_count + pending_deletions
        cap = self.budget_cap(state, policy, privacy)
        if after <= cap:
            return None
        n = acc.train_size
        return (
            f"forgetting {pending_deletions} more sample(s) would bring this budget epoch to {after} "
            f"deletions ({after / n:.1%} of {n}), above the mini_unlearning cap of {int(cap)}: the "
            "linearised replay is only trusted up to the policy's deletion ratio"
        )

    # --------------------------------------------------------------------------------- certificate
    def _certificate(
        self,
        state: MethodState,
        privacy: PrivacyTarget,
        policy: BudgetPolicy | None,
        *,
        charge: int,
        inputs: Mapping[str, Any],
        measured: Mapping[str, float],
    ) -> Certificate:
        acc = WindowAccounting.from_dict(state.accounting)
        cfg = acc.config
        cum = acc.deleted_count
        # Without a policy (a direct library call) the model's own max_deletion_fraction sets the cap.
        cap = self.budget_cap(state, policy or BudgetPolicy(max_deletion_fraction=None), privacy)
        return Certificate(
            method=self.name,
            release_mode=privacy.release_mode,
            guarantee="none",
            epsilon=None,
            delta=None,
            bound_name=BOUND_NAME,
            bound=math.inf,
            sigma=0.0,
            calibration="none",
            cumulative_deletions=cum,
            budget_unit="deleted_samples",
            budget_cap=cap,
            budget_spent=float(cum),
            charge=float(charge),
            noise_seed=None,
            inputs={
                "k": acc.k,
                "m": acc.m,
                "hvp": acc.hvp,
                "lr": cfg["lr"],
                "lr_decay": cfg["lr_decay"],
                "l2": cfg["l2"],
                "batch_size": acc.batch_size,
                "epochs": cfg["epochs"],
                "total_steps": acc.total_steps,
                "first_window_step": acc.first_window_step,
                "training_seed": acc.training_seed,
                "schedule_seed": acc.schedule_seed,
                "train_size": acc.train_size,
                "epsilon": math.inf,
                **inputs,
            },
            measured=dict(measured),
            notes=_NOTES,
        )

    def verify_certificate(self, certificate: Certificate) -> list[str]:
        """Check that the certificate claims nothing: no epsilon, no noise, counts that add up."""
        c = certificate
        problems: list[str] = []
        if c.method != self.name:
            problems.append(f"certificate of method {c.method!r}, expected {self.name!r}")
        if c.guarantee != "none" or c.epsilon is not None or c.delta is not None:
            problems.append(
                "mini_unlearning carries no formal guarantee: guarantee 'none', epsilon and delta None"
            )
        if c.release_mode != "audited":
            problems.append("mini_unlearning releases can only be audited, never certified")
        if c.sigma != 0.0 or c.calibration != "none" or c.noise_seed is not None:
            problems.append("mini_unlearning adds no noise: sigma 0, calibration 'none', no noise seed")
        if c.bound_name != BOUND_NAME or not math.isinf(c.bound):
            problems.append("mini_unlearning has no bound: bound_name 'none' with bound inf")
        if c.budget_unit != "deleted_samples" or c.budget_spent != float(c.cumulative_deletions):
            problems.append("the budget spent must equal the cumulative deletions (unit deleted_samples)")
        if not 0 <= c.charge <= c.cumulative_deletions:
            problems.append(f"charge {c.charge} outside [0, {c.cumulative_deletions}]")
        if c.inputs.get("hvp") not in HVP_MODES:
            problems.append(f"unknown hvp mode {c.inputs.get('hvp')!r}")
        if not _per_step_counts_ok(c.inputs):
            problems.append("deleted_per_step must give one count in [0, |B_l|] per window step")
        hits = c.measured.get("window_deleted_this_request")
        if hits is not None and not 0 <= hits <= c.charge:
            problems.append(f"{hits} deleted samples inside the window, the request forgot only {c.charge}")
        cum_hits = c.measured.get("window_deleted_cumulative")
        if cum_hits is not None and not 0 <= cum_hits <= c.cumulative_deletions:
            problems.append(
                f"{cum_hits} window deletions exceed the {c.cumulative_deletions} cumulative deletions"
            )
        return problems


_NOTES = (
    "No formal guarantee: epsilon is infinite and no noise is added. The model is the trained one plus a "
    "first-order replay of the last k SGD steps without the deleted samples (Mini-Unlearning, Eq. 10), "
    "recomputed on the original trajectory for every sample deleted in this budget epoch. Only deleted "
    "samples inside the replayed window (measured.window_deleted_*) change the correction directly; the "
    "others keep their influence until the next retrain. Audit it empirically (distance to a retrain, "
    "membership inference); the service retrains once the deletion ratio reaches the policy's cap."
)


def _per_step_counts_ok(inputs: Mapping[str, Any]) -> bool:
    per_step, recorded = inputs.get("deleted_per_step"), inputs.get("recorded_per_step")
    if per_step is None:
        return True
    if recorded is None or len(per_step) != len(recorded) or len(per_step) != inputs.get("k"):
        return False
    return all(0 <= d <= r for d, r in zip(per_step, recorded))


def _fraction(acc: WindowAccounting, policy: BudgetPolicy) -> float | None:
    """The deletion ratio of the cap: the policy's, none when the policy sets only a count, else the model's."""
    if policy.max_deletion_fraction is not None:
        return policy.max_deletion_fraction
    if policy.max_deletions is not None:
        return None
    return acc.max_deletion_fraction


def _require_audited(privacy: PrivacyTarget) -> None:
    if privacy.release_mode != "audited":
        raise InvalidConfigError(
            "mini_unlearning carries no (epsilon, delta) guarantee, so it cannot serve release_mode "
            f"{privacy.release_mode!r}: register the model with release_mode 'audited'"
        )


def _measured(
    stats: ReplayStats, in_window: int, acc: WindowAccounting, correction_norm: float, seconds: float
) -> dict[str, float]:
    return {
        "window_deleted_this_request": float(in_window),
        "window_deleted_cumulative": float(acc.window_deleted_cumulative),
        "window_coverage_cumulative": acc.window_coverage,
        "window_deleted_occurrences": float(sum(stats.deleted_per_step)),
        "correction_norm": correction_norm,
        "gradient_evaluations": float(stats.gradient_evaluations),
        "hvp_products": float(stats.hvp_products),
        "lbfgs_fallbacks": float(stats.lbfgs_fallbacks),
        "lbfgs_pairs_dropped": float(stats.lbfgs_pairs_dropped),
        "seconds": seconds,
    }


__all__ = ["BOUND_NAME", "NAME", "SGD_RULE", "MiniUnlearning", "state_from_window"]
