"""Mini-Unlearning (Huang et al., paper 004; digest 004): the ``mini_unlearning`` method.

The unlearned model is the trained one plus a linearised replay of the last k SGD steps without the
deleted samples (Eq. 10, Horner form of digest section 2.9):

    Delta <- 0
    for l = T-k+1 .. T:                                   (ascending)
        Delta <- G(l) + H(l) Delta
    w* = w_T + Delta

    G(l) = eta_l (D_l(w_{l-1}) - D^R_l(w_{l-1}))          (Eq. 7)
    H(l) = I - eta_l J^R_l(w_{l-1})                       (Eq. 8)

where D_l is the step direction training applied at step l (the mean gradient over the recorded batch
B_l, of size B), D^R_l the same map over the retained part B_l \\ D_U normalised by B - dB_l (Eq. 2, the
retraining counterfactual), and J^R_l = dD^R_l/dw, i.e. (1/(B - dB_l)) times the sum of the retained
samples' Hessians. Unrolled, this is exactly Eq. 10:

    Delta = G(T) + sum_{j=2..k} H(T) H(T-1) ... H(T-j+2) G(T-j+1)

with k G-terms and k-1 Hessian-vector products. Notes on where we depart from the printed paper:

- Sign: Eq. 6 / 13 print "- (eta/B) sum_U grad"; the sign is "+" (digest 2.1), which is what
  G = eta (D - D^R) gives. We write G in this "retained step minus full step" form (digest 2.2, equal to
  Eq. 7 to rounding; the unit test checks it against Eq. 7's first form) because D_l is recorded at
  training time, so a request needs only the RETAINED samples of the window: samples forgotten by
  earlier requests, whose data the service has erased, are never needed again.
- The printed Algorithms 1 and 3 have index and ordering bugs (digest 2.4, 2.5); we implement Eq. 10.
- A batch whose samples are all deleted is skipped by the retrain, so G(l) = eta D_l and H(l) = I
  (digest 2.2; the paper divides by zero there).
- Hessian-vector products are exact (``hvp: "exact"``, the Jacobian-vector product of the step map,
  closed form for logistic regression) or the corrected L-BFGS approximation of Algorithm 4
  (``hvp: "lbfgs"``, :mod:`unlearning.lbfgs`) with secant pairs of the SAME function phi_l (the
  retained part of batch l) at the m snapshots before w_{l-1}: the literal reading, a different batch
  per snapshot, breaks the secant condition and can move the model away from the retrain (digest 2.6).
- Sequential requests (digest 6.4, option (a)): every request recomputes Eq. 10 on the ORIGINAL recorded
  trajectory with the cumulative deleted set of the budget epoch, so forgetting A then B equals
  forgetting A and B at once. The recorded window (snapshots and step directions) still carries the
  deleted samples' influence until the next retrain; forgotten sample ids are scrubbed from it.

What is recorded at training time (digest 1.3 / 6.1, stored in ``MethodState.artifacts``): the last
K = k + m + 1 iterates w_{T-k-m} .. w_T ("snapshots"), the batch rows of the K - 1 steps between them
("batch_rows", positions in the training set, reproducible from the schedule seed in ``accounting``),
the sample ids of the k window batches ("window_sample_ids"), and the step directions D_l and step
sizes of the window ("directions", "step_sizes"). No feature or label is kept.

Guarantee: none. There is no (epsilon, delta) (epsilon is infinite) and no noise; Theorem 1 only bounds
the truncation error of the linearised recursion by r^k ||Delta w_{T-k}||, which is vacuous at the
paper's step size (digest 2.3). Only deleted samples that fall in the window's k batches change G
directly; each certificate records how many did. The budget is a largest deletion ratio per epoch,
after which the service retrains.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, MutableSet, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from unlearning.data import Dataset
from unlearning.device import default_device
from unlearning.errors import (
    AlreadyDeletedError,
    DimensionMismatchError,
    InvalidConfigError,
    InvalidDatasetError,
    UnknownSampleError,
)
from unlearning.lbfgs import CompactLBFGS, secant_pairs
from unlearning.methods.hessian_free import check_sgd_config, model_spec_for, sgd_config, sgd_hyperparameters
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
from unlearning.models import ModelSpec, build_model
from unlearning.models.families import family_names
from unlearning.models.flat import FlatModel
from unlearning.privacy.certificate import Certificate, ReleaseMode
from unlearning.sgd_defaults import SGDRule, resolve_sgd
from unlearning.steps import SGDConfig, StepMap, make_step_map, sgd_direction
from unlearning.training import BatchSchedule, dataset_tensors
from unlearning.validation import integer_at_least

HvpMode = Literal["exact", "lbfgs"]
HVP_MODES: tuple[str, ...] = ("exact", "lbfgs")
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64}
BOUND_NAME = "none"
ARTIFACTS = ("snapshots", "batch_rows", "window_sample_ids", "directions", "step_sizes")
_PAD = -1  # batch_rows padding for a batch smaller than the largest one
# The data-derived SGD defaults (unlearning.sgd_defaults): batch min(256, n), at least 2000 steps within
# 1000 epochs, lr 4 / mean ||[x, 1]||^2 (constant: lr_decay stays 1).
SGD_RULE = SGDRule(batch_size=256, min_steps=2000, max_epochs=1000, lr_scale=4.0)


# ------------------------------------------------------------------------------------------ config
@dataclass(frozen=True)
class WindowConfig:
    """k (window length), m (L-BFGS memory), how Hessian-vector products are taken, and the dtype."""

    k: int
    m: int
    hvp: HvpMode
    dtype: torch.dtype

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> WindowConfig:
        k, m, hvp, dtype = config["k"], config["m"], config["hvp"], config["dtype"]
        integer_at_least("k (the number of replayed steps)", k, 1)
        integer_at_least("m (the L-BFGS memory)", m, 1)
        if hvp not in HVP_MODES:
            raise InvalidConfigError(f"hvp must be one of {list(HVP_MODES)}, got {hvp!r}")
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise InvalidConfigError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        return cls(k=k, m=m, hvp=hvp, dtype=DTYPES[dtype])


def _check_fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < float(value) <= 1:
        raise InvalidConfigError(f"max_deletion_fraction must lie in (0, 1], got {value!r}")
    return float(value)


# ---------------------------------------------------------------------------------------- training
@dataclass
class TrajectoryWindow:
    """The recorded tail of one plain-SGD run (digest 004, sections 1.3 and 6.1).

    ``snapshots`` (K, d) are w_{T-K+1} .. w_T; step ``i`` of the K - 1 recorded steps took
    snapshots[i] to snapshots[i+1] with batch ``batch_rows[i]`` (row positions, -1 padded). The last
    ``k`` steps form the replay window: ``window_ids[j]``, ``directions[j]`` (the applied D_l) and
    ``step_sizes[j]`` belong to recorded step K - 1 - k + j.
    """

    schedule: BatchSchedule
    initial_weights: torch.Tensor
    snapshots: torch.Tensor
    batch_rows: torch.Tensor
    window_ids: list[list[str]]
    directions: torch.Tensor
    step_sizes: torch.Tensor
    seconds: float = 0.0

    @property
    def k(self) -> int:
        return int(self.directions.shape[0])

    @property
    def weights(self) -> torch.Tensor:
        return self.snapshots[-1]


def _check_data(model: FlatModel, data: Dataset) -> None:
    if data.num_features != math.prod(model.spec.input_shape):
        raise DimensionMismatchError(
            f"dataset features have shape {data.feature_shape}, the model expects "
            f"{tuple(model.spec.input_shape)}"
        )
    if data.num_classes != model.spec.num_classes:
        raise DimensionMismatchError(
            f"dataset has {data.num_classes} classes, the model was built for {model.spec.num_classes}"
        )


def _pad_rows(batches: Sequence[np.ndarray]) -> torch.Tensor:
    width = max(len(b) for b in batches)
    out = np.full((len(batches), width), _PAD, dtype=np.int64)
    for i, b in enumerate(batches):
        out[i, : len(b)] = b
    return torch.from_numpy(out)


def train_with_window(
    model: FlatModel,
    data: Dataset,
    cfg: SGDConfig,
    seed: int,
    *,
    k: int,
    m: int,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    progress: ProgressCallback | None = None,
) -> TrajectoryWindow:
    """Plain mini-batch SGD (Eq. 3) on the schedule of ``seed``, recording the last k + m + 1 iterates.

    w_0 = ``model.initial_weights(seed)``; step t uses ``BatchSchedule.from_seed(n, B, epochs, seed)``
    and applies w <- w - eta_t D_t(w) with D_t from :func:`unlearning.steps.sgd_direction` (the same map
    the request-time replay differentiates). With T < k + m steps the whole trajectory is recorded.
    """
    _check_data(model, data)
    device = device or torch.device("cpu")
    model.to(device, dtype)
    x_all, y_all = dataset_tensors(data, device, dtype)
    schedule = BatchSchedule.from_seed(len(data), cfg.batch_size, cfg.epochs, seed)
    steps = schedule.steps
    k_eff = min(k, steps)
    first_recorded = steps - min(k + m, steps)  # index t of the first recorded step
    w0 = model.initial_weights(seed, dtype).to(device)
    w = w0.clone()
    snapshots: list[torch.Tensor] = []
    directions: list[torch.Tensor] = []
    etas: list[float] = []
    started = time.perf_counter()
    for t, batch in enumerate(schedule.batches):
        eta = cfg.step_size(t)
        idx = torch.as_tensor(batch, device=device)
        direction = sgd_direction(model, w, x_all[idx], y_all[idx], cfg, len(batch))
        if t >= first_recorded:
            snapshots.append(w.clone())
        if t >= steps - k_eff:
            directions.append(direction.clone())
            etas.append(eta)
        w = w - eta * direction
        if progress is not None and (t % 50 == 0 or t == steps - 1):
            progress("training", (t + 1) / steps)
    snapshots.append(w)
    recorded = schedule.batches[first_recorded:]
    return TrajectoryWindow(
        schedule=schedule,
        initial_weights=w0,
        snapshots=torch.stack(snapshots),
        batch_rows=_pad_rows(recorded),
        window_ids=[[data.sample_ids[i] for i in b] for b in schedule.batches[steps - k_eff :]],
        directions=torch.stack(directions),
        step_sizes=torch.tensor(etas, dtype=torch.float64),
        seconds=time.perf_counter() - started,
    )


def exact_replay(
    model: FlatModel,
    data: Dataset,
    cfg: SGDConfig,
    seed: int,
    deleted_ids: Sequence[str],
    *,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The retraining counterfactual of Eq. 2 that Eq. 10 approximates (the exact reference).

    Same w_0 and batch schedule as :func:`train_with_window` with ``seed`` on ``data`` (the training set
    of the budget epoch), the deleted samples dropped from every batch, each batch renormalised by its
    retained count B - dB_l, and a batch with nothing left skipped. (This differs from
    :func:`unlearning.training.replay_retrain`, which keeps the recorded normaliser B as the Hessian-free
    paper's Eq. 5 does.)
    """
    _check_data(model, data)
    device = device or torch.device("cpu")
    model.to(device, dtype)
    x_all, y_all = dataset_tensors(data, device, dtype)
    keep = np.ones(len(data), dtype=bool)
    keep[data.indices_of(deleted_ids)] = False
    schedule = BatchSchedule.from_seed(len(data), cfg.batch_size, cfg.epochs, seed)
    w = model.initial_weights(seed, dtype).to(device)
    for t, batch in enumerate(schedule.batches):
        kept = batch[keep[batch]]
        if len(kept):
            idx = torch.as_tensor(kept, device=device)
            w = w - cfg.step_size(t) * sgd_direction(model, w, x_all[idx], y_all[idx], cfg, len(kept))
    return w


