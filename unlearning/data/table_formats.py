"""The column checks the table readers share, and the Parquet reader.

Each reader (:mod:`unlearning.data.csv_table`, Parquet here, :mod:`unlearning.data.npz_table`) returns the
raw columns (sample ids, owner ids, features, labels as read) for :func:`unlearning.data.uploads.load_table`
to turn into a :class:`~unlearning.data.dataset.Dataset`, and raises :class:`InvalidDatasetError` naming
the column, row or array of a malformed file, or :class:`TooLargeError` for a file past its
:class:`ReadLimits`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from unlearning.data.limits import MAX_CLASSES, ReadLimits, TooLargeError
from unlearning.data.table_columns import ColumnsBuilder
from unlearning.errors import InvalidDatasetError

__all__ = [
    "check_columns",
    "check_feature_columns",
    "feature_columns_of",
    "label_range_error",
    "read_parquet",
]

_PARQUET_BATCH_ROWS = 65_536


# --------------------------------------------------------------------------------------------------
# Column checks
# --------------------------------------------------------------------------------------------------


def check_columns(source: Path, wanted: Sequence[str | None], present: Sequence[str]) -> None:
    """Every named column of ``wanted`` is in ``present``, else an error listing the columns there are."""
    have = set(present)
    missing = [c for c in wanted if c is not None and c not in have]
    if missing:
        hint = ""
        if any(m in ("sample_id", "owner_id") for m in missing):
            hint = " (pass id_column=None / owner_column=None to generate ids instead)"
        raise InvalidDatasetError(
            f"{source}: column(s) {list(missing)} not found; the file has columns {list(present)}{hint}"
        )


def check_feature_columns(
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


def feature_columns_of(
    source: Path,
    header: Sequence[str],
    feature_columns: Sequence[str] | None,
    *,
    id_column: str | None,
    owner_column: str | None,
    label_column: str,
) -> list[str]:
    """The feature columns, checked: ``feature_columns``, or (None) every column of ``header`` that is not
    the id, owner or label column; refuses missing columns and an empty result."""
    check_columns(source, [id_column, owner_column, label_column, *(feature_columns or [])], header)
    if feature_columns is None:
        reserved = {id_column, owner_column, label_column}
        feature_columns = [h for h in header if h not in reserved]
    else:
        check_feature_columns(
            source, feature_columns, id_column=id_column, owner_column=owner_column, label_column=label_column
        )
    if not feature_columns:
        raise InvalidDatasetError(f"{source}: no feature columns left after the id, owner and label columns")
    return list(feature_columns)


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
# Parquet
# --------------------------------------------------------------------------------------------------


def _parquet_file(path: Path, limits: ReadLimits) -> Any:
    """The opened file, its declared size checked against ``limits`` before any column is read."""
    import pyarrow.parquet as pq  # imported lazily: only Parquet users pay for it

    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid / OSError family
        raise InvalidDatasetError(f"{path} is not a readable Parquet file: {exc}") from exc
    meta = parquet.metadata
    uncompressed = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    try:
        limits.check_bytes(path, uncompressed, "holds (uncompressed)")
    except TooLargeError:
        parquet.close()
        raise
    return parquet


def _parquet_labels(cells: Any) -> np.ndarray:
    if pa.types.is_string(cells.type) or pa.types.is_large_string(cells.type):
        return np.array(cells.to_pylist(), dtype=np.str_)
    return np.asarray(cells.to_numpy())


def read_parquet(
    path: Path,
    *,
    id_column: str | None,
    owner_column: str | None,
    label_column: str,
    feature_columns: Sequence[str] | None,
    max_rows: int | None,
    limits: ReadLimits | None = None,
) -> tuple[list[str] | None, list[str] | None, np.ndarray, np.ndarray]:
    """(sample ids, owner ids, float32 features, labels) of a Parquet table, as
    :func:`unlearning.data.csv_table.read_csv`; read in row batches of the needed columns only."""
    limits = limits or ReadLimits()
    with _parquet_file(path, limits) as parquet:
        features = feature_columns_of(
            path,
            list(parquet.schema_arrow.names),
            feature_columns,
            id_column=id_column,
            owner_column=owner_column,
            label_column=label_column,
        )
        declared = parquet.metadata.num_rows
        limits.check_rows(path, declared if max_rows is None else min(declared, max_rows), len(features))
        builder = ColumnsBuilder(
            path,
            id_column=id_column,
            owner_column=owner_column,
            label_column=label_column,
            feature_columns=features,
            limits=limits,
            max_rows=max_rows,
        )
        named = [c for c in (id_column, owner_column) if c is not None]
        batches = parquet.iter_batches(
            batch_size=_PARQUET_BATCH_ROWS, columns=list(dict.fromkeys([*named, label_column, *features]))
        )
        while True:
            try:
                batch = next(batches, None)
            except Exception as exc:  # a corrupt page: pyarrow's ArrowInvalid / OSError family
                raise InvalidDatasetError(f"{path} is not a readable Parquet file: {exc}") from exc
            if batch is None or not builder.add(batch):
                break
    if builder.rows == 0:
        raise InvalidDatasetError(f"{path} has no data rows")
    ids, owners, values, label_cells = builder.finish()
    return ids, owners, values, _parquet_labels(label_cells)
