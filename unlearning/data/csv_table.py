"""CSV tables (plain or gzip), read as a stream with pyarrow's streaming CSV reader.

The file is decompressed on the fly under ``ReadLimits.max_bytes`` (:func:`open_decompressed`) and parsed
in blocks of ``CSV_BLOCK_BYTES``; each block is checked and converted before the next is read
(:class:`ColumnsBuilder`), so memory is bounded by the rows kept, never by the file's decompressed size,
and a file past a limit is refused as soon as a block passes it. Blank lines are skipped, a UTF-8
byte-order mark is ignored, cells are not trimmed except around numbers. Feature cells are parsed as
float64 (then float32, see :class:`ColumnsBuilder`); id, owner and label cells are kept as text.

A malformed file is an :class:`InvalidDatasetError` naming the column and data row (0-based, header
excluded): an empty file, a ragged row, a non-numeric or empty feature cell. The reader runs on one thread
so that pyarrow reports the row of a parse error; the non-numeric cell is found by a second pass over the
failing file only.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from unlearning.data.files import open_decompressed
from unlearning.data.limits import ReadLimits
from unlearning.data.table_columns import ColumnsBuilder, null_error
from unlearning.data.table_formats import feature_columns_of, label_range_error
from unlearning.errors import InvalidDatasetError

__all__ = ["CSV_BLOCK_BYTES", "csv_labels", "read_csv"]

CSV_BLOCK_BYTES = 1 << 20
"""Bytes pyarrow parses at a time. A row may cross one block boundary, not two: a row (or the header) of
up to this many bytes always reads, a longer one may be refused."""

_INTEGER = r"^\s*[+-]?[0-9]+\s*$"
_INT64_DIGITS = 30  # more digits than any int64 (19) with leading zeros to spare: no exact value to name


class _Rejected:
    """pyarrow's ``invalid_row_handler``: remembers the first ragged row and stops the read."""

    def __init__(self) -> None:
        self.row: Any = None

    def __call__(self, row: Any) -> str:
        self.row = self.row or row
        return "error"


def _open(stream: Any, *, types: dict[str, Any] | None, rejected: _Rejected) -> Any:
    convert = pacsv.ConvertOptions(
        column_types=types or {},
        include_columns=list(types) if types else [],
        null_values=[""],
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    return pacsv.open_csv(
        stream,
        read_options=pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES, use_threads=False),
        parse_options=pacsv.ParseOptions(invalid_row_handler=rejected),
        convert_options=convert,
    )


@contextmanager
def _reader(path: Path, limits: ReadLimits, types: dict[str, Any] | None) -> Iterator[Any]:
    """pyarrow's streaming reader over the file (its ``schema``, then its record batches), with pyarrow's
    and gzip's errors, at the opening or while the caller iterates, turned into messages that say what to
    fix. A feature cell pyarrow cannot parse is a :class:`_ConversionError`, for :func:`read_csv` to find."""
    rejected = _Rejected()
    stream = open_decompressed(path, limits)
    try:
        yield _open(stream, types=types, rejected=rejected)
    except pa.ArrowException as exc:
        raise _parse_error(path, exc, rejected) from exc
    except (OSError, EOFError, zlib.error) as exc:
        raise InvalidDatasetError(f"{path} is not a readable CSV file: {exc}") from exc
    finally:
        stream.close()


def _head(path: Path) -> bytes:
    """The first bytes of the file's content (empty when even they cannot be read)."""
    try:
        with open_decompressed(path, ReadLimits()) as stream:
            return stream.read(1 << 16)
    except (OSError, EOFError, zlib.error):
        return b""


class _ConversionError(InvalidDatasetError):
    """A feature cell pyarrow could not parse as a number."""


def _parse_error(path: Path, exc: Exception, rejected: _Rejected) -> InvalidDatasetError:
    text = str(exc)
    if rejected.row is not None:
        row = rejected.row
        at = f"data row {row.number - 2} (0-based, header excluded)" if row.number else "a data row"
        return InvalidDatasetError(
            f"{path}: {at} has {row.actual_columns} fields, the header has {row.expected_columns}: "
            f"{row.text[:200]!r}"
        )
    if "Empty CSV file" in text:
        if b"\x00" in _head(path):
            return InvalidDatasetError(f"{path} holds binary data (NUL bytes), not CSV text")
        return InvalidDatasetError(f"{path} is empty: expected a header row and at least one data row")
    if "straddl" in text:
        return InvalidDatasetError(
            f"{path}: a row (or the header) is longer than {CSV_BLOCK_BYTES:,} bytes: is this a CSV file?"
        )
    if "conversion error to double" in text:
        return _ConversionError(f"{path}: a feature cell is not a number ({text})")
    return InvalidDatasetError(f"{path} is not a readable CSV file: {text}")


