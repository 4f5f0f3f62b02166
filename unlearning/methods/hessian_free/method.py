"""The ``hessian_free`` method (package docstring): fit, forget, repair, budget and certificates."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
import torch

from unlearning.audit.membership import loss_attack
from unlearning.audit.verification import per_sample_losses
from unlearning.data import Dataset
from unlearning.device import default_device
from unlearning.errors import AlreadyDeletedError, DimensionMismatchError, InvalidConfigError
from unlearning.methods.hessian_free import certified, eq56
from unlearning.methods.hessian_free.accounting import GradientResidualAccount, HFAccounting
from unlearning.methods.hessian_free.estimate import hessian_free_estimate
from unlearning.methods.hessian_free.objective import SoftmaxObjective
from unlearning.methods.hessian_free.precision import (
    DEFAULT_VECTOR_DTYPE,
    VECTOR_DTYPES,
    check_certified_precision,
    stored,
    vector_dtype,
)
from unlearning.methods.hessian_free.sgd import (
    MAX_RHO_ITERATIONS,
    SGD_RULE,
    at_most,
    check_sgd_config,
    model_spec_for,
    sgd_config,
    sgd_hyperparameters,
)
from unlearning.methods.hyperparameters import HyperParameter
from unlearning.methods.job_estimate import DataShape, JobEstimate
from unlearning.methods.protocol import (
    BudgetPolicy,
    ForgetOutcome,
    ForgetRequest,
    MethodState,
    PrivacyTarget,
    ProgressCallback,
)
from unlearning.methods.registry import register
from unlearning.methods.statistics import InMemorySampleStatistics
from unlearning.models import ModelSpec, build_model
from unlearning.models.families import family_names
from unlearning.privacy.certificate import Certificate, ReleaseMode
from unlearning.privacy.gaussian import largest_sensitivity
from unlearning.sgd_defaults import resolve_sgd
from unlearning.training import TrainingRecord, replay_retrain, train_recorded
from unlearning.validation import integer_at_least

BOUNDS = (certified.BOUND_NAME, "eq56")
"""The ``certified_bound`` choices: the gradient residual (default) or the paper's Eq. 56 (vacuous)."""


def state_from_record(
    dataset: Dataset, spec: ModelSpec, record: TrainingRecord, config: Mapping[str, Any],
    measured: Mapping[str, float] | None = None,
) -> MethodState:
    """The method state right after Stage II: clean = released = w_T, vectors per sample (in the
    configuration's ``vector_dtype``, :mod:`.precision`), accounting."""
    if record.vectors is None:
        raise InvalidConfigError("the training record has no approximator vectors: train with_vectors=True")
    inputs = eq56.bound_inputs(record)
    acc = HFAccounting(
        **inputs,
        per_sample_bound=eq56.per_sample_bound_from(inputs),
        deleted_count=0,
        train_size=len(dataset),
        config=dict(config),
        measured=dict(measured or {}),
        seconds_precompute=record.seconds.get("train_and_precompute", float("nan")),
    )
    weights = record.weights.detach().cpu()
    return MethodState(
        method=HessianFree.name,
        model=spec,
        clean_weights=weights,
        released_weights=weights.clone(),
        statistics=InMemorySampleStatistics(
            dataset.sample_ids, dataset.owner_ids, stored(record.vectors.cpu(), _vector_dtype_of(config))
        ),
        accounting=acc.to_dict(),
    )


def _vector_dtype_of(config: Mapping[str, Any]) -> str:
    """The configuration's ``vector_dtype`` (float32 for a configuration stored before it existed)."""
    return str(config.get("vector_dtype", DEFAULT_VECTOR_DTYPE))


def certified_state(state: MethodState, dataset: Dataset, privacy: PrivacyTarget, seed: int) -> MethodState:
    """A gradient-residual certified state from :func:`state_from_record`'s: sigma from the configuration's
    sensitivity cap and the privacy target, the weights polished in float64 to a bound of cap/10 on
    ``dataset``, and the training release noised (seed derived from ``seed``)."""
    acc = HFAccounting.from_dict(state.accounting)
    cap = float(acc.config["sensitivity_cap"])
    certified.check_certifiable(str(acc.config.get("family", "logistic_regression")), acc.l2, cap)
    objective = certified.objective_on(dataset, acc.l2, default_device())
    outcome = certified.polish(objective, state.clean_weights, cap)
    account = GradientResidualAccount(
        sensitivity_cap=cap, sigma=certified.sigma_for(cap, privacy.epsilon, privacy.delta),
        epsilon=privacy.epsilon, delta=privacy.delta, max_newton_steps=int(acc.config["max_newton_steps"]),
        fit_noise_seed=certified.fit_noise_seed(seed),
    )
    clean = outcome.weights
    return replace(
        state,
        clean_weights=clean,
        released_weights=clean + account.sigma * _gaussian(clean, account.fit_noise_seed),
        accounting=replace(acc, gradient_residual=account).to_dict(),
    )


