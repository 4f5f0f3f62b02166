"""The ``langevin`` method: stochastic-gradient Langevin unlearning behind the method protocol.

fit     T epochs of projected noisy mini-batch SGD (:mod:`unlearning.methods.langevin.noisy_sgd`, Algorithm 1)
        over the seeded partition of :mod:`unlearning.methods.langevin.batching`, from w0 ~ N(0, 2 sigma^2/m I),
        T the burn-in after which the law is within W_inf 2R c^(TN) (Lemma 3.6) of the stationary law.
forget  K more noisy epochs of exactly the same chain on the remaining data minus the request (the
        forgotten samples' slots become null), from the current weights with fresh noise; K is the least
        number of epochs the accountant (:func:`unlearning.privacy.langevin.sequential.charge_request`)
        needs for the model's (epsilon, delta), the W_inf state Z following the corrected Thm 3.11 recursion.

Accounting reference. Theorem 3.11 compares each release with nu_{D_s|B}, the stationary law of PNSGD
on the remaining data ("retraining to convergence"). The paper assumes the trained model is exactly
stationary; we do not: the recursion starts at Z_out = 2R c^(TN) (Lemma 3.6 from any start in C_R), so
the guarantee holds for the finite burn-in actually run. A T-epoch retrain is itself within that W_inf
of the stationary law.

Budget (``budget_unit = "deleted_samples"``). The guarantee does not wear out: Z converges to the fixed
point Z_B / (1 - c^(KN)) and each request gets its own K (digest 6.4). What the policy caps is utility
and cost. ``must_retrain`` asks for a retrain when (a) the deletions of this budget epoch would exceed
min(train size, max_deletions, floor(max_deletion_fraction * train size)), (b) the next request would
need at least as many noisy epochs as the retrain itself (K >= T, digest 6.5), or (c) the target is
unreachable (Z at the 2R cap, or K above ``max_unlearning_epochs``).

Seeds. The partition seed and every noise seed are recorded in the certificates (project rule: every
draw reproducible). Whoever holds the noise seeds and the data can strip the noise (digest 2.3 warns that
seeds are non-private state): they belong with the training data under the same access control.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
import torch

import unlearning.methods.langevin.config as cfg
from unlearning.data import Dataset
from unlearning.device import default_device
from unlearning.errors import (
    AlreadyDeletedError,
    DimensionMismatchError,
    InvalidConfigError,
    InvalidDatasetError,
    UnknownSampleError,
)
from unlearning.methods.hyperparameters import HyperParameter
from unlearning.methods.job_estimate import DataShape, JobEstimate
from unlearning.methods.langevin.accounting import LangevinAccounting
from unlearning.methods.langevin.batching import (
    Batch,
    batch_of,
    batch_rows,
    gather_batches,
    live_digest,
    sample_hashes,
)
from unlearning.methods.langevin.certificates import fit_certificate, forget_certificate, verify_certificate
from unlearning.methods.langevin.defaults import NORM_SLACK, row_norms
from unlearning.methods.langevin.noisy_sgd import derive_seed, noise_generator, pnsgd_epochs, project
from unlearning.methods.langevin.problem import LogisticProblem
from unlearning.methods.protocol import (
    BudgetPolicy,
    ForgetOutcome,
    ForgetRequest,
    MethodState,
    PrivacyTarget,
    ProgressCallback,
)
from unlearning.methods.registry import register
from unlearning.models import ModelSpec
from unlearning.privacy.certificate import Certificate, ReleaseMode
from unlearning.privacy.langevin.constants import PNSGDConstants
from unlearning.privacy.langevin.distance import stationarity_gap
from unlearning.privacy.langevin.sequential import charge_request


class Langevin:
    """The ``langevin`` method; see the module docstring."""

    name: ClassVar[str] = "langevin"
    request_kinds: ClassVar[frozenset[str]] = frozenset({"sample", "owner"})
    needs_training_data: ClassVar[bool] = True

    def hyperparameters(self) -> tuple[HyperParameter, ...]:
        return cfg.hyperparameters()

    def families(self) -> tuple[str, ...]:
        return (cfg.FAMILY,)

    def release_modes(self) -> tuple[ReleaseMode, ...]:
        """Both, with the same certified releases: noise is part of training, so an ``audited`` model's
        releases carry the certified guarantee too."""
        return ("certified", "audited")

    def restore_model(self, data: Mapping[str, Any]) -> ModelSpec:
        """``MethodState.model`` from its ``to_dict()``."""
        return ModelSpec.from_dict(dict(data))

    def default_config(self) -> dict[str, Any]:
        """The paper's setting where it carries over (:func:`unlearning.methods.langevin.config.default_config`)."""
        return cfg.default_config()

    def check_config(self, config: Mapping[str, Any]) -> None:
        """What ``fit`` checks without the data (:func:`unlearning.methods.langevin.config.check_config`)."""
        cfg.check_config(config)

    def estimate_job(self, config: Mapping[str, Any], shape: DataShape) -> JobEstimate:
        """The burn-in's noisy epochs (:func:`unlearning.methods.langevin.config.langevin_estimate`)."""
        return cfg.langevin_estimate({**self.default_config(), **dict(config)}, shape)

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
        started = time.perf_counter()
        cfg.check_config(config)  # the bounds of registration hold for a library caller too
        merged = {**self.default_config(), **dict(config)}
        partition_seed, noise_seed = derive_seed(seed, "partition"), derive_seed(seed, "noise")
        hashes = sample_hashes(dataset.sample_ids, partition_seed)
        num_batches = cfg.num_batches(len(dataset), merged)
        assignment = batch_of(hashes, num_batches)
        b = int(np.bincount(assignment, minlength=num_batches).max())
        problem = cfg.resolve_problem(dataset, merged, num_batches * b, b)
        eta = cfg.step_size(problem, merged)
        const = PNSGDConstants(num_batches * b, b, eta, problem.l2, problem.clip, cfg.positive(merged, "radius"),
                               problem.smoothness)
        T = cfg.burn_in_epochs(const, merged)
        gap = stationarity_gap(const, T)
        sigma, sigma_source = cfg.resolve_sigma(const, merged, privacy, policy, gap)

        device = default_device()
        batches = gather_batches(dataset, batch_rows(assignment, num_batches), problem, device)
        gen = noise_generator(noise_seed)
        # w0 ~ N(0, 2 sigma^2 / m I) (App. K.3), projected onto C_R so that nu_0 lives on C_R.
        w0 = torch.randn(problem.shape, generator=gen, dtype=torch.float64) * math.sqrt(2.0 * sigma**2 / problem.l2)
        radius = float(merged["radius"])
        w = project(w0.to(device), radius)
        w = pnsgd_epochs(w, batches, problem, epochs=T, eta=eta,
                         sigma=sigma, radius=radius, normaliser=b, generator=gen, progress=progress)
        weights = problem.to_flat(w).cpu()
        train_accuracy = _train_accuracy(problem, w, batches, len(dataset))
        account = LangevinAccounting(
            problem=problem,
            slots=const.n,
            batch_size=b,
            batches=num_batches,
            requested_batch_size=merged["batch_size"],
            eta=eta,
            smoothness=problem.smoothness,
            radius=cfg.positive(merged, "radius"),
            sigma=sigma,
            sigma_source=sigma_source,
            pabi=merged["pabi"],
            conversion=merged["conversion"],
            max_unlearning_epochs=cfg.int_at_least(merged, "max_unlearning_epochs", 1),
            burn_in_epochs=T,
            stationarity_gap=gap,
            z_out=gap,
            deleted_count=0,
            train_size=len(dataset),
            requests=0,
            unlearning_epochs_total=0,
            gradient_evaluations_fit=T * len(dataset),
            gradient_evaluations_unlearning=0,
            partition_seed=partition_seed,
            training_seed=noise_seed,
            live_digest=live_digest(hashes),
            seconds_fit=time.perf_counter() - started,
            train_accuracy=train_accuracy,
        )
        state = MethodState(
            method=self.name,
            model=ModelSpec(cfg.FAMILY, (problem.num_features,), problem.num_classes),
            clean_weights=weights,
            released_weights=weights.clone(),
            statistics=None,
            accounting=account.to_dict(),
        )
        if progress:
            progress("done", 1.0)
        return state, fit_certificate(self.name, account, privacy, self._cap(account, policy))

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
        started = time.perf_counter()
        request.require_kinds(self.name, self.request_kinds)
        if remaining is None:
            raise InvalidConfigError("the langevin method needs the remaining training data to forget (remaining=...)")
        account = LangevinAccounting.from_dict(state.accounting)
        self._check_remaining(remaining, account)
        forgotten = self._resolve(state, request, remaining)
        hashes = self._live_hashes(remaining, account)
        charge = charge_request(account.constants, account.sigma, account.z_out, len(forgotten), privacy.epsilon,
                                privacy.delta, account.pabi, account.conversion, account.max_unlearning_epochs)
        drop = np.zeros(len(remaining), dtype=bool)
        drop[remaining.indices_of(forgotten)] = True
        keep = np.flatnonzero(~drop)
        w = self._unlearn(state, account, remaining, keep, hashes[keep], charge.epochs, noise_seed)
        weights = account.problem.to_flat(w).cpu()
        after = account.after_request(charge, len(forgotten), len(keep), live_digest(hashes[keep]))
        new_state = replace(state, clean_weights=weights, released_weights=weights.clone(), accounting=after.to_dict(),
                            deleted_ids=_with_deleted(state.deleted_ids, forgotten))
        seconds = time.perf_counter() - started
        cert = forget_certificate(self.name, after, privacy, self._cap(after, policy), charge, account.z_out,
                                  noise_seed, gradients=charge.epochs * len(keep), seconds=seconds)
        return ForgetOutcome(state=new_state, certificate=cert, forgotten_ids=tuple(forgotten))

    @staticmethod
    def _live_hashes(remaining: Dataset, account: LangevinAccounting) -> np.ndarray:
        """Keyed hashes of ``remaining``'s ids, checked against the digest of the samples the model holds."""
        hashes = sample_hashes(remaining.sample_ids, account.partition_seed)
        if live_digest(hashes) != account.live_digest:
            raise InvalidConfigError(
                "remaining is not this model's training data minus the samples it forgot (sample ids differ): "
                "pass every sample not yet forgotten, including the ones this request names"
            )
        return hashes

    @staticmethod
    def _unlearn(
        state: MethodState, account: LangevinAccounting, remaining: Dataset, keep: np.ndarray,
        keep_hashes: np.ndarray, epochs: int, noise_seed: int,
    ) -> torch.Tensor:
        """K epochs of the training chain (same partition, same order) on the kept rows of ``remaining``
        from the current weights; the forgotten rows are never read (their slots are null)."""
        device = default_device()
        const, problem = account.constants, account.problem
        rows = [keep[r] for r in batch_rows(batch_of(keep_hashes, const.batches), const.batches)]
        if max(len(r) for r in rows) > const.b:
            raise InvalidConfigError("remaining holds more samples in one batch than at training: it is not "
                                     "this model's training data")
        w = problem.from_flat(state.released_weights.to(torch.float64)).to(device)
        return pnsgd_epochs(w, gather_batches(remaining, rows, problem, device), problem, epochs=epochs,
                            eta=const.eta, sigma=account.sigma, radius=float(const.R or math.inf),
                            normaliser=const.b, generator=noise_generator(noise_seed))

    @staticmethod
    def _check_remaining(remaining: Dataset, account: LangevinAccounting) -> None:
        problem = account.problem
        if remaining.num_features != problem.num_features or remaining.num_classes != problem.num_classes:
            raise DimensionMismatchError(
                f"remaining has {remaining.num_features} features and {remaining.num_classes} classes, the model "
                f"was trained on {problem.num_features} features and {problem.num_classes} classes"
            )
        if len(remaining) != account.remaining:
            raise InvalidConfigError(
                f"remaining holds {len(remaining)} samples, the model still holds {account.remaining}: pass every "
                "sample not yet forgotten, including the ones this request names"
            )
        norms = row_norms(remaining, problem.intercept)
        if not problem.row_clip and norms.max() > problem.feature_bound * (1 + NORM_SLACK):
            row = int(np.argmax(norms))
            raise InvalidDatasetError(
                f"sample {remaining.sample_ids[row]!r} has feature norm {norms[row]:.6g} above the model's "
                f"feature bound {problem.feature_bound:.6g}: remaining is not the data the model was trained on"
            )

    @staticmethod
    def _resolve(state: MethodState, request: ForgetRequest, remaining: Dataset) -> list[str]:
        """Owners expand to their samples in ``remaining``; explicit samples outside those owners are added."""
        if len(set(request.sample_ids)) != len(request.sample_ids):
            raise AlreadyDeletedError("the request names the same sample id twice")
        covered: list[str] = []
        for owner in dict.fromkeys(request.owner_ids):
            try:
                covered.extend(remaining.samples_of_owners([owner]))
            except UnknownSampleError:
                raise UnknownSampleError(
                    f"owner {owner!r} has no remaining samples in this model's training data: unknown, or "
                    "already forgotten"
                ) from None
        seen = set(covered)
        for sid in request.sample_ids:
            if sid in seen:
                continue
            if not remaining.contains(sid):
                if sid in state.deleted_ids:
                    raise AlreadyDeletedError(f"sample {sid!r} was already forgotten in this budget epoch")
                raise UnknownSampleError(f"sample {sid!r} is not in this model's remaining training data")
            covered.append(sid)
            seen.add(sid)
        return covered

    # ----------------------------------------------------------------------------------- budget
    def budget_cap(self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget) -> float:
        """Deletions one budget epoch may absorb: min(train size, max_deletions, floor(fraction * n))."""
        return _deletion_cap(LangevinAccounting.from_dict(state.accounting).train_size, policy)

    def must_retrain(
        self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget, pending_deletions: int = 0
    ) -> str | None:
        account = LangevinAccounting.from_dict(state.accounting)
        after = account.deleted_count + pending_deletions
        cap = self.budget_cap(state, policy, privacy)
        if after > cap:
            return (f"forgetting {pending_deletions} more sample(s) would bring this budget epoch to {after} "
                    f"deletions, above its cap of {int(cap)}")
        if pending_deletions < 1:
            return None
        const = account.constants
        try:
            charge = charge_request(const, account.sigma, account.z_out, pending_deletions, privacy.epsilon,
                                    privacy.delta, account.pabi, account.conversion, account.max_unlearning_epochs)
        except InvalidConfigError as exc:
            return f"the next update cannot reach the privacy target: {exc}"
        T = account.burn_in_epochs
        if charge.epochs >= T:
            return (f"forgetting {pending_deletions} sample(s) needs {charge.epochs} noisy epochs, no fewer than the "
                    f"{T} epochs of retraining from scratch")
        if charge.z_in >= const.cap:
            return "the W_inf bound reached the diameter 2R of the parameter ball: unlearning has no advantage left"
        return None

    @staticmethod
    def _cap(account: LangevinAccounting, policy: BudgetPolicy | None) -> float:
        """A certificate's budget cap: the policy's deletion cap, the train size without a policy."""
        return _deletion_cap(account.train_size, policy) if policy else float(account.train_size)

    # ------------------------------------------------------------------------------ certificates
    def verify_certificate(self, certificate: Certificate) -> list[str]:
        """Recompute the accountant's figures from the certificate's inputs and list any discrepancy
        (:func:`unlearning.methods.langevin.certificates.verify_certificate`)."""
        return verify_certificate(certificate)


def _deletion_cap(n: int, policy: BudgetPolicy) -> float:
    """min(n, max_deletions, floor(max_deletion_fraction * n)) over the limits the policy sets."""
    caps = [float(n)]
    if policy.max_deletions is not None:
        caps.append(float(policy.max_deletions))
    if policy.max_deletion_fraction is not None:
        caps.append(float(math.floor(policy.max_deletion_fraction * n)))
    return min(caps)


def _train_accuracy(problem: LogisticProblem, w: torch.Tensor, batches: Sequence[Batch], n: int) -> float:
    """Training accuracy of the released weights: argmax over the logits [0, W x]."""
    correct = 0
    for xb, yb in batches:
        if yb.numel():
            logits = torch.cat([torch.zeros(xb.shape[0], 1, dtype=xb.dtype, device=xb.device), xb @ w.T], dim=1)
            correct += int((logits.argmax(dim=1) == yb).sum())
    return correct / n


def _with_deleted(deleted: Any, forgotten: Sequence[str]) -> Any:
    """A plain set of forgotten ids grows (library use: a repeat request then says "already forgotten");
    any other set type is the service's own bookkeeping (keyed hashes), which the service updates."""
    return deleted | set(forgotten) if type(deleted) is set else deleted


register(Langevin())
