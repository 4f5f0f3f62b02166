"""Table loaders refuse malformed input with InvalidDatasetError (the service's 422), never a crash or a
misleading message: out-of-range labels, unbounded class counts, empty feature dimensions, zero rows,
float32 overflow, dictionary-encoded labels and feature columns that clash with other columns."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from unlearning.data import Dataset, load_table, uploads
from unlearning.errors import InvalidDatasetError

HEADER = ["sample_id", "owner_id", "f1", "f2", "label"]


def _write_csv(path: Path, rows: list[list[object]], header: list[str] = HEADER) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _csv_with_label(tmp_path: Path, label: str) -> Path:
    return _write_csv(tmp_path / "t.csv", [["a", "u", 1, 2, "0"], ["b", "u", 3, 4, label]])


def _npz(tmp_path: Path, features: np.ndarray, labels: np.ndarray, **extra: np.ndarray) -> Path:
    path = tmp_path / "d.npz"
    np.savez(path, features=features, labels=labels, **extra)
    return path


def _parquet(tmp_path: Path, columns: dict[str, object]) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table(columns), path)
    return path


# --- 1. integer labels beyond 64 bits --------------------------------------------------------------


@pytest.mark.parametrize("label", ["18446744073709551616", "9223372036854775808"])
def test_csv_label_beyond_64_bits_is_too_large(tmp_path: Path, label: str) -> None:
    with pytest.raises(
        InvalidDatasetError, match=rf"label {label} at data row 1 of column 'label' is too large"
    ):
        load_table(_csv_with_label(tmp_path, label))


def test_csv_label_below_minus_64_bits_is_negative(tmp_path: Path) -> None:
    with pytest.raises(InvalidDatasetError, match="label -18446744073709551616 at data row 1 .* is negative"):
        load_table(_csv_with_label(tmp_path, "-18446744073709551616"))


# --- 2. the inferred class count is bounded --------------------------------------------------------


def test_max_classes_matches_the_service_cap() -> None:
    assert uploads.MAX_CLASSES == 100_000


def test_csv_huge_integer_label_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        InvalidDatasetError, match="label 1000000000000 at data row 1 .*below 100,000 .or strings"
    ):
        load_table(_csv_with_label(tmp_path, "1000000000000"))


def test_csv_label_bound_applies_after_the_offset(tmp_path: Path) -> None:
    assert load_table(_csv_with_label(tmp_path, "999")).num_classes == 1_000  # a small table's allowance
    with pytest.raises(InvalidDatasetError, match="label 100000 at data row 1 .*below 100,000"):
        load_table(_csv_with_label(tmp_path, "100000"))
    shifted = _write_csv(tmp_path / "s.csv", [["a", "u", 1, 2, "1"], ["b", "u", 3, 4, "1000"]])
    assert load_table(shifted, label_offset=1).num_classes == 1_000
    # int64 arithmetic would wrap this label round to a negative number once the offset is subtracted.
    with pytest.raises(
        InvalidDatasetError, match=r"label 9223372036854775808 at data row 1 .*label_offset=-1\) is too large"
    ):
        load_table(_csv_with_label(tmp_path, "9223372036854775807"), label_offset=-1)


def test_csv_huge_whole_float_label_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidDatasetError, match="is too large: labels must be class indices below 100,000"):
        load_table(_csv_with_label(tmp_path, "1e30"))


def test_npz_huge_label_is_refused(tmp_path: Path) -> None:
    path = _npz(tmp_path, np.zeros((2, 2)), np.array([0, 10**12]))
    with pytest.raises(
        InvalidDatasetError, match="label 1000000000000 at data row 1 of column 'labels'.*100,000"
    ):
        load_table(path)


def test_npz_num_classes_scalar_is_bounded(tmp_path: Path) -> None:
    path = _npz(tmp_path, np.zeros((2, 2)), np.array([0, 1]), num_classes=np.array(10**12))
    with pytest.raises(InvalidDatasetError, match="'num_classes' is 1000000000000.*at most 100,000"):
        load_table(path)


def test_parquet_huge_label_is_refused(tmp_path: Path) -> None:
    path = _parquet(tmp_path, {"f": [0.1, 0.2], "label": [0, 10**12]})
    with pytest.raises(InvalidDatasetError, match="label 1000000000000 at data row 1 .*100,000"):
        load_table(path, id_column=None, owner_column=None)


def test_too_many_distinct_string_labels_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 100,001 distinct strings would make a slow test: lower the bound instead.
    monkeypatch.setattr(uploads, "MAX_CLASSES", 2)
    path = _write_csv(
        tmp_path / "t.csv", [["a", "u", 1, 2, "x"], ["b", "u", 3, 4, "y"], ["c", "u", 5, 6, "z"]]
    )
    with pytest.raises(InvalidDatasetError, match="3 distinct values.*at most 2 classes"):
        load_table(path)


# --- 3 and 4. NPZ shapes ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(4, 0), (4, 0, 3), (4, 3, 0)])
def test_npz_zero_size_feature_dimension_is_refused(tmp_path: Path, shape: tuple[int, ...]) -> None:
    path = _npz(tmp_path, np.zeros(shape), np.array([0, 1, 0, 1]))
    with pytest.raises(InvalidDatasetError, match=r"'features' has shape .*: no feature values"):
        load_table(path)


def test_npz_zero_rows_is_refused(tmp_path: Path) -> None:
    path = _npz(tmp_path, np.zeros((0, 3)), np.zeros(0, dtype=np.int64))
    with pytest.raises(InvalidDatasetError, match="the dataset has no rows"):
        load_table(path)


# --- 5. uint64 labels above 2**63 ------------------------------------------------------------------


def test_npz_uint64_label_above_int64_is_too_large_not_negative(tmp_path: Path) -> None:
    path = _npz(tmp_path, np.zeros((2, 2)), np.array([0, 2**63 + 5], dtype=np.uint64))
    with pytest.raises(InvalidDatasetError, match=f"label {2**63 + 5} at data row 1 .* is too large"):
        load_table(path)


def test_parquet_uint64_label_above_int64_is_too_large_not_negative(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    path = _parquet(tmp_path, {"f": [0.1, 0.2], "label": pa.array([0, 2**63 + 5], type=pa.uint64())})
    with pytest.raises(InvalidDatasetError, match=f"label {2**63 + 5} at data row 1 .* is too large"):
        load_table(path, id_column=None, owner_column=None)


# --- 6. Parquet dictionary-encoded labels ----------------------------------------------------------


def test_parquet_dictionary_encoded_string_labels_load(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    labels = pa.array(["dog", "cat", "dog"]).dictionary_encode()
    path = _parquet(tmp_path, {"f": [0.1, 0.2, 0.3], "label": labels})
    ds = load_table(path, id_column=None, owner_column=None)
    assert ds.class_names == ("cat", "dog") and ds.labels.tolist() == [1, 0, 1]


# --- 7. float32 overflow ---------------------------------------------------------------------------


def test_csv_feature_overflowing_float32_names_the_column(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "t.csv", [["a", "u", 1, 2, "0"], ["b", "u", 3, "-1e39", "1"]])
    with pytest.raises(InvalidDatasetError, match="column 'f2' has value -1e[+]39 at data row 1, .*float32"):
        load_table(path)


def test_parquet_feature_overflowing_float32_names_the_column(tmp_path: Path) -> None:
    path = _parquet(tmp_path, {"f": [0.1, 1e39], "label": [0, 1]})
    with pytest.raises(InvalidDatasetError, match="column 'f' has value 1e[+]39 at data row 1, .*float32"):
        load_table(path, id_column=None, owner_column=None)


def test_dataset_features_overflowing_float32_say_so() -> None:
    with pytest.raises(InvalidDatasetError, match="sample 'b' .row 1.* overflow float32"):
        Dataset(("a", "b"), ("u", "u"), np.array([[1.0], [1e39]]), np.array([0, 1]), 2)
    with pytest.raises(InvalidDatasetError, match="NaN or infinite"):  # a real inf keeps its message
        Dataset(("a", "b"), ("u", "u"), np.array([[1.0], [np.inf]]), np.array([0, 1]), 2)


def test_npz_features_overflowing_float32_say_so(tmp_path: Path) -> None:
    path = _npz(tmp_path, np.array([[1.0, 2.0], [3.0, 4e38]]), np.array([0, 1]))
    with pytest.raises(InvalidDatasetError, match="overflow float32"):
        load_table(path)


# --- 8. feature_columns that clash ---------------------------------------------------------------


def test_feature_columns_named_twice_are_refused(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "t.csv", [["a", "u", 1, 2, "0"], ["b", "u", 3, 4, "1"]])
    with pytest.raises(InvalidDatasetError, match="feature column 'f1' is named more than once"):
        load_table(path, feature_columns=["f1", "f1"])


@pytest.mark.parametrize(("column", "role"), [("label", "label"), ("sample_id", "id"), ("owner_id", "owner")])
def test_feature_column_that_is_the_label_id_or_owner_is_refused(
    tmp_path: Path, column: str, role: str
) -> None:
    path = _write_csv(tmp_path / "t.csv", [["a", "u", 1, 2, "0"], ["b", "u", 3, 4, "1"]])
    with pytest.raises(InvalidDatasetError, match=f"feature column '{column}' is also the {role} column"):
        load_table(path, feature_columns=[column, "f1"])


def test_parquet_feature_columns_clash_is_refused(tmp_path: Path) -> None:
    path = _parquet(tmp_path, {"f": [0.1, 0.2], "label": [0, 1]})
    with pytest.raises(InvalidDatasetError, match="feature column 'label' is also the label column"):
        load_table(path, id_column=None, owner_column=None, feature_columns=["label", "f"])
    with pytest.raises(InvalidDatasetError, match="feature column 'f' is named more than once"):
        load_table(path, id_column=None, owner_column=None, feature_columns=["f", "f"])
