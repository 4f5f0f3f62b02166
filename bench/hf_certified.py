"""Certified Hessian-free releases by the gradient residual, measured (the ``certified`` object of
``python -m bench.hessian_free``).

Per setting: a certified fit (recorded SGD, Stage II, the float64 polish, noise), then 30% of the rows
forgotten one at a time in a seeded random order through the method's own ``forget`` with the remaining rows,
retraining (the method's own fit on the remaining rows) whenever ``must_retrain`` asks for it, as the
service would. Every ``check_every``-th deletion the exact minimiser on the remaining rows is solved to
||grad|| <= 1e-8 l2 and compared with the released clean weights: a *bound violation* is a true distance
above the computed bound (||grad|| + slack)/l2, or above Delta_max. Noisy accuracy is the mean over 20 noise
draws of sigma at the end. Delta_max is the configuration's (the default unless the setting says), so the
deletion path is the same for both epsilons; only sigma differs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch

from unlearning.data import Dataset, mnist_subsets
from unlearning.device import default_device
from unlearning.methods.hessian_free import (
    HessianFree,
    HFAccounting,
    certified_state,
    model_spec_for,
    sgd_config,
    state_from_record,
)
from unlearning.methods.hessian_free.certified import MAX_CG_ITERATIONS, polish, residual_of, sigma_for
from unlearning.methods.hessian_free.objective import SoftmaxObjective, minimise
from unlearning.methods.protocol import BudgetPolicy, ForgetRequest, MethodState, PrivacyTarget
from unlearning.models import build_model
from unlearning.training import TrainingRecord, train_recorded

EPSILONS = (1.0, 10.0)
DELTA = 1e-3
NOISE_DRAWS = 20
DELETION_FRACTION = 0.3
POLICY = BudgetPolicy(max_deletion_fraction=None)  # the 30% run must not stop at the default cap of 30%


@dataclass(frozen=True)
class Setting:
    name: str
    n_train: int
    n_test: int
    config: dict[str, Any]
    check_every: int  # compare with the exact minimiser at every k-th deletion


def _annealed(n: int, epochs: int, batch: int = 32, final: float = 0.01) -> dict[str, Any]:
    steps = epochs * -(-n // batch)
    return {"family": "logistic_regression", "epochs": epochs, "batch_size": batch, "lr": 0.05,
            "lr_decay": final ** (1.0 / steps), "l2": 0.5, "clip_norm": 5.0, "clip_mode": "batch"}


def settings(r1_config: dict[str, Any], quick: bool) -> list[Setting]:
    """R1 (the paper's configuration) and the 8,000-row MNIST setting (4 epochs annealed to 1% of the step
    size, so that the vectors track the minimiser); ``quick``: 1,000 rows, 2 epochs in place of 8,000, and
    fewer comparisons with the exact minimiser."""
    if quick:
        return [Setting("r1", 1000, 400, dict(r1_config), 10),
                Setting("mnist8k", 1000, 1000, _annealed(1000, 2), 10)]
    return [Setting("r1", 1000, 400, dict(r1_config), 3), Setting("mnist8k", 8000, 2000, _annealed(8000, 4), 25)]


def _accuracy(weights: torch.Tensor, test: Dataset) -> float:
    theta = weights.to(torch.float64).view(test.num_classes, -1)
    x = torch.as_tensor(test.features.reshape(len(test), -1), dtype=torch.float64)
    return float(((x @ theta[:, :-1].T + theta[:, -1]).argmax(1).numpy() == test.labels).mean())


def _noisy_accuracy(clean: torch.Tensor, sigma: float, test: Dataset, seed: int) -> float:
    gen = torch.Generator().manual_seed(seed)
    draws = [_accuracy(clean + sigma * torch.randn(clean.shape, generator=gen, dtype=torch.float64), test)
             for _ in range(NOISE_DRAWS)]
    return float(np.mean(draws))


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - started) * 1000.0


def _distance_check(state: MethodState, rows: Dataset, cap: float) -> tuple[float, float]:
    """(true distance to the exact minimiser on ``rows``, computed bound) of the state's clean weights."""
    acc = HFAccounting.from_dict(state.accounting)
    objective = SoftmaxObjective(rows.features, rows.labels, rows.num_classes, acc.l2)
    start = objective.evaluate(state.clean_weights)
    exact, _ = minimise(objective, start, 1e-8 * acc.l2, 50, MAX_CG_ITERATIONS)
    distance = float((state.clean_weights.to(torch.float64) - exact.weights).norm())
    return distance, start.certified_gradient_norm / acc.l2


