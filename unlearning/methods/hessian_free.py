"""Hessian-free online certified unlearning (Qiao et al.; digest 002): the ``hessian_free`` method.

fit     Stage I + II: recorded SGD with the per-sample approximators a^{-u} of Eq. 10 computed fused
        with training (:func:`unlearning.training.train_recorded`).
forget  Stage III: w̄ <- w̄ + sum_{u in U} a^{-u} (Theorem 1, additivity; owners use their per-owner
        sums), then release w̃ = w̄ + N(0, sigma^2 I) in ``certified`` mode or w̃ = w̄ in ``audited`` mode.

Noise accounting (digest 002 section 7.3, choice (a)): the clean model w̄ is kept and every release is
re-noised from scratch with sigma calibrated for the *cumulative* deleted set of the budget epoch,
sigma = m_cum * delta_1 * sqrt(2 ln(1.25/delta))/epsilon (classical, epsilon <= 1) or the analytic
Gaussian mechanism (epsilon > 1), delta_1 being the rigorous per-sample bound of Eq. 56. Each release
is then one Gaussian-mechanism output with respect to the retrain on S minus U_cum; the noise seed is
recorded so the release can be reproduced. The authors' code instead adds m=1 noise after each request,
which does not certify the cumulative set.

Honesty about the bound: on the paper's own MNIST setting the Eq. 56 bound is orders of magnitude above
the measured error, so ``certified`` noise destroys the model. ``audited`` releases add no noise, say
``guarantee = "empirical"`` and carry a measured probe: at fit time a seeded 1% of the samples is
forgotten with the vectors and compared with the exact replay-retrain (weight distances, and the AUC of a
loss-threshold membership attack telling retained rows from the forgotten ones under each model).
"""

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
from unlearning.errors import (
    AlreadyDeletedError,
    DimensionMismatchError,
    InvalidConfigError,
)
from unlearning.methods.hyperparameters import HyperParameter
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
from unlearning.models.nets import MAX_HIDDEN_LAYERS, MAX_HIDDEN_WIDTH, hidden_widths
from unlearning.privacy.certificate import Certificate, ReleaseMode
from unlearning.privacy.gaussian import calibrate_sigma, largest_sensitivity
from unlearning.privacy.hf_bound import hf_per_sample_bound, hf_total_bound
from unlearning.sgd_defaults import DERIVED_KEYS, SGDRule, resolve_sgd
from unlearning.steps import CLIP_MODES, SGDConfig
from unlearning.training import TrainingRecord, replay_retrain, train_recorded
from unlearning.validation import integer_at_least

BOUND_NAME = "hf_eq56_per_sample_times_m"
_SGD_KEYS = ("epochs", "batch_size", "lr", "lr_decay", "l2", "clip_norm", "clip_mode")
_REL_TOL = 1e-9


def model_spec_for(dataset: Dataset, config: Mapping[str, Any]) -> ModelSpec:
    """The architecture for ``dataset`` from ``config["family"]`` (and ``hidden`` for the MLP)."""
    family = str(config.get("family", "logistic_regression"))
    options: dict[str, Any] = {}
    if family == "mlp":
        options = {"hidden": list(config.get("hidden", [64])), "activation": config.get("activation", "tanh")}
    shape = dataset.feature_shape if family in ("cnn", "lenet5") else (dataset.num_features,)
    return ModelSpec(family=family, input_shape=tuple(shape), num_classes=dataset.num_classes, options=options)


def sgd_config(config: Mapping[str, Any]) -> SGDConfig:
    """The recorded training SGD of ``config`` (also Mini-Unlearning's: ``lr_decay`` 1 is a constant step)."""
    values = {k: config[k] for k in _SGD_KEYS if k in config}
    clip = values.get("clip_norm")
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, int | float)):
        raise InvalidConfigError(f"clip_norm must be a number or null, got {clip!r}")
    values["clip_norm"] = None if clip is None else float(clip)
    return SGDConfig(**values)


