"""Readers of the table formats a user uploads: CSV (optionally gzip-compressed), Parquet and NPZ.

Each reader returns the raw columns (sample ids, owner ids, features as float64, labels as read) for
:func:`unlearning.data.uploads.load_table` to turn into a :class:`~unlearning.data.dataset.Dataset`, and
raises :class:`InvalidDatasetError` naming the column, row or array of a malformed file. NPZ archives
are read with ``allow_pickle=False`` always.
"""

from __future__ import annotations

import csv
import gzip
import operator
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from unlearning.data.files import is_gzip
from unlearning.data.limits import MAX_CLASSES
from unlearning.errors import InvalidDatasetError

__all__ = ["label_range_error", "read_csv", "read_npz", "read_parquet"]

_INT64_MIN = int(np.iinfo(np.int64).min)
_INT64_MAX = int(np.iinfo(np.int64).max)


# --------------------------------------------------------------------------------------------------
# Column checks
# --------------------------------------------------------------------------------------------------


def _missing_columns_error(
    source: Path, missing: Sequence[str], present: Sequence[str]
) -> InvalidDatasetError:
    hint = ""
    if any(m in ("sample_id", "owner_id") for m in missing):
        hint = " (pass id_column=None / owner_column=None to generate ids instead)"
    return InvalidDatasetError(
        f"{source}: column(s) {list(missing)} not found; the file has columns {list(present)}{hint}"
    )


def _check_columns(source: Path, wanted: Sequence[str | None], present: Sequence[str]) -> None:
    have = set(present)
    missing = [c for c in wanted if c is not None and c not in have]
    if missing:
        raise _missing_columns_error(source, missing, present)



def _check_feature_columns(
    source: Path,
    feature_columns: Sequence[str],
    *,
    id_column: str | None,
    owner_column: str | None,
    label_column: str,
) -> None:
    """Refuse a feature column named twice, or one that is also the label, id or owner column."""
    roles = (("label", label_column), ("id", id_column), ("owner", owner_column))
    seen: set[str] = set()
    for name in feature_columns:
        if name in seen:
            raise InvalidDatasetError(
                f"{source}: feature column {name!r} is named more than once in feature_columns: name each "
                "column once"
            )
        seen.add(name)
        for role, other in roles:
            if name == other:
                raise InvalidDatasetError(
                    f"{source}: feature column {name!r} is also the {role} column ({role}_column={name!r}): "
                    "remove it from feature_columns"
                )


def _check_float32_range(source: Path, features: np.ndarray, columns: Sequence[str]) -> None:
    """Refuse finite feature values that float32 (the dtype models train in) cannot hold, naming the
    column and data row; NaN and infinities are left to :class:`Dataset`, which reports them."""
    with np.errstate(over="ignore"):
        overflow = np.isfinite(features) & ~np.isfinite(features.astype(np.float32))
    if overflow.any():
        row, j = (int(i) for i in np.argwhere(overflow)[0])
        raise InvalidDatasetError(
            f"{source}: feature column {columns[j]!r} has value {float(features[row, j])!r} at data row {row}, "
            "which overflows float32 (largest magnitude about 3.4e38): rescale the column"
        )



def label_range_error(
    source: Path, column: str, row: int, value: int, label_offset: int | None = None
) -> InvalidDatasetError:
    """The error for an integer label that is no class index: negative, or MAX_CLASSES and above."""
    after = f" (after subtracting label_offset={label_offset})" if label_offset is not None else ""
    where = f"{source}: label {value} at data row {row} of column {column!r}{after}"
    if value < 0:
        return InvalidDatasetError(f"{where} is negative: labels must start at 0")
    return InvalidDatasetError(
        f"{where} is too large: labels must be class indices below {MAX_CLASSES:,} (or strings)"
    )



# --------------------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------------------


def _open_text(path: Path) -> IO[str]:
    """The file as text, decompressed on the fly when it is gzip (so max_rows stops reading early)."""
    # utf-8-sig tolerates a byte-order mark; newline="" is what the csv module asks for.
    if is_gzip(path):
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return path.open("r", encoding="utf-8-sig", newline="")