# ------------------------------------------------------------------------------ sample id storage
def _encode_ids(batches: Sequence[Sequence[str]]) -> torch.Tensor:
    """(k, b_max, L) uint8: UTF-8 sample ids, zero padded (an all-zero entry is padding or scrubbed)."""
    encoded = [[s.encode("utf-8") for s in b] for b in batches]
    length = max(1, max((len(s) for b in encoded for s in b), default=1))
    width = max(len(b) for b in encoded)
    out = np.zeros((len(encoded), width), dtype=f"S{length}")
    for i, b in enumerate(encoded):
        out[i, : len(b)] = b
    return torch.from_numpy(out.view(np.uint8).reshape(len(encoded), width, length).copy())


def _decode_ids(table: torch.Tensor) -> list[list[str]]:
    k, width, length = table.shape
    raw = np.ascontiguousarray(table.numpy()).reshape(k * width, length).view(f"S{length}").reshape(k, width)
    return [[s.decode("utf-8") for s in row] for row in raw]


# -------------------------------------------------------------------------------------- the state
def state_from_window(
    dataset: Dataset, spec: ModelSpec, window: TrajectoryWindow, config: Mapping[str, Any], seed: int
) -> MethodState:
    """The method state after training: clean = released = w_T, the window in ``artifacts``."""
    wc = WindowConfig.from_config(config)
    weights = window.weights.detach().cpu()
    accounting: dict[str, Any] = {
        "deleted_count": 0,
        "train_size": len(dataset),
        "config": dict(config),
        "training_seed": seed,
        "schedule_seed": window.schedule.seed,
        "total_steps": window.schedule.steps,
        "batch_size": window.schedule.batch_size,
        "k": window.k,
        "m": wc.m,
        "hvp": wc.hvp,
        "snapshots": int(window.snapshots.shape[0]),
        "first_window_step": window.schedule.steps - window.k + 1,
        "window_deleted_cumulative": 0,
        "seconds_fit": window.seconds,
    }
    return MethodState(
        method=MiniUnlearning.name,
        model=spec,
        clean_weights=weights,
        released_weights=weights.clone(),
        statistics=None,
        accounting=accounting,
        artifacts={
            "snapshots": window.snapshots.detach().cpu(),
            "batch_rows": window.batch_rows.cpu(),
            "window_sample_ids": _encode_ids(window.window_ids),
            "directions": window.directions.detach().cpu(),
            "step_sizes": window.step_sizes.cpu(),
        },
    )