# Upper bounds on the recorded-SGD settings, checked at registration so that a magnitude torch cannot
# represent (lr 1e300 overflows float32) or a run that would never finish is a 422, not a failed training.
# Generous: the paper settings, benches and tests use lr <= 0.05, l2 <= 0.5, clip_norm <= 10, at most 60
# epochs and batches of at most 256.
MAX_LR = 10.0  # SGD diverges long before: a step of 10 times the gradient is already no learning rate
MAX_L2 = 1e4  # lr * l2 > 2 diverges for any lr this allows, so a larger penalty only zeroes the weights
MAX_CLIP_NORM = 1e6  # far above any gradient norm; clip_mode "none" is the way to switch clipping off
MAX_EPOCHS = 1_000  # every batch of every epoch is scheduled up front and replayed on a retrain
MAX_BATCH_SIZE = 2**20  # a batch at least the size of the data is already full-batch gradient descent
MAX_RHO_ITERATIONS = 100  # power iterations per step for rho (default 3)

# The data-derived SGD defaults (unlearning.sgd_defaults): batch min(32, n), at least 1000 steps within 200
# epochs, lr 4 / mean ||[x, 1]||^2 decaying to 0.3 lr over the run.
SGD_RULE = SGDRule(batch_size=32, min_steps=1000, max_epochs=200, lr_scale=4.0, final_lr_fraction=0.3)


def _at_most(name: str, value: float, limit: float, hint: str = "") -> None:
    if value > limit:
        shown = f"{limit:,}" if isinstance(limit, int) else f"{limit:g}"
        raise InvalidConfigError(f"{name} must be at most {shown}, got {value!r}{hint}")


def check_sgd_config(merged: Mapping[str, Any]) -> None:
    """The recorded-SGD settings, with their upper bounds, and, for an MLP, its widths (shared by the
    SGD-trained methods). A None of :data:`unlearning.sgd_defaults.DERIVED_KEYS` passes: ``fit`` derives it."""
    cfg = sgd_config({k: v for k, v in merged.items() if not (v is None and k in DERIVED_KEYS)})
    _at_most("lr", cfg.lr, MAX_LR)
    _at_most("l2", cfg.l2, MAX_L2)
    _at_most("epochs", cfg.epochs, MAX_EPOCHS)
    _at_most("batch_size", cfg.batch_size, MAX_BATCH_SIZE)
    if cfg.clip_norm is not None:
        if not math.isfinite(cfg.clip_norm):
            raise InvalidConfigError(f"clip_norm must be a finite number or null, got {cfg.clip_norm!r}")
        _at_most("clip_norm", cfg.clip_norm, MAX_CLIP_NORM, '; set clip_mode "none" to switch clipping off')
    family = merged.get("family", "logistic_regression")
    if not isinstance(family, str) or family not in family_names():
        raise InvalidConfigError(f"unknown model family {family!r}; choose one of {list(family_names())}")
    if family == "mlp":
        hidden_widths(merged.get("hidden", [64]))


def sgd_hyperparameters() -> tuple[HyperParameter, ...]:
    """The declarations of the keys :func:`check_sgd_config` checks (shared by the SGD-trained methods)."""
    return (
        HyperParameter("family", "string", "The model trained (the registration's top-level family)",
                       choices=family_names()),
        HyperParameter("hidden", "integer_list", "Hidden layer widths of the MLP (family mlp only)",
                       minimum=1, maximum=MAX_HIDDEN_WIDTH, max_items=MAX_HIDDEN_LAYERS),
        HyperParameter("epochs", "integer", "Passes of SGD over the training data", minimum=1, maximum=MAX_EPOCHS,
                       nullable=True, null_means="derived from the data (unlearning.sgd_defaults): enough passes for a fixed number of SGD steps"),
        HyperParameter("batch_size", "integer", "Samples per SGD step", minimum=1, maximum=MAX_BATCH_SIZE,
                       nullable=True, null_means="derived from the data (unlearning.sgd_defaults): min(default batch, n)"),
        HyperParameter("lr", "number", "Initial SGD step size eta", minimum=0, exclusive_minimum=True,
                       maximum=MAX_LR, nullable=True, null_means="derived from the data (unlearning.sgd_defaults): 4 / mean ||[x, 1]||^2"),
        HyperParameter("lr_decay", "number", "Per-step decay q of the step size, eta_t = eta * q^t (1: constant)",
                       minimum=0, exclusive_minimum=True, maximum=1, nullable=True,
                       null_means="derived from the data (unlearning.sgd_defaults): the decay over the run's steps (constant for mini_unlearning)"),
        HyperParameter("l2", "number", "L2 regularisation coefficient of (l2/2)||w||^2", minimum=0, maximum=MAX_L2,
                       nullable=True, null_means="derived from the data (unlearning.sgd_defaults): 1/n"),
        HyperParameter("clip_norm", "number", "Gradient clipping threshold (needed unless clip_mode is none)",
                       minimum=0, exclusive_minimum=True, maximum=MAX_CLIP_NORM, nullable=True,
                       null_means="no clipping threshold (only with clip_mode none)"),
        HyperParameter("clip_mode", "string", "Clip each per-sample gradient, the batch gradient, or none",
                       choices=CLIP_MODES),
    )


