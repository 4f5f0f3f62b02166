"""The recorded-SGD settings of the Hessian-free method, shared with the other SGD-trained methods:
the model architecture of a configuration, the :class:`~unlearning.steps.SGDConfig` it trains with, the
upper bounds checked at registration and their hyperparameter declarations."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from unlearning.data import Dataset
from unlearning.errors import InvalidConfigError
from unlearning.methods.hyperparameters import HyperParameter
from unlearning.methods.job_estimate import DataShape, ModelSize, model_size
from unlearning.models import ModelSpec
from unlearning.models.families import family_names
from unlearning.models.nets import MAX_HIDDEN_LAYERS, MAX_HIDDEN_WIDTH, hidden_widths
from unlearning.sgd_defaults import DERIVED_KEYS, SGDRule, derived_batch_size, derived_epochs
from unlearning.steps import CLIP_MODES, SGDConfig

_SGD_KEYS = ("epochs", "batch_size", "lr", "lr_decay", "l2", "clip_norm", "clip_mode")


def model_spec_for(dataset: Dataset, config: Mapping[str, Any]) -> ModelSpec:
    """The architecture for ``dataset`` from ``config["family"]`` (and ``hidden`` for the MLP)."""
    family = str(config.get("family", "logistic_regression"))
    options: dict[str, Any] = {}
    if family == "mlp":
        options = {"hidden": list(config.get("hidden", [64])), "activation": config.get("activation", "tanh")}
    shape = dataset.feature_shape if family in ("cnn", "lenet5") else (dataset.num_features,)
    return ModelSpec(family=family, input_shape=tuple(shape), num_classes=dataset.num_classes, options=options)


def sgd_config(config: Mapping[str, Any]) -> SGDConfig:
    """The recorded training SGD of ``config`` (also Mini-Unlearning's: ``lr_decay`` 1 is a constant step)."""
    values = {k: config[k] for k in _SGD_KEYS if k in config}
    clip = values.get("clip_norm")
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, int | float)):
        raise InvalidConfigError(f"clip_norm must be a number or null, got {clip!r}")
    values["clip_norm"] = None if clip is None else float(clip)
    return SGDConfig(**values)


# Upper bounds on the recorded-SGD settings, checked at registration so that a magnitude torch cannot
# represent (lr 1e300 overflows float32) or a run that would never finish is a 422, not a failed training.
# Generous: the paper settings, benches and tests use lr <= 0.05, l2 <= 0.5, clip_norm <= 10, at most 60
# epochs and batches of at most 256.
MAX_LR = 10.0  # SGD diverges long before: a step of 10 times the gradient is already no learning rate
MAX_L2 = 1e4  # lr * l2 > 2 diverges for any lr this allows, so a larger penalty only zeroes the weights
MAX_CLIP_NORM = 1e6  # far above any gradient norm; clip_mode "none" is the way to switch clipping off
MAX_EPOCHS = 1_000  # every batch of every epoch is scheduled up front and replayed on a retrain
MAX_BATCH_SIZE = 2**20  # a batch at least the size of the data is already full-batch gradient descent
MAX_RHO_ITERATIONS = 100  # power iterations per step for rho (default 3)

# The data-derived SGD defaults (unlearning.sgd_defaults): batch min(32, n), at least 1000 steps within 200
# epochs, lr 4 / mean ||[x, 1]||^2 decaying to 0.3 lr over the run.
SGD_RULE = SGDRule(batch_size=32, min_steps=1000, max_epochs=200, lr_scale=4.0, final_lr_fraction=0.3)


def at_most(name: str, value: float, limit: float, hint: str = "") -> None:
    if value > limit:
        shown = f"{limit:,}" if isinstance(limit, int) else f"{limit:g}"
        raise InvalidConfigError(f"{name} must be at most {shown}, got {value!r}{hint}")