def run_setting(setting: Setting, seed: int, record: TrainingRecord | None = None) -> dict[str, Any]:
    """The figures of one setting; ``record`` reuses a finished R1 training (same data and configuration)."""
    method = HessianFree()
    privacy = PrivacyTarget(EPSILONS[0], DELTA, "certified")
    train, test = mnist_subsets(setting.n_train, n_test=setting.n_test, seed=seed, flatten=True)
    config = {**method.default_config(), **setting.config}
    spec = model_spec_for(train, config)
    training_ms = 1000.0 * record.seconds.get("train_and_precompute", 0.0) if record is not None else 0.0
    if record is None:  # what HessianFree.fit runs (the probe is for audited models only)
        record, training_ms = _timed(partial(train_recorded, build_model(spec), train, sgd_config(config), seed,
                                             rho_iterations=int(config["rho_iterations"]), device=default_device()))
    base = state_from_record(train, spec, record, config)
    state, polish_ms = _timed(partial(certified_state, base, train, privacy, seed))
    fit_ms = training_ms + polish_ms
    sgd_weights = record.weights
    acc0 = HFAccounting.from_dict(state.accounting)
    assert acc0.gradient_residual is not None
    cap = acc0.gradient_residual.sensitivity_cap
    fit_audit = residual_of(state.clean_weights, train, acc0.l2, cap)
    sgd_norm = residual_of(sgd_weights, train, acc0.l2).gradient_norm
    order = np.random.default_rng([seed, 0xDE1]).permutation(len(train))
    deletions = int(DELETION_FRACTION * len(train))
    current, gone = train, 0
    times, passes, retrains, retrain_at = [], [], 0, []
    distances, bounds, violations = [], [], 0
    for k in range(deletions):
        sid = train.sample_ids[order[k]]
        if method.must_retrain(state, POLICY, privacy, 1):
            (state, _), _ms = _timed(partial(method.fit, current, config, privacy, seed + k, policy=POLICY))
            retrains += 1
            retrain_at.append(k)
        before = HFAccounting.from_dict(state.accounting).gradient_residual
        outcome, ms = _timed(partial(method.forget, state, ForgetRequest(sample_ids=(sid,)), k, privacy, current,
                                     POLICY))
        state = outcome.state
        after = HFAccounting.from_dict(state.accounting).gradient_residual
        assert before is not None and after is not None
        times.append(ms)
        passes.append(after.work.passes - before.work.passes)
        current = current.without([sid])
        gone += 1
        if (k + 1) % setting.check_every == 0 or k + 1 == deletions:
            distance, bound = _distance_check(state, current, cap)
            distances.append(distance)
            bounds.append(bound)
            violations += int(distance > bound or distance > cap)
    acc_end = HFAccounting.from_dict(state.accounting)
    clean = state.clean_weights
    (_, retrain_ms) = _timed(lambda: method.fit(current, config, privacy, seed + 10_000, policy=POLICY))
    zeros = torch.zeros_like(clean, dtype=torch.float64)
    (_, exact_ms) = _timed(lambda: polish(SoftmaxObjective(current.features, current.labels, current.num_classes,
                                                           acc_end.l2, default_device()), zeros, cap))
    ratios = np.asarray(bounds) / np.maximum(np.asarray(distances), 1e-300)
    shared = {
        "deletions": gone,
        "retrains": retrains,
        "first_retrain_at_fraction": (retrain_at[0] / len(train)) if retrain_at else None,
        "passes_per_deletion": float(np.mean(passes)),
        "max_passes_per_deletion": int(np.max(passes)),
        "bound_violations": violations,
        "bound_checks": len(distances),
        "bound_over_distance_min": float(ratios.min()),
        "bound_over_distance_max": float(ratios.max()),
        "ms_per_deletion": float(np.mean(times)),
        "ms_per_deletion_p95": float(np.percentile(times, 95)),
        "retrain_ms": retrain_ms,
        "exact_solve_ms": exact_ms,
        "fit_ms": fit_ms,
        "fit_polish_ms": polish_ms,
        "fit_residual": fit_audit.gradient_norm,
        "fit_residual_sgd": sgd_norm,
        "fit_bound": fit_audit.bound,
        "sensitivity_cap": cap,
        "l2": acc_end.l2,
        "n_train": len(train),
        "n_test": len(test),
        "config": {k: setting.config[k] for k in sorted(setting.config)},
    }
    out: dict[str, Any] = {}
    for eps in EPSILONS:
        sigma = sigma_for(cap, eps, DELTA)
        out[_key(eps)] = {
            "sigma": sigma,
            "acc_noiseless": _accuracy(clean, test),
            "acc_noisy_mean": _noisy_accuracy(clean, sigma, test, seed),
            **shared,
            "deletion_ms_over_retrain_ms": float(np.mean(times)) / retrain_ms,
        }
    return out


def _key(eps: float) -> str:
    return str(int(eps)) if float(eps).is_integer() else str(eps)


def run(r1_config: dict[str, Any], quick: bool, seed: int, r1_record: TrainingRecord | None) -> dict[str, Any]:
    """The ``certified`` object: ``{"r1": {"1": {...}, "10": {...}}, "mnist8k": {...}}``."""
    out: dict[str, Any] = {}
    for setting in settings(r1_config, quick):
        record = r1_record if setting.name == "r1" else None
        out[setting.name] = run_setting(setting, seed, record)
    out["delta"] = DELTA
    out["noise_draws"] = NOISE_DRAWS
    out["path_shared_across_epsilon"] = True
    return out


def print_table(certified: dict[str, Any]) -> None:
    print("Certified releases (gradient residual against the exact minimiser, delta 1e-3):")
    print("  setting  eps  sigma     acc noiseless/noisy  del  retrains  passes/del  violations  ms/del  "
          "retrain ms  exact ms  fit ||grad||")
    for name in ("r1", "mnist8k"):
        for eps in EPSILONS:
            r = certified[name][_key(eps)]
            print(f"  {name:<8} {_key(eps):>3}  {r['sigma']:.4g}  {r['acc_noiseless']:.4f}/{r['acc_noisy_mean']:.4f}"
                  f"      {r['deletions']:>4}  {r['retrains']:>8}  {r['passes_per_deletion']:>10.2f}  "
                  f"{r['bound_violations']:>4}/{r['bound_checks']:<4}  {r['ms_per_deletion']:>6.1f}  "
                  f"{r['retrain_ms']:>10.0f}  {r['exact_solve_ms']:>8.0f}  {r['fit_residual']:.3g}")
    if math.isfinite(certified["r1"][_key(EPSILONS[0])]["bound_over_distance_min"]):
        r = certified["r1"][_key(EPSILONS[0])]
        print(f"  r1 bound / true distance: {r['bound_over_distance_min']:.2f} to {r['bound_over_distance_max']:.2f}")
