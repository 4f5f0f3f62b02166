"""Tables a user uploads, as :class:`Dataset` objects: :func:`load_table` for CSV (optionally
gzip-compressed), NPZ and Parquet files (parsed by :mod:`unlearning.data.csv_table`,
:mod:`unlearning.data.npz_table` and :mod:`unlearning.data.table_formats`).

A missing file raises :class:`FileNotFoundError`; a malformed one :class:`InvalidDatasetError` with a
message that names the problem (column, row, array).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from unlearning.data.csv_table import read_csv
from unlearning.data.dataset import Dataset
from unlearning.data.files import require_file
from unlearning.data.limits import MAX_CLASSES, SMALL_TABLE_CLASSES, ReadLimits, class_limit
from unlearning.data.npz_table import read_npz
from unlearning.data.table_formats import label_range_error, read_parquet
from unlearning.errors import InvalidConfigError, InvalidDatasetError

__all__ = ["load_table"]

_INT64_MAX = int(np.iinfo(np.int64).max)


# --------------------------------------------------------------------------------------------------
# Labels, ids and the Dataset
# --------------------------------------------------------------------------------------------------


def _check_unique_ids(ids: Sequence[str], source: Path, column: str) -> None:
    if len(set(ids)) == len(ids):
        return
    first_row: dict[str, int] = {}
    for row, sid in enumerate(ids):
        if sid in first_row:
            raise InvalidDatasetError(
                f"{source}: sample id {sid!r} in column {column!r} appears at data rows {first_row[sid]} "
                f"and {row} (0-based): sample ids must be unique"
            )
        first_row[sid] = row


def _encode_labels(
    values: np.ndarray,
    *,
    source: Path,
    column: str,
    num_classes: int | None,
    label_offset: int | None,
) -> tuple[np.ndarray, int, tuple[str, ...] | None]:
    """Class indices, the class count and the class names (None for integer labels) from a raw label
    column.

    Integer labels are used as they are, minus ``label_offset``; floats must be whole numbers and are
    treated as integers. String labels map to indices by their sorted unique values ("cat" -> 0,
    "dog" -> 1), which are returned as the class names. ``num_classes`` defaults to max label + 1
    (integers) or the number of distinct strings. An empty string is not a label. The class count,
    given or inferred, is at most :func:`class_limit` of the rows.
    """
    if values.dtype.kind == "U":
        if label_offset is not None:
            raise InvalidDatasetError(
                f"{source}: label column {column!r} holds strings; label_offset only applies to integer labels"
            )
        empty = np.char.str_len(np.char.strip(values)) == 0
        if empty.any():
            raise InvalidDatasetError(
                f"{source}: the label of data row {int(np.argmax(empty))} (0-based) in column {column!r} is "
                "empty: every row needs a label"
            )
        classes, indices = np.unique(values, return_inverse=True)
        if len(classes) > MAX_CLASSES:
            raise InvalidDatasetError(
                f"{source}: label column {column!r} has {len(classes)} distinct values; at most "
                f"{MAX_CLASSES:,} classes are supported"
            )
        if num_classes is not None and num_classes < len(classes):
            raise InvalidDatasetError(
                f"{source}: label column {column!r} has {len(classes)} distinct values but num_classes={num_classes}"
            )
        names = tuple(str(c) for c in classes)
        _check_class_count(num_classes, len(values), source)
        return indices.astype(np.int64), num_classes if num_classes is not None else len(classes), names
    ints = _integer_labels(values, source=source, column=column)
    offset = int(label_offset) if label_offset is not None else 0
    if ints.size:
        # Check the range with Python ints before subtracting: int64 arithmetic near its limits wraps.
        for row in (int(np.argmin(ints)), int(np.argmax(ints))):
            shifted = int(ints[row]) - offset
            if not 0 <= shifted < MAX_CLASSES:
                raise label_range_error(source, column, row, shifted, label_offset)
    if label_offset is not None:
        ints = ints - offset
    if num_classes is None and ints.size:
        row = int(np.argmax(ints))
        after = f" (after subtracting label_offset={label_offset})" if label_offset is not None else ""
        what = f"label {int(ints[row])} at data row {row} of column {column!r}{after}"
        inferred = int(ints[row]) + 1
        _check_class_count(inferred, len(ints), source, f"{what} makes {inferred:,} classes")
    _check_class_count(num_classes, len(ints), source)
    return ints, num_classes if num_classes is not None else int(ints.max()) + 1, None


def _check_class_count(count: int | None, rows: int, source: Path, what: str | None = None) -> None:
    """At most :func:`class_limit` of the rows classes, given (``num_classes``) or inferred (``what``)."""
    limit = class_limit(rows)
    if count is None or count <= limit:
        return
    raise InvalidDatasetError(
        f"{source}: {what or f'num_classes={count:,}'} for {rows:,} rows, more than the {limit:,} classes "
        f"such a table may have (as many as its rows, at least {SMALL_TABLE_CLASSES:,}, at most "
        f"{MAX_CLASSES:,}): number the classes 0 to k-1 (label_offset subtracts a constant from every "
        "label), or give them as names (such as 'c99999'), which are numbered in sorted order"
    )


def _integer_labels(values: np.ndarray, *, source: Path, column: str) -> np.ndarray:
    """The labels as int64; whole-number floats are integers, values int64 cannot hold are refused."""
    kind = values.dtype.kind
    if kind in "iub":
        if kind == "u" and values.size and int(values.max()) > _INT64_MAX:
            # The cast would wrap a uint64 above 2**63 - 1 round to a negative number.
            row = int(np.argmax(values))
            raise label_range_error(source, column, row, int(values[row]))
        return values.astype(np.int64)
    if kind == "f":
        bad = ~np.isfinite(values) | (values != np.round(values))
        if bad.any():
            row = int(np.argmax(bad))
            raise InvalidDatasetError(
                f"{source}: label {float(values[row])} at data row {row} of column {column!r} is not a whole number"
            )
        # float64 holds whole numbers far beyond int64 (1e30): the cast would give garbage.
        outside = (values < -(2.0**63)) | (values >= 2.0**63)
        if outside.any():
            row = int(np.argmax(outside))
            raise label_range_error(source, column, row, int(values[row]))
        return values.astype(np.int64)
    raise InvalidDatasetError(
        f"{source}: label column {column!r} has dtype {values.dtype}; expected integers or strings"
    )



def _table_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".csv", ".npz", ".parquet", ".pq"):
        name = name.removesuffix(suffix)
    return name or "table"


def _build_dataset(
    *,
    source: Path,
    sample_ids: Sequence[str] | None,
    owner_ids: Sequence[str] | None,
    features: np.ndarray,
    raw_labels: np.ndarray,
    label_column: str,
    id_column: str,
    num_classes: int | None,
    label_offset: int | None,
    id_prefix: str,
    name: str,
) -> Dataset:
    """Generate missing ids, check id uniqueness, encode labels and hand the arrays to Dataset."""
    n = int(features.shape[0])
    if sample_ids is None:
        sample_ids = tuple(f"{id_prefix}-{i}" for i in range(n))
    else:
        _check_unique_ids(sample_ids, source, id_column)
    labels, k, names = _encode_labels(
        raw_labels, source=source, column=label_column, num_classes=num_classes, label_offset=label_offset
    )
    return Dataset(
        sample_ids=tuple(sample_ids),
        # A row without an owner column is its own owner: forgetting the owner forgets that one row.
        owner_ids=tuple(owner_ids) if owner_ids is not None else tuple(sample_ids),
        features=features,
        labels=labels,
        num_classes=k,
        name=name,
        class_names=names,
    )



# --------------------------------------------------------------------------------------------------
# Tables: public entry points
# --------------------------------------------------------------------------------------------------


def _table_format(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes[-1:] == [".npz"]:
        return "npz"
    if suffixes[-1:] in ([".parquet"], [".pq"]):
        return "parquet"
    if suffixes[-1:] == [".csv"] or suffixes[-2:] == [".csv", ".gz"]:
        return "csv"
    raise InvalidDatasetError(f"{path}: unsupported file type; expected .csv, .csv.gz, .npz or .parquet")


def load_table(
    path: str | Path,
    *,
    id_column: str | None = "sample_id",
    owner_column: str | None = "owner_id",
    label_column: str = "label",
    feature_columns: Sequence[str] | None = None,
    num_classes: int | None = None,
    label_offset: int | None = None,
    id_prefix: str = "row",
    max_rows: int | None = None,
    name: str | None = None,
    limits: ReadLimits | None = None,
) -> Dataset:
    """Load a labelled table from CSV (``.csv`` / ``.csv.gz``), NPZ (``.npz``) or Parquet (``.parquet``).

    CSV and Parquet: one row per sample, a header naming the columns. ``id_column`` holds the sample ids
    (``None``: generate ``{id_prefix}-{i}`` from the row index i); ``owner_column`` the owner ids
    (``None``: each row is its own owner, owner id = sample id); ``label_column`` the labels;
    ``feature_columns`` the features in that order (``None``: every other column, in file order). CSV is
    streamed through pyarrow's CSV reader (gzip detected from the content); every feature cell must be a
    number.

    NPZ: arrays ``features`` (n, ...) numeric and ``labels`` (n,), optional ``sample_ids`` and
    ``owner_ids`` (unicode string arrays of shape (n,)) and an optional integer scalar ``num_classes``.
    It is read with ``allow_pickle=False`` always, so object arrays are refused. The column arguments
    do not apply (the array names are fixed); ``feature_columns`` must be ``None``.

    Labels: integers are used as they are, minus ``label_offset`` when given (for 1-based labels);
    strings map to class indices by their sorted unique values. ``num_classes`` (argument, else the NPZ
    scalar) defaults to max label + 1 for integers and the number of distinct strings otherwise.
    The class count is at most as many as the rows (:func:`~unlearning.data.limits.class_limit`).
    ``max_rows`` stops after that many data rows (CSV and Parquet stop reading early). ``name`` defaults to
    the file name without its suffixes. ``limits`` bound what the file may hold (decompressed bytes, rows,
    feature values, characters of an id or label cell), checked while it is read, before more is held:
    past one, :class:`~unlearning.data.limits.TooLargeError`.

    Raises :class:`FileNotFoundError` for a missing file and :class:`InvalidDatasetError` for an empty
    file, missing columns (named, with the columns that exist), non-numeric feature cells (column and
    row), duplicate ids, NaN/inf features, labels out of range or more classes than rows.
    """
    source = require_file(Path(path), "table file")
    if max_rows is not None and max_rows < 1:
        raise InvalidConfigError(f"max_rows must be >= 1, got {max_rows}")
    kind = _table_format(source)
    file_classes: int | None = None
    if kind == "npz":
        if feature_columns is not None:
            raise InvalidConfigError("feature_columns applies to CSV and Parquet tables, not to NPZ archives")
        ids, owners, features, raw_labels, file_classes = read_npz(source, limits)
        if max_rows is not None:
            features, raw_labels = features[:max_rows], raw_labels[:max_rows]
            ids = ids[:max_rows] if ids is not None else None
            owners = owners[:max_rows] if owners is not None else None
        label_name, id_name = "labels", "sample_ids"
    else:
        reader = read_csv if kind == "csv" else read_parquet
        ids, owners, features, raw_labels = reader(
            source,
            id_column=id_column,
            owner_column=owner_column,
            label_column=label_column,
            feature_columns=feature_columns,
            max_rows=max_rows,
            limits=limits,
        )
        label_name, id_name = label_column, id_column or ""
    return _build_dataset(
        source=source,
        sample_ids=ids,
        owner_ids=owners,
        features=features,
        raw_labels=raw_labels,
        label_column=label_name,
        id_column=id_name,
        num_classes=num_classes if num_classes is not None else file_classes,
        label_offset=label_offset,
        id_prefix=id_prefix,
        name=name or _table_name(source),
    )
