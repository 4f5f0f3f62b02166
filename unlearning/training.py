"""Stage I (recorded SGD), Stage II fused into it, and the exact references (replay and fresh retrain).

Stage II is the forward recursion of Eq. 10 as the digest's corrected loop (digest 002, section 2.3):

    for t = 0 .. T-1:
        a_j <- (I - eta_t J_t) a_j            for every sample j   (propagate; J_t = dD_t/dw at w_t)
        a_j <- a_j + (eta_t/|B_t|) inj_j(t)   for j in B_t          (inject AFTER propagating)
        w_{t+1} = w_t - eta_t D_t(w_t)

so that a_j = sum over the steps t where j was used of (eta_t/|B_t|) * prod_{s>t}(I - eta_s J_s) inj_j(t),
which is Eq. 10's a^{-u} (recollection matrix times gradient). We follow the digest rather than the
printed Algorithm 2, which reads the gradient at the wrong weights and injects one step late, and
rather than the authors' code, which injects before propagating (an O(eta^2) difference). Because the
recursion only needs (w_t, B_t) at step t, it runs inside training and no checkpoint is ever kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from unlearning.data import Dataset
from unlearning.errors import DimensionMismatchError
from unlearning.models.flat import FlatModel
from unlearning.steps import SGDConfig, StepMap, make_step_map, sgd_direction

ProgressFn = Callable[[float], None]


@dataclass(frozen=True)
class BatchSchedule:
    """The recorded batch schedule: row indices of every step, and the seed that produced them.

    Epoch e shuffles with ``numpy.random.default_rng([seed, e]).permutation(n)`` and cuts the
    permutation into consecutive batches of ``batch_size`` (the last one may be smaller).
    """

    seed: int
    n: int
    batch_size: int
    epochs: int
    batches: tuple[np.ndarray, ...]

    @classmethod
    def from_seed(cls, n: int, batch_size: int, epochs: int, seed: int) -> BatchSchedule:
        batches: list[np.ndarray] = []
        for e in range(epochs):
            perm = np.random.default_rng([seed, e]).permutation(n)
            batches.extend(perm[i : i + batch_size] for i in range(0, n, batch_size))
        return cls(seed=seed, n=n, batch_size=batch_size, epochs=epochs, batches=tuple(batches))

    @property
    def steps(self) -> int:
        return len(self.batches)

    @property
    def batches_per_epoch(self) -> int:
        return -(-self.n // self.batch_size)


@dataclass
class TrainingRecord:
    """What Stage I (and a fused Stage II) leaves behind."""

    initial_weights: torch.Tensor
    weights: torch.Tensor
    schedule: BatchSchedule
    config: SGDConfig
    max_grad_norm: float  # largest unclipped per-sample gradient norm seen on the trajectory
    clip_active_steps: int
    rho_per_step: np.ndarray | None = None  # estimated ||I - eta_t J_t||_2 per step
    vectors: torch.Tensor | None = None  # (n, d): a^{-u} for every training row, in dataset order
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def rho(self) -> float:
        return float(self.rho_per_step.max()) if self.rho_per_step is not None else float("nan")


def dataset_tensors(data: Dataset, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.as_tensor(data.features, device=device).to(dtype),
        torch.as_tensor(data.labels, device=device),
    )


def _check_input_shape(model: FlatModel, data: Dataset) -> None:
    if data.feature_shape != tuple(model.spec.input_shape) and data.num_features != int(
        np.prod(model.spec.input_shape)
    ):
        raise DimensionMismatchError(
            f"dataset features have shape {data.feature_shape}, model expects {tuple(model.spec.input_shape)}"
        )
    if data.num_classes != model.spec.num_classes:
        raise DimensionMismatchError(
            f"dataset has {data.num_classes} classes, model was built for {model.spec.num_classes}"
        )


class _SpectralNormTracker:
    """Estimates rho_t = ||I - eta_t J_t||_2 by power iteration on A^T A, warm-started across steps.

    Consecutive operators differ little, so a few iterations per step from the previous step's
    vector track the top singular value. Power iteration gives a lower estimate of the norm; the
    certificate records this as an estimate (digest 002, 3.4: the public code's estimate returns 1).
    """

    def __init__(self, dim: int, iterations: int, device: torch.device, dtype: torch.dtype, seed: int) -> None:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        v = torch.randn(1, dim, generator=gen, dtype=dtype).to(device)
        self.v = v / v.norm()
        self.iterations = iterations

    def step(self, step: StepMap, eta: float) -> float:
        best = 0.0
        v = self.v
        for _ in range(self.iterations):
            av = v - eta * step.jvp(v)
            best = max(best, float(av.norm()))
            ata = av - eta * step.vjp(av)
            v = ata / ata.norm().clamp_min(1e-30)
        self.v = v
        return best


def train_recorded(
    model: FlatModel,
    data: Dataset,
    cfg: SGDConfig,
    seed: int,
    *,
    with_vectors: bool = True,
    rho_iterations: int = 3,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    progress: ProgressFn | None = None,
    start_weights: torch.Tensor | None = None,
    start_vectors: torch.Tensor | None = None,
    groups: np.ndarray | None = None,
) -> TrainingRecord:
    """Stage I: deterministic plain SGD from ``model.initial_weights(seed)`` on the schedule of ``seed``.

    With ``with_vectors`` it runs Stage II fused (the per-sample vectors a^{-u} of Eq. 10) and tracks
    rho_t; every random draw derives from ``seed``. ``start_weights`` / ``start_vectors`` continue an
    earlier run instead (the repair strategy: old vectors are propagated through the new steps and
    receive the new injections, digest 002 section 2.5).

    ``groups`` maps each row to a vector index: samples of one group inject into one shared vector,
    which by linearity is the approximator of the whole group computed directly (per-user vectors,
    digest 002 section 7.2, O(kd) memory for k groups instead of O(nd)).
    """
    _check_input_shape(model, data)
    device = device or torch.device("cpu")
    model.to(device, dtype)
    x_all, y_all = dataset_tensors(data, device, dtype)
    schedule = BatchSchedule.from_seed(len(data), cfg.batch_size, cfg.epochs, seed)
    w0 = (start_weights if start_weights is not None else model.initial_weights(seed, dtype)).to(device, dtype)
    w = w0.clone()
    vectors = None
    row_of = torch.as_tensor(groups if groups is not None else np.arange(len(data)), device=device)
    n_vectors = int(row_of.max()) + 1 if len(row_of) else 0
    if with_vectors:
        if start_vectors is not None:
            if tuple(start_vectors.shape) != (n_vectors, model.dim):
                raise DimensionMismatchError(
                    f"start vectors have shape {tuple(start_vectors.shape)}, expected ({n_vectors}, {model.dim})"
                )
            vectors = start_vectors.to(device, dtype).clone()
        else:
            vectors = torch.zeros(n_vectors, model.dim, dtype=dtype, device=device)
    tracker = _SpectralNormTracker(model.dim, rho_iterations, device, dtype, seed) if with_vectors else None
    rhos = np.zeros(schedule.steps) if with_vectors else None
    max_grad, clip_steps = 0.0, 0
    started = time.perf_counter()
    for t, batch in enumerate(schedule.batches):
        eta = cfg.step_size(t)
        idx = torch.as_tensor(batch, device=device)
        step = make_step_map(model, w, x_all[idx], y_all[idx], cfg)
        max_grad = max(max_grad, float(step.grad_norms.max()))
        clip_steps += int(step.clip_active)
        if vectors is not None and tracker is not None and rhos is not None:
            step.propagate_(vectors, eta)
            vectors.index_add_(0, row_of[idx], step.injections(), alpha=eta / len(batch))
            rhos[t] = tracker.step(step, eta)
        w = w - eta * step.direction
        if progress is not None and (t % 10 == 0 or t == schedule.steps - 1):
            progress((t + 1) / schedule.steps)
    elapsed = time.perf_counter() - started
    return TrainingRecord(
        initial_weights=w0,
        weights=w,
        schedule=schedule,
        config=cfg,
        max_grad_norm=max_grad,
        clip_active_steps=clip_steps,
        rho_per_step=rhos,
        vectors=vectors,
        seconds={"train_and_precompute" if with_vectors else "train": elapsed},
    )


def replay_retrain(
    model: FlatModel,
    data: Dataset,
    record: TrainingRecord,
    deleted_ids: Sequence[str],
    *,
    device: torch.device | None = None,
) -> torch.Tensor:
    """The exact reference of Eq. 5: same initialisation, batch schedule and step sizes, the deleted
    samples dropped from every batch they were in, each batch still normalised by its recorded size."""
    device = device or record.weights.device
    dtype = record.weights.dtype
    x_all, y_all = dataset_tensors(data, device, dtype)
    keep = np.ones(len(data), dtype=bool)
    keep[data.indices_of(deleted_ids)] = False
    w = record.initial_weights.to(device).clone()
    cfg = record.config
    for t, batch in enumerate(record.schedule.batches):
        kept = torch.as_tensor(batch[keep[batch]], device=device)
        w = w - cfg.step_size(t) * sgd_direction(model, w, x_all[kept], y_all[kept], cfg, len(batch))
    return w


def retrain_from_scratch(
    model: FlatModel, remaining: Dataset, cfg: SGDConfig, seed: int, *, device: torch.device | None = None
) -> TrainingRecord:
    """Plain training on the remaining data with a fresh schedule (no Stage II)."""
    return train_recorded(model, remaining, cfg, seed, with_vectors=False, device=device)