def _bound_inputs(record: TrainingRecord, g_bound: float, g_source: str) -> dict[str, Any]:
    cfg, schedule = record.config, record.schedule
    return {
        "eta": cfg.lr,
        "q": cfg.lr_decay,
        "G": g_bound,
        "G_source": g_source,
        "rho": record.rho,
        "rho_source": "power_iteration_max_over_trajectory",
        "batch_size": cfg.batch_size,
        "batches_per_epoch": schedule.batches_per_epoch,
        "total_steps": schedule.steps,
        "epochs": cfg.epochs,
        "clip_mode": cfg.clip_mode,
        "clip_norm": cfg.clip_norm,
        "l2": cfg.l2,
        "training_seed": schedule.seed,
    }


def _gradient_bound(record: TrainingRecord) -> tuple[float, str]:
    """G of Lemma 2: the clip norm when every per-sample gradient is clipped, else the measured maximum.

    The measured maximum is taken on the learned trajectory only; the retrain trajectory is not run
    at fit time, which is why the certificate names the source.
    """
    cfg = record.config
    if cfg.clip_mode == "per_sample" and cfg.clip_norm is not None:
        return min(float(cfg.clip_norm), record.max_grad_norm), "clip_norm_per_sample"
    return record.max_grad_norm, "max_per_sample_grad_norm_measured"


def per_sample_bound_from(inputs: Mapping[str, Any]) -> float:
    """delta_1 of Eq. 56 from a certificate's recorded inputs (worst in-epoch position)."""
    return hf_per_sample_bound(
        eta=float(inputs["eta"]),
        q=float(inputs["q"]),
        G=float(inputs["G"]),
        rho=float(inputs["rho"]),
        batch_size=int(inputs["batch_size"]),
        batches_per_epoch=int(inputs["batches_per_epoch"]),
        total_steps=int(inputs["total_steps"]),
    )


def state_from_record(
    dataset: Dataset, spec: ModelSpec, record: TrainingRecord, config: Mapping[str, Any],
    measured: Mapping[str, float] | None = None,
) -> MethodState:
    """The method state right after Stage II: clean = released = w_T, vectors per sample, accounting."""
    if record.vectors is None:
        raise InvalidConfigError("the training record has no approximator vectors: train with_vectors=True")
    g_bound, g_source = _gradient_bound(record)
    inputs = _bound_inputs(record, g_bound, g_source)
    accounting: dict[str, Any] = {
        **inputs,
        "per_sample_bound": per_sample_bound_from(inputs),
        "deleted_count": 0,
        "train_size": len(dataset),
        "config": dict(config),
        "measured": dict(measured or {}),
        "seconds_precompute": record.seconds.get("train_and_precompute", float("nan")),
    }
    weights = record.weights.detach().cpu()
    return MethodState(
        method=HessianFree.name,
        model=spec,
        clean_weights=weights,
        released_weights=weights.clone(),
        statistics=InMemorySampleStatistics(dataset.sample_ids, dataset.owner_ids, record.vectors.cpu()),
        accounting=accounting,
    )


