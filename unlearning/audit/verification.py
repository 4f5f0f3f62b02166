"""Verification metrics that compare an unlearned model with the exact retrained one (digest 002, 5.4).

- distance:    ||w_unlearned - w_retrained||_2 (the paper's "error"; with the Hessian-free method
               w_unlearned = w_{E,B} + a^{-U} and w_retrained = w^{-U}_{E,B}, the replay-retrain of Eq. 5);
- correlation: Pearson and Spearman, over the forgotten samples u, between the approximate loss change
               l(w_unlearned; u) - l(w_original; u) and the actual change l(w_retrained; u) - l(w_original; u);
- accuracy on the test set, on the retained training rows and on the forgotten rows;
- membership inference: the loss-threshold attack's AUC and advantage (:mod:`unlearning.audit.membership`)
  with the forgotten rows as members and the test rows as non-members, under each of the three models.

Loss convention. The paper's l includes the regulariser (l = CE + (l2/2)||w||^2 for LR). For a given
w the regulariser is the same number for every sample, so it shifts every loss change by one constant
(a different constant for the approximate and for the actual change) and leaves both correlations
unchanged. :func:`per_sample_losses` therefore returns CE alone by default; pass ``l2 > 0`` to add
(l2/2)||w||^2 when absolute loss values should match the training objective.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from scipy import stats

from unlearning.audit.membership import loss_attack
from unlearning.data import Dataset
from unlearning.errors import DimensionMismatchError, EmptyRequestError, InvalidConfigError
from unlearning.models.flat import FlatModel


def _check(model: FlatModel, w: torch.Tensor, data: Dataset | None = None) -> None:
    if w.ndim != 1 or w.shape[0] != model.dim:
        raise DimensionMismatchError(
            f"weights have shape {tuple(w.shape)}, model {model.spec.family!r} needs ({model.dim},)"
        )
    if data is None:
        return
    if data.num_features != int(np.prod(model.spec.input_shape)):
        raise DimensionMismatchError(
            f"dataset {data.name!r} features have shape {data.feature_shape}, "
            f"model expects {tuple(model.spec.input_shape)}"
        )
    if data.num_classes != model.spec.num_classes:
        raise DimensionMismatchError(
            f"dataset {data.name!r} has {data.num_classes} classes, model was built for {model.spec.num_classes}"
        )


def _rows(data: Dataset, ids: Sequence[str] | None) -> np.ndarray:
    rows = np.arange(len(data)) if ids is None else data.indices_of(ids)  # UnknownSampleError
    if rows.size == 0:
        raise EmptyRequestError("no sample ids to evaluate on")
    return rows


def _logits(
    model: FlatModel, w: torch.Tensor, data: Dataset, rows: np.ndarray, batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (logits, labels) batch by batch, features cast to ``w``'s dtype and device."""
    if batch_size < 1:
        raise InvalidConfigError(f"batch_size must be >= 1, got {batch_size}")
    with torch.no_grad():
        for s in range(0, rows.size, batch_size):
            idx = rows[s : s + batch_size]
            x = torch.as_tensor(data.features[idx], device=w.device).to(w.dtype)
            x = x.reshape(idx.size, *model.spec.input_shape)
            y = torch.as_tensor(data.labels[idx], device=w.device)
            yield model.logits(w, x), y


def distance(w_a: torch.Tensor, w_b: torch.Tensor) -> float:
    """||w_a - w_b||_2, computed in float64."""
    if w_a.shape != w_b.shape:
        raise DimensionMismatchError(
            f"cannot compare weights of shapes {tuple(w_a.shape)} and {tuple(w_b.shape)}"
        )
    return float((w_a.detach().to(torch.float64) - w_b.detach().to(w_a.device, torch.float64)).norm())


def accuracy(
    model: FlatModel, w: torch.Tensor, data: Dataset, ids: Sequence[str] | None = None, batch_size: int = 1024
) -> float:
    """Fraction of rows whose arg-max logit is the label: all of ``data``, or the rows of ``ids``."""
    _check(model, w, data)
    rows = _rows(data, ids)
    correct = 0
    for logits, y in _logits(model, w, data, rows, batch_size):
        correct += int((logits.argmax(dim=1) == y).sum())
    return correct / rows.size


def per_sample_losses(
    model: FlatModel,
    w: torch.Tensor,
    data: Dataset,
    ids: Sequence[str] | None = None,
    *,
    l2: float = 0.0,
    batch_size: int = 1024,
) -> np.ndarray:
    """l(w; z) for each row (in the order of ``ids``, or dataset order): CE(f(w, x), y) + (l2/2)||w||^2.

    ``l2 = 0`` (default) gives cross-entropy alone; see the module docstring for why that is enough
    for the correlation metrics. Returned as float64.
    """
    _check(model, w, data)
    if l2 < 0:
        raise InvalidConfigError(f"l2 must be >= 0, got {l2}")
    rows = _rows(data, ids)
    parts = [
        F.cross_entropy(logits, y, reduction="none").to(torch.float64).cpu().numpy()
        for logits, y in _logits(model, w, data, rows, batch_size)
    ]
    out = np.concatenate(parts)
    if l2 > 0:
        out = out + 0.5 * l2 * float((w.detach().to(torch.float64) ** 2).sum())
    return out


