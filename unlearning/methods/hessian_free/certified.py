"""Certified Hessian-free releases by the gradient residual, against the exact minimiser.

What holds. For the L2-regularised convex family (multinomial logistic regression, binary included, bias
inside the penalty) the objective F_D of :mod:`.objective` is l2-strongly convex, so for any weights w::

    ||w - w*_D|| <= ||grad F_D(w)|| / l2                       (w*_D: the exact minimiser on the rows D)

Output perturbation (Guo et al. 2020, Certified Data Removal, Thm 3 / Sekhari et al. 2021): if every
release's clean weights are within Delta_max of w*_{D'} (D' the rows left), then the release
``w + N(0, sigma^2 I)`` with sigma from the analytic Gaussian mechanism (Balle & Wang 2018) at sensitivity
Delta_max is (epsilon, delta)-indistinguishable from ``w*_{D'} + N(0, sigma^2 I)``: from the exact
minimiser on the remaining rows, as if the deleted rows had never been there, released with the same noise.

The mechanism:

- registration: sigma = analytic_sigma(Delta_max, epsilon, delta), from the configuration alone (Delta_max
  is the ``sensitivity_cap`` hyperparameter); no measured figure ever enters sigma;
- fit: recorded SGD with the fused Stage II (the per-sample vectors a^{-u}), then Newton-CG in float64 until
  ``(||grad F_D(w)|| + slack)/l2 <= Delta_max/10``; release w + N(0, sigma^2 I);
- forget: w <- w + sum_{u in U} a^{-u}; one float64 pass over D' gives ``||grad F_{D'}(w)||`` and its
  rounding slack (:mod:`.objective`); while ``(||grad|| + slack)/l2 > Delta_max``, Newton-CG steps
  warm-started at w, each aiming at 0.7 Delta_max, at most ``max_newton_steps``; if still above, an exact
  solve (Newton-CG to Delta_max/10 without a step limit) and the vectors are marked stale (the method then
  asks for a retrain, which refreshes them). Release w + fresh N(0, sigma^2 I).

The certificate names the bound ``gradient_residual`` with value Delta_max (what is guaranteed), and carries
sigma, Delta_max, l2, epsilon, delta and ``check: passed``: never the measured residual, whose value depends
on the deleted rows.

Threat model. The guarantee covers what a consumer of the model sees: each release's weights (and so its
predictions) and its certificate, whose every field is fixed by the configuration and the count of
deletions. The work a deletion took (how many Newton steps, whether an exact solve and then a retrain
followed) depends on the deleted rows; it shows in the update's duration, in the version's stored accounting
(:class:`~.accounting.Work`) and in when the model retrains. Whoever can time updates or read the operator's
records learns about one bit per deletion on how far the deleted rows moved the minimiser; that is not
covered. Each release is one Gaussian-mechanism output: an observer of several releases of one budget epoch
composes their guarantees.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from unlearning.data import Dataset
from unlearning.errors import DimensionMismatchError, InvalidConfigError
from unlearning.methods.hessian_free.accounting import GradientResidualAccount, HFAccounting
from unlearning.methods.hessian_free.objective import Evaluation, SoftmaxObjective, minimise
from unlearning.privacy.certificate import Certificate
from unlearning.privacy.gaussian import analytic_sigma

BOUND_NAME = "gradient_residual"
CONVEX_FAMILIES = ("logistic_regression",)
"""The families whose training objective is l2-strongly convex (softmax regression; two classes is binary)."""
POLISH_FRACTION = 0.1  # the fit's polish and an exact solve reach Delta_max / 10
STEP_FRACTION = 0.7  # a deletion's Newton steps aim at 0.7 Delta_max (docs/decisions.md)
MAX_EXACT_STEPS = 100  # Newton steps of an exact solve (a strongly convex problem needs far fewer)
MAX_CG_ITERATIONS = 500  # Hessian-vector products per Newton step
MAX_NEWTON_STEPS = 100  # the largest max_newton_steps a configuration may ask for
DEFAULT_SENSITIVITY_CAP = 0.002
_REL_TOL = 1e-9
_REFERENCE = (
    "the exact minimiser of F(w) = mean cross-entropy over the remaining rows + (l2/2)||w||^2 (bias included), "
    "released with the same noise"
)


def sigma_for(cap: float, epsilon: float, delta: float) -> float:
    """sigma of the analytic Gaussian mechanism at sensitivity ``cap`` (Balle & Wang 2018, Thm 8)."""
    return analytic_sigma(cap, epsilon, delta)


def cap_for(sigma: float, epsilon: float, delta: float) -> float:
    """The sensitivity a sigma covers at (epsilon, delta): sigma / sigma(1) (the profile depends on sigma/Delta only)."""
    return sigma / analytic_sigma(1.0, epsilon, delta)


def check_certifiable(family: str, l2: float | None, cap: float) -> None:
    """Refuse what the gradient residual cannot certify: a nonconvex family, no L2 term, a bad cap."""
    if family not in CONVEX_FAMILIES:
        raise InvalidConfigError(
            f"a certified hessian_free model must be one of the convex families {list(CONVEX_FAMILIES)}: the "
            f"{family!r} objective is not convex, so no gradient bounds its distance to a retrain and no noise "
            "level can be certified; register it with release_mode 'audited' (no noise, measured figures)"
        )
    if l2 is not None and not (l2 > 0 and math.isfinite(l2)):
        raise InvalidConfigError(
            f"a certified hessian_free model needs l2 > 0 (its strong convexity is what bounds the distance to the "
            f"exact minimiser), got {l2!r}; leave l2 null for the data-derived 1/n"
        )
    if isinstance(cap, bool) or not isinstance(cap, int | float) or not (cap > 0 and math.isfinite(cap)):
        raise InvalidConfigError(f"sensitivity_cap must be a finite number > 0, got {cap!r}")


# ----------------------------------------------------------------------------------- the check


@dataclass(frozen=True)
class CheckOutcome:
    """Weights that passed the check (``(||grad|| + slack)/l2 <= cap``) and what getting there took."""

    weights: torch.Tensor  # float64, on the CPU
    passes: int
    newton_steps: int
    exact: bool


def objective_on(data: Dataset, l2: float, device: torch.device) -> SoftmaxObjective:
    return SoftmaxObjective(data.features, data.labels, data.num_classes, l2, device)


def _bound(at: Evaluation, l2: float) -> float:
    return at.certified_gradient_norm / l2


def _solve(objective: SoftmaxObjective, at: Evaluation, cap: float) -> tuple[Evaluation, int]:
    """Newton-CG until the bound is at most ``POLISH_FRACTION * cap``; an error if float64 cannot get
    below ``cap`` (the rounding slack alone is above it)."""
    l2 = objective.l2
    at, steps = minimise(objective, at, POLISH_FRACTION * cap * l2, MAX_EXACT_STEPS, MAX_CG_ITERATIONS)
    if _bound(at, l2) > cap:
        raise InvalidConfigError(
            f"the exact solve stopped at a bound of {_bound(at, l2):.3g} > sensitivity_cap {cap:g} (rounding "
            f"slack {at.slack / l2:.3g} on {objective.n} rows): raise sensitivity_cap or l2"
        )
    return at, steps


def polish(objective: SoftmaxObjective, weights: torch.Tensor, cap: float) -> CheckOutcome:
    """The fit's polish: Newton-CG from the SGD weights to a bound of at most ``cap / 10``."""
    at, steps = _solve(objective, objective.evaluate(weights.to(torch.float64)), cap)
    return CheckOutcome(at.weights.cpu(), objective.passes, steps, exact=False)