@dataclass(frozen=True)
class RecordedWindow:
    """The recorded window of a state (its ``artifacts``), checked for presence and consistent shapes."""

    snapshots: torch.Tensor
    batch_rows: torch.Tensor
    ids: torch.Tensor
    directions: torch.Tensor
    step_sizes: torch.Tensor

    @classmethod
    def of(cls, state: MethodState) -> RecordedWindow:
        missing = [name for name in ARTIFACTS if name not in state.artifacts]
        if missing:
            raise InvalidConfigError(
                f"this state lacks the recorded trajectory window {missing}: store MethodState.artifacts "
                "with the model version, or retrain the model"
            )
        a = state.artifacts
        win = cls(a["snapshots"], a["batch_rows"], a["window_sample_ids"], a["directions"], a["step_sizes"])
        k, d = win.directions.shape
        steps = win.snapshots.shape[0] - 1
        if win.snapshots.shape[1] != state.clean_weights.shape[0] or d != state.clean_weights.shape[0]:
            raise DimensionMismatchError(
                f"recorded snapshots have dimension {win.snapshots.shape[1]}, the model "
                f"{state.clean_weights.shape[0]}"
            )
        if not (k <= steps and win.batch_rows.shape[0] == steps and win.ids.shape[0] == k
                and win.step_sizes.shape == (k,)):
            raise InvalidConfigError(
                "the recorded trajectory window is inconsistent (artifact shapes disagree): retrain the model"
            )
        return win

    @property
    def k(self) -> int:
        return int(self.directions.shape[0])

    @property
    def history(self) -> int:
        """Index in ``snapshots`` of w_{T-k}, the input of the first window step."""
        return int(self.snapshots.shape[0]) - 1 - self.k