def _parses(cells: Any) -> bool:
    try:
        pc.cast(pc.utf8_trim_whitespace(cells), pa.float64())
    except pa.ArrowInvalid:
        return False
    return True


def _first_unparsed(cells: Any) -> int:
    """Index of the first cell that is not a number, in cells that hold one (bisection: log n casts)."""
    lo, hi = 0, len(cells)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _parses(cells.slice(lo, mid - lo)):
            lo = mid
        else:
            hi = mid
    return lo


def _non_numeric_error(path: Path, features: Sequence[str], limits: ReadLimits) -> InvalidDatasetError | None:
    """The first feature cell that is not a number, by column and data row (a second pass, as text)."""
    rows = 0
    with _reader(path, limits, {c: pa.string() for c in features}) as reader:
        for batch in reader:
            for name in features:
                cells = batch.column(name)
                if not _parses(cells):
                    row = _first_unparsed(cells)
                    value = str(cells[row].as_py())
                    if not value.strip():
                        return null_error(path, name, rows + row)
                    return InvalidDatasetError(
                        f"{path}: feature column {name!r} has non-numeric value {value!r} at data row "
                        f"{rows + row} (0-based, header excluded)"
                    )
            rows += batch.num_rows
    return None


def read_csv(
    path: Path,
    *,
    id_column: str | None,
    owner_column: str | None,
    label_column: str,
    feature_columns: Sequence[str] | None,
    max_rows: int | None,
    limits: ReadLimits | None = None,
) -> tuple[list[str] | None, list[str] | None, np.ndarray, np.ndarray]:
    """(sample ids, owner ids, float32 features, labels) of a CSV table (gzip detected from the content);
    ids are None where their column is None, ``feature_columns`` None means every other column, labels
    as :func:`csv_labels` reads them. ``max_rows`` stops reading after that many data rows; ``limits``
    refuse a larger file as it streams (:class:`TooLargeError`)."""
    limits = limits or ReadLimits()
    with _reader(path, limits, None) as reader:
        header = list(reader.schema.names)
    if len(set(header)) != len(header):
        dup = next(h for i, h in enumerate(header) if h in header[:i])
        raise InvalidDatasetError(f"{path}: column {dup!r} appears more than once in the header")
    feature_columns = feature_columns_of(
        path,
        header,
        feature_columns,
        id_column=id_column,
        owner_column=owner_column,
        label_column=label_column,
    )
    builder = ColumnsBuilder(
        path,
        id_column=id_column,
        owner_column=owner_column,
        label_column=label_column,
        feature_columns=feature_columns,
        limits=limits,
        max_rows=max_rows,
    )
    types = {c: pa.float64() for c in feature_columns}
    types.update({c: pa.string() for c in (id_column, owner_column, label_column) if c is not None})
    try:
        with _reader(path, limits, types) as reader:
            for batch in reader:
                if not builder.add(batch):
                    break
    except _ConversionError as exc:
        raise _non_numeric_error(path, feature_columns, limits) or exc from None
    ids, owners, features, label_cells = builder.finish()
    return ids, owners, features, csv_labels(path, label_column, label_cells)


def csv_labels(path: Path, column: str, cells: Any) -> np.ndarray:
    """Labels as int64 when every cell is an integer, as float64 when every cell is a number (whole
    numbers such as ``1.0`` are then integers; others are refused), otherwise as unicode strings. An
    integer beyond int64 is an :class:`InvalidDatasetError` naming its row."""
    trimmed = pc.utf8_trim_whitespace(cells)
    try:
        return np.asarray(pc.cast(trimmed, pa.int64()).to_numpy(), dtype=np.int64)
    except pa.ArrowInvalid:
        pass
    if pc.all(pc.match_substring_regex(trimmed, _INTEGER)).as_py():
        # Integers, one of them beyond int64: name it, exactly (a float would round it).
        for row, cell in enumerate(trimmed.to_pylist()):
            digits = len(cell.lstrip("+-"))
            if digits > _INT64_DIGITS:
                sign = "negative" if cell.startswith("-") else "too large"
                raise InvalidDatasetError(
                    f"{path}: the label at data row {row} of column {column!r} is an integer of {digits:,} "
                    f"digits: {sign}; labels must be class indices (or strings)"
                )
            value = int(cell)
            if not -(2**63) <= value < 2**63:
                raise label_range_error(path, column, row, value)
    try:
        return np.asarray(pc.cast(trimmed, pa.float64()).to_numpy(), dtype=np.float64)
    except pa.ArrowInvalid:
        return np.array(cells.to_pylist(), dtype=np.str_)
