"""Turning a table read as a stream of Arrow record batches (CSV blocks, Parquet row batches) into the raw
columns :func:`unlearning.data.uploads.load_table` builds a Dataset from, one batch at a time.

Each batch is checked and converted as it arrives: the row and feature-value limits before its values
are converted, missing values, float32 overflow and over-long text cells with the data row they are in.
Features go straight into one float32 array grown in place (``ndarray.resize``: pages never touched are
never resident), so memory is the table's float32 features plus one batch, whatever the file's size.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from unlearning.data.ids import shown_id
from unlearning.data.limits import ReadLimits
from unlearning.errors import InvalidDatasetError

__all__ = ["ColumnsBuilder", "RawColumns", "null_error"]

RawColumns = tuple[list[str] | None, list[str] | None, np.ndarray, Any]
"""(sample ids, owner ids, float32 features, label cells): ids are None where their column is None."""

_MIN_CAPACITY = 1024


def null_error(source: Path, name: str, row: int) -> InvalidDatasetError:
    return InvalidDatasetError(
        f"{source}: column {name!r} has a missing value (an empty cell or null) at data row {row} (0-based, "
        "header excluded): every row needs a value in it"
    )


def _plain(column: Any) -> Any:
    """The column with dictionary encoding undone (Parquet categoricals)."""
    return column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column


class ColumnsBuilder:
    """Accumulates record batches into :data:`RawColumns`; ``add`` each batch, then ``finish``."""

    def __init__(
        self,
        source: Path,
        *,
        id_column: str | None,
        owner_column: str | None,
        label_column: str,
        feature_columns: Sequence[str],
        limits: ReadLimits,
        max_rows: int | None,
    ) -> None:
        self._source, self._limits, self._max_rows = source, limits, max_rows
        self._ids, self._owners, self._label = id_column, owner_column, label_column
        self._features = list(feature_columns)
        self._text: dict[str, list[Any]] = {c: [] for c in (id_column, owner_column, label_column) if c}
        self._roles = {label_column: "label", owner_column: "owner id", id_column: "sample id"}
        self._array = np.empty((0, len(self._features)), dtype=np.float32)
        self.rows = 0

    def add(self, batch: Any) -> bool:
        """Check and keep ``batch``; False once ``max_rows`` rows are kept (the caller stops reading)."""
        if self._max_rows is not None and self.rows + batch.num_rows > self._max_rows:
            batch = batch.slice(0, self._max_rows - self.rows)
        n = batch.num_rows
        self._limits.check_rows(self._source, self.rows + n, len(self._features))
        for name, chunks in self._text.items():
            chunks.append(self._checked_text(batch.column(name), name))
        self._grow(self.rows + n)
        for j, name in enumerate(self._features):
            self._array[self.rows : self.rows + n, j] = self._float32(batch.column(name), name)
        self.rows += n
        return self._max_rows is None or self.rows < self._max_rows

    def finish(self) -> RawColumns:
        """The columns kept; :class:`InvalidDatasetError` when no data row was read."""
        if self.rows == 0:
            raise InvalidDatasetError(f"{self._source} has a header but no data rows")
        self._array.resize((self.rows, len(self._features)), refcheck=False)
        label_cells = pa.chunked_array(self._text[self._label], type=self._text_type(self._label))
        return self._strings(self._ids), self._strings(self._owners), self._array, label_cells

    # -- per batch ---------------------------------------------------------------------------------

    def _grow(self, rows: int) -> None:
        capacity = len(self._array)
        if rows > capacity:
            # realloc: the old pages are moved (mremap), not copied; the new ones are not resident yet.
            new = max(rows, 2 * capacity, _MIN_CAPACITY)
            self._array.resize((new, len(self._features)), refcheck=False)

    def _checked_text(self, column: Any, name: str) -> Any:
        column = _plain(column)
        if column.null_count:
            raise null_error(self._source, name, self.rows + _first(column.is_null()))
        limit = self._limits.max_text_chars
        if limit is not None and (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            too_long = pc.greater(pc.utf8_length(column), limit)
            if pc.any(too_long).as_py():
                row = _first(too_long)
                value = str(column[row].as_py())
                role = self._roles[name]
                raise InvalidDatasetError(
                    f"{self._source}: column {name!r}, row {self.rows + row} (0-based): {role} "
                    f"{shown_id(value)} is too long: {role}s are at most {limit} characters, this one has "
                    f"{len(value)}"
                )
        return column

    def _float32(self, column: Any, name: str) -> np.ndarray:
        """The column as float32, refusing missing values and finite values float32 cannot hold."""
        column = _plain(column)
        kind = column.type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
            raise InvalidDatasetError(
                f"{self._source}: feature column {name!r} has type {kind}; feature columns must be numeric"
            )
        if column.null_count:
            raise null_error(self._source, name, self.rows + _first(column.is_null()))
        values = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
        with np.errstate(over="ignore"):
            narrow = values.astype(np.float32)
        overflow = np.isinf(narrow) & np.isfinite(values)
        if overflow.any():
            row = int(np.argmax(overflow))
            raise InvalidDatasetError(
                f"{self._source}: feature column {name!r} has value {float(values[row])!r} at data row "
                f"{self.rows + row}, which overflows float32 (largest magnitude about 3.4e38): rescale the "
                "column"
            )
        return narrow

    # -- at the end --------------------------------------------------------------------------------

    def _text_type(self, name: str) -> Any:
        chunks = self._text[name]
        return chunks[0].type if chunks else pa.string()

    def _strings(self, name: str | None) -> list[str] | None:
        if name is None:
            return None
        column = pa.chunked_array(self._text[name], type=self._text_type(name))
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            return list(column.to_pylist())
        return [str(v) for v in column.to_pylist()]


def _first(mask: Any) -> int:
    """Index of the first true value of a boolean Arrow array."""
    return int(np.argmax(np.asarray(mask.to_numpy(zero_copy_only=False))))