# ---------------------------------------------------------------------------------- request logic
def _resolve_request(
    request: ForgetRequest, remaining: Dataset, deleted: MutableSet[str] | set[str]
) -> list[str]:
    """The sample ids this request forgets: the named owners' remaining samples, then the named samples."""
    if len(set(request.sample_ids)) != len(request.sample_ids):
        raise AlreadyDeletedError("the request names the same sample id twice: name each sample once")
    for sid in request.sample_ids:
        if sid in deleted:
            raise AlreadyDeletedError(f"sample {sid!r} was already forgotten in this budget epoch")
        if not remaining.contains(sid):
            raise UnknownSampleError(f"sample {sid!r} is not in the model's remaining training data")
    owners = list(dict.fromkeys(request.owner_ids))
    out: list[str] = []
    if owners:
        try:
            out.extend(remaining.samples_of_owners(owners))
        except UnknownSampleError as exc:
            raise UnknownSampleError(f"{exc}: the owner is unknown or was already forgotten") from None
    covered = set(out)
    out.extend(s for s in request.sample_ids if s not in covered)
    return out


@dataclass(frozen=True)
class WindowStep:
    """One replayed step: its retained rows (positions in ``remaining``), |B_l| and dB_l."""

    retained: np.ndarray
    recorded: int
    deleted: int


def _resolve_window(
    window: RecordedWindow, remaining: Dataset, forgotten: set[str]
) -> tuple[list[WindowStep], torch.Tensor, int]:
    """Split every window batch into retained and deleted samples; scrub this request's ids.

    An id scrubbed by an earlier request counts as deleted; an id neither scrubbed, nor named, nor in
    ``remaining`` means the caller passed the wrong training data. Returns the steps, the scrubbed id
    table and the number of distinct samples of this request that fall inside the window.
    """
    ids = window.ids.clone()
    offset = window.batch_rows.shape[0] - window.k
    steps: list[WindowStep] = []
    hit: set[str] = set()
    for j, row in enumerate(_decode_ids(window.ids)):
        recorded = int((window.batch_rows[offset + j] != _PAD).sum())
        kept: list[str] = []
        for pos, sid in enumerate(row[:recorded]):
            if sid in forgotten:
                hit.add(sid)
                ids[j, pos] = 0
            elif sid:  # "" = padding or scrubbed by an earlier request
                kept.append(sid)
        try:
            rows = remaining.indices_of(kept)
        except UnknownSampleError as exc:
            raise InvalidDatasetError(
                f"a sample of the recorded window is missing from the remaining training data ({exc}); pass "
                "every sample not yet forgotten, including those this request names"
            ) from None
        steps.append(WindowStep(retained=rows, recorded=recorded, deleted=recorded - len(kept)))
    return steps, ids, len(hit)


