"""The job estimate of a ``hessian_free`` training (:meth:`HessianFree.estimate_job`).

Stage I + II (:func:`unlearning.training.train_recorded`) keeps one float32 vector per sample and, at every
step, propagates all n of them through the step's map: for logistic regression two products with the
(b, D+1) batch, about 4 n b p flops (:meth:`~unlearning.steps.SoftmaxStepMap.propagate_`), hence 4 n^2 p per
epoch; for the neural families a forward-over-reverse jvp of the batch per vector, in chunks of 64 vectors
(:class:`~unlearning.steps.AutogradStepMap`). Memory: the vectors (n p), the per-owner sums of the statistics
(at most as many again), the batch schedule (epochs x n indices) and the rows. An audited fit replays the
training once more for its probe; a certified one polishes the weights by Newton-CG in float64. The state
keeps the vectors in ``vector_dtype`` (:mod:`.precision`): a copy of them, and of their per-owner sums, in
that dtype; the hot store holds the same (:func:`~unlearning.methods.job_estimate.hot_store_bytes`, with
float64 weights: a certified release's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from unlearning.methods.hessian_free.precision import DEFAULT_VECTOR_DTYPE, itemsize
from unlearning.methods.hessian_free.sgd import SGD_RULE, model_size_of, sgd_run
from unlearning.methods.job_estimate import (
    AUTOGRAD_CALL_SECONDS,
    AUTOGRAD_MEMORY,
    AUTOGRAD_WARMUP_SECONDS,
    FLOAT32,
    FLOAT64,
    INDEX,
    STEP_SECONDS,
    DataShape,
    JobEstimate,
    data_bytes,
    estimate,
    hot_store_bytes,
)

JVP_CHUNK = 64  # vectors per torch.func call of AutogradStepMap
JVP_FACTOR = 4.0  # a jvp of the batch direction: forward-over-reverse, about four forward passes per vector
POLISH_PASSES = 60  # passes over the rows of a certified fit's Newton-CG polish
STEP_CALLS = 4  # small steps (STEP_SECONDS) of one recorded step besides its spectral-norm tracking
PROPAGATE_CHUNK = 256  # vectors per block of SoftmaxStepMap.propagate_, two small steps each
REPLAY_CALLS = 3  # small steps of one step of the audited probe's replay


def hessian_free_estimate(merged: Mapping[str, Any], shape: DataShape) -> JobEstimate:
    """Memory and single-core time of ``fit`` with the (merged) configuration on data of ``shape``."""
    n = max(shape.rows, 1)
    batch, epochs, steps = sgd_run(merged, n, SGD_RULE)
    size = model_size_of(merged, shape)
    p = size.parameters
    closed_form = merged.get("family", "logistic_regression") == "logistic_regression"
    rho = int(merged.get("rho_iterations", 3))
    kept = itemsize(merged.get("vector_dtype", DEFAULT_VECTOR_DTYPE))
    # Stage II's float32 vectors, the state's copy in the kept dtype (none in float32: the same tensor)
    # and the per-owner sums in that dtype (at most one per row)
    copy = 0.0 if kept == FLOAT32 else 1.0
    memory = {
        "per-sample vectors (rows x parameters) and per-owner sums": n * p * (FLOAT32 + (1.0 + copy) * kept),
        "training rows": data_bytes(shape, FLOAT64) + data_bytes(shape, FLOAT32),
        "batch schedule": float(epochs * n * INDEX),
        "float64 polish of a certified release": 2.0 * data_bytes(shape) + 8.0 * n * shape.classes * FLOAT64,
    }
    fixed = {"the audited probe's replay steps": steps * REPLAY_CALLS * STEP_SECONDS}
    if closed_form:
        propagate = 4.0 * epochs * n * n * p
        calls = STEP_CALLS + 2 * rho + 2 * math.ceil(n / PROPAGATE_CHUNK)
        fixed["recorded steps"] = steps * calls * STEP_SECONDS
    else:
        memory["jvp chunks (64 vectors through a batch)"] = (
            4.0 * JVP_CHUNK * (batch * size.activations + p) * FLOAT32
        )
        memory["torch.func"] = AUTOGRAD_MEMORY
        propagate = JVP_FACTOR * epochs * n * n * size.forward_flops
        calls = math.ceil(n / JVP_CHUNK) + 2 * rho + 1
        fixed["recorded steps (torch.func calls)"] = (
            AUTOGRAD_WARMUP_SECONDS + steps * calls * AUTOGRAD_CALL_SECONDS
        )
    flops = {
        "propagating the per-sample vectors (Stage II: epochs x rows^2 x parameters)": propagate,
        "SGD steps and the spectral-norm tracking": epochs * n * (3.0 + 4.0 * rho) * size.forward_flops,
        "the audited probe's replay of the training": 3.0 * epochs * n * size.forward_flops,
        "float64 polish of a certified release": POLISH_PASSES * 4.0 * n * size.forward_flops,
    }
    hot = hot_store_bytes(p, FLOAT64, shape=shape, vector=p, vector_itemsize=kept)
    return estimate(memory, flops, fixed, hot_store=hot)


__all__ = ["hessian_free_estimate"]