def _read_csv_rows(path: Path, max_rows: int | None) -> tuple[list[str], list[list[str]]]:
    """Header and data rows of a CSV file (gzip or plain); blank lines are skipped, ragged rows rejected."""
    try:
        with _open_text(path) as text:
            return _collect_csv_rows(path, csv.reader(text), max_rows)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, csv.Error) as exc:
        raise InvalidDatasetError(f"{path} is not a readable CSV file: {exc}") from exc


def _collect_csv_rows(path: Path, reader: Any, max_rows: int | None) -> tuple[list[str], list[list[str]]]:
    header = next(reader, None)
    while header is not None and not header:  # leading blank lines
        header = next(reader, None)
    if header is None:
        raise InvalidDatasetError(f"{path} is empty: expected a header row and at least one data row")
    rows: list[list[str]] = []
    for record in reader:
        if not record:
            continue
        if len(record) != len(header):
            raise InvalidDatasetError(
                f"{path}: data row {len(rows)} (line {reader.line_num}) has {len(record)} fields, "
                f"the header has {len(header)}"
            )
        rows.append(record)
        if max_rows is not None and len(rows) >= max_rows:
            break
    if not rows:
        raise InvalidDatasetError(f"{path} has a header but no data rows")
    return header, rows


def _csv_features(path: Path, header: list[str], rows: list[list[str]], columns: list[int]) -> np.ndarray:
    """Parse the feature cells as float64; a non-numeric cell is reported by column and data row."""
    if not columns:
        raise InvalidDatasetError(f"{path}: no feature columns left after the id, owner and label columns")
    pick: Callable[[list[str]], Any] = operator.itemgetter(*columns)
    try:
        # Fast path: numpy parses a list of string tuples in C; a bad cell makes it raise and we
        # fall back to a slow scan whose only job is to name the bad cell.
        table = np.array([pick(r) for r in rows], dtype=np.float64)
    except ValueError as exc:
        _raise_first_non_numeric(path, header, rows, columns)
        # numpy and float() disagreed on some cell: still fail with this module's error type.
        raise InvalidDatasetError(f"{path}: feature columns could not be parsed as numbers: {exc}") from exc
    return table.reshape(len(rows), len(columns))


def _raise_first_non_numeric(
    path: Path, header: list[str], rows: list[list[str]], columns: list[int]
) -> None:
    for row, record in enumerate(rows):
        for j in columns:
            try:
                float(record[j])
            except ValueError:
                raise InvalidDatasetError(
                    f"{path}: feature column {header[j]!r} has non-numeric value {record[j]!r} at data row "
                    f"{row} (0-based, header excluded)"
                ) from None


def _csv_labels(path: Path, header: list[str], rows: list[list[str]], column: int) -> np.ndarray:
    """Labels as int64 when every cell is an integer, as float64 when every cell is a number (whole
    numbers such as ``1.0`` are then integers; others are refused), otherwise as unicode strings. An
    integer beyond int64 is an :class:`InvalidDatasetError` naming its row."""
    cells = [r[column] for r in rows]
    try:
        ints = [int(c) for c in cells]
    except ValueError:
        pass
    else:
        try:
            return np.array(ints, dtype=np.int64)
        except OverflowError:
            # numpy raises OverflowError (not ValueError) for an integer beyond 64 bits: name the cell.
            row = next(i for i, v in enumerate(ints) if not _INT64_MIN <= v <= _INT64_MAX)
            raise label_range_error(path, header[column], row, ints[row]) from None
    try:
        return np.array([float(c) for c in cells], dtype=np.float64)
    except ValueError:
        return np.array(cells, dtype=np.str_)


