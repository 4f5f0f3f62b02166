"""The pure parts of ``python -m bench.tabular``: its problems, its baselines, its CSV and its target."""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.tabular import (
    GENERATED_FULL,
    GENERATED_QUICK,
    METHODS,
    Generated,
    acc_majority,
    covertype,
    flagged_of,
    generated,
    judge,
    problems,
    split,
    table_csv,
)


@pytest.mark.parametrize("spec", GENERATED_QUICK, ids=lambda s: s.name)
def test_a_generated_problem_is_seeded_has_its_declared_shape_and_scattered_scales(spec: Generated) -> None:
    problem = generated(spec)
    again = generated(spec)
    assert np.array_equal(problem.features, again.features) and np.array_equal(problem.labels, again.labels)
    assert problem.features.shape == (spec.rows, spec.dims)
    assert problem.classes == spec.classes and set(np.unique(problem.labels)) == set(range(spec.classes))
    # float32 values, so that the service (which reads float32) and the baseline see the same numbers
    assert np.array_equal(problem.features, problem.features.astype(np.float32).astype(np.float64))
    spread = problem.features.std(axis=0)
    assert spread.max() / spread.min() > 1e4  # columns x 10**U(-3, 4): orders of magnitude apart
    offsets = np.abs(problem.features.mean(axis=0)) / spread
    assert offsets.max() > 20 and offsets.max() <= 101  # offsets of up to 100 spreads
    other = generated(Generated(spec.name, spec.rows, spec.dims, spec.classes, spec.seed + 100))
    assert not np.array_equal(problem.features, other.features)


def test_the_modes_cover_the_declared_sizes_and_classes() -> None:
    assert all(spec.rows <= 2000 for spec in GENERATED_QUICK)
    assert min(s.classes for s in GENERATED_FULL) == 2 and max(s.classes for s in GENERATED_FULL) == 10
    assert min(s.rows for s in GENERATED_FULL) <= 500 and max(s.rows for s in GENERATED_FULL) == 100_000
    assert METHODS == ("hessian_free", "langevin", "mini_unlearning", "newton_removal")


def write_covertype(path: Path, rows: int) -> None:
    rng = np.random.default_rng(0)
    with gzip.open(path, "wt") as fh:
        fh.write("Elevation,Aspect,Soil_Type1,Cover_Type\n")
        for i in range(rows):
            fh.write(f"{rng.uniform():.6f},{rng.uniform():.6f},{i % 2},{1 + i % 7}\n")


def test_quick_problems_are_small_and_covertype_is_skipped_with_a_note_when_missing(tmp_path: Path) -> None:
    found, notes = problems(quick=True, seed=0, covertype_path=tmp_path / "absent.csv.gz")
    assert [p.name for p in found][:3] == ["iris", "wine", "breast_cancer"]
    assert "covertype" not in {p.name for p in found} and "covertype skipped" in notes[0]
    assert all(p.rows <= 2000 for p in found)
    write_covertype(tmp_path / "test.csv.gz", 70)
    found, notes = problems(quick=True, seed=0, covertype_path=tmp_path / "test.csv.gz")
    assert not notes and found[-1].name == "covertype"


def test_covertype_labels_start_at_zero_and_a_subsample_is_seeded(tmp_path: Path) -> None:
    write_covertype(tmp_path / "test.csv.gz", 70)
    whole = covertype(tmp_path / "test.csv.gz", None, 0)
    assert whole.features.shape == (70, 3) and whole.classes == 7 and whole.labels.min() == 0
    part = covertype(tmp_path / "test.csv.gz", 30, 0)
    assert part.rows == 30 and np.array_equal(
        part.features, covertype(tmp_path / "test.csv.gz", 30, 0).features
    )


def test_the_split_is_seeded_stratified_and_75_25() -> None:
    problem = generated(GENERATED_QUICK[1])
    s = split(problem, 0)
    assert len(s.y_test) == problem.rows // 4 and len(s.y_train) + len(s.y_test) == problem.rows
    assert np.array_equal(s.x_test, split(problem, 0).x_test)
    train_share = np.bincount(s.y_train) / len(s.y_train)
    test_share = np.bincount(s.y_test) / len(s.y_test)
    assert np.allclose(train_share, test_share, atol=0.01)