@dataclass
class ReplayStats:
    """Work done by one forward loop (for the certificate's ``measured``)."""

    gradient_evaluations: int = 0
    hvp_products: int = 0
    lbfgs_fallbacks: int = 0
    lbfgs_pairs_dropped: int = 0
    deleted_per_step: list[int] = field(default_factory=list)
    recorded_per_step: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _RetainedBatch:
    """phi_l, the retained part of window batch l, as a map of the weights: D^R_l(w) and its step map
    (normalised by B - dB_l, Eq. 2). Every evaluation is counted in ``stats``."""

    model: FlatModel
    cfg: SGDConfig
    x: torch.Tensor
    y: torch.Tensor
    stats: ReplayStats

    def direction(self, w: torch.Tensor) -> torch.Tensor:
        self.stats.gradient_evaluations += 1
        return sgd_direction(self.model, w, self.x, self.y, self.cfg, self.x.shape[0])

    def step_map(self, w: torch.Tensor) -> StepMap:
        self.stats.gradient_evaluations += 1
        return make_step_map(self.model, w, self.x, self.y, self.cfg, normalizer=self.x.shape[0])


def forward_correction(
    model: FlatModel,
    cfg: SGDConfig,
    window: RecordedWindow,
    steps: Sequence[WindowStep],
    remaining: Dataset,
    *,
    hvp: HvpMode,
    m: int,
    device: torch.device,
) -> tuple[torch.Tensor, ReplayStats]:
    """Delta of Eq. 10 by the forward recursion Delta <- G(l) + H(l) Delta over the window (ascending).

    G(l) = eta_l (D_l - D^R_l(w_{l-1})) always uses the exact retained direction; only the product
    J^R_l Delta inside H(l) Delta is approximated in ``lbfgs`` mode. A step with no deleted sample has
    G = 0 and, while Delta is still zero, needs no work, so the recursion starts at the first window
    step that contains a deleted sample.
    """
    dtype = window.snapshots.dtype
    model.to(device, dtype)
    snaps = window.snapshots.to(device)
    stats = ReplayStats()
    delta = torch.zeros(snaps.shape[1], dtype=dtype, device=device)
    started = False
    for j, step in enumerate(steps):
        stats.deleted_per_step.append(step.deleted)
        stats.recorded_per_step.append(step.recorded)
        if step.deleted == 0 and not started:
            continue
        eta = float(window.step_sizes[j])
        applied = window.directions[j].to(device)
        started = True
        if len(step.retained) == 0:  # the retrain skips this step: G = eta D_l = w_{l-1} - w_l, H = I
            delta = delta + eta * applied
            continue
        at = window.history + j  # snaps[at] = w_{l-1}
        x = torch.as_tensor(remaining.features[step.retained], device=device).to(dtype)
        y = torch.as_tensor(remaining.labels[step.retained], device=device)
        phi = _RetainedBatch(model, cfg, x, y, stats)
        exact = phi.step_map(snaps[at]) if hvp == "exact" else None
        retained_dir = exact.direction.reshape(-1) if exact is not None else phi.direction(snaps[at])
        if bool(delta.any()):
            if exact is not None:
                product = _hvp_exact(exact, delta)
            else:
                product = _hvp_lbfgs(phi, snaps, at, m, retained_dir, delta)
            delta = delta - eta * product
            stats.hvp_products += 1
        if step.deleted:
            delta = delta + eta * (applied - retained_dir)
    return delta, stats


def _hvp_exact(step_map: StepMap, v: torch.Tensor) -> torch.Tensor:
    """J^R_l v, the Jacobian-vector product of the retained step map (closed form for logistic regression)."""
    return step_map.jvp(v[None])[0]


