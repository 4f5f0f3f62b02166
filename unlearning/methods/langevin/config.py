"""Configuration of the ``langevin`` method: the hyperparameters it declares (with their bounds), its
defaults, what it checks without the data, their resolution against the training data into the constants
of the chain (the problem, the step size eta <= 1/L, the burn-in T and the noise sigma), and the job
estimate of a training from the data's shape.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from unlearning.data import Dataset
from unlearning.errors import InvalidConfigError, InvalidDatasetError
from unlearning.methods.hyperparameters import HyperParameter, check_declared
from unlearning.methods.job_estimate import (
    FLOAT64,
    STEP_SECONDS,
    DataShape,
    JobEstimate,
    data_bytes,
    estimate,
    hot_store_bytes,
)
from unlearning.methods.langevin.defaults import (
    MAX_BURN_IN_STEPS,
    NORM_SLACK,
    burn_in_step_budget,
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

# Upper bounds (and the least tolerance), checked at registration so that no single value makes a training
# run for days or overflows: the paper (digest 003) and the benches use b = 32 to 512 or full batch, lam 1e-6 n
# to 0.011, R = 100, sigma 0.01 to 1.26 and burn-ins of 10 to 3,000 epochs.
MIN_POSITIVE = 1e-12  # l2, lr, clip_norm, feature_bound, radius, sigma: smaller values make the chain's
# constants (c = 1 - eta m, Z_B, the burn-in) meaningless in float64 before any step runs
MAX_BATCH_SIZE = 2**20  # a batch at least the size of the data is already full batch
MAX_L2 = 1e4  # m; with eta <= 1/L <= 1/m a stronger penalty only pins the weights at 0
MAX_LR = 10.0  # eta must also be <= 1/L, which is at most 4 once the intercept makes every row norm >= 1
MAX_CLIP_NORM = 1e6  # M; far above any gradient norm of rows within MAX_FEATURE_BOUND
MAX_FEATURE_BOUND = 1e6  # B; the burn-in grows with B^2, so far larger bounds only mean unscaled features
MAX_RADIUS = 1e6  # R; the burn-in grows with log R and the initial draw is projected onto the ball
MIN_BURN_IN_TOLERANCE = 1e-12  # the burn-in grows with log(1/tolerance): 1e-12 is 4x the default's epochs
MAX_BURN_IN_TOLERANCE = 1.0  # a gap as large as Z_B itself: beyond it the chain is not burnt in at all
MAX_SIGMA = 1e3  # noise per step; the paper's calibrated sigmas are at most 1.26
MAX_EPOCHS = MAX_BURN_IN_STEPS  # epochs, max_burn_in_epochs, target_epochs, max_unlearning_epochs: the
# longest burn-in the default cap allows (MAX_BURN_IN_STEPS noisy steps, full batch); a request needing as
# many epochs as the burn-in retrains instead


def hyperparameters() -> tuple[HyperParameter, ...]:
    """What ``GET /v1/methods`` shows for the method: every key of :func:`default_config`."""
    least: dict[str, Any] = {"minimum": MIN_POSITIVE}
    epochs: dict[str, Any] = {"minimum": 1, "maximum": MAX_EPOCHS}
    return (
        HyperParameter("family", "string", "The model trained: a (multinomial) logistic regression, whose "
                       "strongly convex objective the guarantee needs", choices=(FAMILY,)),
        HyperParameter("batch_size", "integer", "Samples per noisy gradient step (0, or at least the number "
                       "of samples: full batch)", minimum=0, maximum=MAX_BATCH_SIZE),
        HyperParameter("l2", "number", "Strength m of the L2 regularisation", **least, maximum=MAX_L2,
                       nullable=True,
                       null_means="derived from the data: max(1/n, the least l2 whose burn-in fits the noisy-step "
                       "budget min(200k, max(50k, 10 n)))"),
        HyperParameter("lr", "number", "Step size eta, at most 1/L (checked when training starts)", **least,
                       maximum=MAX_LR, nullable=True, null_means="derived from the data: 1/L, L the smoothness of the objective"),
        HyperParameter("clip_norm", "number", "Per-sample gradient clipping threshold M", **least,
                       maximum=MAX_CLIP_NORM, nullable=True, null_means="derived from the data: the largest gradient norm the "
                       "features allow (never clips)"),
        HyperParameter("feature_bound", "number", "Bound on every feature vector's norm (the intercept's 1 "
                       "included); L and M are derived from it", **least, maximum=MAX_FEATURE_BOUND, nullable=True,
                       null_means="derived from the data: the 90% quantile of the rows' norms, rows above it clipped "
                       "onto it"),
        HyperParameter("intercept", "boolean", "Append a constant feature 1 (a bias)"),
        HyperParameter("radius", "number", "Radius R of the ball the iterates are projected onto", **least,
                       maximum=MAX_RADIUS),
        HyperParameter("epochs", "integer", "Noisy training epochs (the burn-in T)", **epochs, nullable=True,
                       null_means="derived from the data: the T with 2R c^(TN) <= burn_in_tolerance x Z_B"),
        HyperParameter("burn_in_tolerance", "number", "How close to the stationary regime the derived burn-in "
                       "gets", minimum=MIN_BURN_IN_TOLERANCE, maximum=MAX_BURN_IN_TOLERANCE),
        HyperParameter("sigma", "number", "Std of the Langevin noise per step", **least, maximum=MAX_SIGMA,
                       nullable=True,
                       null_means="derived from the data: the least sigma for which a single-sample request "
                       "needs at most target_epochs noisy epochs at the model's (epsilon, delta)"),
        HyperParameter("target_epochs", "integer", "Noisy epochs per single-sample request a derived sigma is "
                       "calibrated for", **epochs),
        HyperParameter("pabi", "string", "Privacy amplification by iteration: the paper's c^(2KN) or the "
                       "shift-optimal (tight) form", choices=PABI_VARIANTS),
        HyperParameter("conversion", "string", "RDP to (epsilon, delta) conversion: the paper's (Prop K.2) or "
                       "dp_accounting's (tighter)", choices=CONVERSIONS),
        HyperParameter("max_unlearning_epochs", "integer", "Most noisy epochs one request may take; beyond "
                       "it the model retrains", **epochs),
        HyperParameter("max_burn_in_epochs", "integer", "Most epochs a derived burn-in may take; a longer "
                       "one is refused when training starts", **epochs, nullable=True,
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
    check_declared(hyperparameters(), merged)


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


# ------------------------------------------------------------------------------------------ job estimate
# The job estimate of a training (Langevin.estimate_job).
# Training is T epochs of projected noisy SGD over N batches (:func:`.noisy_sgd.pnsgd_epochs`): every epoch
# reads every row once (a gradient of the (C - 1) x (D + 1) weights, a few flops per weight and row) and
# draws N x p Gaussian numbers, one batch at a time, so time is T x (rows x p + N x p noise + N steps).
# T is the configured ``epochs``, or the derived burn-in, bounded as ``fit`` bounds it: with a derived ``l2``
# (and step 1/L) the burn-in fits min(200k, max(50k, 10 n)) noisy steps (:func:`.defaults.derived_l2`); with
# a given ``l2`` it is derived as ``fit`` derives it, from the configured or an assumed feature bound
# (:data:`ASSUMED_SQUARED_NORM`); it is never longer than ``max_burn_in_epochs`` (null: ``MAX_BURN_IN_STEPS``
# steps). Memory: the rows gathered per batch in float64, one epoch's noise (N x p) and the data.

GRADIENT_FLOPS = 6.0  # per weight and row: the logits, the residuals and their product with the rows
NOISE_FLOPS = 20.0  # per Gaussian number drawn (torch.randn on the CPU), with the update and projection
STEP_CALLS = 1.5  # small steps (STEP_SECONDS) of one noisy step
HASH_SECONDS = 2e-6  # a sample id's keyed blake2b hash (the batch partition)
ASSUMED_SQUARED_NORM = 1.0
"""A row's squared norm per feature a given ``l2``'s burn-in is estimated with when ``feature_bound`` is null (the
derived bound is the 90% quantile of the rows' norms): the mean of standardised columns (the default scaling
of an audited model) and the most of min-max scaled ones. Rows of larger norm burn in for longer than
estimated: give ``feature_bound`` (or ``epochs``) to have the burn-in estimated as ``fit`` derives it."""


def burn_in_bound(merged: Mapping[str, Any], shape: DataShape) -> int:
    """T as ``fit`` resolves it, or an upper bound of the derived burn-in (the comment above)."""
    if merged.get("epochs") is not None:
        return int(merged["epochs"])
    rows = max(shape.rows, 1)
    batches = num_batches(rows, merged)
    cap = merged.get("max_burn_in_epochs")
    epochs = int(cap) if cap is not None else math.ceil(MAX_BURN_IN_STEPS / batches)
    if merged.get("l2") is None and merged.get("lr") is None:  # derived_l2 assumes the step 1/L
        epochs = min(epochs, math.ceil(max(burn_in_step_budget(rows), batches) / batches))
    elif merged.get("l2") is not None:
        epochs = min(epochs, _converging_epochs(merged, shape, batches) or epochs)
    return max(epochs, 1)


def _converging_epochs(merged: Mapping[str, Any], shape: DataShape, batches: int) -> int | None:
    """The burn-in of Lemma 3.6 for a given ``l2`` (:func:`unlearning.privacy.langevin.distance.epochs_to_converge`),
    with the configured feature bound or ``ASSUMED_SQUARED_NORM`` per feature; None where the constants
    are inconsistent (``fit`` refuses those)."""
    intercept = float(bool(merged.get("intercept", True)))
    bound = merged.get("feature_bound") or math.sqrt(
        ASSUMED_SQUARED_NORM * max(shape.features, 1) + intercept
    )
    multinomial = shape.classes > 2
    l2 = float(merged["l2"])
    smoothness = (0.5 if multinomial else 0.25) * bound**2 + l2
    clip = merged.get("clip_norm") or (math.sqrt(2.0) if multinomial else 1.0) * bound
    eta = min(float(merged.get("lr") or math.inf), 1.0 / smoothness)
    slots = math.ceil(max(shape.rows, 1) / batches)
    try:
        const = PNSGDConstants(
            batches * slots, slots, eta, l2, float(clip), float(merged["radius"]), smoothness
        )
        return epochs_to_converge(const, float(merged["burn_in_tolerance"]))
    except (InvalidConfigError, OverflowError, ValueError):
        return None


def langevin_estimate(merged: Mapping[str, Any], shape: DataShape) -> JobEstimate:
    """Memory and single-core time of ``fit`` with the (merged) configuration on data of ``shape``."""
    n = max(shape.rows, 1)
    batches = num_batches(n, merged)
    epochs = burn_in_bound(merged, shape)
    p = max(shape.classes - 1, 1) * (shape.features + int(bool(merged.get("intercept", True))))
    memory = {
        "rows gathered per batch (float64)": data_bytes(shape, FLOAT64)
        + n * (FLOAT64 + 1.0)
        + 2.0 * n * FLOAT64,
        "one epoch's noise (batches x parameters)": 2.0 * batches * p * FLOAT64,
        "training rows": data_bytes(shape, FLOAT64),
    }
    flops = {
        "noisy epochs (burn-in x rows x parameters)": GRADIENT_FLOPS * epochs * n * p,
        "Gaussian noise (burn-in x batches x parameters)": NOISE_FLOPS * epochs * batches * p,
    }
    fixed = {
        "noisy steps (burn-in x batches)": epochs * batches * STEP_CALLS * STEP_SECONDS,
        "hashing sample ids": n * HASH_SECONDS,
    }
    served = shape.classes * (shape.features + int(bool(merged.get("intercept", True))))  # a column per class
    return estimate(memory, flops, fixed, hot_store=hot_store_bytes(served, FLOAT64))
