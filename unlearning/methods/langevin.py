"""Stochastic-gradient Langevin unlearning (SGLU; Chien, Wang, Chen, Li 2024; digest 003): ``langevin``.

fit     projected noisy mini-batch SGD (PNSGD, Algorithm 1) on L2-regularised logistic regression over one
        fixed seeded partition of the training slots into N mini-batches, cycled in the same order every
        epoch:  W <- Pi_{C_R}( W - eta [ (1/b) sum_{i in B_j} clip_M(grad l_i(W)) + lam W ] + sqrt(2 eta) sigma xi ),
        run for T epochs, T the burn-in after which the law is within W_inf 2R c^(TN) (Lemma 3.6) of the
        stationary law, a negligible fraction of the first request's distance Z_B.
forget  K more noisy epochs of exactly the same PNSGD, same partition and order, on the remaining data
        minus the request, from the current (noisy) weights with fresh noise; K is the least number of
        epochs the accountant (``unlearning.privacy.langevin_accountant``) needs for the model's
        (epsilon, delta), the W_inf state Z following the corrected Theorem 3.11 recursion.

The model. Binary classification is the paper's model exactly (App. K.3): w . x with
l(w; x, y) = -log sigmoid(y w . x), per-sample data gradients clipped to norm M, plus lam/2 ||w||^2,
smoothness L = ||x||^2/4 + lam, strong convexity m = lam. More classes use the reference-class
multinomial logit (class 0's logit pinned to 0, so two classes give exactly the binary model): its
data Hessian (diag(p) - p p^T) (x) x x^T has norm <= ||x||^2/2 (Gershgorin), so L = ||x||^2/2 + lam,
and its data gradient (p - e_y) (x) x has norm <= sqrt(2) ||x||. The released weights live in the
``logistic_regression`` family's layout theta (C, D+1) (bias last, row 0 zero), so
``build_model(spec).logits`` serves them. Clipping: for two classes a clipped gradient is the gradient
of a Huberised logistic loss, still convex with the same L, so any clip norm M is sound; for more classes
clipping a vector residual is not the gradient of a convex loss, so M must be at least sqrt(2) * the
feature bound (clipping never active) or the configuration is refused.

Deleting instead of replacing. The paper's adjacency replaces a point (n fixed, batch positions fixed).
We replace every deleted sample with a *null* point that contributes no data gradient (digest 2.3, the
analogue of Kairouz et al.'s bottom element): it is L-smooth and m-strongly convex through the
regulariser, and ||grad f(w; d) - grad f(w; null)|| <= M <= 2M (Remark 3.7), so every bound holds with
the paper's constants while the forgotten sample's data is never touched again: unlearning trains on
the remaining samples only. The same device pads the batches.

The partition. Sample i belongs to batch blake2b_key(partition_seed)(sample_id) mod N, a seeded random
partition that depends on no feature and survives deletions without storing any id: the state keeps
only scalars (no copy of training data, no identifiers). Batches therefore hold different numbers of
samples; every step divides by b = the largest batch at fit time and the smaller batches are padded
with null slots, so the analysis sees N batches of exactly b slots (n = N b). A keyed, order-free
digest of the live sample ids (sum of keyed hashes mod 2^64) is kept to detect a ``remaining`` dataset
that is not this model's training data.

Accounting reference. Theorem 3.11 compares each release with nu_{D_s|B}, the stationary law of PNSGD
on the remaining data ("retraining to convergence"). The paper assumes the trained model is exactly
stationary; we do not: the recursion starts at Z_out = 2R c^(TN) (Lemma 3.6 from any start in C_R), so
the guarantee holds for the finite burn-in actually run. A T-epoch retrain is itself within that W_inf
of the stationary law.

Release modes. Noise is part of training here: there is no clean model, so every release is certified.
A model registered in ``audited`` mode gets exactly the same releases and the same certified guarantee;
its certificates say so (``release_mode`` echoes the registration, ``guarantee`` is "certified").

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

import hashlib
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

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
from unlearning.privacy import langevin_accountant as acc
from unlearning.privacy.certificate import Certificate, ReleaseMode
from unlearning.validation import integer_at_least, positive_number

FAMILY = "logistic_regression"
BOUND_NAME = "sglu_w_inf_thm3.11"
BUDGET_UNIT = "deleted_samples"
PAPER_L2_PER_SAMPLE = 1e-6  # lam = 1e-6 * n (App. K.3)
ROW_NORM_QUANTILE = 0.9  # a derived feature bound: this quantile of the training rows' norms
BURN_IN_STEPS = (50_000, 10, 200_000)  # a derived l2 fits its burn-in in min(200k, max(50k, 10 n)) noisy steps
MAX_BURN_IN_STEPS = 1_000_000  # the burn-in refused when max_burn_in_epochs is None: this many noisy steps
_REL_TOL = 1e-9
_NORM_SLACK = 1e-6  # float32 features: a row may exceed the recorded bound by rounding only
_MASK64 = (1 << 64) - 1


# ------------------------------------------------------------------------------------------ the model
@dataclass(frozen=True)
class LogisticProblem:
    """L2-regularised (reference-class multinomial) logistic regression with per-sample clipping.

    The trained parameter is W of shape (C - 1, D + intercept): row k scores class k + 1 against the
    reference class 0. ``feature_bound`` bounds ||[x, 1]|| (or ||x||) over the data universe. With
    ``row_clip`` every row is first scaled onto that bound when it lies outside it (x <- x min(1, B_x/||x||),
    B_x = sqrt(feature_bound^2 - 1) with the intercept, feature_bound without): a fixed row-local map, so
    the algorithm is PNSGD on the clipped rows and every constant holds for them.
    """

    num_classes: int
    num_features: int
    intercept: bool
    l2: float
    clip: float
    feature_bound: float
    row_clip: bool = False

    @property
    def shape(self) -> tuple[int, int]:
        return self.num_classes - 1, self.num_features + int(self.intercept)

    @property
    def curvature(self) -> float:
        """The data Hessian's norm per unit ||x||^2: p(1-p) <= 1/4 (binary), diag(p) - pp^T <= 1/2."""
        return 0.25 if self.num_classes == 2 else 0.5

    @property
    def smoothness(self) -> float:
        """L = curvature * feature_bound^2 + lam (digest 1.3: 1/4 + lam for unit-norm features)."""
        return self.curvature * self.feature_bound**2 + self.l2

    @property
    def natural_gradient_bound(self) -> float:
        """max ||data gradient||: |sigmoid - 1| ||x|| <= B (binary); ||p - e_y|| ||x|| <= sqrt(2) B."""
        return (1.0 if self.num_classes == 2 else math.sqrt(2.0)) * self.feature_bound

    def augment(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1)
        if self.row_clip:
            limit = math.sqrt(max(self.feature_bound**2 - float(self.intercept), 0.0))
            x = x * torch.clamp(limit / x.norm(dim=1, keepdim=True).clamp_min(1e-300), max=1.0)
        if self.intercept:
            x = torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)], dim=1)
        return x

    def residuals(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Clipped per-sample data gradients in factored form: grad_i = r_i (x) x_i, r_i of shape (C-1,),
        r_i = s_i (p_i - e_{y_i}) with p the softmax over [0, W x] without class 0 and
        s_i = min(1, M / ||grad_i||) (Pi_{C_M} of App. K.3, eq. 72)."""
        logits = torch.cat([torch.zeros(x.shape[0], 1, dtype=x.dtype, device=x.device), x @ w.T], dim=1)
        r = torch.softmax(logits, dim=1)[:, 1:] - F.one_hot(y, self.num_classes)[:, 1:]
        norms = r.norm(dim=1) * x.norm(dim=1)
        scale = torch.clamp(self.clip / norms.clamp_min(1e-300), max=1.0)
        return r * scale.unsqueeze(1)

    def data_gradient_sum(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """sum_i clip(grad l_i(W)) over the rows of x (the regulariser not included)."""
        return self.residuals(w, x, y).T @ x

    def objective_gradient(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, normaliser: float) -> torch.Tensor:
        """(1/normaliser) sum_i clip(grad l_i(W)) + lam W."""
        return self.data_gradient_sum(w, x, y) / normaliser + self.l2 * w

    def to_flat(self, w: torch.Tensor) -> torch.Tensor:
        """W (C-1, D+intercept) -> the ``logistic_regression`` family's flat theta (C, D+1)."""
        theta = torch.zeros(self.num_classes, self.num_features + 1, dtype=w.dtype, device=w.device)
        theta[1:, : w.shape[1]] = w
        return theta.reshape(-1)

    def from_flat(self, flat: torch.Tensor) -> torch.Tensor:
        C, D = self.num_classes, self.num_features
        if flat.ndim != 1 or flat.shape[0] != C * (D + 1):
            raise DimensionMismatchError(
                f"weights have shape {tuple(flat.shape)}, a {C}-class logistic regression on {D} features "
                f"needs ({C * (D + 1)},)"
            )
        theta = flat.reshape(C, D + 1)
        return theta[1:, : self.shape[1]].clone()

    def to_dict(self) -> dict[str, Any]:
        return {"num_classes": self.num_classes, "num_features": self.num_features, "intercept": self.intercept,
                "l2": self.l2, "clip": self.clip, "feature_bound": self.feature_bound, "row_clip": self.row_clip}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LogisticProblem:
        return cls(int(d["num_classes"]), int(d["num_features"]), bool(d["intercept"]), float(d["l2"]),
                   float(d["clip"]), float(d["feature_bound"]), bool(d.get("row_clip", False)))


def project(w: torch.Tensor, radius: float) -> torch.Tensor:
    """Pi_{C_R}(w) = w min(1, R/||w||) (Frobenius norm of the whole parameter)."""
    norm = float(w.norm())
    return w * (radius / norm) if norm > radius else w


Batch = tuple[torch.Tensor, torch.Tensor]
"""The features (augmented) and labels of one mini-batch's real samples (possibly none)."""


def pnsgd_epochs(
    w: torch.Tensor,
    batches: Sequence[Batch],
    problem: LogisticProblem,
    *,
    epochs: int,
    eta: float,
    sigma: float,
    radius: float,
    normaliser: int,
    generator: torch.Generator,
    progress: ProgressCallback | None = None,
    phase: str = "training",
) -> torch.Tensor:
    """``epochs`` full epochs of Algorithm 1 from ``w``: batches j = 0..N-1 in order, each step
    W <- Pi_{C_R}(W - eta ((1/b) sum_{B_j} clip grad + lam W) + sqrt(2 eta) sigma xi), xi ~ N(0, I).

    Noise is drawn on the CPU from ``generator`` one epoch at a time (N x shape), so the same seed gives
    the same weights on every device. Empty batches (all slots null) still take the noisy
    regulariser step: the chain is the one the analysis describes.
    """
    scale = math.sqrt(2.0 * eta) * sigma
    shape = (len(batches), *w.shape)
    with small_op_threads(w.device, normaliser * w.numel()):
        for e in range(epochs):
            noise = torch.randn(shape, generator=generator, dtype=w.dtype).to(w.device)
            for j, (xb, yb) in enumerate(batches):
                grad = problem.l2 * w
                if yb.numel():
                    grad = grad + problem.data_gradient_sum(w, xb, yb) / normaliser
                w = project(w - eta * grad + scale * noise[j], radius)
            if progress is not None:
                progress(phase, (e + 1) / epochs)
    return w


SMALL_OP_ELEMENTS = 1 << 22


@contextmanager
def small_op_threads(device: torch.device, elements: int) -> Iterator[None]:
    """Run tiny per-step CPU ops on one intra-op thread, restoring the previous count afterwards.

    Each step touches one mini-batch (b x d elements); at that size torch's thread fork/join costs more
    than the arithmetic, and on a busy machine it is catastrophic: on the shared 2-core box a b = 128
    MNIST fit took 5.6 s with 2 threads and 0.1 s with 1 (the full batch 6.1 s vs 0.6 s). The setting is
    process-wide while the loop runs and only on the CPU; it changes speed, not the algorithm (one
    thread also fixes the floating-point summation order, so small fits reproduce bit for bit whatever
    the caller's thread setting).
    """
    if device.type != "cpu" or elements > SMALL_OP_ELEMENTS or torch.get_num_threads() == 1:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _accuracy(problem: LogisticProblem, w: torch.Tensor, batches: Sequence[Batch], n: int) -> float:
    """Training accuracy of the released weights: argmax over the logits [0, W x]."""
    correct = 0
    for xb, yb in batches:
        if yb.numel():
            logits = torch.cat([torch.zeros(xb.shape[0], 1, dtype=xb.dtype, device=xb.device), xb @ w.T], dim=1)
            correct += int((logits.argmax(dim=1) == yb).sum())
    return correct / n


# ------------------------------------------------------------------------------------------ partition
def _key(partition_seed: int) -> bytes:
    return hashlib.blake2b(f"lethe-langevin-partition:{int(partition_seed)}".encode(), digest_size=32).digest()


def sample_hashes(sample_ids: Sequence[str], partition_seed: int) -> np.ndarray:
    """Keyed 64-bit hashes of sample ids (blake2b keyed with the partition seed), as uint64."""
    key = _key(partition_seed)
    out = np.empty(len(sample_ids), dtype=np.uint64)
    for i, sid in enumerate(sample_ids):
        out[i] = int.from_bytes(hashlib.blake2b(sid.encode(), digest_size=8, key=key).digest(), "little")
    return out


def batch_of(hashes: np.ndarray, num_batches: int) -> np.ndarray:
    """Batch index of each sample: hash mod N (a seeded random partition; bias < N / 2^64)."""
    return (hashes % np.uint64(num_batches)).astype(np.int64)


def id_digest(hashes: np.ndarray) -> int:
    """Order-free digest of a set of samples: the sum of their keyed hashes mod 2^64."""
    return int(hashes.sum(dtype=np.uint64)) & _MASK64


def batch_rows(batch_index: np.ndarray, num_batches: int) -> list[np.ndarray]:
    """Row indices of every batch j = 0..N-1 (rows in dataset order within a batch)."""
    order = np.argsort(batch_index, kind="stable")
    counts = np.bincount(batch_index, minlength=num_batches)
    return np.split(order, np.cumsum(counts)[:-1])


def gather_batches(
    data: Dataset, rows_of_batches: Sequence[np.ndarray], problem: LogisticProblem, device: torch.device
) -> list[Batch]:
    """(features, labels) of every batch on ``device`` in float64, gathered once: rows not named (the
    samples being forgotten) are never copied."""
    features = data.features.reshape(len(data), -1)
    out: list[Batch] = []
    for rows in rows_of_batches:
        x = torch.as_tensor(features[rows], device=device).to(torch.float64)
        out.append((problem.augment(x), torch.as_tensor(data.labels[rows], device=device)))
    return out


# ------------------------------------------------------------------------------------------ helpers
def _derive_seed(seed: int, tag: str) -> int:
    """An independent 63-bit seed for one purpose (partition, noise) from the fit seed."""
    tag_int = int.from_bytes(hashlib.blake2b(tag.encode(), digest_size=4).digest(), "little")
    state = np.random.SeedSequence([int(seed) & _MASK64, tag_int]).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31 | int(state[1]) >> 1) & ((1 << 63) - 1)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(int(seed))