def test_the_majority_rate_is_the_train_majority_on_the_test_rows() -> None:
    assert acc_majority(np.array([0, 1, 1, 1, 2]), np.array([0, 0, 1, 2])) == 0.25


def test_the_csv_carries_ids_owners_labels_and_exact_float32_features() -> None:
    x = np.array([[1e-3, 12345.678], [-7.25, 3.0e4], [0.1, 2.0]], dtype=np.float32).astype(np.float64)
    rows = list(csv.reader(io.StringIO(gzip.decompress(table_csv(x, np.array([0, 2, 1]), "t")).decode())))
    assert rows[0] == ["sample_id", "owner_id", "label", "f0", "f1"]
    assert [r[:3] for r in rows[1:]] == [
        ["t-0", "t-owner-0", "0"],
        ["t-1", "t-owner-0", "2"],
        ["t-2", "t-owner-1", "1"],
    ]
    back = np.array([[float(v) for v in r[3:]] for r in rows[1:]], dtype=np.float32)
    assert np.array_equal(back, x.astype(np.float32))


def entry(acc: float | None, flagged: bool | None = False, error: str | None = None) -> dict[str, Any]:
    return {"acc": acc, "flagged": flagged, "error": error, "train_s": 1.0}


def results(lr: float, majority: float, **methods: dict[str, Any]) -> dict[str, Any]:
    return {"d": {"acc_sklearn_lr": lr, "acc_majority": majority, "methods": methods}}


def test_a_gap_of_4_points_misses_the_target_and_2_points_does_not() -> None:
    close = judge(results(0.90, 0.5, hessian_free=entry(0.88), newton_removal=entry(0.88)))
    assert close["within_target"] is True and close["misses"] == []
    assert close["worst_gap"] == pytest.approx(0.02) and close["worst_gap_points"] == pytest.approx(2.0)
    far = judge(results(0.90, 0.5, hessian_free=entry(0.88), newton_removal=entry(0.86)))
    assert far["within_target"] is False
    assert [(m["dataset"], m["method"]) for m in far["misses"]] == [("d", "newton_removal")]
    assert far["worst"] == {"dataset": "d", "method": "newton_removal"}
    assert far["worst_gap"] == pytest.approx(0.04)
    assert judge(results(0.90, 0.5, hessian_free=entry(0.95)))["within_target"] is True  # ahead of sklearn


def test_mini_unlearning_may_fall_5_points_behind() -> None:
    assert judge(results(0.90, 0.5, mini_unlearning=entry(0.86)))["within_target"] is True
    assert judge(results(0.90, 0.5, mini_unlearning=entry(0.85)))["within_target"] is True
    assert judge(results(0.90, 0.5, mini_unlearning=entry(0.84)))["within_target"] is False
    assert judge(results(0.90, 0.5, langevin=entry(0.86)))["within_target"] is False


def test_a_failed_model_misses_and_a_flag_misses_only_where_sklearn_clearly_beats_the_majority() -> None:
    failed = judge(results(0.90, 0.5, langevin=entry(None, None, "failed: burn-in")))
    assert failed["within_target"] is False and failed["failed"] == 1 and failed["worst_gap"] is None
    assert "burn-in" in failed["misses"][0]["reason"]
    flagged = judge(results(0.90, 0.5, hessian_free=entry(0.90, flagged=True)))
    assert flagged["within_target"] is False and flagged["flagged"] == 1
    unlearnable = judge(results(0.52, 0.50, hessian_free=entry(0.51, flagged=True)))
    assert unlearnable["within_target"] is True and unlearnable["flagged"] == 1
    unknown = judge(results(0.90, 0.5, hessian_free=entry(0.90, flagged=None)))
    assert unknown["within_target"] is True and unknown["flags_unknown"] == 1


def test_flagged_is_read_from_the_quality_report_and_null_without_one() -> None:
    assert flagged_of({"id": 1}) is None
    assert flagged_of({"quality": None}) is None
    assert flagged_of({"quality": {"accuracy": 0.5}}) is None
    assert flagged_of({"quality": {"flagged": True}}) is True
    assert flagged_of({"quality": {"flagged": False}}) is False