def read_csv(
    path: Path,
    *,
    id_column: str | None,
    owner_column: str | None,
    label_column: str,
    feature_columns: Sequence[str] | None,
    max_rows: int | None,
) -> tuple[list[str] | None, list[str] | None, np.ndarray, np.ndarray]:
    """(sample ids, owner ids, features, labels) of a CSV table (gzip detected from the content); ids
    are None where their column is None, ``feature_columns`` None means every other column."""
    header, rows = _read_csv_rows(path, max_rows)
    if len(set(header)) != len(header):
        dup = next(h for i, h in enumerate(header) if h in header[:i])
        raise InvalidDatasetError(f"{path}: column {dup!r} appears more than once in the header")
    _check_columns(path, [id_column, owner_column, label_column, *(feature_columns or [])], header)
    position = {h: i for i, h in enumerate(header)}
    if feature_columns is None:
        reserved = {id_column, owner_column, label_column}
        feature_columns = [h for h in header if h not in reserved]
    else:
        _check_feature_columns(
            path, feature_columns, id_column=id_column, owner_column=owner_column, label_column=label_column
        )
    features = _csv_features(path, header, rows, [position[c] for c in feature_columns])
    _check_float32_range(path, features, feature_columns)
    ids = [r[position[id_column]] for r in rows] if id_column is not None else None
    owners = [r[position[owner_column]] for r in rows] if owner_column is not None else None
    return ids, owners, features, _csv_labels(path, header, rows, position[label_column])


# --------------------------------------------------------------------------------------------------
# Parquet
# --------------------------------------------------------------------------------------------------


def _arrow_column(table: Any, name: str, source: Path) -> Any:
    """The column, dictionary-decoded; a null value is an error naming its row."""
    import pyarrow as pa

    column = table.column(name)
    if pa.types.is_dictionary(column.type):
        # Categorical columns store each distinct value once plus indices: check and use the values.
        column = column.cast(column.type.value_type)
    if column.null_count:
        row = int(np.argmax(column.is_null().to_numpy(zero_copy_only=False)))
        raise InvalidDatasetError(f"{source}: column {name!r} has a missing (null) value at data row {row}")
    return column


def _arrow_strings(table: Any, name: str, source: Path) -> list[str]:
    return [str(v) for v in _arrow_column(table, name, source).to_pylist()]


def _arrow_numeric(table: Any, name: str, source: Path) -> np.ndarray:
    import pyarrow as pa

    column = _arrow_column(table, name, source)
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        raise InvalidDatasetError(
            f"{source}: feature column {name!r} has type {kind}; feature columns must be numeric"
        )
    return np.asarray(column.to_numpy(), dtype=np.float64)


def _arrow_labels(table: Any, name: str, source: Path) -> np.ndarray:
    import pyarrow as pa

    column = _arrow_column(table, name, source)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return np.array(column.to_pylist(), dtype=np.str_)
    return np.asarray(column.to_numpy())


def read_parquet(
    path: Path,
    *,
    id_column: str | None,
    owner_column: str | None,
    label_column: str,
    feature_columns: Sequence[str] | None,
    max_rows: int | None,
) -> tuple[list[str] | None, list[str] | None, np.ndarray, np.ndarray]:
    """(sample ids, owner ids, features, labels) of a Parquet table, as :func:`read_csv`."""
    import pyarrow.parquet as pq  # imported lazily: only Parquet users pay for it

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid / OSError family
        raise InvalidDatasetError(f"{path} is not a readable Parquet file: {exc}") from exc
    if max_rows is not None:
        table = table.slice(0, max_rows)
    header = list(table.column_names)
    _check_columns(path, [id_column, owner_column, label_column, *(feature_columns or [])], header)
    if table.num_rows == 0:
        raise InvalidDatasetError(f"{path} has no data rows")
    if feature_columns is None:
        reserved = {id_column, owner_column, label_column}
        feature_columns = [h for h in header if h not in reserved]
    else:
        _check_feature_columns(
            path, feature_columns, id_column=id_column, owner_column=owner_column, label_column=label_column
        )
    if not feature_columns:
        raise InvalidDatasetError(f"{path}: no feature columns left after the id, owner and label columns")
    features = np.stack([_arrow_numeric(table, c, path) for c in feature_columns], axis=1)
    _check_float32_range(path, features, feature_columns)
    ids = _arrow_strings(table, id_column, path) if id_column is not None else None
    owners = _arrow_strings(table, owner_column, path) if owner_column is not None else None
    return ids, owners, features, _arrow_labels(table, label_column, path)


