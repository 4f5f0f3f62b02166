"""Configuration of the ``langevin`` method: the hyperparameters it declares, its defaults, what it
checks without the data, and their resolution against the training data into the constants of the
chain (the problem, the step size eta <= 1/L, the burn-in T and the noise sigma).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from unlearning.data import Dataset
from unlearning.errors import InvalidConfigError, InvalidDatasetError
from unlearning.methods.hyperparameters import HyperParameter
from unlearning.methods.langevin.defaults import (
    MAX_BURN_IN_STEPS,
    NORM_SLACK,
    derived_feature_bound,
    derived_l2,
    row_norms,
)
from unlearning.methods.langevin.problem import LogisticProblem
from unlearning.methods.protocol import BudgetPolicy, PrivacyTarget
from unlearning.privacy.langevin.calibration import steady_state_sigma
from unlearning.privacy.langevin.constants import CONVERSIONS, PABI_VARIANTS, PNSGDConstants
from unlearning.privacy.langevin.distance import epochs_to_converge
from unlearning.validation import integer_at_least, positive_number

FAMILY = "logistic_regression"


def hyperparameters() -> tuple[HyperParameter, ...]:
    """What ``GET /v1/methods`` shows for the method: every key of :func:`default_config`."""
    above_zero: dict[str, Any] = {"minimum": 0, "exclusive_minimum": True}
    return (
        HyperParameter("family", "string", "The model trained: a (multinomial) logistic regression, whose "
                       "strongly convex objective the guarantee needs", choices=(FAMILY,)),
        HyperParameter("batch_size", "integer", "Samples per noisy gradient step (0, or at least the number "
                       "of samples: full batch)", minimum=0),
        HyperParameter("l2", "number", "Strength m of the L2 regularisation", **above_zero, nullable=True,
                       null_means="derived from the data: max(1/n, the least l2 whose burn-in fits the noisy-step "
                       "budget min(200k, max(50k, 10 n)))"),
        HyperParameter("lr", "number", "Step size eta, at most 1/L (checked when training starts)", **above_zero,
                       nullable=True, null_means="derived from the data: 1/L, L the smoothness of the objective"),
        HyperParameter("clip_norm", "number", "Per-sample gradient clipping threshold M", **above_zero,
                       nullable=True, null_means="derived from the data: the largest gradient norm the "
                       "features allow (never clips)"),
        HyperParameter("feature_bound", "number", "Bound on every feature vector's norm (the intercept's 1 "
                       "included); L and M are derived from it", **above_zero, nullable=True,
                       null_means="derived from the data: the 90% quantile of the rows' norms, rows above it clipped "
                       "onto it"),
        HyperParameter("intercept", "boolean", "Append a constant feature 1 (a bias)"),
        HyperParameter("radius", "number", "Radius R of the ball the iterates are projected onto", **above_zero),
        HyperParameter("epochs", "integer", "Noisy training epochs (the burn-in T)", minimum=1, nullable=True,
                       null_means="derived from the data: the T with 2R c^(TN) <= burn_in_tolerance x Z_B"),
        HyperParameter("burn_in_tolerance", "number", "How close to the stationary regime the derived burn-in "
                       "gets", **above_zero),
        HyperParameter("sigma", "number", "Std of the Langevin noise per step", **above_zero, nullable=True,
                       null_means="derived from the data: the least sigma for which a single-sample request "
                       "needs at most target_epochs noisy epochs at the model's (epsilon, delta)"),
        HyperParameter("target_epochs", "integer", "Noisy epochs per single-sample request a derived sigma is "
                       "calibrated for", minimum=1),
        HyperParameter("pabi", "string", "Privacy amplification by iteration: the paper's c^(2KN) or the "
                       "shift-optimal (tight) form", choices=PABI_VARIANTS),
        HyperParameter("conversion", "string", "RDP to (epsilon, delta) conversion: the paper's (Prop K.2) or "
                       "dp_accounting's (tighter)", choices=CONVERSIONS),
        HyperParameter("max_unlearning_epochs", "integer", "Most noisy epochs one request may take; beyond "
                       "it the model retrains", minimum=1),
        HyperParameter("max_burn_in_epochs", "integer", "Most epochs a derived burn-in may take; a longer "
                       "one is refused when training starts", minimum=1, nullable=True,
                       null_means="at most 1,000,000 noisy steps"),
    )


def default_config() -> dict[str, Any]:
    """The paper's setting (digest 1.3, 5.2) where it carries over; None means "derive it from the data"
    (the values used are recorded in the accounting):

    - ``batch_size`` 128 (the paper's mini-batch setting; ``0`` or >= n means full batch);
    - ``intercept`` true: a constant feature 1 (a bias, regularised like every weight);
    - ``feature_bound`` None: :func:`.defaults.derived_feature_bound`, the 90% quantile of the rows' norms (with the
      intercept's 1), rows above it clipped onto it; a given bound must hold for every row instead;
    - ``l2`` None: :func:`.defaults.derived_l2`, lam = max(1/n, the least lam whose burn-in fits
      :func:`.defaults.burn_in_step_budget` noisy steps); ``lr`` None: eta = 1/L;
    - ``clip_norm`` None: M = the largest data-gradient norm the features allow (never clips);
    - ``radius`` R = 100; ``epochs`` None: the burn-in T with 2R c^(TN) <= burn_in_tolerance Z_B;
      ``max_burn_in_epochs`` None: a burn-in of more than ``MAX_BURN_IN_STEPS`` noisy steps is refused;
    - ``sigma`` 0.01: utility is fixed and each request gets the K the accountant needs (the stationary
      law is about N(w*, sigma^2 H^-1), so with lam near 1/n a larger sigma widens it in the weakly
      regularised directions; docs/decisions.md has the measurements). None: the least sigma for which every
      single-sample request, however many, needs at most ``target_epochs`` noisy epochs at the model's
      (epsilon, delta) (Thm 3.11 fixed point) -- cheap deletions, but on small datasets that sigma can be
      large enough to ruin accuracy (check ``measured.train_accuracy``);
    - ``pabi`` "paper" (c^(2KN)) or "tight" (shift-optimal); ``conversion`` "paper" (Prop K.2) or
      "dp_accounting" (tighter RDP -> DP conversion).
    """
    return {
        "family": FAMILY,
        "batch_size": 128,
        "l2": None,
        "lr": None,
        "clip_norm": None,
        "feature_bound": None,
        "intercept": True,
        "radius": 100.0,
        "epochs": None,
        "burn_in_tolerance": 1e-3,
        "sigma": 0.01,
        "target_epochs": 1,
        "pabi": "paper",
        "conversion": "paper",
        "max_unlearning_epochs": 10_000,
        "max_burn_in_epochs": None,
    }


def check_config(config: Mapping[str, Any]) -> None:
    """What ``fit`` checks without the data; the feature bound, lr <= 1/L and the burn-in length
    depend on the rows and are checked when training starts."""
    merged = {**default_config(), **dict(config)}
    check_choices(merged)
    for name in ("feature_bound", "l2", "lr", "clip_norm", "sigma"):
        optional_positive(merged, name)
    for name in ("radius", "burn_in_tolerance"):
        positive(merged, name)
    for name in ("target_epochs", "max_unlearning_epochs"):
        int_at_least(merged, name, 1)
    for name in ("epochs", "max_burn_in_epochs"):
        if merged[name] is not None:
            int_at_least(merged, name, 1)
    num_batches(1, merged)


def check_choices(config: Mapping[str, Any]) -> None:
    """The family, the PABI variant and the conversion are among the supported ones; intercept is a bool."""
    if config.get("family", FAMILY) != FAMILY:
        raise InvalidConfigError(
            f"the langevin method trains family {FAMILY!r} only (its guarantee needs a strongly convex "
            f"objective), not {config.get('family')!r}"
        )
    for name in ("pabi", "conversion"):
        choices = PABI_VARIANTS if name == "pabi" else CONVERSIONS
        if config[name] not in choices:
            raise InvalidConfigError(f"{name} must be one of {choices}, got {config[name]!r}")
    if not isinstance(config["intercept"], bool):
        raise InvalidConfigError(f"intercept must be true or false, got {config['intercept']!r}")


def resolve_problem(dataset: Dataset, config: Mapping[str, Any], slots: int, b: int) -> LogisticProblem:
    """The problem of ``config`` on ``dataset``, its None values derived from the data: the feature
    bound by :func:`.defaults.derived_feature_bound` (rows outside it are clipped onto it), ``l2`` by
    :func:`.defaults.derived_l2` for the partition of ``slots`` slots in batches of ``b``."""
    check_choices(config)
    intercept = config["intercept"]
    norms = row_norms(dataset, intercept)
    bound = optional_positive(config, "feature_bound")
    row_clip = bound is None
    if bound is None:
        bound = derived_feature_bound(row_norms(dataset, False), intercept)
    elif norms.max() > bound * (1 + NORM_SLACK):
        row = int(np.argmax(norms))
        raise InvalidDatasetError(
            f"sample {dataset.sample_ids[row]!r} has feature norm {norms[row]:.6g} above feature_bound "
            f"{bound}: normalise the features or raise the bound (L and M are derived from it)"
        )
    C = dataset.num_classes
    natural = (1.0 if C == 2 else math.sqrt(2.0)) * bound
    clip = optional_positive(config, "clip_norm") or natural
    if C > 2 and clip < natural * (1 - 1e-12):
        raise InvalidConfigError(
            f"clip_norm {clip} would clip multinomial gradients (their bound is sqrt(2) * feature_bound = "
            f"{natural:.6g}); a clipped multinomial gradient is not the gradient of a convex loss, so the "
            "guarantee would not hold: leave clip_norm unset or use two classes"
        )
    problem = LogisticProblem(C, dataset.num_features, intercept, 0.0, clip, bound, row_clip)
    l2 = optional_positive(config, "l2")
    if l2 is None:
        l2 = derived_l2(len(dataset), problem.smoothness, clip, slots, b, positive(config, "radius"),
                        positive(config, "burn_in_tolerance"))
    return replace(problem, l2=l2)


def num_batches(n: int, config: Mapping[str, Any]) -> int:
    """N = ceil(n / batch_size), or 1 (full batch) for batch_size 0 or >= n."""
    b = config["batch_size"]
    if isinstance(b, bool) or not isinstance(b, int) or b < 0:
        raise InvalidConfigError(f"batch_size must be an integer >= 1 (0 for full batch), got {b!r}")
    return 1 if b == 0 or b >= n else math.ceil(n / b)


def step_size(problem: LogisticProblem, config: Mapping[str, Any]) -> float:
    """eta = ``lr``, or 1/L when unset; refused above 1/L, where PNSGD no longer contracts (digest 6.6.1)."""
    limit = 1.0 / problem.smoothness
    eta = optional_positive(config, "lr")
    if eta is None:
        return limit
    if eta > limit * (1 + 1e-12):
        raise InvalidConfigError(
            f"lr {eta} exceeds 1/L = {limit:.6g} (L = {problem.smoothness:.6g} = curvature * feature_bound^2 "
            "+ l2): PNSGD contracts, and the guarantee holds, only for lr <= 1/L"
        )
    return eta


def burn_in_epochs(const: PNSGDConstants, config: Mapping[str, Any]) -> int:
    """T = ``epochs``, or the least T with 2R c^(TN) <= burn_in_tolerance Z_B (Lemma 3.6), refused above
    ``max_burn_in_epochs`` (default: ``MAX_BURN_IN_STEPS`` noisy steps)."""
    if config.get("epochs") is not None:
        return int_at_least(config, "epochs", 1)
    epochs = epochs_to_converge(const, positive(config, "burn_in_tolerance"))
    if config.get("max_burn_in_epochs") is None:
        cap = math.ceil(MAX_BURN_IN_STEPS / const.batches)
    else:
        cap = int_at_least(config, "max_burn_in_epochs", 1)
    if epochs > cap:
        # A weakly regularised small dataset contracts so slowly that the burn-in runs for hours;
        # refuse up front instead of training silently that long.
        raise InvalidConfigError(
            f"reaching the stationary regime needs {epochs} noisy epochs (more than max_burn_in_epochs "
            f"{cap}): raise l2 (now {const.m:g}), raise burn_in_tolerance, or set epochs explicitly"
        )
    return epochs


def resolve_sigma(
    const: PNSGDConstants, config: Mapping[str, Any], privacy: PrivacyTarget,
    policy: BudgetPolicy | None, gap: float,
) -> tuple[float, str]:
    """(sigma, where it came from): ``sigma`` as configured, or the least sigma for which every single-sample
    request needs at most ``target_epochs`` noisy epochs
    (:func:`unlearning.privacy.langevin.calibration.steady_state_sigma`, from the stationarity gap ``gap``),
    capped by the budget policy's ``max_sigma``."""
    max_sigma = policy.max_sigma if policy is not None else None
    sigma = optional_positive(config, "sigma")
    if sigma is not None:
        if max_sigma is not None and sigma > max_sigma:
            raise InvalidConfigError(f"sigma {sigma} exceeds the budget policy's max_sigma {max_sigma}")
        return sigma, "config"
    K = int_at_least(config, "target_epochs", 1)
    sigma = steady_state_sigma(const, privacy.epsilon, privacy.delta, K, gap, config["pabi"], config["conversion"])
    if max_sigma is not None and sigma > max_sigma:
        return float(max_sigma), f"policy_max_sigma (steady state for {K} epochs needs {sigma:.6g})"
    return sigma, f"steady_state_{K}_epochs"


def positive(config: Mapping[str, Any], name: str) -> float:
    """``config[name]`` as a float, if it is a finite number > 0."""
    return positive_number(name, config[name])


def optional_positive(config: Mapping[str, Any], name: str) -> float | None:
    """``config[name]`` as a float, if it is a finite number > 0, or None when unset."""
    return None if config.get(name) is None else positive(config, name)


def int_at_least(config: Mapping[str, Any], name: str, low: int) -> int:
    """``config[name]`` as an int, if it is an integer >= ``low``."""
    return integer_at_least(name, config[name], low)