def check_sgd_config(merged: Mapping[str, Any]) -> None:
    """The recorded-SGD settings, with their upper bounds, and, for an MLP, its widths (shared by the
    SGD-trained methods). A None of :data:`unlearning.sgd_defaults.DERIVED_KEYS` passes: ``fit`` derives it."""
    cfg = sgd_config({k: v for k, v in merged.items() if not (v is None and k in DERIVED_KEYS)})
    at_most("lr", cfg.lr, MAX_LR)
    at_most("l2", cfg.l2, MAX_L2)
    at_most("epochs", cfg.epochs, MAX_EPOCHS)
    at_most("batch_size", cfg.batch_size, MAX_BATCH_SIZE)
    if cfg.clip_norm is not None:
        if not math.isfinite(cfg.clip_norm):
            raise InvalidConfigError(f"clip_norm must be a finite number or null, got {cfg.clip_norm!r}")
        at_most("clip_norm", cfg.clip_norm, MAX_CLIP_NORM, '; set clip_mode "none" to switch clipping off')
    family = merged.get("family", "logistic_regression")
    if not isinstance(family, str) or family not in family_names():
        raise InvalidConfigError(f"unknown model family {family!r}; choose one of {list(family_names())}")
    if family == "mlp":
        hidden_widths(merged.get("hidden", [64]))


def sgd_run(merged: Mapping[str, Any], rows: int, rule: SGDRule) -> tuple[int, int, int]:
    """(batch size, epochs, steps) the recorded SGD of ``merged`` takes on ``rows`` rows: the configured
    values, or those :mod:`unlearning.sgd_defaults` derives with ``rule`` (for a job estimate)."""
    n = max(int(rows), 1)
    batch = min(int(merged.get("batch_size") or derived_batch_size(n, rule)), n)
    epochs = int(merged.get("epochs") or derived_epochs(n, batch, rule))
    return batch, epochs, epochs * math.ceil(n / batch)


def model_size_of(merged: Mapping[str, Any], shape: DataShape) -> ModelSize:
    """The size of the model ``merged`` trains on data of ``shape`` (:func:`model_spec_for`'s architecture)."""
    family = str(merged.get("family", "logistic_regression"))
    hidden = list(merged.get("hidden", [64])) if family == "mlp" else []
    return model_size(family, shape.features, shape.classes, hidden)


def sgd_hyperparameters() -> tuple[HyperParameter, ...]:
    """The declarations of the keys :func:`check_sgd_config` checks (shared by the SGD-trained methods)."""
    return (
        HyperParameter("family", "string", "The model trained (the registration's top-level family)",
                       choices=family_names()),
        HyperParameter("hidden", "integer_list", "Hidden layer widths of the MLP (family mlp only)",
                       minimum=1, maximum=MAX_HIDDEN_WIDTH, max_items=MAX_HIDDEN_LAYERS),
        HyperParameter("epochs", "integer", "Passes of SGD over the training data", minimum=1, maximum=MAX_EPOCHS,
                       nullable=True, null_means="derived from the data (unlearning.sgd_defaults): enough passes for a fixed number of SGD steps"),
        HyperParameter("batch_size", "integer", "Samples per SGD step", minimum=1, maximum=MAX_BATCH_SIZE,
                       nullable=True, null_means="derived from the data (unlearning.sgd_defaults): min(default batch, n)"),
        HyperParameter("lr", "number", "Initial SGD step size eta", minimum=0, exclusive_minimum=True,
                       maximum=MAX_LR, nullable=True, null_means="derived from the data (unlearning.sgd_defaults): 4 / mean ||[x, 1]||^2"),
        HyperParameter("lr_decay", "number", "Per-step decay q of the step size, eta_t = eta * q^t (1: constant)",
                       minimum=0, exclusive_minimum=True, maximum=1, nullable=True,
                       null_means="derived from the data (unlearning.sgd_defaults): the decay over the run's steps (constant for mini_unlearning)"),
        HyperParameter("l2", "number", "L2 regularisation coefficient of (l2/2)||w||^2", minimum=0, maximum=MAX_L2,
                       nullable=True, null_means="derived from the data (unlearning.sgd_defaults): 1/n"),
        HyperParameter("clip_norm", "number", "Gradient clipping threshold (needed unless clip_mode is none)",
                       minimum=0, exclusive_minimum=True, maximum=MAX_CLIP_NORM, nullable=True,
                       null_means="no clipping threshold (only with clip_mode none)"),
        HyperParameter("clip_mode", "string", "Clip each per-sample gradient, the batch gradient, or none",
                       choices=CLIP_MODES),
    )
