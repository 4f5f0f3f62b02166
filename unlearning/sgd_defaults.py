"""Data-derived settings of the recorded SGD (``hessian_free``, ``mini_unlearning``).

A key of :data:`DERIVED_KEYS` whose value is None is derived from the training data when ``fit`` starts
(:func:`resolve_sgd`); a value the user gave is kept. The method records the resolved values, so a
forget or a repair reads back exactly the settings training used. The rules target L2-regularised
logistic regression on features of roughly unit scale (standardised columns, or pixels in [0, 1]):

- ``l2 = 1/n``: scikit-learn's default C = 1 written for the mean loss, (1/n) sum_i l_i + (l2/2) ||w||^2;
- ``batch_size = min(B, n)``;
- ``epochs = min(E, max(1, ceil(S / ceil(n / batch_size))))``: at least S steps when at most E epochs
  allow it, one epoch when an epoch alone has S steps;
- ``lr = c / mean_i ||[x_i, 1]||^2`` (at most c, since ||[x, 1]|| >= 1): 1/L-bar for c = 4, with
  L-bar = mean_i ||[x_i, 1]||^2 / 4 the smoothness of the binary logistic loss averaged over the rows;
- ``lr_decay = r^(1 / T)`` over the T = epochs * ceil(n / batch_size) steps, so the last step is r times
  the first; 1 (a constant step) for a rule without r.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from unlearning.data import Dataset

DERIVED_KEYS = ("epochs", "batch_size", "lr", "lr_decay", "l2")


@dataclass(frozen=True)
class SGDRule:
    """The constants of the rules above: B, S, E, c and r (None: a derived ``lr_decay`` is 1)."""

    batch_size: int
    min_steps: int
    max_epochs: int
    lr_scale: float = 4.0
    final_lr_fraction: float | None = None


def mean_squared_row_norm(dataset: Dataset) -> float:
    """mean_i ||[x_i, 1]||^2 over the rows (features flattened; the 1 is the model's bias input)."""
    x = dataset.features.reshape(len(dataset), -1)
    total = 0.0
    for start in range(0, len(x), 65_536):  # float64 sums in blocks: no float64 copy of a large table
        block = x[start : start + 65_536].astype(np.float64)
        total += float(np.einsum("ij,ij->", block, block))
    return total / len(x) + 1.0


def derived_l2(n: int) -> float:
    """l2 = 1/n (scikit-learn's C = 1 for the mean loss)."""
    return 1.0 / max(int(n), 1)


def derived_batch_size(n: int, rule: SGDRule) -> int:
    """batch_size = min(B, n)."""
    return max(1, min(rule.batch_size, int(n)))


def derived_epochs(n: int, batch_size: int, rule: SGDRule) -> int:
    """epochs = min(E, max(1, ceil(S / ceil(n / batch_size))))."""
    per_epoch = math.ceil(int(n) / int(batch_size))
    return min(rule.max_epochs, max(1, math.ceil(rule.min_steps / per_epoch)))


def derived_lr(mean_sq_norm: float, rule: SGDRule) -> float:
    """lr = c / mean_i ||[x_i, 1]||^2."""
    return rule.lr_scale / mean_sq_norm


def derived_lr_decay(total_steps: int, final_fraction: float) -> float:
    """lr_decay = r^(1/T): the step size falls from lr to r * lr over the T steps."""
    return float(final_fraction ** (1.0 / max(int(total_steps), 1)))


def resolve_sgd(config: Mapping[str, Any], dataset: Dataset, rule: SGDRule) -> dict[str, Any]:
    """``config`` with every None of :data:`DERIVED_KEYS` replaced by its rule's value on ``dataset``; the
    other values are kept as given."""
    out = dict(config)
    n = len(dataset)
    if out.get("l2") is None:
        out["l2"] = derived_l2(n)
    if out.get("batch_size") is None:
        out["batch_size"] = derived_batch_size(n, rule)
    if out.get("epochs") is None:
        out["epochs"] = derived_epochs(n, int(out["batch_size"]), rule)
    if out.get("lr") is None:
        out["lr"] = derived_lr(mean_squared_row_norm(dataset), rule)
    if out.get("lr_decay") is None:
        steps = int(out["epochs"]) * math.ceil(n / int(out["batch_size"]))
        fraction = rule.final_lr_fraction
        out["lr_decay"] = 1.0 if fraction is None else derived_lr_decay(steps, fraction)
    return out


__all__ = [
    "DERIVED_KEYS",
    "SGDRule",
    "derived_batch_size",
    "derived_epochs",
    "derived_l2",
    "derived_lr",
    "derived_lr_decay",
    "mean_squared_row_norm",
    "resolve_sgd",
]
