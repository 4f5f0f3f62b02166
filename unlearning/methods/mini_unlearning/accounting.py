"""The accounting of a Mini-Unlearning state, typed.

At the protocol boundary ``MethodState.accounting`` stays a JSON dict; :class:`WindowAccounting` reads it
(:meth:`WindowAccounting.from_dict`) and writes it (:meth:`WindowAccounting.to_dict`) under exactly the
keys stored model versions carry, so every stored version loads and every new one reads as before. Keys
that other layers add to the same dict (the table wrapper's ``feature_transform`` and ``quality``) are
kept untouched, after the method's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from unlearning.errors import InvalidConfigError
from unlearning.methods.mini_unlearning.config import DEFAULT_MAX_DELETION_FRACTION, HvpMode, hvp_mode

_KEYS = (
    "deleted_count",
    "train_size",
    "config",
    "training_seed",
    "schedule_seed",
    "total_steps",
    "batch_size",
    "k",
    "m",
    "hvp",
    "snapshots",
    "first_window_step",
    "window_deleted_cumulative",
    "seconds_fit",
)


@dataclass(frozen=True)
class WindowAccounting:
    """What a state records about its training run, its window and the deletions of its budget epoch.

    ``deleted_count``: samples forgotten in this budget epoch; ``train_size``: n, the size of its training
    set; ``config``: the resolved configuration training used (SGD and window settings, data-derived
    values filled in); ``training_seed`` / ``schedule_seed``: the seeds of w_0 and of the batch schedule;
    ``total_steps``: T; ``batch_size``: B; ``k``: the replayed steps, min(k, T); ``m``: the L-BFGS
    memory; ``hvp``: the product mode; ``snapshots``: K, the recorded iterates; ``first_window_step``:
    T - k + 1, the first replayed step (1-based); ``window_deleted_cumulative``: distinct deleted samples
    of this budget epoch that fell inside the window; ``seconds_fit``: the training time. ``extra``: the
    keys other layers added, kept as they are.
    """

    deleted_count: int
    train_size: int
    config: dict[str, Any]
    training_seed: int
    schedule_seed: int
    total_steps: int
    batch_size: int
    k: int
    m: int
    hvp: HvpMode
    snapshots: int
    first_window_step: int
    window_deleted_cumulative: int
    seconds_fit: float
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WindowAccounting:
        """The accounting of ``MethodState.accounting``; :class:`InvalidConfigError` when a key is missing."""
        missing = [key for key in _KEYS if key not in data]
        if missing:
            raise InvalidConfigError(
                f"this state's accounting lacks {missing}: it was not written by mini_unlearning; retrain the model"
            )
        return cls(
            deleted_count=int(data["deleted_count"]),
            train_size=int(data["train_size"]),
            config=dict(data["config"]),
            training_seed=int(data["training_seed"]),
            schedule_seed=int(data["schedule_seed"]),
            total_steps=int(data["total_steps"]),
            batch_size=int(data["batch_size"]),
            k=int(data["k"]),
            m=int(data["m"]),
            hvp=hvp_mode(data["hvp"]),
            snapshots=int(data["snapshots"]),
            first_window_step=int(data["first_window_step"]),
            window_deleted_cumulative=int(data["window_deleted_cumulative"]),
            seconds_fit=float(data["seconds_fit"]),
            extra={key: value for key, value in data.items() if key not in _KEYS},
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON dict of ``MethodState.accounting``: the keys :meth:`from_dict` reads, then ``extra``."""
        return {
            "deleted_count": self.deleted_count,
            "train_size": self.train_size,
            "config": dict(self.config),
            "training_seed": self.training_seed,
            "schedule_seed": self.schedule_seed,
            "total_steps": self.total_steps,
            "batch_size": self.batch_size,
            "k": self.k,
            "m": self.m,
            "hvp": self.hvp,
            "snapshots": self.snapshots,
            "first_window_step": self.first_window_step,
            "window_deleted_cumulative": self.window_deleted_cumulative,
            "seconds_fit": self.seconds_fit,
            **self.extra,
        }

    def after_forgetting(self, forgotten: int, in_window: int) -> WindowAccounting:
        """The accounting once ``forgotten`` more samples are deleted, ``in_window`` of them inside the window."""
        return replace(
            self,
            deleted_count=self.deleted_count + forgotten,
            window_deleted_cumulative=self.window_deleted_cumulative + in_window,
        )

    @property
    def max_deletion_fraction(self) -> float:
        """The model's own deletion ratio per budget epoch (used when the policy sets no limit)."""
        return float(self.config.get("max_deletion_fraction", DEFAULT_MAX_DELETION_FRACTION))

    @property
    def window_coverage(self) -> float:
        """window_deleted_cumulative / deleted_count: the share of this epoch's deletions the window saw."""
        return self.window_deleted_cumulative / self.deleted_count if self.deleted_count else 0.0


__all__ = ["WindowAccounting"]
