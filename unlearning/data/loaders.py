"""Loaders that turn files (and scikit-learn's bundled sets) into :class:`Dataset` objects.

Supported inputs:

* MNIST IDX files (gzip or plain), parsed with numpy only: :func:`load_mnist_idx`.
* Tables: CSV (optionally gzip-compressed), NPZ and Parquet: :func:`load_table`, and the Forest
  Covertype file of the shared data folder: :func:`load_covertype`.
* scikit-learn's bundled toy sets (no download): :func:`load_sklearn`.
* Seeded Gaussian blobs for tests and for when a real file is missing: :func:`make_synthetic`.

The real files live in the shared data folder (:func:`shared_data_dir`); nothing is ever downloaded.
Every loader raises :class:`FileNotFoundError` for a missing file and :class:`InvalidDatasetError`
with a message that names the problem (column, row, array) for a malformed one.
"""

from __future__ import annotations

import csv
import gzip
import math
import operator
import os
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from unlearning.data.dataset import Dataset
from unlearning.errors import InvalidConfigError, InvalidDatasetError

DATA_DIR_ENV = "LETHE_DATA_DIR"
"""Environment variable that overrides :func:`shared_data_dir`."""

_GZIP_MAGIC = b"\x1f\x8b"
_IDX_IMAGES_MAGIC = 2051  # 0x00000803: unsigned bytes, 3 dimensions (count, rows, cols)
_IDX_LABELS_MAGIC = 2049  # 0x00000801: unsigned bytes, 1 dimension (count)

COVERTYPE_LABEL_COLUMN = "Cover_Type"
COVERTYPE_NUM_CLASSES = 7

SKLEARN_DATASETS = ("digits", "breast_cancer", "wine", "iris")

MAX_CLASSES = 100_000
"""Most classes a table may have, the service's cap on an explicit ``num_classes``. An inferred class
count is max label + 1, so without this bound one huge label would size a model for it."""

_INT64_MIN = int(np.iinfo(np.int64).min)
_INT64_MAX = int(np.iinfo(np.int64).max)


# --------------------------------------------------------------------------------------------------
# Locations and raw bytes
# --------------------------------------------------------------------------------------------------


def shared_data_dir() -> Path:
    """The folder holding the shared real datasets (``mnist/``, ``covertype/``, ...).

    ``$LETHE_DATA_DIR`` when set and non-empty, else ``<project root>/../shared/data`` where the project
    root is the folder holding ``pyproject.toml`` (two levels above this package). The path is returned
    even when it does not exist: loaders raise :class:`FileNotFoundError` when they need a file.
    """
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override).expanduser()
    project_root = Path(__file__).resolve().parents[2]
    return project_root.parent / "shared" / "data"


def _require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(
            f"{what} not found at {path}: put the file there, pass its path explicitly, or set "
            f"{DATA_DIR_ENV} to the folder that holds the shared datasets"
        )
    return path


def _is_gzip(path: Path) -> bool:
    # Sniff the magic bytes instead of trusting the suffix: a renamed file still loads.
    with path.open("rb") as fh:
        return fh.read(2) == _GZIP_MAGIC


def _read_bytes(path: Path) -> bytes:
    """The file's content, decompressed when it is gzip; a corrupt gzip stream is an InvalidDatasetError."""
    if not _is_gzip(path):
        return path.read_bytes()
    try:
        with gzip.open(path, "rb") as fh:
            return fh.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise InvalidDatasetError(f"{path} is not a readable gzip file: {exc}") from exc


# --------------------------------------------------------------------------------------------------
# MNIST (IDX)
# --------------------------------------------------------------------------------------------------


def _parse_idx(raw: bytes, *, expected_magic: int, source: Path) -> np.ndarray:
    """Parse one IDX file of unsigned bytes.

    Format: a big-endian int32 magic number (0x0000 0x08 ndim; 2051 for images, 2049 for labels), then
    ``ndim`` big-endian uint32 sizes, then ``prod(sizes)`` bytes in C order.
    """
    if len(raw) < 4:
        raise InvalidDatasetError(f"{source} is too short ({len(raw)} bytes) to be an IDX file")
    magic = int.from_bytes(raw[:4], "big")
    if magic != expected_magic:
        raise InvalidDatasetError(
            f"{source} has IDX magic number {magic}, expected {expected_magic}: "
            "it is not the right kind of IDX file (2051 = images, 2049 = labels) or it is corrupt"
        )
    ndim = raw[3]
    header_len = 4 + 4 * ndim
    if len(raw) < header_len:
        raise InvalidDatasetError(f"{source} is truncated inside its IDX header")
    dims = tuple(int.from_bytes(raw[4 + 4 * k : 8 + 4 * k], "big") for k in range(ndim))
    expected = math.prod(dims)
    actual = len(raw) - header_len
    if actual != expected:
        raise InvalidDatasetError(
            f"{source} declares shape {dims} ({expected} bytes of data) but holds {actual} bytes: "
            "the file is truncated or corrupt"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header_len).reshape(dims)


