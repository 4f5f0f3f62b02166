"""The certificates of the Newton methods' releases, and their verification from the recorded inputs.

A release's certificate states the epoch's accumulated residual bound against the budget
(:mod:`unlearning.newton.budget`); a removal's also records every summary of its Newton step, so
:func:`verify_newton_certificate` recomputes the charge with the arithmetic the step used
(:func:`unlearning.newton.step.step_terms`).
"""

from __future__ import annotations

import math
from typing import Any

from unlearning.errors import InvalidConfigError
from unlearning.methods.protocol import PrivacyTarget
from unlearning.newton.budget import NewtonAccounting, c0, residual_budget
from unlearning.newton.step import StepReport, charge_from, step_terms
from unlearning.privacy.certificate import Certificate

__all__ = ["newton_certificate", "step_inputs", "verify_newton_certificate"]


def step_inputs(step: StepReport, spent_before: float, count: float, lam: float) -> dict[str, Any]:
    """Everything :func:`verify_newton_certificate` needs to recompute a step's charge."""
    return {
        "kind": "removal",
        "spent_before": spent_before,
        "bound_variant": step.variant,
        "gamma": step.gamma,
        "op_norm_bound": step.op_norm,
        "max_row_norm": step.max_row_norm,
        "u4sq": step.u4sq,
        "row_weighted_u2": step.row_weighted_u2,
        "u_norm": step.u_norm,
        "v_norm": step.v_norm,
        "path_norm": step.path_norm,
        "iterations": step.iterations,
        "delta_norm": step.delta_norm,
        "solver_residual": step.solver_residual,
        "design_rows": None,  # filled by the caller
        "design_dim": None,
        "count": count,
        "lam": lam,
        "per_class_bound": step.bound,
        "slack": step.slack,
        "hessian_products": step.hessian_products,
    }




def newton_certificate(
    method: str,
    accounting: NewtonAccounting,
    privacy: PrivacyTarget,
    *,
    charge: float,
    inputs: dict[str, Any],
    notes: str,
) -> Certificate:
    """The Certificate of a Newton-method release (an audited one adds no noise: empirical)."""
    certified = privacy.release_mode == "certified"
    epsilon, delta = privacy.epsilon, privacy.delta
    spent = accounting.spent
    remaining = max(accounting.remaining, 1)
    cfg = accounting.config
    lam = cfg.lam
    measured = {
        "residual_bound": spent,
        # Strong convexity: ||W - W_retrain(same B)|| <= ||grad L_B(W; D')|| / (lam m').
        "distance_to_same_noise_retrain_bound": spent / (lam * remaining),
    }
    return Certificate(
        method=method,
        release_mode=privacy.release_mode,
        guarantee="certified" if certified else "empirical",
        epsilon=epsilon if certified else None,
        delta=delta if certified else None,
        bound_name=f"newton_gradient_residual_{cfg.bound}",
        bound=spent,
        sigma=accounting.noise_std,
        calibration="none",
        cumulative_deletions=accounting.deleted_count,
        budget_unit="gradient_residual",
        budget_cap=accounting.cap,
        budget_spent=spent,
        charge=charge,
        noise_seed=accounting.noise_seed,
        inputs={
            "alpha": cfg.alpha,
            "noise_std": accounting.noise_std,
            "lam": lam,
            "target_epsilon": epsilon,
            "target_delta": delta,
            "c0": c0(delta),
            "optimizer_residual": accounting.optimizer_residual,
            "optimizer_iterations": accounting.optimizer_iterations,
            "epoch": accounting.epoch,
            "retrains": accounting.retrains,
            "fit_seed": accounting.fit_seed,
            "noise_seed": accounting.noise_seed,
            "train_size": accounting.train_size,
            "remaining": accounting.remaining,
            "config": cfg.to_dict(),
            **inputs,
        },
        measured=measured,
        notes=notes,
    )


def _close(a: float, b: float, rel: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-300)


def verify_newton_certificate(cert: Certificate) -> list[str]:
    """Recompute the budget, the charge of a removal from its recorded summaries, and the spending."""
    problems: list[str] = []
    inp = cert.inputs
    try:
        alpha, eps, dlt = float(inp["alpha"]), float(inp["target_epsilon"]), float(inp["target_delta"])
        cap = residual_budget(alpha, eps, dlt)
    except (KeyError, TypeError, ValueError, InvalidConfigError) as exc:
        return [f"the certificate lacks the budget inputs: {exc}"]
    if cert.budget_unit != "gradient_residual":
        problems.append(f"budget unit is {cert.budget_unit!r}, expected 'gradient_residual'")
    if not _close(cap, cert.budget_cap):
        problems.append(f"budget cap recomputes to {cap}, certificate says {cert.budget_cap}")
    if cert.budget_spent > cert.budget_cap * (1 + 1e-12):
        problems.append(f"spent {cert.budget_spent} exceeds the cap {cert.budget_cap}")
    if not _close(cert.bound, cert.budget_spent):
        problems.append("the bound must equal the accumulated residual bound (budget_spent)")
    if cert.release_mode == "certified":
        if cert.guarantee != "certified" or cert.epsilon is None or cert.delta is None:
            problems.append("a certified release must state guarantee 'certified' with epsilon and delta")
        if not _close(cert.sigma, alpha):
            problems.append(f"sigma {cert.sigma} differs from the objective-perturbation std alpha {alpha}")
    else:
        if cert.guarantee != "empirical" or cert.epsilon is not None or cert.sigma != 0.0:
            problems.append("an audited release adds no noise: guarantee 'empirical', sigma 0, no epsilon")
    kind = inp.get("kind")
    if kind == "opening":
        if not _close(cert.budget_spent, float(inp["optimizer_residual"])) or cert.charge != 0.0:
            problems.append("an epoch's opening release must spend exactly the optimiser residual, charge 0")
        return problems
    if kind != "removal":
        return problems + [f"unknown certificate kind {kind!r}"]
    try:
        bounds, slack = step_terms(
            inp["bound_variant"], op_norm=inp["op_norm_bound"], max_row_norm=float(inp["max_row_norm"]),
            u4sq=list(inp["u4sq"]), row_weighted_u2=list(inp["row_weighted_u2"]), u_norm=list(inp["u_norm"]),
            v_norm=list(inp["v_norm"]), path_norm=list(inp["path_norm"]), delta_norm=list(inp["delta_norm"]),
            rows=int(inp["design_rows"]), dim=int(inp["design_dim"]), iterations=int(inp["iterations"]),
            count=float(inp["count"]), lam=float(inp["lam"]),
        )
        charge = charge_from(bounds, list(inp["solver_residual"]), slack)
    except (KeyError, TypeError, ValueError, InvalidConfigError) as exc:
        return problems + [f"the charge cannot be recomputed: {exc}"]
    if not _close(charge, cert.charge):
        problems.append(f"the charge recomputes to {charge}, certificate says {cert.charge}")
    if not _close(float(inp["spent_before"]) + cert.charge, cert.budget_spent):
        problems.append(f"spent_before {inp['spent_before']} + charge {cert.charge} != spent {cert.budget_spent}")
    return problems