class HessianFree:
    """The ``hessian_free`` method; see the module docstring."""

    name: ClassVar[str] = "hessian_free"
    request_kinds: ClassVar[frozenset[str]] = frozenset({"sample", "owner"})
    needs_training_data: ClassVar[bool] = False

    def hyperparameters(self) -> tuple[HyperParameter, ...]:
        return (
            *sgd_hyperparameters(),
            HyperParameter("rho_iterations", "integer", "Power iterations per step for the Hessian norm rho of the "
                           "bound", minimum=1, maximum=MAX_RHO_ITERATIONS),
            HyperParameter("audit_probe_fraction", "number", "Fraction of the samples forgotten in a probe at "
                           "training time, measured against a replayed retrain (0: no probe)", minimum=0, maximum=1),
        )

    def families(self) -> tuple[str, ...]:
        return family_names()

    def release_modes(self) -> tuple[ReleaseMode, ...]:
        """Both: ``certified`` adds noise calibrated from the bound, ``audited`` releases the clean weights."""
        return ("certified", "audited")

    def default_config(self) -> dict[str, Any]:
        """Logistic regression by recorded SGD, batch clipping at 5 (digest 002 section 8); None means
        "derive it from the data" by :data:`SGD_RULE` (:mod:`unlearning.sgd_defaults`): l2 = 1/n,
        batch_size = min(32, n), epochs = min(200, max(1, ceil(1000 / ceil(n / batch_size)))),
        lr = 4 / mean_i ||[x_i, 1]||^2 and lr_decay = 0.3^(1/T) over the T steps. The precompute costs
        about 4 n^2 * dim(w) flops per epoch (every step propagates all n vectors), hence one epoch once an
        epoch has 1000 steps."""
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
        }

    def check_config(self, config: Mapping[str, Any]) -> None:
        merged = {**self.default_config(), **dict(config)}
        check_sgd_config(merged)
        rho_iterations = integer_at_least("rho_iterations", merged["rho_iterations"], 1)
        _at_most("rho_iterations", rho_iterations, MAX_RHO_ITERATIONS)
        fraction = merged["audit_probe_fraction"]
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 <= fraction <= 1:
            raise InvalidConfigError(f"audit_probe_fraction must lie in [0, 1], got {fraction!r}")

    def restore_model(self, data: Mapping[str, Any]) -> ModelSpec:
        return ModelSpec.from_dict(dict(data))

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
        merged = resolve_sgd({**self.default_config(), **dict(config)}, dataset, SGD_RULE)
        spec = model_spec_for(dataset, merged)
        cfg = sgd_config(merged)
        model = build_model(spec)
        record = train_recorded(
            model,
            dataset,
            cfg,
            seed,
            rho_iterations=int(merged["rho_iterations"]),
            device=default_device(),
            progress=(lambda f: progress("training_and_precompute", f)) if progress else None,
        )
        probe = self._audit_probe(model, dataset, record, float(merged["audit_probe_fraction"]), seed)
        state = state_from_record(dataset, spec, record, merged, probe)
        if progress:
            progress("done", 1.0)
        return state, self._certificate(state, privacy, policy, charge=0, noise_seed=None, sigma=0.0, cal="none")

    @staticmethod
    def _audit_probe(
        model: Any, dataset: Dataset, record: TrainingRecord, fraction: float, seed: int
    ) -> dict[str, float]:
        """Forget a seeded ``fraction`` of the samples with the vectors and measure against the replay.

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
        unlearned = record.weights + record.vectors[torch.as_tensor(rows, device=record.vectors.device)].sum(0)
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
        clean = state.clean_weights + delta.to(state.clean_weights.dtype)
        accounting = {**state.accounting, "deleted_count": int(state.accounting["deleted_count"]) + len(forgotten)}
        sigma, cal = self._noise_scale(accounting, privacy)
        released = clean if sigma == 0.0 else clean + sigma * _gaussian(clean, noise_seed)
        stats.remove(forgotten)
        new_state = replace(
            state,
            clean_weights=clean,
            released_weights=released,
            accounting=accounting,
        )
        seed = noise_seed if sigma > 0 else None
        cert = self._certificate(new_state, privacy, policy, charge=len(forgotten), noise_seed=seed, sigma=sigma, cal=cal)
        return ForgetOutcome(state=new_state, certificate=cert, forgotten_ids=tuple(forgotten))

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

    @staticmethod
    def _noise_scale(accounting: Mapping[str, Any], privacy: PrivacyTarget) -> tuple[float, str]:
        if privacy.release_mode == "audited" or accounting.get("repaired"):
            return 0.0, "none"
        bound = hf_total_bound(float(accounting["per_sample_bound"]), int(accounting["deleted_count"]))
        sigma, cal = calibrate_sigma(bound, privacy.epsilon, privacy.delta)
        return sigma, (cal if sigma > 0 else "none")

    # ----------------------------------------------------------------------------------- repair
    def repair(
        self, state: MethodState, remaining: Dataset, epochs: int, seed: int, privacy: PrivacyTarget
    ) -> tuple[MethodState, Certificate]:
        """Algorithm 3 (digest 002 section 2.5), explicitly UNCERTIFIED: fine-tune w̄ on the remaining data
        for ``epochs`` more epochs of the recorded SGD (step sizes continue the decay where training
        stopped), while the remaining samples' vectors are propagated through the new steps and receive
        their new injections, i.e. the Stage II recursion continued from the old vectors.

        Every later release of this budget epoch carries ``guarantee = "none"`` and no noise: the Eq. 56
        bound was derived for the original trajectory only. A retrain starts a certified epoch again.
        """
        stats = state.statistics
        if stats is None:
            raise InvalidConfigError("this state has no per-sample vectors to repair")
        snapshot = stats.export()
        if set(snapshot.sample_ids) != set(remaining.sample_ids):
            raise InvalidConfigError("repair needs exactly the remaining samples of this budget epoch")
        order = {sid: i for i, sid in enumerate(snapshot.sample_ids)}
        start_vectors = snapshot.vectors[torch.as_tensor([order[s] for s in remaining.sample_ids])]
        config = state.accounting["config"]
        cfg = sgd_config(config)
        cfg = replace(cfg, epochs=epochs, lr=cfg.step_size(int(state.accounting["total_steps"])))
        model = build_model(state.model)
        record = train_recorded(
            model, remaining, cfg, seed, device=default_device(),
            start_weights=state.clean_weights, start_vectors=start_vectors,
        )
        assert record.vectors is not None
        weights = record.weights.detach().cpu()
        accounting = {**state.accounting, "repaired": True, "repair_epochs": epochs, "repair_seed": seed}
        new_state = replace(
            state,
            clean_weights=weights,
            released_weights=weights.clone(),
            statistics=InMemorySampleStatistics(remaining.sample_ids, remaining.owner_ids, record.vectors.cpu()),
            accounting=accounting,
        )
        return new_state, self._certificate(new_state, privacy, None, charge=0, noise_seed=None, sigma=0.0, cal="none")

    # ----------------------------------------------------------------------------------- budget
    def budget_cap(self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget) -> float:
        """Deletions one budget epoch may absorb: the tightest of the policy's limits."""
        caps = [float(state.accounting["train_size"])]
        if policy.max_deletions is not None:
            caps.append(float(policy.max_deletions))
        if policy.max_deletion_fraction is not None:
            caps.append(math.floor(policy.max_deletion_fraction * int(state.accounting["train_size"])))
        if privacy.release_mode == "certified" and policy.max_sigma is not None:
            per_sample = float(state.accounting["per_sample_bound"])
            allowed = largest_sensitivity(policy.max_sigma, privacy.epsilon, privacy.delta)
            caps.append(math.floor(allowed / per_sample) if per_sample > 0 else math.inf)
        return min(caps)

    def must_retrain(
        self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget, pending_deletions: int = 0
    ) -> str | None:
        after = int(state.accounting["deleted_count"]) + pending_deletions
        cap = self.budget_cap(state, policy, privacy)
        if after <= cap:
            return None
        return (
            f"forgetting {pending_deletions} more sample(s) would bring this budget epoch to {after} "
            f"deletions, above its cap of {int(cap)} ({_cap_reason(state, policy, privacy, cap)})"
        )

    # ------------------------------------------------------------------------------ certificate
    def _certificate(
        self,
        state: MethodState,
        privacy: PrivacyTarget,
        policy: BudgetPolicy | None,
        *,
        charge: int,
        noise_seed: int | None,
        sigma: float,
        cal: str,
    ) -> Certificate:
        acc = state.accounting
        m = int(acc["deleted_count"])
        repaired = bool(acc.get("repaired"))
        certified = privacy.release_mode == "certified" and not repaired
        inputs = {k: acc[k] for k in _bound_input_keys()}
        guarantee = "none" if repaired else ("certified" if certified else "empirical")
        return Certificate(
            method=self.name,
            release_mode=privacy.release_mode,
            guarantee=guarantee,  # type: ignore[arg-type]
            epsilon=privacy.epsilon if certified else None,
            delta=privacy.delta if certified else None,
            bound_name=BOUND_NAME,
            bound=hf_total_bound(float(acc["per_sample_bound"]), m),
            sigma=sigma,
            calibration=cal,  # type: ignore[arg-type]
            cumulative_deletions=m,
            budget_unit="deleted_samples",
            budget_cap=self.budget_cap(state, policy, privacy) if policy else float(acc["train_size"]),
            budget_spent=float(m),
            charge=float(charge),
            noise_seed=noise_seed,
            inputs={**inputs, "per_sample_bound": acc["per_sample_bound"], "target_epsilon": privacy.epsilon,
                    "target_delta": privacy.delta},
            measured=dict(acc.get("measured", {})),
            notes=_notes(certified, repaired),
        )

    def verify_certificate(self, certificate: Certificate) -> list[str]:
        """Recompute delta_1 (Eq. 56), the total bound m*delta_1 and sigma from the recorded inputs."""
        problems: list[str] = []
        inputs = certificate.inputs
        per_sample = per_sample_bound_from(inputs)
        if not math.isclose(per_sample, float(inputs["per_sample_bound"]), rel_tol=_REL_TOL):
            problems.append(f"per-sample bound recomputes to {per_sample}, certificate says {inputs['per_sample_bound']}")
        bound = hf_total_bound(per_sample, certificate.cumulative_deletions)
        if not math.isclose(bound, certificate.bound, rel_tol=_REL_TOL):
            problems.append(f"bound recomputes to {bound}, certificate says {certificate.bound}")
        if certificate.guarantee == "none":
            if certificate.sigma != 0.0 or certificate.epsilon is not None:
                problems.append("a release without guarantee must carry no noise and no epsilon")
            return problems
        if certificate.release_mode == "certified" and certificate.cumulative_deletions > 0:
            sigma, cal = calibrate_sigma(bound, float(inputs["target_epsilon"]), float(inputs["target_delta"]))
            if not math.isclose(sigma, certificate.sigma, rel_tol=_REL_TOL) or cal != certificate.calibration:
                problems.append(f"sigma recomputes to {sigma} ({cal}), certificate says {certificate.sigma} "
                                f"({certificate.calibration})")
        elif certificate.sigma != 0.0:
            problems.append(f"an {certificate.release_mode} release with no deletions must carry sigma 0")
        if certificate.release_mode == "audited" and certificate.guarantee != "empirical":
            problems.append("an audited release must state an empirical guarantee")
        return problems


