"""The certificates of ``langevin`` releases, and their verification from the inputs they record.

A fit certificate says the release is an exact run of the learning algorithm (epsilon 0) and records as
its ``bound`` the W_inf distance 2R c^(TN) (Lemma 3.6) to the stationary law, the Z the sequential
accounting starts from. A forget certificate says the release is (epsilon, delta)-unlearning with respect
to the stationary law of noisy SGD on the remaining data, from one step of the Thm 3.11 recursion
(:func:`unlearning.privacy.langevin.sequential.charge_request`):

    Z_in = min(Z_prev + Z_B(S), 2R),   K = least K meeting the target,   Z_out = c^(KN) Z_in

Release modes. Noise is part of training: there is no clean model, so every release is certified. A
model registered in ``audited`` mode gets exactly the same releases and the same certified guarantee;
its certificates say so (``release_mode`` echoes the registration, ``guarantee`` is "certified").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from unlearning.errors import InvalidConfigError
from unlearning.methods.langevin.accounting import LangevinAccounting
from unlearning.methods.langevin.problem import LogisticProblem
from unlearning.methods.protocol import PrivacyTarget
from unlearning.privacy.certificate import Certificate
from unlearning.privacy.langevin.constants import PNSGDConstants
from unlearning.privacy.langevin.distance import stationarity_gap
from unlearning.privacy.langevin.sequential import RequestCharge, charge_request

BOUND_NAME = "sglu_w_inf_thm3.11"
BUDGET_UNIT = "deleted_samples"
_REL_TOL = 1e-9


def fit_certificate(method: str, account: LangevinAccounting, privacy: PrivacyTarget, budget_cap: float) -> Certificate:
    """The certificate of a freshly trained version: exact, epsilon 0, bound = the starting Z."""
    return Certificate(
        method=method,
        release_mode=privacy.release_mode,
        guarantee="exact",
        epsilon=0.0,
        delta=0.0,
        bound_name=BOUND_NAME,
        bound=account.z_out,
        sigma=account.sigma,
        calibration="none",
        cumulative_deletions=0,
        budget_unit=BUDGET_UNIT,
        budget_cap=budget_cap,
        budget_spent=0.0,
        charge=0.0,
        noise_seed=account.training_seed,
        inputs={**account.certificate_inputs(), "z_out": account.z_out, "target_epsilon": privacy.epsilon,
                "target_delta": privacy.delta},
        measured={"gradient_evaluations": float(account.gradient_evaluations_fit),
                  "seconds": account.seconds_fit, "train_accuracy": account.train_accuracy},
        notes=(
            f"Trained by projected noisy SGD for {account.burn_in_epochs} epochs: an exact run of the learning "
            "algorithm on this data. 'bound' is the W_inf distance (Lemma 3.6) between this model's law and the "
            "stationary law, the starting Z of the sequential accounting."
        ),
    )


def forget_certificate(
    method: str, account: LangevinAccounting, privacy: PrivacyTarget, budget_cap: float, charge: RequestCharge,
    z_prev: float, noise_seed: int, *, gradients: int, seconds: float,
) -> Certificate:
    """The certificate of one request: ``account`` is the accounting after it, ``z_prev`` the Z before it."""
    m = account.deleted_count
    inputs = {
        **account.certificate_inputs(),
        "z_prev": z_prev,
        "request_size": charge.size,
        "z_in": charge.z_in,
        "epochs": charge.epochs,
        "z_out": charge.z_out,
        "alpha": charge.loss.alpha,
        "rdp": charge.loss.rdp,
        "epsilon_reached": charge.loss.epsilon,
        "target_epsilon": privacy.epsilon,
        "target_delta": privacy.delta,
    }
    audited = privacy.release_mode == "audited"
    return Certificate(
        method=method,
        release_mode=privacy.release_mode,
        guarantee="certified",
        epsilon=charge.loss.epsilon,
        delta=privacy.delta,
        bound_name=BOUND_NAME,
        bound=charge.z_in,
        sigma=account.sigma,
        calibration="none",
        cumulative_deletions=m,
        budget_unit=BUDGET_UNIT,
        budget_cap=budget_cap,
        budget_spent=float(m),
        charge=float(charge.size),
        noise_seed=int(noise_seed),
        inputs=inputs,
        measured={"gradient_evaluations": float(gradients), "seconds": seconds},
        notes=(
            f"({charge.loss.epsilon:.4g}, {privacy.delta:.3g})-unlearning of {charge.size} sample(s) with respect "
            f"to the stationary law of noisy SGD on the remaining data: {charge.epochs} noisy epoch(s) from "
            f"W_inf distance Z = {charge.z_in:.6g} (Thm 3.11 recursion, {account.pabi} PABI, Renyi order "
            f"{charge.loss.alpha:.4g}, {account.conversion} conversion)."
            + (" The model was registered in audited mode; Langevin releases are noisy by construction, so "
               "the certified guarantee holds all the same." if audited else "")
        ),
    )


def verify_certificate(certificate: Certificate) -> list[str]:
    """Recompute the accountant's figures from the certificate's inputs and list any discrepancy: L from the
    feature bound, the stationarity gap 2R c^(TN), and for a request Z_in, K, Z_out and epsilon."""
    problems: list[str] = []
    inputs = certificate.inputs
    try:
        const = _recorded_constants(inputs)
    except InvalidConfigError as exc:
        return [f"the recorded constants are invalid: {exc}"]
    except KeyError as exc:
        return [f"the certificate lacks input {exc}"]
    problem = LogisticProblem(int(inputs["num_classes"]), 1, bool(inputs["intercept"]), float(inputs["l2"]),
                              float(inputs["clip"]), float(inputs["feature_bound"]))
    if not math.isclose(problem.smoothness, const.L or 0.0, rel_tol=_REL_TOL):
        problems.append(f"L recomputes to {problem.smoothness} from the feature bound, certificate says {const.L}")
    gap = stationarity_gap(const, int(inputs["burn_in_epochs"]))
    _close(problems, "stationarity gap", gap, float(inputs["stationarity_gap"]))
    if not math.isclose(certificate.sigma, float(inputs["sigma"]), rel_tol=_REL_TOL):
        problems.append(f"sigma {certificate.sigma} differs from the recorded {inputs['sigma']}")
    if certificate.guarantee == "exact":
        _close(problems, "Z after training", gap, float(inputs["z_out"]))
        _close(problems, "bound", gap, certificate.bound)
        if certificate.cumulative_deletions != 0 or certificate.epsilon != 0.0:
            problems.append("a freshly trained model must record no deletions and epsilon 0")
        return problems
    if certificate.guarantee != "certified":
        return [*problems, f"a langevin release is certified or exact, not {certificate.guarantee!r}"]
    try:
        charge = charge_request(const, float(inputs["sigma"]), float(inputs["z_prev"]),
                                int(inputs["request_size"]), float(inputs["target_epsilon"]),
                                float(inputs["target_delta"]), inputs["pabi"], inputs["conversion"],
                                int(inputs["max_unlearning_epochs"]))
    except (InvalidConfigError, KeyError) as exc:
        return [*problems, f"the accountant cannot recompute this request: {exc}"]
    if charge.epochs != int(inputs["epochs"]):
        problems.append(f"K recomputes to {charge.epochs}, certificate says {inputs['epochs']}")
    _close(problems, "Z in", charge.z_in, float(inputs["z_in"]))
    _close(problems, "bound", charge.z_in, certificate.bound)
    _close(problems, "Z out", charge.z_out, float(inputs["z_out"]))
    _close(problems, "epsilon reached", charge.loss.epsilon, float(inputs["epsilon_reached"]))
    _close(problems, "epsilon", charge.loss.epsilon, certificate.epsilon if certificate.epsilon is not None else -1.0)
    if charge.loss.epsilon > float(inputs["target_epsilon"]) * (1 + _REL_TOL):
        problems.append(f"epsilon {charge.loss.epsilon} exceeds the target {inputs['target_epsilon']}")
    if certificate.delta != float(inputs["target_delta"]):
        problems.append(f"delta {certificate.delta} differs from the target {inputs['target_delta']}")
    if int(inputs["request_size"]) != int(certificate.charge):
        problems.append(f"the request size {inputs['request_size']} differs from the charge {certificate.charge}")
    return problems


def _recorded_constants(inputs: Mapping[str, Any]) -> PNSGDConstants:
    """The accountant's constants from a certificate's inputs (the accounting's keys)."""
    return PNSGDConstants(
        n=int(inputs["slots"]),
        b=int(inputs["batch_size"]),
        eta=float(inputs["eta"]),
        m=float(inputs["l2"]),
        M=float(inputs["clip"]),
        R=float(inputs["radius"]),
        L=float(inputs["smoothness"]),
    )


def _close(problems: list[str], what: str, expected: float, recorded: float) -> None:
    if not math.isclose(expected, recorded, rel_tol=_REL_TOL, abs_tol=1e-300):
        problems.append(f"{what} recomputes to {expected}, certificate says {recorded}")