def _indexed_ids(prefix: str, n: int) -> tuple[str, ...]:
    """``prefix-00000`` .. : zero padded to at least 5 digits so ids sort in row order."""
    width = max(5, len(str(max(n - 1, 0))))
    return tuple(f"{prefix}-{i:0{width}d}" for i in range(n))


def _grouped_owner_ids(n: int, samples_per_owner: int) -> tuple[str, ...]:
    """Row i belongs to ``owner-{i // samples_per_owner}`` (zero padded like the sample ids)."""
    if samples_per_owner < 1:
        raise InvalidConfigError(f"samples_per_owner must be >= 1, got {samples_per_owner}")
    num_owners = -(-n // samples_per_owner)
    width = max(5, len(str(max(num_owners - 1, 0))))
    return tuple(f"owner-{i // samples_per_owner:0{width}d}" for i in range(n))


def load_mnist_idx(
    directory: str | Path | None = None,
    images: str = "t10k-images-idx3-ubyte.gz",
    labels: str = "t10k-labels-idx1-ubyte.gz",
    flatten: bool = False,
    *,
    samples_per_owner: int = 1,
) -> Dataset:
    """Load MNIST from a pair of IDX files (gzip-compressed or plain), with numpy only.

    ``directory`` defaults to ``shared_data_dir() / "mnist"`` (the official 10k test split). Pixels are
    scaled from 0..255 to [0, 1] float32; the feature shape is ``(1, rows, cols)`` (one channel, 28x28
    for MNIST) or ``(rows * cols,)`` when ``flatten``. Sample ids are ``mnist-00000``, ``mnist-00001``, ..
    (the row index in the file, zero padded); owners are assigned deterministically: row i belongs to
    ``owner-{i // samples_per_owner}`` (zero padded), so the default gives every image its own owner.
    A wrong magic number, a size that does not match the header, differing image and label counts or a
    corrupt gzip stream raise :class:`InvalidDatasetError`.
    """
    folder = Path(directory) if directory is not None else shared_data_dir() / "mnist"
    image_path = _require_file(folder / images, "MNIST image file")
    label_path = _require_file(folder / labels, "MNIST label file")
    pixels = _parse_idx(_read_bytes(image_path), expected_magic=_IDX_IMAGES_MAGIC, source=image_path)
    targets = _parse_idx(_read_bytes(label_path), expected_magic=_IDX_LABELS_MAGIC, source=label_path)
    if pixels.shape[0] != targets.shape[0]:
        raise InvalidDatasetError(
            f"{image_path} holds {pixels.shape[0]} images but {label_path} holds {targets.shape[0]} labels"
        )
    n = int(pixels.shape[0])
    features = pixels.astype(np.float32) / np.float32(255.0)
    features = features.reshape(n, -1) if flatten else features.reshape(n, 1, *pixels.shape[1:])
    return Dataset(
        sample_ids=_indexed_ids("mnist", n),
        owner_ids=_grouped_owner_ids(n, samples_per_owner),
        features=features,
        labels=targets.astype(np.int64),
        num_classes=10,
        name="mnist",
    )


# --------------------------------------------------------------------------------------------------
# Tables: shared pieces
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


def _check_unique_ids(ids: Sequence[str], source: Path, column: str) -> None:
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
    (integers) or the number of distinct strings. An empty string is not a label.
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
        return indices.astype(np.int64), num_classes if num_classes is not None else len(classes), names
    ints = _integer_labels(values, source=source, column=column)
    offset = int(label_offset) if label_offset is not None else 0
    if ints.size:
        # Check the range with Python ints before subtracting: int64 arithmetic near its limits wraps.
        for row in (int(np.argmin(ints)), int(np.argmax(ints))):
            shifted = int(ints[row]) - offset
            if not 0 <= shifted < MAX_CLASSES:
                raise _label_range_error(source, column, row, shifted, label_offset)
    if label_offset is not None:
        ints = ints - offset
    return ints, num_classes if num_classes is not None else int(ints.max()) + 1, None


def _label_range_error(
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


def _integer_labels(values: np.ndarray, *, source: Path, column: str) -> np.ndarray:
    """The labels as int64; whole-number floats are integers, values int64 cannot hold are refused."""
    kind = values.dtype.kind
    if kind in "iub":
        if kind == "u" and values.size and int(values.max()) > _INT64_MAX:
            # The cast would wrap a uint64 above 2**63 - 1 round to a negative number.
            row = int(np.argmax(values))
            raise _label_range_error(source, column, row, int(values[row]))
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
            raise _label_range_error(source, column, row, int(values[row]))
        return values.astype(np.int64)
    raise InvalidDatasetError(
        f"{source}: label column {column!r} has dtype {values.dtype}; expected integers or strings"
    )


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
# CSV
# --------------------------------------------------------------------------------------------------


def _open_text(path: Path) -> IO[str]:
    """The file as text, decompressed on the fly when it is gzip (so max_rows stops reading early)."""
    # utf-8-sig tolerates a byte-order mark; newline="" is what the csv module asks for.
    if _is_gzip(path):
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
            raise _label_range_error(path, header[column], row, ints[row]) from None
    try:
        return np.array([float(c) for c in cells], dtype=np.float64)
    except ValueError:
        return np.array(cells, dtype=np.str_)


def _load_csv(
    path: Path,
    *,
    id_column: str | None,
    owner_column: str | None,
    label_column: str,
    feature_columns: Sequence[str] | None,
    max_rows: int | None,
) -> tuple[list[str] | None, list[str] | None, np.ndarray, np.ndarray]:
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


def _load_parquet(
    path: Path,
    *,
    id_column: str | None,
    owner_column: str | None,
    label_column: str,
    feature_columns: Sequence[str] | None,
    max_rows: int | None,
) -> tuple[list[str] | None, list[str] | None, np.ndarray, np.ndarray]:
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


def _load_npz(path: Path) -> tuple[list[str] | None, list[str] | None, np.ndarray, np.ndarray, int | None]:
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
) -> Dataset:
    """Load a labelled table from CSV (``.csv`` / ``.csv.gz``), NPZ (``.npz``) or Parquet (``.parquet``).

    CSV and Parquet: one row per sample, a header naming the columns. ``id_column`` holds the sample ids
    (``None``: generate ``{id_prefix}-{i}`` from the row index i); ``owner_column`` the owner ids
    (``None``: each row is its own owner, owner id = sample id); ``label_column`` the labels;
    ``feature_columns`` the features in that order (``None``: every other column, in file order). CSV is
    parsed with the ``csv`` module (gzip detected from the content); every feature cell must be a number.

    NPZ: arrays ``features`` (n, ...) numeric and ``labels`` (n,), optional ``sample_ids`` and
    ``owner_ids`` (unicode string arrays of shape (n,)) and an optional integer scalar ``num_classes``.
    It is read with ``allow_pickle=False`` always, so object arrays are refused. The column arguments
    do not apply (the array names are fixed); ``feature_columns`` must be ``None``.

    Labels: integers are used as they are, minus ``label_offset`` when given (for 1-based labels);
    strings map to class indices by their sorted unique values. ``num_classes`` (argument, else the NPZ
    scalar) defaults to max label + 1 for integers and the number of distinct strings otherwise.
    ``max_rows`` stops after that many data rows (CSV stops reading early). ``name`` defaults to the
    file name without its suffixes.

    Raises :class:`FileNotFoundError` for a missing file and :class:`InvalidDatasetError` for an empty
    file, missing columns (named, with the columns that exist), non-numeric feature cells (column and
    row), duplicate ids, NaN/inf features or labels out of range.
    """
    source = _require_file(Path(path), "table file")
    if max_rows is not None and max_rows < 1:
        raise InvalidConfigError(f"max_rows must be >= 1, got {max_rows}")
    kind = _table_format(source)
    file_classes: int | None = None
    if kind == "npz":
        if feature_columns is not None:
            raise InvalidConfigError("feature_columns applies to CSV and Parquet tables, not to NPZ archives")
        ids, owners, features, raw_labels, file_classes = _load_npz(source)
        if max_rows is not None:
            features, raw_labels = features[:max_rows], raw_labels[:max_rows]
            ids = ids[:max_rows] if ids is not None else None
            owners = owners[:max_rows] if owners is not None else None
        label_name, id_name = "labels", "sample_ids"
    else:
        reader = _load_csv if kind == "csv" else _load_parquet
        ids, owners, features, raw_labels = reader(
            source,
            id_column=id_column,
            owner_column=owner_column,
            label_column=label_column,
            feature_columns=feature_columns,
            max_rows=max_rows,
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


def load_covertype(path: str | Path | None = None, n: int | None = None, seed: int = 0) -> Dataset:
    """Load Forest Covertype (54 features already min-max scaled to [0, 1], 7 classes).

    ``path`` defaults to ``shared_data_dir() / "covertype" / "test.csv.gz"`` (92,962 rows). The label
    column ``Cover_Type`` (1..7) becomes 0..6 and ``num_classes`` is always 7, so a subsample missing a
    class still has the right output size. Sample ids are ``cov-{i}`` with i the row index in the file
    (stable whatever ``n`` is); each row is its own owner. With ``n`` the result is
    ``subsample(full, n, seed)`` (see :func:`unlearning.data.splits.subsample`).
    """
    from unlearning.data.splits import subsample  # local import: splits imports this module at load time

    source = Path(path) if path is not None else shared_data_dir() / "covertype" / "test.csv.gz"
    full = load_table(
        _require_file(source, "Covertype file"),
        id_column=None,
        owner_column=None,
        label_column=COVERTYPE_LABEL_COLUMN,
        num_classes=COVERTYPE_NUM_CLASSES,
        label_offset=1,
        id_prefix="cov",
        name="covertype",
    )
    return full if n is None else subsample(full, n, seed)


# --------------------------------------------------------------------------------------------------
# scikit-learn bundled sets and synthetic data
# --------------------------------------------------------------------------------------------------


def _min_max_scale(x: np.ndarray) -> np.ndarray:
    """Scale each column to [0, 1]; a constant column becomes all zeros (nothing to scale)."""
    low = x.min(axis=0)
    span = x.max(axis=0) - low
    return (x - low) / np.where(span > 0, span, 1.0)


def load_sklearn(name: str) -> Dataset:
    """Load one of scikit-learn's bundled datasets: "digits", "breast_cancer", "wine" or "iris".

    They ship inside the scikit-learn wheel (no download). Features are min-max scaled to [0, 1] per
    column over the whole set ((x - min) / (max - min); a constant column becomes 0), so they sit on the
    same scale as the other loaders' features. Sample ids are ``{name}-{i}``; each row is its own owner.
    """
    from sklearn import datasets  # imported lazily: scikit-learn is slow to import

    loaders: dict[str, Callable[..., Any]] = {
        "digits": datasets.load_digits,
        "breast_cancer": datasets.load_breast_cancer,
        "wine": datasets.load_wine,
        "iris": datasets.load_iris,
    }
    if name not in loaders:
        raise InvalidDatasetError(
            f"unknown scikit-learn dataset {name!r}: choose one of {list(SKLEARN_DATASETS)}"
        )
    bunch = loaders[name]()
    x = np.asarray(bunch.data, dtype=np.float64)
    y = np.asarray(bunch.target, dtype=np.int64)
    ids = tuple(f"{name}-{i}" for i in range(len(y)))
    names = tuple(str(t) for t in bunch.target_names)
    return Dataset(
        sample_ids=ids,
        owner_ids=ids,
        features=_min_max_scale(x),
        labels=y,
        num_classes=len(names),
        name=name,
        # iris: setosa, versicolor, virginica; digits' names are its indices, so it needs none
        class_names=None if names == tuple(str(i) for i in range(len(names))) else names,
    )


def make_synthetic(
    n: int,
    num_features: int,
    num_classes: int,
    seed: int,
    separation: float = 3.0,
    *,
    samples_per_owner: int = 1,
) -> Dataset:
    """Seeded Gaussian-blob classification data (for tests, and when a real file is missing).

    Algorithm, with ``rng = numpy.random.Generator(numpy.random.PCG64(seed))``:

    1. class centres: ``c = rng.standard_normal((num_classes, num_features))``, each row rescaled to
       Euclidean norm ``separation`` (so every centre lies at that distance from the origin);
    2. labels: ``rng.permutation(np.arange(n) % num_classes)`` (balanced: class sizes differ by at most 1);
    3. features: ``c[labels] + rng.standard_normal((n, num_features))`` (unit-variance noise), float32.

    Larger ``separation`` makes the classes easier to tell apart. Sample ids are ``syn-00000``, ..;
    owners are ``owner-{i // samples_per_owner}`` as in :func:`load_mnist_idx`. name="synthetic".
    """
    if n < 1 or num_features < 1 or num_classes < 2:
        raise InvalidConfigError(
            f"need n >= 1, num_features >= 1 and num_classes >= 2; got n={n}, num_features={num_features}, "
            f"num_classes={num_classes}"
        )
    if not (separation >= 0 and math.isfinite(separation)):
        raise InvalidConfigError(f"separation must be a finite number >= 0, got {separation}")
    rng = np.random.Generator(np.random.PCG64(seed))
    centres = rng.standard_normal((num_classes, num_features))
    centres *= separation / np.linalg.norm(centres, axis=1, keepdims=True)
    labels = rng.permutation(np.arange(n) % num_classes)
    features = centres[labels] + rng.standard_normal((n, num_features))
    return Dataset(
        sample_ids=_indexed_ids("syn", n),
        owner_ids=_grouped_owner_ids(n, samples_per_owner),
        features=features.astype(np.float32),
        labels=labels,
        num_classes=num_classes,
        name="synthetic",
    )
