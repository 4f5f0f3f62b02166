"""Hessian-free vectors kept in half precision (``vector_dtype``): stored in the dtype asked for (half the
bytes), every sum computed in float32, forgets within the rounding of float32's, deterministic, the same
through the hot store and the statistics buckets as in memory; refused under the Eq. 56 bound, certified by
the gradient residual as before."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from service.jobs.state import BlobCache, read_statistics, write_statistics
from service.storage.artifacts import LocalArtifactStore
from service.storage.hot import HotStore, connect
from service.storage.statistics import RedisSampleStatistics
from unlearning.data import Dataset, make_synthetic
from unlearning.errors import InvalidConfigError
from unlearning.methods.hessian_free import HessianFree
from unlearning.methods.protocol import BudgetPolicy, ForgetRequest, MethodState, PrivacyTarget
from unlearning.methods.statistics import InMemorySampleStatistics

AUDITED = PrivacyTarget(1.0, 1e-3, "audited")
CERTIFIED = PrivacyTarget(1.0, 1e-3, "certified")
TINY = {"epochs": 4, "batch_size": 8, "lr": 0.05, "lr_decay": 0.99, "l2": 0.5, "clip_norm": 5.0}
HALF = ("float16", "bfloat16")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
UNIT_ROUNDING = {"float16": 2.0**-11, "bfloat16": 2.0**-8}  # relative rounding of one value


@pytest.fixture(scope="module")
def data() -> Dataset:
    return make_synthetic(120, 6, 3, 0, samples_per_owner=3)


def _fit(data: Dataset, dtype: str, privacy: PrivacyTarget = AUDITED, **extra: object) -> MethodState:
    torch.manual_seed(0)
    state, _ = HessianFree().fit(data, {**TINY, "vector_dtype": dtype, **extra}, privacy, seed=3)
    return state


def _stats(state: MethodState) -> InMemorySampleStatistics:
    assert isinstance(state.statistics, InMemorySampleStatistics)
    return state.statistics


def test_the_choices_are_declared_and_enforced() -> None:
    method = HessianFree()
    declared = {p.name: p for p in method.hyperparameters()}["vector_dtype"]
    assert set(declared.choices) == set(DTYPES) and method.default_config()["vector_dtype"] == "float32"
    for bad in ("float8", "float64", 16, None):
        with pytest.raises(InvalidConfigError, match="vector_dtype"):
            method.check_config({"vector_dtype": bad})


@pytest.mark.parametrize("dtype", HALF)
def test_half_precision_vectors_are_kept_in_their_dtype_and_summed_in_float32(
    data: Dataset, dtype: str
) -> None:
    full, half = _stats(_fit(data, "float32")), _stats(_fit(data, dtype))
    exported = half.export().vectors
    assert (
        exported.dtype == DTYPES[dtype]
        and exported.element_size() * 2 == full.export().vectors.element_size()
    )
    # the same Stage II, rounded once: each value within its dtype's rounding of float32's
    reference = full.export().vectors
    assert torch.equal(exported, reference.to(DTYPES[dtype]))
    ids = list(data.sample_ids[:10])
    assert (
        half.sum_samples(ids).dtype == torch.float32 and half.sum_owner("owner-00000").dtype == torch.float32
    )
    torch.testing.assert_close(half.sum_samples(ids), exported[:10].float().sum(0), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("dtype", HALF)
def test_a_forget_from_half_precision_vectors_is_float32_s_within_the_rounding(
    data: Dataset, dtype: str
) -> None:
    request = ForgetRequest(
        owner_ids=("owner-00001", "owner-00007"), sample_ids=(data.sample_ids[40], data.sample_ids[90])
    )
    full = HessianFree().forget(_fit(data, "float32"), request, 0, AUDITED).state
    half = HessianFree().forget(_fit(data, dtype), request, 0, AUDITED).state
    moved = float((full.clean_weights - _fit(data, "float32").clean_weights).norm())
    error = float((half.clean_weights - full.clean_weights).norm())
    assert 0 < error <= 8 * UNIT_ROUNDING[dtype] * moved, (error, moved)


@pytest.mark.parametrize("dtype", HALF)
def test_half_precision_fits_and_forgets_are_deterministic(data: Dataset, dtype: str) -> None:
    a, b = _fit(data, dtype), _fit(data, dtype)
    assert torch.equal(_stats(a).export().vectors, _stats(b).export().vectors)
    request = ForgetRequest(owner_ids=("owner-00002",))
    assert torch.equal(
        HessianFree().forget(a, request, 5, AUDITED).state.released_weights,
        HessianFree().forget(b, request, 5, AUDITED).state.released_weights,
    )


@pytest.mark.parametrize("dtype", HALF)
def test_the_audit_probe_measures_the_rounded_vectors(data: Dataset, dtype: str) -> None:
    full, half = _fit(data, "float32"), _fit(data, dtype)
    assert full.accounting["measured"]["probe_distance_to_replay_retrain"] != pytest.approx(
        half.accounting["measured"]["probe_distance_to_replay_retrain"], rel=1e-9
    )


@pytest.mark.parametrize("dtype", HALF)
def test_the_hot_store_holds_the_vectors_in_their_dtype_and_sums_like_the_library(
    data: Dataset, dtype: str
) -> None:
    memory = _stats(_fit(data, dtype))
    snapshot = memory.export()
    hot = HotStore(connect(None), "test")
    hot.load_stats(1, 1, snapshot.sample_ids, snapshot.owner_ids, snapshot.vectors)
    assert hot.stats_meta(1) == {"seq": "1", "dim": str(memory.dim), "dtype": dtype}
    redis_stats = RedisSampleStatistics(hot, 1, dim=memory.dim, dtype=dtype)
    for owner in ("owner-00000", "owner-00005"):
        assert torch.equal(redis_stats.sum_owner(owner), memory.sum_owner(owner))  # the same rounded sums
    ids = list(data.sample_ids[3:30])
    torch.testing.assert_close(redis_stats.sum_samples(ids), memory.sum_samples(ids), rtol=1e-6, atol=1e-9)
    # a partial owner's sum is written back in the dtype, from its float32 difference
    redis_stats.remove([data.sample_ids[0]])  # one of owner-0's three rows
    redis_stats.apply(1, 2)
    after = RedisSampleStatistics(hot, 1, dim=memory.dim, dtype=dtype)
    expected = (memory.sum_owner("owner-00000") - snapshot.vectors[0].float()).to(DTYPES[dtype]).float()
    assert torch.equal(after.sum_owner("owner-00000"), expected)


@pytest.mark.parametrize("dtype", HALF)
def test_the_statistics_buckets_round_trip_half_precision_vectors(
    data: Dataset, dtype: str, tmp_path: Path
) -> None:
    snapshot = _stats(_fit(data, dtype)).export()
    store = LocalArtifactStore(tmp_path / "artifacts", durable=False)
    manifest = write_statistics(store, snapshot, max_buckets=8)
    assert manifest["dtype"] == dtype
    back = read_statistics(BlobCache(store), manifest)
    order = {sid: i for i, sid in enumerate(back.sample_ids)}
    rows = torch.as_tensor([order[s] for s in snapshot.sample_ids])
    assert back.vectors.dtype == DTYPES[dtype] and torch.equal(back.vectors[rows], snapshot.vectors)


@pytest.mark.parametrize("dtype", HALF)
def test_half_precision_is_refused_under_the_eq56_bound(data: Dataset, dtype: str) -> None:
    method = HessianFree()
    with pytest.raises(InvalidConfigError, match="Eq. 56 bound does not cover the rounding"):
        method.check_registration({"certified_bound": "eq56", "vector_dtype": dtype}, CERTIFIED, 6)
    method.check_registration(
        {"certified_bound": "eq56", "vector_dtype": dtype}, AUDITED, 6
    )  # nothing certified
    with pytest.raises(InvalidConfigError, match="vector_dtype"):
        _fit(data, dtype, CERTIFIED, certified_bound="eq56")


@pytest.mark.parametrize("dtype", HALF)
def test_a_certified_release_from_half_precision_vectors_still_passes_its_check(
    data: Dataset, dtype: str
) -> None:
    """The gradient residual is checked on the weights released, in float64 over the remaining rows: the
    rounding of the vectors moves only where the check starts."""
    method = HessianFree()
    state = _fit(data, dtype, CERTIFIED, sensitivity_cap=0.05)
    gone = ("owner-00003", "owner-00011")
    outcome = method.forget(
        state,
        ForgetRequest(owner_ids=gone),
        7,
        CERTIFIED,
        remaining=data,
        policy=BudgetPolicy(max_deletion_fraction=None),
    )
    assert (
        outcome.certificate.inputs["check"] == "passed"
        and method.verify_certificate(outcome.certificate) == []
    )
    from unlearning.methods.hessian_free import audit_residual

    remaining = data.without(list(outcome.forgotten_ids))
    audit = audit_residual(outcome.state, remaining)
    assert audit.within_cap and audit.bound <= 0.05