def restore(objective: SoftmaxObjective, weights: torch.Tensor, cap: float, max_newton_steps: int) -> CheckOutcome:
    """A deletion's check (module docstring): Newton-CG steps while the bound exceeds ``cap``, at most
    ``max_newton_steps``, then an exact solve if still above."""
    l2 = objective.l2
    at = objective.evaluate(weights.to(torch.float64))
    steps = 0
    if _bound(at, l2) > cap and max_newton_steps > 0:
        at, steps = minimise(objective, at, STEP_FRACTION * cap * l2, max_newton_steps, MAX_CG_ITERATIONS)
    exact = _bound(at, l2) > cap
    if exact:
        at, more = _solve(objective, at, cap)
        steps += more
    return CheckOutcome(at.weights.cpu(), objective.passes, steps, exact)


def rows_after(remaining: Dataset, forgotten: list[str], expected: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows D' of a deletion as (features, labels): ``remaining`` is the budget epoch's current rows,
    with or without the request's rows (those are dropped); anything else is an error, since the
    certificate is about D'."""
    present = [sid for sid in forgotten if remaining.contains(sid)]
    if present and len(present) != len(forgotten):
        raise DimensionMismatchError(
            f"the remaining data holds {len(present)} of the {len(forgotten)} samples this request forgets: pass "
            "the budget epoch's current rows, with all of them or none"
        )
    if len(remaining) - len(present) != expected:
        raise DimensionMismatchError(
            f"the remaining data has {len(remaining) - len(present)} rows after this request, this model's budget "
            f"epoch has {expected}: pass the epoch's current training rows"
        )
    if not present:
        return remaining.features, remaining.labels
    keep = np.ones(len(remaining), dtype=bool)
    keep[remaining.indices_of(present)] = False
    return remaining.features[keep], remaining.labels[keep]


# ------------------------------------------------------------------------------------ auditing


@dataclass(frozen=True)
class ResidualAudit:
    """The gradient residual of given weights on given rows, recomputed by an auditor with data access."""

    rows: int
    l2: float
    gradient_norm: float  # ||grad F(w)|| as computed in float64
    rounding_slack: float  # the exact norm is at most gradient_norm + rounding_slack
    bound: float  # (gradient_norm + rounding_slack) / l2: the distance to the exact minimiser is at most this
    sensitivity_cap: float | None  # Delta_max of the model, None for a model without one
    within_cap: bool | None  # bound <= sensitivity_cap

    def to_dict(self) -> dict[str, float | int | bool | None]:
        return asdict(self)


def residual_of(
    weights: torch.Tensor, rows: Dataset, l2: float, cap: float | None = None, device: torch.device | None = None
) -> ResidualAudit:
    """Recompute ``(||grad F_rows(weights)|| + slack) / l2`` in float64 (one pass over ``rows``, which are the
    model's input rows: already through its feature transform)."""
    objective = objective_on(rows, l2, device or torch.device("cpu"))
    at = objective.evaluate(weights.to(torch.float64))
    bound = _bound(at, l2)
    return ResidualAudit(len(rows), l2, at.gradient_norm, at.slack, bound, cap,
                         None if cap is None else bool(bound <= cap))


# --------------------------------------------------------------------------------- certificates


def certificate(
    method: str, acc: HFAccounting, account: GradientResidualAccount, *, budget_cap: float, charge: int,
    noise_seed: int,
) -> Certificate:
    """The certificate of a gradient-residual release: every field is fixed by the configuration and the
    count of deletions (nothing measured)."""
    return Certificate(
        method=method,
        release_mode="certified",
        guarantee="certified",
        epsilon=account.epsilon,
        delta=account.delta,
        bound_name=BOUND_NAME,
        bound=account.sensitivity_cap,
        sigma=account.sigma,
        calibration="analytic",
        cumulative_deletions=acc.deleted_count,
        budget_unit="deleted_samples",
        budget_cap=budget_cap,
        budget_spent=float(acc.deleted_count),
        charge=float(charge),
        noise_seed=noise_seed,
        inputs={
            "sensitivity_cap": account.sensitivity_cap,
            "l2": acc.l2,
            "gradient_norm_threshold": acc.l2 * account.sensitivity_cap,
            "check": "passed",
            "reference": _REFERENCE,
            "family": str(acc.config.get("family", "logistic_regression")),
            "arithmetic": "float64 with a rounding slack (unlearning.methods.hessian_free.objective)",
            "target_epsilon": account.epsilon,
            "target_delta": account.delta,
        },
        measured={},
        notes=NOTES,
    )


NOTES = (
    "Certified against the exact minimiser on the remaining rows: the clean weights passed "
    "(||grad F|| + rounding slack)/l2 <= sensitivity_cap on those rows (l2-strong convexity), and the release "
    "adds Gaussian noise of the analytic mechanism at that sensitivity, fixed at registration. The guarantee "
    "covers each release's weights and this certificate; the work an update took (Newton steps, exact "
    "solves, retrains, time) depends on the deleted rows and is not covered; several releases compose."
)


def verify(certificate: Certificate) -> list[str]:
    """Recompute Delta_max from (sigma, epsilon, delta) and check the rest against it."""
    inputs = certificate.inputs
    required = ("sensitivity_cap", "l2", "gradient_norm_threshold", "check", "target_epsilon", "target_delta")
    missing = [k for k in required if k not in inputs]
    if missing:
        return [f"the certificate's inputs lack {missing}"]
    problems: list[str] = []
    if certificate.release_mode != "certified" or certificate.guarantee != "certified":
        problems.append("a gradient-residual certificate is a certified release with a certified guarantee")
    if certificate.calibration != "analytic":
        problems.append(f"the noise is calibrated by the analytic mechanism, not {certificate.calibration!r}")
    eps, delta = certificate.epsilon, certificate.delta
    if eps is None or delta is None:
        return [*problems, "a certified release states epsilon and delta"]
    if eps != inputs["target_epsilon"] or delta != inputs["target_delta"]:
        problems.append(f"epsilon/delta {eps}/{delta} differ from the targets "
                        f"{inputs['target_epsilon']}/{inputs['target_delta']}")
    cap = cap_for(certificate.sigma, eps, delta)
    for name, value in (("inputs.sensitivity_cap", inputs["sensitivity_cap"]), ("bound", certificate.bound)):
        if not math.isclose(cap, float(value), rel_tol=_REL_TOL):
            problems.append(f"sigma {certificate.sigma} covers a sensitivity of {cap} at (epsilon {eps}, delta "
                            f"{delta}), {name} says {value}")
    l2 = float(inputs["l2"])
    if not (l2 > 0 and math.isfinite(l2)):
        problems.append(f"l2 must be > 0 for the bound to hold, got {l2}")
    elif not math.isclose(l2 * cap, float(inputs["gradient_norm_threshold"]), rel_tol=_REL_TOL):
        problems.append(f"the gradient-norm threshold {inputs['gradient_norm_threshold']} is not l2 {l2} times "
                        f"the sensitivity {cap}")
    if inputs["check"] != "passed":
        problems.append(f"the release's check says {inputs['check']!r}, not 'passed'")
    leaked = [k for k in (*inputs, *certificate.measured) if "residual" in k or k == "gradient_norm"]
    if leaked:
        problems.append(f"the certificate carries measured residual figures {leaked}")
    return problems


def fit_noise_seed(seed: int) -> int:
    """The noise seed of the training release, derived from the training seed."""
    return int(np.random.SeedSequence([int(seed), 0x5EED]).generate_state(1)[0])