def _correlations(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    if a.size < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return {"pearson": math.nan, "spearman": math.nan}  # undefined for fewer than 2 or constant values
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pearson = float(stats.pearsonr(a, b)[0])
        spearman = float(stats.spearmanr(a, b)[0])
    return {"pearson": pearson, "spearman": spearman}


def loss_change_correlation(
    model: FlatModel,
    w_original: torch.Tensor,
    w_unlearned: torch.Tensor,
    w_retrained: torch.Tensor,
    data: Dataset,
    forgotten_ids: Sequence[str],
    *,
    l2: float = 0.0,
) -> dict[str, float]:
    """Pearson and Spearman correlation over u in ``forgotten_ids`` between

        approximate change  l(w_unlearned; u) - l(w_original; u)
        actual change       l(w_retrained; u) - l(w_original; u)

    (digest 002, 5.4; paper section 5.1). Returns ``{"pearson": r, "spearman": rho}``; both are NaN when
    fewer than two samples are forgotten or either change is constant (a correlation is undefined then).
    """
    for w in (w_unlearned, w_retrained):
        if w.shape != w_original.shape:
            raise DimensionMismatchError(
                f"cannot compare weights of shapes {tuple(w_original.shape)} and {tuple(w.shape)}"
            )
    base = per_sample_losses(model, w_original, data, forgotten_ids, l2=l2)
    approx = per_sample_losses(model, w_unlearned, data, forgotten_ids, l2=l2) - base
    actual = per_sample_losses(model, w_retrained, data, forgotten_ids, l2=l2) - base
    return _correlations(approx, actual)


def report(
    model: FlatModel,
    w_original: torch.Tensor,
    w_unlearned: torch.Tensor,
    w_retrained: torch.Tensor,
    train: Dataset,
    test: Dataset,
    forgotten_ids: Sequence[str],
    *,
    l2: float = 0.0,
) -> dict[str, Any]:
    """All verification numbers for one deletion, as a flat dict of floats (plus the counts):

    - ``distance_unlearned_retrained``: ||w_unlearned - w_retrained|| (the paper's error),
    - ``distance_original_retrained``: ||w_original - w_retrained|| (what doing nothing costs),
    - ``distance_ratio``: the first over the second (< 1: the update moved towards the retrained model),
    - ``test_accuracy_{original,unlearned,retrained}``,
    - ``retained_accuracy_{...}`` on the training rows not forgotten (NaN if none remain),
    - ``forgotten_accuracy_{...}`` on the forgotten rows,
    - ``pearson``, ``spearman`` from :func:`loss_change_correlation`,
    - ``mia_auc_{...}``, ``mia_advantage_{...}``: the loss-threshold membership attack separating the
      forgotten rows from the test rows (:func:`unlearning.audit.membership.loss_attack`); an update that
      forgets well has the retrained model's figures, not the original's,
    - ``num_forgotten``, ``num_retained``.
    """
    forgotten = list(forgotten_ids)
    if not forgotten:
        raise EmptyRequestError("report needs at least one forgotten sample id")
    forgotten_rows = train.indices_of(forgotten)
    forgotten_set = set(forgotten_rows.tolist())
    retained = [sid for i, sid in enumerate(train.sample_ids) if i not in forgotten_set]
    d_unl = distance(w_unlearned, w_retrained)
    d_orig = distance(w_original, w_retrained)
    out: dict[str, Any] = {
        "distance_unlearned_retrained": d_unl,
        "distance_original_retrained": d_orig,
        "distance_ratio": d_unl / d_orig if d_orig > 0 else math.nan,
        "num_forgotten": len(forgotten_set),
        "num_retained": len(retained),
    }
    for name, w in (("original", w_original), ("unlearned", w_unlearned), ("retrained", w_retrained)):
        out[f"test_accuracy_{name}"] = accuracy(model, w, test)
        out[f"retained_accuracy_{name}"] = accuracy(model, w, train, retained) if retained else math.nan
        out[f"forgotten_accuracy_{name}"] = accuracy(model, w, train, forgotten)
        attack = loss_attack(per_sample_losses(model, w, train, forgotten), per_sample_losses(model, w, test))
        out[f"mia_auc_{name}"], out[f"mia_advantage_{name}"] = attack.auc, attack.advantage
    out.update(loss_change_correlation(model, w_original, w_unlearned, w_retrained, train, forgotten, l2=l2))
    return out


__all__ = ["accuracy", "distance", "loss_change_correlation", "per_sample_losses", "report"]