def _bound_input_keys() -> tuple[str, ...]:
    return ("eta", "q", "G", "G_source", "rho", "rho_source", "batch_size", "batches_per_epoch", "total_steps",
            "epochs", "clip_mode", "clip_norm", "l2", "training_seed")


def _gaussian(like: torch.Tensor, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    return torch.randn(like.shape, generator=gen, dtype=like.dtype).to(like.device)


def _cap_reason(state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget, cap: float) -> str:
    n = int(state.accounting["train_size"])
    if policy.max_deletions is not None and cap == policy.max_deletions:
        return "the policy's max_deletions"
    if policy.max_deletion_fraction is not None and cap == math.floor(policy.max_deletion_fraction * n):
        return f"the policy's max_deletion_fraction {policy.max_deletion_fraction} of {n} samples"
    if privacy.release_mode == "certified" and policy.max_sigma is not None:
        return f"the noise for more deletions would exceed max_sigma {policy.max_sigma}"
    return "the training set size"


def _notes(certified: bool, repaired: bool = False) -> str:
    if repaired:
        return (
            "Repaired (Algorithm 3): the model was fine-tuned on the remaining data and no bound covers "
            "it, so this release carries no guarantee. A retrain starts a certified budget epoch again."
        )
    if certified:
        return (
            "Certified under the paper's Assumption 1 with the recorded rho (power-iteration estimate, "
            "a lower estimate of the true maximum) and G (source named in inputs.G_source). Noise is "
            "calibrated for the cumulative deletions of this budget epoch (Eq. 56 bound times m)."
        )
    return (
        "Audited release: no noise was added, so no (epsilon, delta) guarantee holds. 'measured' holds the "
        "fit-time probe: a seeded sample of the training set forgotten with the approximator vectors and "
        "compared with the exact replay-retrain (weight distances; probe_mia_auc_*: the AUC of a loss-threshold "
        "membership attack telling as many retained rows from the forgotten ones, under each model: the "
        "unlearned model's figure should be the replay-retrain's)."
    )


register(HessianFree())
