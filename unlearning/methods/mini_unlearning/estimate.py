"""The job estimate of a ``mini_unlearning`` training (:meth:`MiniUnlearning.estimate_job`).

Training is plain mini-batch SGD (:func:`.trajectory.train_with_window`): one batch gradient per step,
epochs x rows samples in all. What it keeps: the last k + m + 1 iterates and k step directions of p
parameters in the window's dtype (stacked once more at the end), the batch schedule (epochs x rows
indices), the window's rows and sample ids, and the rows themselves. The hot store holds the served
weights only (the window is an artifact, in the artifact store).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unlearning.methods.hessian_free.sgd import model_size_of, sgd_run
from unlearning.methods.job_estimate import (
    AUTOGRAD_MEMORY,
    AUTOGRAD_WARMUP_SECONDS,
    FLOAT64,
    INDEX,
    STEP_SECONDS,
    DataShape,
    JobEstimate,
    data_bytes,
    estimate,
    hot_store_bytes,
)
from unlearning.methods.mini_unlearning.config import WindowConfig
from unlearning.sgd_defaults import SGDRule

GRADIENT_FACTOR = 3.0  # a batch gradient: one forward and a backward pass of twice its cost
STEP_CALLS = 3  # small steps (STEP_SECONDS) of one SGD step of logistic regression (closed form)
AUTOGRAD_STEP_CALLS = 20  # of one SGD step of a neural family (a torch.func gradient)


def mini_unlearning_estimate(merged: Mapping[str, Any], shape: DataShape, rule: SGDRule) -> JobEstimate:
    """Memory and single-core time of ``fit`` with the (merged) configuration on data of ``shape``; ``rule``
    derives a null batch size or epoch count."""
    window = WindowConfig.from_config(merged)
    itemsize = window.dtype.itemsize
    n = max(shape.rows, 1)
    batch, epochs, steps = sgd_run(merged, n, rule)
    size = model_size_of(merged, shape)
    k = min(window.k, steps)
    recorded = min(window.k + window.m, steps) + 1
    per_sample = 2.0 if merged.get("clip_mode") == "per_sample" else 1.0  # vmap over per-sample gradients
    closed_form = merged.get("family", "logistic_regression") == "logistic_regression"
    memory = {
        "recorded window (k + m + 1 snapshots and k directions)": 2.0
        * (recorded + k)
        * size.parameters
        * itemsize,
        "batch schedule": float(epochs * n * INDEX),
        "window rows and ids": 2.0 * recorded * batch * INDEX,
        "training rows": data_bytes(shape, FLOAT64) + data_bytes(shape, itemsize),
        "a batch's activations": 4.0 * per_sample * batch * size.activations * itemsize,
    }
    flops = {
        "SGD (epochs x rows x a gradient)": GRADIENT_FACTOR * per_sample * epochs * n * size.forward_flops
    }
    fixed = {"SGD steps": steps * (STEP_CALLS if closed_form else AUTOGRAD_STEP_CALLS) * STEP_SECONDS}
    if not closed_form:
        memory["torch.func"] = AUTOGRAD_MEMORY
        fixed["torch.func's first transforms"] = AUTOGRAD_WARMUP_SECONDS
    return estimate(memory, flops, fixed, hot_store=hot_store_bytes(size.parameters, itemsize))


__all__ = ["mini_unlearning_estimate"]