class HessianFree:
    """The ``hessian_free`` method; see the package docstring."""

    name: ClassVar[str] = "hessian_free"
    request_kinds: ClassVar[frozenset[str]] = frozenset({"sample", "owner"})
    needs_training_data: ClassVar[bool] = False
    """In audited mode (and with the ``eq56`` bound); a gradient-residual certified model needs the remaining
    rows at every deletion: :meth:`needs_remaining_data`."""

    def needs_remaining_data(self, config: Mapping[str, Any], privacy: PrivacyTarget) -> bool:
        """Whether ``forget`` needs the remaining rows: only a certified model under the gradient residual."""
        merged = {**self.default_config(), **dict(config)}
        return privacy.release_mode == "certified" and merged["certified_bound"] == certified.BOUND_NAME

    def hyperparameters(self) -> tuple[HyperParameter, ...]:
        return (
            *sgd_hyperparameters(),
            HyperParameter("rho_iterations", "integer", "Power iterations per step for the Hessian norm rho of the "
                           "Eq. 56 bound", minimum=1, maximum=MAX_RHO_ITERATIONS),
            HyperParameter("audit_probe_fraction", "number", "Fraction of the samples forgotten in a probe at "
                           "training time of an audited model, measured against a replayed retrain (0: no probe)",
                           minimum=0, maximum=1),
            HyperParameter("certified_bound", "string", "What a certified release's noise is calibrated from: the "
                           "gradient residual against the exact minimiser, or the paper's Eq. 56 bound (vacuous on "
                           "real data: its noise leaves the model near chance)", choices=BOUNDS),
            HyperParameter("sensitivity_cap", "number", "Delta_max of a certified release: every release is within "
                           "it of the exact minimiser on the remaining rows; sigma follows from it and (epsilon, "
                           "delta)", minimum=0, exclusive_minimum=True, maximum=1e6),
            HyperParameter("max_newton_steps", "integer", "Newton-CG steps a certified deletion may take before an "
                           "exact solve (and a retrain) takes over", minimum=0, maximum=certified.MAX_NEWTON_STEPS),
            HyperParameter("vector_dtype", "string", "Precision the per-sample vectors are stored in (hot store and "
                           "artifacts); half precision halves their bytes, sums are computed in float32 (refused "
                           "with the eq56 certified bound)", choices=tuple(VECTOR_DTYPES)),
        )

    def families(self) -> tuple[str, ...]:
        return family_names()

    def release_modes(self) -> tuple[ReleaseMode, ...]:
        """Both: ``certified`` adds noise fixed at registration (convex families), ``audited`` adds none."""
        return ("certified", "audited")

    def default_config(self) -> dict[str, Any]:
        """Logistic regression by recorded SGD, batch clipping at 5 (digest 002 section 8); None means
        "derive it from the data" by :data:`SGD_RULE` (:mod:`unlearning.sgd_defaults`): l2 = 1/n,
        batch_size = min(32, n), epochs = min(200, max(1, ceil(1000 / ceil(n / batch_size)))),
        lr = 4 / mean_i ||[x_i, 1]||^2 and lr_decay = 0.3^(1/T) over the T steps. The precompute costs
        about 4 n^2 * dim(w) flops per epoch (every step propagates all n vectors), hence one epoch once an
        epoch has 1000 steps. Certified releases use the gradient residual with Delta_max 0.002 (sigma
        0.00515 at epsilon 1, delta 1e-3) and at most 3 Newton steps per deletion. The vectors are kept in
        float32 (``vector_dtype``: :mod:`.precision`)."""
        return {
            "family": "logistic_regression",
            "hidden": [64],
            "epochs": None,
            "batch_size": None,
            "lr": None,
            "lr_decay": None,
            "l2": None,
            "clip_norm": 5.0,
            "clip_mode": "batch",
            "rho_iterations": 3,
            "audit_probe_fraction": 0.01,
            "certified_bound": certified.BOUND_NAME,
            "sensitivity_cap": certified.DEFAULT_SENSITIVITY_CAP,
            "max_newton_steps": 3,
            "vector_dtype": DEFAULT_VECTOR_DTYPE,
        }

    def check_config(self, config: Mapping[str, Any]) -> None:
        merged = {**self.default_config(), **dict(config)}
        check_sgd_config(merged)
        rho_iterations = integer_at_least("rho_iterations", merged["rho_iterations"], 1)
        at_most("rho_iterations", rho_iterations, MAX_RHO_ITERATIONS)
        fraction = merged["audit_probe_fraction"]
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 <= fraction <= 1:
            raise InvalidConfigError(f"audit_probe_fraction must lie in [0, 1], got {fraction!r}")
        if merged["certified_bound"] not in BOUNDS:
            raise InvalidConfigError(f"certified_bound must be one of {list(BOUNDS)}, got {merged['certified_bound']!r}")
        cap = merged["sensitivity_cap"]
        if isinstance(cap, bool) or not isinstance(cap, int | float) or not (0 < cap <= 1e6):
            raise InvalidConfigError(f"sensitivity_cap must be a number in (0, 1e6], got {cap!r}")
        steps = integer_at_least("max_newton_steps", merged["max_newton_steps"], 0)
        at_most("max_newton_steps", steps, certified.MAX_NEWTON_STEPS)
        vector_dtype(merged["vector_dtype"])

    def check_registration(self, config: Mapping[str, Any], privacy: PrivacyTarget, num_features: int) -> None:
        """A certified model must be of a convex family with l2 > 0 (both bounds assume strong convexity),
        and keep float32 vectors under the Eq. 56 bound (:func:`.precision.check_certified_precision`)."""
        if privacy.release_mode != "certified":
            return
        merged = {**self.default_config(), **dict(config)}
        l2 = merged["l2"]
        certified.check_certifiable(str(merged["family"]), None if l2 is None else float(l2),
                                    float(merged["sensitivity_cap"]))
        check_certified_precision(merged["vector_dtype"], merged["certified_bound"], "eq56")

    def restore_model(self, data: Mapping[str, Any]) -> ModelSpec:
        return ModelSpec.from_dict(dict(data))

    def estimate_job(self, config: Mapping[str, Any], shape: DataShape) -> JobEstimate:
        """Stage I + II's per-sample vectors and their propagation (:mod:`.estimate`)."""
        return hessian_free_estimate({**self.default_config(), **dict(config)}, shape)

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
        self.check_config(config)
        self.check_registration(config, privacy, dataset.num_features)
        merged = resolve_sgd({**self.default_config(), **dict(config)}, dataset, SGD_RULE)
        residual = self.needs_remaining_data(merged, privacy)
        if residual and policy is not None and policy.max_sigma is not None:
            sigma = certified.sigma_for(float(merged["sensitivity_cap"]), privacy.epsilon, privacy.delta)
            if sigma > policy.max_sigma:
                raise InvalidConfigError(
                    f"the certified noise sigma {sigma:.4g} (sensitivity_cap {merged['sensitivity_cap']} at epsilon "
                    f"{privacy.epsilon}, delta {privacy.delta}) is above the policy's max_sigma {policy.max_sigma}: "
                    "lower sensitivity_cap or raise max_sigma"
                )
        spec = model_spec_for(dataset, merged)
        model = build_model(spec)
        record = train_recorded(
            model,
            dataset,
            sgd_config(merged),
            seed,
            rho_iterations=int(merged["rho_iterations"]),
            device=default_device(),
            progress=(lambda f: progress("training_and_precompute", f)) if progress else None,
        )
        probe = {}
        if privacy.release_mode == "audited":  # a certified release carries nothing measured on the data
            probe = self._audit_probe(model, dataset, record, float(merged["audit_probe_fraction"]), seed,
                                      vector_dtype(merged["vector_dtype"]))
        state = state_from_record(dataset, spec, record, merged, probe)
        if residual:
            state = certified_state(state, dataset, privacy, seed)
        if progress:
            progress("done", 1.0)
        acc = HFAccounting.from_dict(state.accounting)
        if acc.gradient_residual is not None:
            account = acc.gradient_residual
            cert = certified.certificate(self.name, acc, account, budget_cap=self._cap(acc, policy, privacy),
                                         charge=0, noise_seed=account.fit_noise_seed)
            return state, cert
        return state, self._eq56_certificate(acc, privacy, policy, charge=0, noise_seed=None, sigma=0.0, cal="none")

    @staticmethod
    def _audit_probe(
        model: Any, dataset: Dataset, record: TrainingRecord, fraction: float, seed: int,
        precision: torch.dtype = torch.float32,
    ) -> dict[str, float]:
        """Forget a seeded ``fraction`` of the samples with the vectors as the state keeps them (rounded to
        ``precision``, summed in float32) and measure against the replay.

        Besides the weight distances: the loss-threshold membership attack
        (:mod:`unlearning.audit.membership`) telling an equal number of seeded retained rows (members)
        from the forgotten rows, under the original, the unlearned and the replay-retrained weights. The
        original saw both sets (AUC near 0.5); the retrain's AUC is what complete forgetting looks like;
        the unlearned model's should be the retrain's.
        """
        m = round(fraction * len(dataset))
        if m < 1 or record.vectors is None:
            return {}
        order = np.random.default_rng([seed, 0xA0D17]).permutation(len(dataset))
        rows = np.sort(order[:m])
        ids = [dataset.sample_ids[i] for i in rows]
        kept = [dataset.sample_ids[i] for i in np.sort(order[m : 2 * m])]
        retrained = replay_retrain(model, dataset, record, ids)
        chosen = record.vectors[torch.as_tensor(rows, device=record.vectors.device)]
        unlearned = record.weights + chosen.to(precision).to(torch.float32).sum(0)
        err = float((unlearned - retrained).norm())
        out = {
            "probe_deletions": float(m),
            "probe_distance_to_replay_retrain": err,
            "probe_distance_original_to_replay_retrain": float((record.weights - retrained).norm()),
            "probe_distance_per_deleted_sample": err / m,
        }
        if kept:
            for name, w in (("original", record.weights), ("unlearned", unlearned), ("replay_retrain", retrained)):
                attack = loss_attack(per_sample_losses(model, w, dataset, kept), per_sample_losses(model, w, dataset, ids))
                out[f"probe_mia_auc_{name}"] = attack.auc
        return out

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
        """Stage III (package docstring): add the forgotten samples' vectors; a gradient-residual certified
        state then checks (and if need be restores) the bound on the remaining rows ``remaining`` (the budget
        epoch's current rows, with or without this request's) before the fresh noise."""
        request.require_kinds(self.name, self.request_kinds)
        stats = state.statistics
        if stats is None:
            raise InvalidConfigError("this state has no per-sample vectors: refit the model")
        forgotten, delta = self._resolve_and_sum(stats, request)
        if delta.shape != state.clean_weights.shape:
            raise DimensionMismatchError(
                f"approximator vectors have dimension {tuple(delta.shape)}, the model has "
                f"{tuple(state.clean_weights.shape)}"
            )
        acc = HFAccounting.from_dict(state.accounting).with_deleted(len(forgotten))
        account = acc.gradient_residual
        if account is not None and acc.certified_residual:
            clean, account = self._restore_bound(state, acc, account, forgotten, delta, remaining)
            acc = replace(acc, gradient_residual=account)
            released = clean + account.sigma * _gaussian(clean, noise_seed)
            cert = certified.certificate(self.name, acc, account, budget_cap=self._cap(acc, policy, privacy),
                                         charge=len(forgotten), noise_seed=noise_seed)
        else:
            clean = state.clean_weights + delta.to(state.clean_weights.dtype)
            sigma, cal = eq56.noise_scale(acc, privacy.release_mode, privacy.epsilon, privacy.delta)
            released = clean if sigma == 0.0 else clean + sigma * _gaussian(clean, noise_seed)
            cert = self._eq56_certificate(acc, privacy, policy, charge=len(forgotten),
                                          noise_seed=noise_seed if sigma > 0 else None, sigma=sigma, cal=cal)
        stats.remove(forgotten)
        new_state = replace(state, clean_weights=clean, released_weights=released, accounting=acc.to_dict())
        return ForgetOutcome(state=new_state, certificate=cert, forgotten_ids=tuple(forgotten))

    @staticmethod
    def _restore_bound(
        state: MethodState, acc: HFAccounting, account: GradientResidualAccount, forgotten: list[str],
        delta: torch.Tensor, remaining: Dataset | None,
    ) -> tuple[torch.Tensor, GradientResidualAccount]:
        """w + sum a^{-u} (unless the vectors are stale), then the check on D' (:func:`certified.restore`)."""
        if remaining is None:
            raise InvalidConfigError(
                "a certified hessian_free model forgets with its remaining training rows (remaining=...): every "
                "deletion checks the gradient residual with one pass over them"
            )
        features, labels = certified.rows_after(remaining, forgotten, acc.train_size - acc.deleted_count)
        objective = SoftmaxObjective(features, labels, int(state.model.num_classes), acc.l2, default_device())
        start = state.clean_weights.to(torch.float64)
        if not account.vectors_stale:
            start = start + delta.to(torch.float64)
        outcome = certified.restore(objective, start, account.sensitivity_cap, account.max_newton_steps)
        return outcome.weights, replace(
            account,
            vectors_stale=account.vectors_stale or outcome.exact,
            work=account.work.plus(outcome.passes, outcome.newton_steps, outcome.exact),
        )

    @staticmethod
    def _resolve_and_sum(stats: Any, request: ForgetRequest) -> tuple[list[str], torch.Tensor]:
        """Owners contribute their per-owner sum (one read); explicit samples outside those owners add theirs."""
        covered: list[str] = []
        total = torch.zeros(stats.dim)
        for owner in dict.fromkeys(request.owner_ids):
            ids = stats.remaining_of_owner(owner)
            if not ids:
                raise AlreadyDeletedError(f"owner {owner!r} has no remaining samples: already forgotten")
            covered.extend(ids)
            total = total + stats.sum_owner(owner)
        covered_set = set(covered)
        extra = [s for s in dict.fromkeys(request.sample_ids) if s not in covered_set]
        if len(set(request.sample_ids)) != len(request.sample_ids):
            raise AlreadyDeletedError("the request names the same sample id twice")
        if extra:
            total = total + stats.sum_samples(extra)
        return covered + extra, total

    # ----------------------------------------------------------------------------------- repair
    def repair(
        self, state: MethodState, remaining: Dataset, epochs: int, seed: int, privacy: PrivacyTarget
    ) -> tuple[MethodState, Certificate]:
        """Algorithm 3 (digest 002 section 2.5), explicitly UNCERTIFIED: fine-tune w̄ on the remaining data
        for ``epochs`` more epochs of the recorded SGD (step sizes continue the decay where training
        stopped), while the remaining samples' vectors are propagated through the new steps and receive
        their new injections, i.e. the Stage II recursion continued from the old vectors.

        Every later release of this budget epoch carries ``guarantee = "none"`` and no noise: no bound
        covers the fine-tuned trajectory. A retrain starts a certified epoch again.
        """
        stats = state.statistics
        if stats is None:
            raise InvalidConfigError("this state has no per-sample vectors to repair")
        snapshot = stats.export()
        if set(snapshot.sample_ids) != set(remaining.sample_ids):
            raise InvalidConfigError("repair needs exactly the remaining samples of this budget epoch")
        order = {sid: i for i, sid in enumerate(snapshot.sample_ids)}
        start_vectors = snapshot.vectors[torch.as_tensor([order[s] for s in remaining.sample_ids])].to(torch.float32)
        acc = HFAccounting.from_dict(state.accounting)
        cfg = sgd_config(acc.config)
        cfg = replace(cfg, epochs=epochs, lr=cfg.step_size(acc.total_steps))
        record = train_recorded(
            build_model(state.model), remaining, cfg, seed, device=default_device(),
            start_weights=state.clean_weights.to(torch.float32), start_vectors=start_vectors,
        )
        assert record.vectors is not None
        weights = record.weights.detach().cpu()
        acc = replace(acc, repaired=True, repair_epochs=epochs, repair_seed=seed)
        new_state = replace(
            state,
            clean_weights=weights,
            released_weights=weights.clone(),
            statistics=InMemorySampleStatistics(
                remaining.sample_ids, remaining.owner_ids, stored(record.vectors.cpu(), _vector_dtype_of(acc.config))
            ),
            accounting=acc.to_dict(),
        )
        return new_state, self._eq56_certificate(acc, privacy, None, charge=0, noise_seed=None, sigma=0.0, cal="none")

    # ----------------------------------------------------------------------------------- budget
    def budget_cap(self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget) -> float:
        """Deletions one budget epoch may absorb: the tightest of the policy's limits."""
        return self._cap(HFAccounting.from_dict(state.accounting), policy, privacy)

    @staticmethod
    def _cap(acc: HFAccounting, policy: BudgetPolicy | None, privacy: PrivacyTarget) -> float:
        caps = [float(acc.train_size)]
        if policy is None:
            return caps[0]
        if policy.max_deletions is not None:
            caps.append(float(policy.max_deletions))
        if policy.max_deletion_fraction is not None:
            caps.append(math.floor(policy.max_deletion_fraction * acc.train_size))
        eq56_noise = acc.gradient_residual is None and privacy.release_mode == "certified"
        if eq56_noise and policy.max_sigma is not None:  # a gradient-residual sigma is fixed (checked at fit)
            allowed = largest_sensitivity(policy.max_sigma, privacy.epsilon, privacy.delta)
            caps.append(math.floor(allowed / acc.per_sample_bound) if acc.per_sample_bound > 0 else math.inf)
        return min(caps)

    def must_retrain(
        self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget, pending_deletions: int = 0
    ) -> str | None:
        acc = HFAccounting.from_dict(state.accounting)
        if acc.certified_residual and acc.gradient_residual is not None and acc.gradient_residual.vectors_stale:
            return ("an exact solve restored the certified bound at an earlier deletion, so the approximator "
                    "vectors no longer track the minimiser: a retrain refreshes them")
        after = acc.deleted_count + pending_deletions
        cap = self._cap(acc, policy, privacy)
        if after <= cap:
            return None
        return (
            f"forgetting {pending_deletions} more sample(s) would bring this budget epoch to {after} "
            f"deletions, above its cap of {int(cap)} ({_cap_reason(acc, policy, privacy, cap)})"
        )

    # ------------------------------------------------------------------------------ certificate
    def _eq56_certificate(
        self, acc: HFAccounting, privacy: PrivacyTarget, policy: BudgetPolicy | None, *, charge: int,
        noise_seed: int | None, sigma: float, cal: str,
    ) -> Certificate:
        return eq56.certificate(self.name, acc, privacy.release_mode, privacy.epsilon, privacy.delta,
                                budget_cap=self._cap(acc, policy, privacy), charge=charge, noise_seed=noise_seed,
                                sigma=sigma, calibration=cal)

    def verify_certificate(self, certificate: Certificate) -> list[str]:
        """Gradient residual: Delta_max recomputed from (sigma, epsilon, delta) and checked against the rest
        (:func:`certified.verify`); Eq. 56 and audited: delta_1, the bound and sigma recomputed."""
        if certificate.bound_name == certified.BOUND_NAME:
            return certified.verify(certificate)
        if certificate.bound_name == eq56.BOUND_NAME:
            return eq56.verify(certificate)
        return [f"unknown bound {certificate.bound_name!r} for the {self.name} method"]


