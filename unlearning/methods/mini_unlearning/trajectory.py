"""The recorded trajectory of Mini-Unlearning: plain SGD that keeps its last steps, and the stored window.

Training is plain mini-batch SGD with the step sizes eta_t of the configuration (Eq. 3):

    w_t = w_{t-1} - eta_t D_t(w_{t-1}),     D_t(w) = (1/B) sum_{j in B_t} grad f_j(w)  (+ the L2 term)

What is recorded (digest 004, sections 1.3 and 6.1; stored in ``MethodState.artifacts``, see
:data:`ARTIFACTS`): the last K = k + m + 1 iterates w_{T-k-m} .. w_T ("snapshots"), the batch rows of the
K - 1 steps between them ("batch_rows", positions in the training set, -1 padded, reproducible from the
schedule seed in the accounting), the sample ids of the k window batches ("window_sample_ids", UTF-8,
zero padded; a zeroed id is one a request has scrubbed), and the applied step directions D_l and step
sizes eta_l of the window ("directions", "step_sizes"). No feature or label is kept. With T < k + m
steps the whole trajectory is recorded.

:func:`exact_replay` is the retraining counterfactual of Eq. 2 that the correction approximates.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from unlearning.data import Dataset
from unlearning.errors import DimensionMismatchError, InvalidConfigError
from unlearning.methods.protocol import MethodState, ProgressCallback
from unlearning.models.flat import FlatModel
from unlearning.steps import SGDConfig, sgd_direction
from unlearning.training import BatchSchedule, dataset_tensors

ARTIFACTS = ("snapshots", "batch_rows", "window_sample_ids", "directions", "step_sizes")
PAD = -1  # batch_rows padding for a batch smaller than the largest one


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

    def artifacts(self) -> dict[str, torch.Tensor]:
        """The window as ``MethodState.artifacts`` (on the CPU), under the names of :data:`ARTIFACTS`."""
        return {
            "snapshots": self.snapshots.detach().cpu(),
            "batch_rows": self.batch_rows.cpu(),
            "window_sample_ids": encode_ids(self.window_ids),
            "directions": self.directions.detach().cpu(),
            "step_sizes": self.step_sizes.cpu(),
        }


def check_data(model: FlatModel, data: Dataset) -> None:
    """:class:`DimensionMismatchError` unless ``data`` has the model's feature count and classes."""
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
    out = np.full((len(batches), width), PAD, dtype=np.int64)
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
    check_data(model, data)
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
    """The retraining counterfactual of Eq. 2 that Eq. 10 approximates (the exact reference):

        w*_l = w*_{l-1} - eta_l / (B - dB_l) sum_{j in B_l \\ D_U} grad f_j(w*_{l-1}),    w*_0 = w_0

    Same w_0 and batch schedule as :func:`train_with_window` with ``seed`` on ``data`` (the training set
    of the budget epoch), the deleted samples dropped from every batch, each batch renormalised by its
    retained count B - dB_l, and a batch with nothing left skipped. (This differs from
    :func:`unlearning.training.replay_retrain`, which keeps the recorded normaliser B as the Hessian-free
    paper's Eq. 5 does.)
    """
    check_data(model, data)
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
def encode_ids(batches: Sequence[Sequence[str]]) -> torch.Tensor:
    """(k, b_max, L) uint8: UTF-8 sample ids, zero padded (an all-zero entry is padding or scrubbed)."""
    encoded = [[s.encode("utf-8") for s in b] for b in batches]
    length = max(1, max((len(s) for b in encoded for s in b), default=1))
    width = max(len(b) for b in encoded)
    out = np.zeros((len(encoded), width), dtype=f"S{length}")
    for i, b in enumerate(encoded):
        out[i, : len(b)] = b
    return torch.from_numpy(out.view(np.uint8).reshape(len(encoded), width, length).copy())


def decode_ids(table: torch.Tensor) -> list[list[str]]:
    """The id lists of :func:`encode_ids`'s table, padding and scrubbed entries as ``""``."""
    k, width, length = table.shape
    raw = np.ascontiguousarray(table.numpy()).reshape(k * width, length).view(f"S{length}").reshape(k, width)
    return [[s.decode("utf-8") for s in row] for row in raw]


# ------------------------------------------------------------------------------ the stored window
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

    def recorded_size(self, j: int) -> int:
        """|B_l|, the recorded batch size of window step ``j`` (0-based)."""
        offset = self.batch_rows.shape[0] - self.k
        return int((self.batch_rows[offset + j] != PAD).sum())


__all__ = [
    "ARTIFACTS",
    "PAD",
    "RecordedWindow",
    "TrajectoryWindow",
    "check_data",
    "decode_ids",
    "encode_ids",
    "exact_replay",
    "train_with_window",
]