# --------------------------------------------------------------------------------------------------
# NPZ
# --------------------------------------------------------------------------------------------------

_NPZ_KEYS = ("features", "labels", "sample_ids", "owner_ids", "num_classes")


def _npz_array(archive: Any, key: str, source: Path) -> np.ndarray:
    try:
        return np.asarray(archive[key])
    except ValueError as exc:
        # numpy raises ValueError for object arrays when allow_pickle=False: refuse, never unpickle.
        raise InvalidDatasetError(
            f"{source}: array {key!r} is an object (pickled) array; store numbers or unicode strings instead"
        ) from exc


def _npz_ids(archive: Any, key: str, source: Path, n: int) -> list[str] | None:
    if key not in archive.files:
        return None
    values = _npz_array(archive, key, source)
    if values.dtype.kind != "U" or values.shape != (n,):
        raise InvalidDatasetError(
            f"{source}: array {key!r} has dtype {values.dtype} and shape {values.shape}; expected a unicode "
            f"string array of shape ({n},)"
        )
    return [str(v) for v in values]


def _npz_num_classes(archive: Any, source: Path) -> int | None:
    if "num_classes" not in archive.files:
        return None
    value = _npz_array(archive, "num_classes", source)
    if value.shape != () or value.dtype.kind not in "iu":
        raise InvalidDatasetError(f"{source}: 'num_classes' must be an integer scalar, got {value!r}")
    if int(value) > MAX_CLASSES:
        raise InvalidDatasetError(
            f"{source}: 'num_classes' is {int(value)}; at most {MAX_CLASSES:,} classes are supported"
        )
    return int(value)


def read_npz(path: Path) -> tuple[list[str] | None, list[str] | None, np.ndarray, np.ndarray, int | None]:
    """(sample ids, owner ids, features, labels, num_classes) of an NPZ archive; the optional entries
    are None when absent."""
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise InvalidDatasetError(f"{path} is not a readable NPZ archive: {exc}") from exc
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise InvalidDatasetError(
            f"{path} holds a single .npy array, expected an NPZ archive of named arrays"
        )
    with archive:
        missing = [k for k in ("features", "labels") if k not in archive.files]
        if missing:
            raise InvalidDatasetError(
                f"{path}: array(s) {missing} not found; the archive has {sorted(archive.files)} "
                f"(expected features, labels and optionally {list(_NPZ_KEYS[2:])})"
            )
        features = _npz_array(archive, "features", path)
        if features.ndim < 2 or features.dtype.kind not in "fiub":
            raise InvalidDatasetError(
                f"{path}: 'features' has dtype {features.dtype} and shape {features.shape}; expected a numeric "
                "array of shape (n, ...) with at least 2 dimensions"
            )
        n = features.shape[0]
        if n == 0:
            raise InvalidDatasetError(
                f"{path}: the dataset has no rows ('features' has shape {features.shape})"
            )
        if 0 in features.shape[1:]:
            # A zero-size dimension leaves each row without features; models would divide by zero.
            raise InvalidDatasetError(
                f"{path}: 'features' has shape {features.shape}: no feature values per row; every dimension "
                "after the first (rows) must be at least 1"
            )
        labels = _npz_array(archive, "labels", path)
        if labels.shape != (n,):
            raise InvalidDatasetError(f"{path}: 'labels' has shape {labels.shape}, expected ({n},)")
        ids = _npz_ids(archive, "sample_ids", path, n)
        owners = _npz_ids(archive, "owner_ids", path, n)
        return ids, owners, features, labels, _npz_num_classes(archive, path)