def _row_norms(data: Dataset, intercept: bool) -> np.ndarray:
    sq = np.einsum("ij,ij->i", *(2 * [data.features.reshape(len(data), -1).astype(np.float64)]))
    return np.sqrt(sq + (1.0 if intercept else 0.0))


def derived_feature_bound(norms: np.ndarray, intercept: bool) -> float:
    """The feature bound when ``feature_bound`` is None: B = sqrt(q^2 + intercept), q the
    ``ROW_NORM_QUANTILE`` (0.9) quantile of the rows' norms ||x|| (their maximum when that quantile is 0);
    rows above it are clipped onto it (``LogisticProblem.row_clip``). L = curvature * B^2 + lam sets the step
    size 1/L and the burn-in grows with B^2, so a few rows of large norm must not set B.
    """
    q = float(np.quantile(norms, ROW_NORM_QUANTILE)) if len(norms) else 0.0
    if not q > 0:
        q = float(norms.max()) if len(norms) else 0.0
    if not q > 0:
        raise InvalidDatasetError("every feature vector is zero: nothing to learn from")
    return math.sqrt(q * q + float(intercept))


def burn_in_step_budget(n: int) -> int:
    """S = min(200,000, max(50,000, 10 n)) noisy steps: the burn-in a derived ``l2`` allows (a few seconds
    on one core for a few hundred rows, under a minute at 100,000 rows)."""
    low, per_row, high = BURN_IN_STEPS
    return min(high, max(low, per_row * n))


