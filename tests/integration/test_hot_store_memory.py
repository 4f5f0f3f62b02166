"""The hot-store estimate (``JobEstimate.hot_store_bytes``) against what a REAL Redis holds for the state a
fit writes (``MEMORY USAGE`` of every key the model has, allocator rounding and per-entry overhead
included): never below it, and at most 1.5 times it (1.2 to 1.3 on these fits, vectors of 2,010 and 7,850
values, float32 and half precision, weights only for Newton)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
import torch

from service.storage.hot import HotStore
from tests.unit.test_hot_store_estimates import publish
from unlearning.data.builtin import make_synthetic
from unlearning.methods.job_estimate import DataShape
from unlearning.methods.protocol import PrivacyTarget
from unlearning.methods.registry import get_method

AUDITED = PrivacyTarget(1.0, 1e-3, "audited")


def redis_memory(hot: HotStore, model_id: int) -> int:
    """What Redis reports it holds for the model's keys (every element counted)."""
    return sum(
        int(hot.client.memory_usage(key, samples=0) or 0)
        for key in hot.client.scan_iter(hot.key(model_id, "*"))
    )


@pytest.mark.parametrize(
    ("name", "features", "config"),
    [
        ("hessian_free", 200, {"epochs": 2}),
        ("hessian_free", 200, {"epochs": 2, "vector_dtype": "bfloat16"}),
        ("hessian_free", 784, {"epochs": 1, "vector_dtype": "float16"}),
        ("newton_removal", 784, {}),
    ],
)
def test_the_estimate_bounds_what_redis_holds_for_a_fitted_state(
    redis_url: str, name: str, features: int, config: dict[str, Any]
) -> None:
    torch.set_num_threads(1)
    data = make_synthetic(300, features, 10, 0, samples_per_owner=3)
    state, _ = get_method(name).fit(data, config, AUDITED, seed=0)
    hot = publish(state, 1, HotStore(redis.Redis.from_url(redis_url), f"estimate-{uuid.uuid4().hex[:8]}"))
    held = redis_memory(hot, 1)
    shape = DataShape(len(data), features, 10, owners=len(set(data.owner_ids)))
    estimated = get_method(name).estimate_job(config, shape).hot_store_bytes
    assert held <= estimated <= 1.5 * held, (estimated, held, estimated / held)