def audit_residual(state: MethodState, remaining: Dataset, device: torch.device | None = None) -> certified.ResidualAudit:
    """The gradient residual of a stored version, recomputed by an auditor with data access.

    ``state`` is the version's state (its clean weights, model and accounting: ``l2``, the sensitivity cap
    and the feature transform); ``remaining`` the version's remaining training rows, raw (the version's
    feature transform is applied here). The audit says whether ``(||grad F|| + slack)/l2`` is within the
    sensitivity cap, i.e. whether the clean weights are within Delta_max of the exact minimiser.
    """
    from unlearning.tables.transform import FeatureTransform

    acc = HFAccounting.from_dict(state.accounting)
    transform = FeatureTransform.restore(acc.extra.get("feature_transform"), state.artifacts)
    rows = remaining if transform.is_identity else remaining.with_features(transform.apply(remaining.features))
    cap = acc.gradient_residual.sensitivity_cap if acc.gradient_residual is not None else None
    return certified.residual_of(state.clean_weights, rows, acc.l2, cap, device)


def _gaussian(like: torch.Tensor, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    return torch.randn(like.shape, generator=gen, dtype=like.dtype).to(like.device)


def _cap_reason(acc: HFAccounting, policy: BudgetPolicy, privacy: PrivacyTarget, cap: float) -> str:
    n = acc.train_size
    if policy.max_deletions is not None and cap == policy.max_deletions:
        return "the policy's max_deletions"
    if policy.max_deletion_fraction is not None and cap == math.floor(policy.max_deletion_fraction * n):
        return f"the policy's max_deletion_fraction {policy.max_deletion_fraction} of {n} samples"
    if privacy.release_mode == "certified" and policy.max_sigma is not None:
        return f"the noise for more deletions would exceed max_sigma {policy.max_sigma}"
    return "the training set size"


register(HessianFree())