def derived_l2(
    n: int, data_smoothness: float, clip: float, slots: int, b: int, radius: float, tolerance: float,
    steps: int | None = None,
) -> float:
    """The L2 coefficient when ``l2`` is None: lam = max(1/n, lam_S).

    1/n is scikit-learn's default C = 1 written for the mean loss (mean l_i + lam/2 ||w||^2). lam_S is the
    least lam whose burn-in takes at most S noisy steps (``steps``, default :func:`burn_in_step_budget`),
    N T(lam) <= S with T the epochs of
    :func:`unlearning.privacy.langevin_accountant.epochs_to_converge` at eta = 1/L, L = ``data_smoothness``
    + lam (found by bisection on log lam): the contraction c = 1 - lam/L makes the burn-in about
    (L/lam) ln(2R / (tolerance Z_B)) steps, so a weaker regulariser than lam_S trains for longer than
    S steps. When even one epoch exceeds S steps (N > S), lam_S is the least lam with T = 1.
    """
    def burn_in_steps(lam: float) -> int:
        L = data_smoothness + lam
        const = acc.PNSGDConstants(slots, b, 1.0 / L, lam, clip, radius, L)
        return const.batches * acc.epochs_to_converge(const, tolerance)

    target = max(burn_in_step_budget(n) if steps is None else int(steps), slots // b)
    lam = 1.0 / n
    if burn_in_steps(lam) <= target:
        return lam
    lo, hi = lam, 2.0 * lam
    while burn_in_steps(hi) > target and hi < 1e6 * data_smoothness:
        lo, hi = hi, 2.0 * hi
    for _ in range(30):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if burn_in_steps(mid) <= target else (mid, hi)
    return hi


def _positive(config: Mapping[str, Any], name: str) -> float:
    return positive_number(name, config[name])


def _optional_positive(config: Mapping[str, Any], name: str) -> float | None:
    return None if config.get(name) is None else _positive(config, name)


def _int_at_least(config: Mapping[str, Any], name: str, low: int) -> int:
    return integer_at_least(name, config[name], low)


def constants_from(accounting: Mapping[str, Any]) -> acc.PNSGDConstants:
    """The accountant's constants from a state's accounting (or a certificate's inputs)."""
    return acc.PNSGDConstants(
        n=int(accounting["slots"]),
        b=int(accounting["batch_size"]),
        eta=float(accounting["eta"]),
        m=float(accounting["l2"]),
        M=float(accounting["clip"]),
        R=float(accounting["radius"]),
        L=float(accounting["smoothness"]),
    )


# ------------------------------------------------------------------------------------------ method
class Langevin:
    """The ``langevin`` method; see the module docstring."""

    name: ClassVar[str] = "langevin"
    request_kinds: ClassVar[frozenset[str]] = frozenset({"sample", "owner"})
    needs_training_data: ClassVar[bool] = True

    def hyperparameters(self) -> tuple[HyperParameter, ...]:
        positive: dict[str, Any] = {"minimum": 0, "exclusive_minimum": True}
        return (
            HyperParameter("family", "string", "The model trained: a (multinomial) logistic regression, whose "
                           "strongly convex objective the guarantee needs", choices=(FAMILY,)),
            HyperParameter("batch_size", "integer", "Samples per noisy gradient step (0, or at least the number "
                           "of samples: full batch)", minimum=0),
            HyperParameter("l2", "number", "Strength m of the L2 regularisation", **positive, nullable=True,
                           null_means="derived from the data: max(1/n, the least l2 whose burn-in fits the noisy-step "
                           "budget min(200k, max(50k, 10 n)))"),
            HyperParameter("lr", "number", "Step size eta, at most 1/L (checked when training starts)", **positive,
                           nullable=True, null_means="derived from the data: 1/L, L the smoothness of the objective"),
            HyperParameter("clip_norm", "number", "Per-sample gradient clipping threshold M", **positive,
                           nullable=True, null_means="derived from the data: the largest gradient norm the "
                           "features allow (never clips)"),
            HyperParameter("feature_bound", "number", "Bound on every feature vector's norm (the intercept's 1 "
                           "included); L and M are derived from it", **positive, nullable=True,
                           null_means="derived from the data: the 90% quantile of the rows' norms, rows above it clipped "
                           "onto it"),
            HyperParameter("intercept", "boolean", "Append a constant feature 1 (a bias)"),
            HyperParameter("radius", "number", "Radius R of the ball the iterates are projected onto", **positive),
            HyperParameter("epochs", "integer", "Noisy training epochs (the burn-in T)", minimum=1, nullable=True,
                           null_means="derived from the data: the T with 2R c^(TN) <= burn_in_tolerance x Z_B"),
            HyperParameter("burn_in_tolerance", "number", "How close to the stationary regime the derived burn-in "
                           "gets", **positive),
            HyperParameter("sigma", "number", "Std of the Langevin noise per step", **positive, nullable=True,
                           null_means="derived from the data: the least sigma for which a single-sample request "
                           "needs at most target_epochs noisy epochs at the model's (epsilon, delta)"),
            HyperParameter("target_epochs", "integer", "Noisy epochs per single-sample request a derived sigma is "
                           "calibrated for", minimum=1),
            HyperParameter("pabi", "string", "Privacy amplification by iteration: the paper's c^(2KN) or the "
                           "shift-optimal (tight) form", choices=acc.PABI_VARIANTS),
            HyperParameter("conversion", "string", "RDP to (epsilon, delta) conversion: the paper's (Prop K.2) or "
                           "dp_accounting's (tighter)", choices=acc.CONVERSIONS),
            HyperParameter("max_unlearning_epochs", "integer", "Most noisy epochs one request may take; beyond "
                           "it the model retrains", minimum=1),
            HyperParameter("max_burn_in_epochs", "integer", "Most epochs a derived burn-in may take; a longer "
                           "one is refused when training starts", minimum=1, nullable=True,
                           null_means="at most 1,000,000 noisy steps"),
        )

    def families(self) -> tuple[str, ...]:
        return (FAMILY,)

    def release_modes(self) -> tuple[ReleaseMode, ...]:
        """Both, with the same certified releases: noise is part of training, so an ``audited`` model's
        releases carry the certified guarantee too."""
        return ("certified", "audited")

    def restore_model(self, data: Mapping[str, Any]) -> ModelSpec:
        """``MethodState.model`` from its ``to_dict()``."""
        return ModelSpec.from_dict(dict(data))

    def default_config(self) -> dict[str, Any]:
        """The paper's setting (digest 1.3, 5.2) where it carries over; None means "derive it from the data"
        (the values used are recorded in the accounting):

        - ``batch_size`` 128 (the paper's mini-batch setting; ``0`` or >= n means full batch);
        - ``intercept`` true: a constant feature 1 (a bias, regularised like every weight);
        - ``feature_bound`` None: :func:`derived_feature_bound`, the 90% quantile of the rows' norms (with the
          intercept's 1), rows above it clipped onto it; a given bound must hold for every row instead;
        - ``l2`` None: :func:`derived_l2`, lam = max(1/n, the least lam whose burn-in fits
          :func:`burn_in_step_budget` noisy steps); ``lr`` None: eta = 1/L;
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

    def check_config(self, config: Mapping[str, Any]) -> None:
        """What ``fit`` checks without the data; the feature bound, lr <= 1/L and the burn-in length
        depend on the rows and are checked when training starts."""
        merged = {**self.default_config(), **dict(config)}
        self._check_choices(merged)
        for name in ("feature_bound", "l2", "lr", "clip_norm", "sigma"):
            _optional_positive(merged, name)
        for name in ("radius", "burn_in_tolerance"):
            _positive(merged, name)
        for name in ("target_epochs", "max_unlearning_epochs"):
            _int_at_least(merged, name, 1)
        for name in ("epochs", "max_burn_in_epochs"):
            if merged[name] is not None:
                _int_at_least(merged, name, 1)
        self._num_batches(1, merged)

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
        merged = {**self.default_config(), **dict(config)}
        partition_seed, noise_seed = _derive_seed(seed, "partition"), _derive_seed(seed, "noise")
        hashes = sample_hashes(dataset.sample_ids, partition_seed)
        num_batches = self._num_batches(len(dataset), merged)
        assignment = batch_of(hashes, num_batches)
        b = int(np.bincount(assignment, minlength=num_batches).max())
        problem = self._problem(dataset, merged, num_batches * b, b)
        eta = self._step_size(problem, merged)
        const = acc.PNSGDConstants(num_batches * b, b, eta, problem.l2, problem.clip,
                                   _positive(merged, "radius"), problem.smoothness)
        T = self._burn_in(const, merged)
        gap = acc.stationarity_gap(const, T)
        sigma, sigma_source = self._sigma(const, merged, privacy, policy, gap)

        device = default_device()
        batches = gather_batches(dataset, batch_rows(assignment, num_batches), problem, device)
        gen = _generator(noise_seed)
        # w0 ~ N(0, 2 sigma^2 / m I) (App. K.3), projected onto C_R so that nu_0 lives on C_R.
        w0 = torch.randn(problem.shape, generator=gen, dtype=torch.float64) * math.sqrt(2.0 * sigma**2 / problem.l2)
        radius = float(merged["radius"])
        w = project(w0.to(device), radius)
        w = pnsgd_epochs(w, batches, problem, epochs=T, eta=eta,
                         sigma=sigma, radius=radius, normaliser=b, generator=gen, progress=progress)
        weights = problem.to_flat(w).cpu()
        train_accuracy = _accuracy(problem, w, batches, len(dataset))
        accounting: dict[str, Any] = {
            **problem.to_dict(),
            "slots": const.n,
            "batch_size": b,
            "batches": num_batches,
            "requested_batch_size": merged["batch_size"],
            "eta": eta,
            "smoothness": problem.smoothness,
            "radius": const.R,
            "sigma": sigma,
            "sigma_source": sigma_source,
            "pabi": merged["pabi"],
            "conversion": merged["conversion"],
            "max_unlearning_epochs": _int_at_least(merged, "max_unlearning_epochs", 1),
            "burn_in_epochs": T,
            "stationarity_gap": gap,
            "z_out": gap,
            "deleted_count": 0,
            "train_size": len(dataset),
            "requests": 0,
            "unlearning_epochs_total": 0,
            "gradient_evaluations_fit": T * len(dataset),
            "gradient_evaluations_unlearning": 0,
            "partition_seed": partition_seed,
            "training_seed": noise_seed,
            "live_digest": format(id_digest(hashes), "016x"),
            "seconds_fit": time.perf_counter() - started,
            "train_accuracy": train_accuracy,
        }
        state = MethodState(
            method=self.name,
            model=ModelSpec(FAMILY, (problem.num_features,), problem.num_classes),
            clean_weights=weights,
            released_weights=weights.clone(),
            statistics=None,
            accounting=accounting,
        )
        if progress:
            progress("done", 1.0)
        return state, self._fit_certificate(state, privacy, policy)

    @staticmethod
    def _check_choices(config: Mapping[str, Any]) -> None:
        if config.get("family", FAMILY) != FAMILY:
            raise InvalidConfigError(
                f"the langevin method trains family {FAMILY!r} only (its guarantee needs a strongly convex "
                f"objective), not {config.get('family')!r}"
            )
        for name in ("pabi", "conversion"):
            choices = acc.PABI_VARIANTS if name == "pabi" else acc.CONVERSIONS
            if config[name] not in choices:
                raise InvalidConfigError(f"{name} must be one of {choices}, got {config[name]!r}")
        if not isinstance(config["intercept"], bool):
            raise InvalidConfigError(f"intercept must be true or false, got {config['intercept']!r}")

    def _problem(self, dataset: Dataset, config: Mapping[str, Any], slots: int, b: int) -> LogisticProblem:
        """The problem of ``config`` on ``dataset``, its None values derived from the data: the feature
        bound by :func:`derived_feature_bound` (rows outside it are clipped onto it), ``l2`` by
        :func:`derived_l2` for the partition of ``slots`` slots in batches of ``b``."""
        self._check_choices(config)
        intercept = config["intercept"]
        norms = _row_norms(dataset, intercept)
        bound = _optional_positive(config, "feature_bound")
        row_clip = bound is None
        if bound is None:
            bound = derived_feature_bound(_row_norms(dataset, False), intercept)
        elif norms.max() > bound * (1 + _NORM_SLACK):
            row = int(np.argmax(norms))
            raise InvalidDatasetError(
                f"sample {dataset.sample_ids[row]!r} has feature norm {norms[row]:.6g} above feature_bound "
                f"{bound}: normalise the features or raise the bound (L and M are derived from it)"
            )
        C = dataset.num_classes
        natural = (1.0 if C == 2 else math.sqrt(2.0)) * bound
        clip = _optional_positive(config, "clip_norm") or natural
        if C > 2 and clip < natural * (1 - 1e-12):
            raise InvalidConfigError(
                f"clip_norm {clip} would clip multinomial gradients (their bound is sqrt(2) * feature_bound = "
                f"{natural:.6g}); a clipped multinomial gradient is not the gradient of a convex loss, so the "
                "guarantee would not hold: leave clip_norm unset or use two classes"
            )
        problem = LogisticProblem(C, dataset.num_features, intercept, 0.0, clip, bound, row_clip)
        l2 = _optional_positive(config, "l2")
        if l2 is None:
            l2 = derived_l2(len(dataset), problem.smoothness, clip, slots, b, _positive(config, "radius"),
                            _positive(config, "burn_in_tolerance"))
        return replace(problem, l2=l2)

    @staticmethod
    def _num_batches(n: int, config: Mapping[str, Any]) -> int:
        b = config["batch_size"]
        if isinstance(b, bool) or not isinstance(b, int) or b < 0:
            raise InvalidConfigError(f"batch_size must be an integer >= 1 (0 for full batch), got {b!r}")
        return 1 if b == 0 or b >= n else math.ceil(n / b)

    @staticmethod
    def _step_size(problem: LogisticProblem, config: Mapping[str, Any]) -> float:
        limit = 1.0 / problem.smoothness
        eta = _optional_positive(config, "lr")
        if eta is None:
            return limit
        if eta > limit * (1 + 1e-12):
            raise InvalidConfigError(
                f"lr {eta} exceeds 1/L = {limit:.6g} (L = {problem.smoothness:.6g} = curvature * feature_bound^2 "
                "+ l2): PNSGD contracts, and the guarantee holds, only for lr <= 1/L"
            )
        return eta

    @staticmethod
    def _burn_in(const: acc.PNSGDConstants, config: Mapping[str, Any]) -> int:
        if config.get("epochs") is not None:
            return _int_at_least(config, "epochs", 1)
        epochs = acc.epochs_to_converge(const, _positive(config, "burn_in_tolerance"))
        if config.get("max_burn_in_epochs") is None:
            cap = math.ceil(MAX_BURN_IN_STEPS / const.batches)
        else:
            cap = _int_at_least(config, "max_burn_in_epochs", 1)
        if epochs > cap:
            # A weakly regularised small dataset contracts so slowly that the burn-in runs for hours;
            # refuse up front instead of training silently that long.
            raise InvalidConfigError(
                f"reaching the stationary regime needs {epochs} noisy epochs (more than max_burn_in_epochs "
                f"{cap}): raise l2 (now {const.m:g}), raise burn_in_tolerance, or set epochs explicitly"
            )
        return epochs

    @staticmethod
    def _sigma(
        const: acc.PNSGDConstants, config: Mapping[str, Any], privacy: PrivacyTarget,
        policy: BudgetPolicy | None, gap: float,
    ) -> tuple[float, str]:
        max_sigma = policy.max_sigma if policy is not None else None
        sigma = _optional_positive(config, "sigma")
        if sigma is not None:
            if max_sigma is not None and sigma > max_sigma:
                raise InvalidConfigError(f"sigma {sigma} exceeds the budget policy's max_sigma {max_sigma}")
            return sigma, "config"
        K = _int_at_least(config, "target_epochs", 1)
        sigma = acc.steady_state_sigma(const, privacy.epsilon, privacy.delta, K, gap, config["pabi"],
                                       config["conversion"])
        if max_sigma is not None and sigma > max_sigma:
            return float(max_sigma), f"policy_max_sigma (steady state for {K} epochs needs {sigma:.6g})"
        return sigma, f"steady_state_{K}_epochs"

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
        account = state.accounting
        problem = LogisticProblem.from_dict(account)
        self._check_remaining(remaining, problem, account)
        forgotten = self._resolve(state, request, remaining)
        hashes = self._live_hashes(remaining, account)
        const = constants_from(account)
        charge = acc.charge_request(const, float(account["sigma"]), float(account["z_out"]), len(forgotten),
                                    privacy.epsilon, privacy.delta, account["pabi"], account["conversion"],
                                    int(account["max_unlearning_epochs"]))
        drop = np.zeros(len(remaining), dtype=bool)
        drop[remaining.indices_of(forgotten)] = True
        keep = np.flatnonzero(~drop)
        w = self._unlearn(state, problem, const, remaining, keep, hashes[keep], charge.epochs, noise_seed)
        weights = problem.to_flat(w).cpu()
        new_account = {
            **account,
            "deleted_count": int(account["deleted_count"]) + len(forgotten),
            "z_out": charge.z_out,
            "requests": int(account["requests"]) + 1,
            "unlearning_epochs_total": int(account["unlearning_epochs_total"]) + charge.epochs,
            "gradient_evaluations_unlearning": int(account["gradient_evaluations_unlearning"]) + charge.epochs * len(keep),
            "live_digest": format(id_digest(hashes[keep]), "016x"),
        }
        new_state = replace(state, clean_weights=weights, released_weights=weights.clone(), accounting=new_account,
                            deleted_ids=_with_deleted(state.deleted_ids, forgotten))
        cert = self._forget_certificate(new_state, privacy, policy, charge, account, noise_seed,
                                        gradients=charge.epochs * len(keep), seconds=time.perf_counter() - started)
        return ForgetOutcome(state=new_state, certificate=cert, forgotten_ids=tuple(forgotten))

    @staticmethod
    def _live_hashes(remaining: Dataset, account: Mapping[str, Any]) -> np.ndarray:
        """Keyed hashes of ``remaining``'s ids, checked against the digest of the samples the model holds."""
        hashes = sample_hashes(remaining.sample_ids, int(account["partition_seed"]))
        if format(id_digest(hashes), "016x") != account["live_digest"]:
            raise InvalidConfigError(
                "remaining is not this model's training data minus the samples it forgot (sample ids differ): "
                "pass every sample not yet forgotten, including the ones this request names"
            )
        return hashes

    @staticmethod
    def _unlearn(
        state: MethodState, problem: LogisticProblem, const: acc.PNSGDConstants, remaining: Dataset,
        keep: np.ndarray, keep_hashes: np.ndarray, epochs: int, noise_seed: int,
    ) -> torch.Tensor:
        """K epochs of the training chain (same partition, same order) on the kept rows of ``remaining``
        from the current weights; the forgotten rows are never read (their slots are null)."""
        device = default_device()
        rows = [keep[r] for r in batch_rows(batch_of(keep_hashes, const.batches), const.batches)]
        if max(len(r) for r in rows) > const.b:
            raise InvalidConfigError("remaining holds more samples in one batch than at training: it is not "
                                     "this model's training data")
        w = problem.from_flat(state.released_weights.to(torch.float64)).to(device)
        return pnsgd_epochs(w, gather_batches(remaining, rows, problem, device), problem, epochs=epochs,
                            eta=const.eta, sigma=float(state.accounting["sigma"]), radius=float(const.R or math.inf),
                            normaliser=const.b, generator=_generator(noise_seed))

    @staticmethod
    def _check_remaining(remaining: Dataset, problem: LogisticProblem, account: Mapping[str, Any]) -> None:
        if remaining.num_features != problem.num_features or remaining.num_classes != problem.num_classes:
            raise DimensionMismatchError(
                f"remaining has {remaining.num_features} features and {remaining.num_classes} classes, the model "
                f"was trained on {problem.num_features} features and {problem.num_classes} classes"
            )
        expected = int(account["train_size"]) - int(account["deleted_count"])
        if len(remaining) != expected:
            raise InvalidConfigError(
                f"remaining holds {len(remaining)} samples, the model still holds {expected}: pass every sample "
                "not yet forgotten, including the ones this request names"
            )
        norms = _row_norms(remaining, problem.intercept)
        if not problem.row_clip and norms.max() > problem.feature_bound * (1 + _NORM_SLACK):
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
        n = int(state.accounting["train_size"])
        caps = [float(n)]
        if policy.max_deletions is not None:
            caps.append(float(policy.max_deletions))
        if policy.max_deletion_fraction is not None:
            caps.append(float(math.floor(policy.max_deletion_fraction * n)))
        return min(caps)

    def must_retrain(
        self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget, pending_deletions: int = 0
    ) -> str | None:
        account = state.accounting
        after = int(account["deleted_count"]) + pending_deletions
        cap = self.budget_cap(state, policy, privacy)
        if after > cap:
            return (f"forgetting {pending_deletions} more sample(s) would bring this budget epoch to {after} "
                    f"deletions, above its cap of {int(cap)}")
        if pending_deletions < 1:
            return None
        const = constants_from(account)
        try:
            charge = acc.charge_request(const, float(account["sigma"]), float(account["z_out"]), pending_deletions,
                                        privacy.epsilon, privacy.delta, account["pabi"], account["conversion"],
                                        int(account["max_unlearning_epochs"]))
        except InvalidConfigError as exc:
            return f"the next update cannot reach the privacy target: {exc}"
        T = int(account["burn_in_epochs"])
        if charge.epochs >= T:
            return (f"forgetting {pending_deletions} sample(s) needs {charge.epochs} noisy epochs, no fewer than the "
                    f"{T} epochs of retraining from scratch")
        if charge.z_in >= const.cap:
            return "the W_inf bound reached the diameter 2R of the parameter ball: unlearning has no advantage left"
        return None

    # ------------------------------------------------------------------------------ certificates
    @staticmethod
    def _constant_inputs(account: Mapping[str, Any]) -> dict[str, Any]:
        keys = ("slots", "batch_size", "batches", "eta", "l2", "clip", "radius", "smoothness", "feature_bound",
                "num_classes", "intercept", "sigma", "sigma_source", "pabi", "conversion", "burn_in_epochs",
                "stationarity_gap", "max_unlearning_epochs", "partition_seed", "training_seed")
        return {k: account[k] for k in keys}

    def _fit_certificate(self, state: MethodState, privacy: PrivacyTarget, policy: BudgetPolicy | None) -> Certificate:
        account = state.accounting
        return Certificate(
            method=self.name,
            release_mode=privacy.release_mode,
            guarantee="exact",
            epsilon=0.0,
            delta=0.0,
            bound_name=BOUND_NAME,
            bound=float(account["z_out"]),
            sigma=float(account["sigma"]),
            calibration="none",
            cumulative_deletions=0,
            budget_unit=BUDGET_UNIT,
            budget_cap=self.budget_cap(state, policy, privacy) if policy else float(account["train_size"]),
            budget_spent=0.0,
            charge=0.0,
            noise_seed=int(account["training_seed"]),
            inputs={**self._constant_inputs(account), "z_out": account["z_out"], "target_epsilon": privacy.epsilon,
                    "target_delta": privacy.delta},
            measured={"gradient_evaluations": float(account["gradient_evaluations_fit"]),
                      "seconds": float(account["seconds_fit"]), "train_accuracy": float(account["train_accuracy"])},
            notes=(
                f"Trained by projected noisy SGD for {account['burn_in_epochs']} epochs: an exact run of the learning "
                "algorithm on this data. 'bound' is the W_inf distance (Lemma 3.6) between this model's law and the "
                "stationary law, the starting Z of the sequential accounting."
            ),
        )

    def _forget_certificate(
        self, state: MethodState, privacy: PrivacyTarget, policy: BudgetPolicy | None, charge: acc.RequestCharge,
        before: Mapping[str, Any], noise_seed: int, *, gradients: int, seconds: float,
    ) -> Certificate:
        account = state.accounting
        m = int(account["deleted_count"])
        inputs = {
            **self._constant_inputs(account),
            "z_prev": float(before["z_out"]),
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
            method=self.name,
            release_mode=privacy.release_mode,
            guarantee="certified",
            epsilon=charge.loss.epsilon,
            delta=privacy.delta,
            bound_name=BOUND_NAME,
            bound=charge.z_in,
            sigma=float(account["sigma"]),
            calibration="none",
            cumulative_deletions=m,
            budget_unit=BUDGET_UNIT,
            budget_cap=self.budget_cap(state, policy, privacy) if policy else float(account["train_size"]),
            budget_spent=float(m),
            charge=float(charge.size),
            noise_seed=int(noise_seed),
            inputs=inputs,
            measured={"gradient_evaluations": float(gradients), "seconds": seconds},
            notes=(
                f"({charge.loss.epsilon:.4g}, {privacy.delta:.3g})-unlearning of {charge.size} sample(s) with respect "
                f"to the stationary law of noisy SGD on the remaining data: {charge.epochs} noisy epoch(s) from "
                f"W_inf distance Z = {charge.z_in:.6g} (Thm 3.11 recursion, {account['pabi']} PABI, Renyi order "
                f"{charge.loss.alpha:.4g}, {account['conversion']} conversion)."
                + (" The model was registered in audited mode; Langevin releases are noisy by construction, so "
                   "the certified guarantee holds all the same." if audited else "")
            ),
        )

    def verify_certificate(self, certificate: Certificate) -> list[str]:
        """Recompute the accountant's figures from the certificate's inputs and list any discrepancy."""
        problems: list[str] = []
        inputs = certificate.inputs
        try:
            const = constants_from(inputs)
        except InvalidConfigError as exc:
            return [f"the recorded constants are invalid: {exc}"]
        except KeyError as exc:
            return [f"the certificate lacks input {exc}"]
        problem = LogisticProblem(int(inputs["num_classes"]), 1, bool(inputs["intercept"]), float(inputs["l2"]),
                                  float(inputs["clip"]), float(inputs["feature_bound"]))
        if not math.isclose(problem.smoothness, const.L or 0.0, rel_tol=_REL_TOL):
            problems.append(f"L recomputes to {problem.smoothness} from the feature bound, certificate says {const.L}")
        gap = acc.stationarity_gap(const, int(inputs["burn_in_epochs"]))
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
            charge = acc.charge_request(const, float(inputs["sigma"]), float(inputs["z_prev"]),
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


def _with_deleted(deleted: Any, forgotten: Sequence[str]) -> Any:
    """A plain set of forgotten ids grows (library use: a repeat request then says "already forgotten");
    any other set type is the service's own bookkeeping (keyed hashes), which the service updates."""
    return deleted | set(forgotten) if type(deleted) is set else deleted


def _close(problems: list[str], what: str, expected: float, recorded: float) -> None:
    if not math.isclose(expected, recorded, rel_tol=_REL_TOL, abs_tol=1e-300):
        problems.append(f"{what} recomputes to {expected}, certificate says {recorded}")


register(Langevin())