def _hvp_lbfgs(
    phi: _RetainedBatch, snaps: torch.Tensor, at: int, m: int, grad_at: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """J^R_l v by the corrected Algorithm 4 with the pairs of phi_l at snaps[at-m .. at].

    The pairs use the gradients of the SAME retained batch at the (up to) m snapshots before w_{l-1}.
    Approximating the mean-gradient Jacobian (1/n_R) H-bar instead of Algorithm 4's sum H-bar scales Y
    by 1/n_R, which scales B by exactly 1/n_R (the BFGS update is homogeneous of degree one in Y), so
    H(l) v = v - eta_l B v is the same as Algorithm 4's output. Without a usable pair (too little
    history, or no positive curvature) the exact product is taken and counted as a fallback.
    """
    lo = max(0, at - m)
    approx = None
    if lo < at:
        older = [phi.direction(snaps[i]) for i in range(lo, at)]
        s, y = secant_pairs(snaps[lo : at + 1], torch.stack([*older, grad_at]))
        approx = CompactLBFGS.from_pairs(s, y)
        phi.stats.lbfgs_pairs_dropped += approx.dropped if approx is not None else at - lo
    if approx is None:
        phi.stats.lbfgs_fallbacks += 1
        return _hvp_exact(phi.step_map(snaps[at]), v)
    return approx.matvec(v)


def _with_added(deleted: MutableSet[str], ids: Sequence[str]) -> MutableSet[str]:
    """The deleted set plus ``ids``: a new set for a plain set; a service's own MutableSet (e.g. of
    keyed hashes that never hold plaintext ids) is updated in place through its ``add``."""
    if type(deleted) is set:
        return deleted | set(ids)
    for sid in ids:
        deleted.add(sid)
    return deleted


# ------------------------------------------------------------------------------------- the method
class MiniUnlearning:
    """The ``mini_unlearning`` method; see the module docstring."""

    name: ClassVar[str] = "mini_unlearning"
    request_kinds: ClassVar[frozenset[str]] = frozenset({"sample", "owner"})
    needs_training_data: ClassVar[bool] = True

    def hyperparameters(self) -> tuple[HyperParameter, ...]:
        return (
            *sgd_hyperparameters(),
            HyperParameter("k", "integer", "Replayed SGD steps at the end of training (the window)", minimum=1),
            HyperParameter("m", "integer", "L-BFGS memory (curvature pairs kept)", minimum=1),
            HyperParameter("hvp", "string", "Hessian-vector products: exact, or the L-BFGS approximation",
                           choices=HVP_MODES),
            HyperParameter("dtype", "string", "Floating-point type of training and the recorded window",
                           choices=tuple(DTYPES)),
            HyperParameter("max_deletion_fraction", "number", "Deletions per budget epoch, as a fraction of its "
                           "training set, when the budget policy sets no limit of its own", minimum=0,
                           exclusive_minimum=True, maximum=1),
        )

    def families(self) -> tuple[str, ...]:
        return family_names()

    def release_modes(self) -> tuple[ReleaseMode, ...]:
        """Audited only: the method carries no (epsilon, delta) guarantee."""
        return ("audited",)

    def restore_model(self, data: Mapping[str, Any]) -> ModelSpec:
        """``MethodState.model`` from its ``to_dict()``."""
        return ModelSpec.from_dict(dict(data))

    def default_config(self) -> dict[str, Any]:
        """The paper's setting (Sec. 5.1): L2 logistic regression, plain SGD at a constant step, k 10, m 2.

        None means "derive it from the data" by :data:`SGD_RULE` (:mod:`unlearning.sgd_defaults`):
        l2 = 1/n (the coefficient of (l2/2)||w||^2), batch_size = min(256, n),
        epochs = min(1000, max(1, ceil(2000 / ceil(n / batch_size)))) and lr = 4 / mean_i ||[x_i, 1]||^2.
        ``max_deletion_fraction`` is the retrain ratio used only when the budget policy sets no limit of
        its own (15%, the largest ratio the paper evaluates).
        """
        return {
            "family": "logistic_regression",
            "hidden": [64],
            "epochs": None,
            "batch_size": None,
            "lr": None,
            "lr_decay": 1.0,
            "l2": None,
            "clip_norm": None,
            "clip_mode": "none",
            "k": 10,
            "m": 2,
            "hvp": "exact",
            "dtype": "float32",
            "max_deletion_fraction": 0.15,
        }

    def check_config(self, config: Mapping[str, Any]) -> None:
        self._merged(config)

    def _merged(self, config: Mapping[str, Any]) -> dict[str, Any]:
        merged = {**self.default_config(), **dict(config)}
        check_sgd_config(merged)
        WindowConfig.from_config(merged)
        _check_fraction(merged["max_deletion_fraction"])
        return merged

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
        _require_audited(privacy)
        merged = resolve_sgd(self._merged(config), dataset, SGD_RULE)
        wc = WindowConfig.from_config(merged)
        spec = model_spec_for(dataset, merged)
        model = build_model(spec)
        window = train_with_window(
            model, dataset, sgd_config(merged), seed, k=wc.k, m=wc.m, device=default_device(), dtype=wc.dtype,
            progress=progress,
        )
        state = state_from_window(dataset, spec, window, merged, seed)
        if progress:
            progress("done", 1.0)
        measured = {"window_rows_fraction": sum(len(b) for b in window.window_ids) / len(dataset)}
        return state, self._certificate(state, privacy, policy, charge=0, inputs={}, measured=measured)

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
        """Recompute Eq. 10 on the recorded window for the cumulative deleted set; no noise is drawn."""
        started = time.perf_counter()
        request.require_kinds(self.name, self.request_kinds)
        if remaining is None:
            raise InvalidDatasetError(
                "mini_unlearning needs the remaining training data (every sample not yet forgotten, "
                "including those this request names)"
            )
        _require_audited(privacy)
        window = RecordedWindow.of(state)
        model = build_model(state.model)
        _check_data(model, remaining)
        forgotten = _resolve_request(request, remaining, state.deleted_ids)
        steps, scrubbed, in_window = _resolve_window(window, remaining, set(forgotten))
        acc = state.accounting
        merged = {**self.default_config(), **dict(acc["config"])}
        delta, stats = forward_correction(
            model, sgd_config(merged), window, steps, remaining,
            hvp=WindowConfig.from_config(merged).hvp, m=int(acc["m"]), device=default_device(),
        )
        clean = window.snapshots[-1] + delta.cpu()
        accounting = {
            **acc,
            "deleted_count": int(acc["deleted_count"]) + len(forgotten),
            "window_deleted_cumulative": int(acc["window_deleted_cumulative"]) + in_window,
        }
        new_state = replace(
            state,
            clean_weights=clean,
            released_weights=clean.clone(),
            accounting=accounting,
            artifacts={**state.artifacts, "window_sample_ids": scrubbed},
            deleted_ids=_with_added(state.deleted_ids, forgotten),
        )
        measured = _measured(stats, in_window, accounting, float(delta.norm()), time.perf_counter() - started)
        inputs = {"deleted_per_step": stats.deleted_per_step, "recorded_per_step": stats.recorded_per_step}
        cert = self._certificate(
            new_state, privacy, policy, charge=len(forgotten), inputs=inputs, measured=measured
        )
        return ForgetOutcome(state=new_state, certificate=cert, forgotten_ids=tuple(forgotten))

    # -------------------------------------------------------------------------------------- budget
    def budget_cap(self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget) -> float:
        """The most samples one budget epoch may forget before a retrain: the tightest policy limit.

        ``policy.max_sigma`` does not apply (no noise is ever added). A policy with neither a count nor a
        ratio limit falls back to the model's ``max_deletion_fraction`` (a heuristic without any limit
        would never be retrained).
        """
        n = int(state.accounting["train_size"])
        caps = [float(n)]
        if policy.max_deletions is not None:
            caps.append(float(policy.max_deletions))
        fraction = _fraction(state, policy)
        if fraction is not None:
            caps.append(float(math.floor(fraction * n)))
        return min(caps)

    def must_retrain(
        self, state: MethodState, policy: BudgetPolicy, privacy: PrivacyTarget, pending_deletions: int = 0
    ) -> str | None:
        after = int(state.accounting["deleted_count"]) + pending_deletions
        cap = self.budget_cap(state, policy, privacy)
        if after <= cap:
            return None
        n = int(state.accounting["train_size"])
        return (
            f"forgetting {pending_deletions} more sample(s) would bring this budget epoch to {after} "
            f"deletions ({after / n:.1%} of {n}), above the mini_unlearning cap of {int(cap)}: the "
            "linearised replay is only trusted up to the policy's deletion ratio"
        )

    # --------------------------------------------------------------------------------- certificate
    def _certificate(
        self,
        state: MethodState,
        privacy: PrivacyTarget,
        policy: BudgetPolicy | None,
        *,
        charge: int,
        inputs: Mapping[str, Any],
        measured: Mapping[str, float],
    ) -> Certificate:
        acc = state.accounting
        cfg = acc["config"]
        cum = int(acc["deleted_count"])
        # Without a policy (a direct library call) the model's own max_deletion_fraction sets the cap.
        cap = self.budget_cap(state, policy or BudgetPolicy(max_deletion_fraction=None), privacy)
        return Certificate(
            method=self.name,
            release_mode=privacy.release_mode,
            guarantee="none",
            epsilon=None,
            delta=None,
            bound_name=BOUND_NAME,
            bound=math.inf,
            sigma=0.0,
            calibration="none",
            cumulative_deletions=cum,
            budget_unit="deleted_samples",
            budget_cap=cap,
            budget_spent=float(cum),
            charge=float(charge),
            noise_seed=None,
            inputs={
                "k": acc["k"],
                "m": acc["m"],
                "hvp": acc["hvp"],
                "lr": cfg["lr"],
                "lr_decay": cfg["lr_decay"],
                "l2": cfg["l2"],
                "batch_size": acc["batch_size"],
                "epochs": cfg["epochs"],
                "total_steps": acc["total_steps"],
                "first_window_step": acc["first_window_step"],
                "training_seed": acc["training_seed"],
                "schedule_seed": acc["schedule_seed"],
                "train_size": acc["train_size"],
                "epsilon": math.inf,
                **inputs,
            },
            measured=dict(measured),
            notes=_NOTES,
        )

    def verify_certificate(self, certificate: Certificate) -> list[str]:
        """Check that the certificate claims nothing: no epsilon, no noise, counts that add up."""
        c = certificate
        problems: list[str] = []
        if c.method != self.name:
            problems.append(f"certificate of method {c.method!r}, expected {self.name!r}")
        if c.guarantee != "none" or c.epsilon is not None or c.delta is not None:
            problems.append(
                "mini_unlearning carries no formal guarantee: guarantee 'none', epsilon and delta None"
            )
        if c.release_mode != "audited":
            problems.append("mini_unlearning releases can only be audited, never certified")
        if c.sigma != 0.0 or c.calibration != "none" or c.noise_seed is not None:
            problems.append("mini_unlearning adds no noise: sigma 0, calibration 'none', no noise seed")
        if c.bound_name != BOUND_NAME or not math.isinf(c.bound):
            problems.append("mini_unlearning has no bound: bound_name 'none' with bound inf")
        if c.budget_unit != "deleted_samples" or c.budget_spent != float(c.cumulative_deletions):
            problems.append("the budget spent must equal the cumulative deletions (unit deleted_samples)")
        if not 0 <= c.charge <= c.cumulative_deletions:
            problems.append(f"charge {c.charge} outside [0, {c.cumulative_deletions}]")
        if c.inputs.get("hvp") not in HVP_MODES:
            problems.append(f"unknown hvp mode {c.inputs.get('hvp')!r}")
        if not _per_step_counts_ok(c.inputs):
            problems.append("deleted_per_step must give one count in [0, |B_l|] per window step")
        hits = c.measured.get("window_deleted_this_request")
        if hits is not None and not 0 <= hits <= c.charge:
            problems.append(f"{hits} deleted samples inside the window, the request forgot only {c.charge}")
        cum_hits = c.measured.get("window_deleted_cumulative")
        if cum_hits is not None and not 0 <= cum_hits <= c.cumulative_deletions:
            problems.append(
                f"{cum_hits} window deletions exceed the {c.cumulative_deletions} cumulative deletions"
            )
        return problems


_NOTES = (
    "No formal guarantee: epsilon is infinite and no noise is added. The model is the trained one plus a "
    "first-order replay of the last k SGD steps without the deleted samples (Mini-Unlearning, Eq. 10), "
    "recomputed on the original trajectory for every sample deleted in this budget epoch. Only deleted "
    "samples inside the replayed window (measured.window_deleted_*) change the correction directly; the "
    "others keep their influence until the next retrain. Audit it empirically (distance to a retrain, "
    "membership inference); the service retrains once the deletion ratio reaches the policy's cap."
)


def _per_step_counts_ok(inputs: Mapping[str, Any]) -> bool:
    per_step, recorded = inputs.get("deleted_per_step"), inputs.get("recorded_per_step")
    if per_step is None:
        return True
    if recorded is None or len(per_step) != len(recorded) or len(per_step) != inputs.get("k"):
        return False
    return all(0 <= d <= r for d, r in zip(per_step, recorded))


def _fraction(state: MethodState, policy: BudgetPolicy) -> float | None:
    if policy.max_deletion_fraction is not None:
        return policy.max_deletion_fraction
    if policy.max_deletions is not None:
        return None
    return float(state.accounting["config"].get("max_deletion_fraction", 0.15))


def _require_audited(privacy: PrivacyTarget) -> None:
    if privacy.release_mode != "audited":
        raise InvalidConfigError(
            "mini_unlearning carries no (epsilon, delta) guarantee, so it cannot serve release_mode "
            f"{privacy.release_mode!r}: register the model with release_mode 'audited'"
        )


def _measured(
    stats: ReplayStats, in_window: int, accounting: Mapping[str, Any], correction_norm: float, seconds: float
) -> dict[str, float]:
    cum = int(accounting["deleted_count"])
    cum_hits = int(accounting["window_deleted_cumulative"])
    return {
        "window_deleted_this_request": float(in_window),
        "window_deleted_cumulative": float(cum_hits),
        "window_coverage_cumulative": cum_hits / cum if cum else 0.0,
        "window_deleted_occurrences": float(sum(stats.deleted_per_step)),
        "correction_norm": correction_norm,
        "gradient_evaluations": float(stats.gradient_evaluations),
        "hvp_products": float(stats.hvp_products),
        "lbfgs_fallbacks": float(stats.lbfgs_fallbacks),
        "lbfgs_pairs_dropped": float(stats.lbfgs_pairs_dropped),
        "seconds": seconds,
    }


register(MiniUnlearning())
