"""Bounds every loader enforces on uploaded and bundled data: the class count, and the sizes a reader
checks while it reads (:class:`ReadLimits`), so that what a file claims or decompresses to never decides
how much memory or disk a reader takes."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from unlearning.errors import InvalidDatasetError

__all__ = ["MAX_CLASSES", "SMALL_TABLE_CLASSES", "Limit", "ReadLimits", "TooLargeError", "class_limit"]

MAX_CLASSES = 100_000
"""Most classes a table or graph may have, the service's cap on an explicit ``num_classes``. An inferred
class count is max label + 1, so without this bound one huge label would size a model for it."""

SMALL_TABLE_CLASSES = 1_000
"""A table of fewer rows may still have this many classes (a small sample of a many-class problem)."""


def class_limit(rows: int) -> int:
    """Most classes a dataset of ``rows`` rows may have: ``min(MAX_CLASSES, max(rows, SMALL_TABLE_CLASSES))``.

    A class count is max label + 1 (or declared), and a model has one output per class: bounding it by
    the rows keeps the model no larger than the data it is trained on (plus a small allowance), so one
    stray label such as 99999 in a 2,000-row table cannot size a 100,000-class model.
    """
    return min(MAX_CLASSES, max(int(rows), SMALL_TABLE_CLASSES))


class Limit(enum.Enum):
    """Which bound of :class:`ReadLimits` an input passed."""

    BYTES = "max_bytes"
    ROWS = "max_rows"
    CELLS = "max_cells"


@dataclass(frozen=True)
class ReadLimits:
    """Bounds a table reader enforces as it reads, before it holds more than they allow (None: unbounded).

    ``max_bytes``: the file's content once decompressed (a gzip CSV while it streams; the entries of an
    NPZ archive; a Parquet file's uncompressed column data). ``max_rows``: data rows. ``max_cells``: feature
    values, rows times features. ``max_text_chars``: characters of one id, owner or label cell, so that
    memory is bounded by the rows rather than by what one cell holds.
    """

    max_bytes: int | None = None
    max_rows: int | None = None
    max_cells: int | None = None
    max_text_chars: int | None = None

    def check_rows(self, source: object, rows: int, features: int) -> None:
        """:class:`TooLargeError` when ``rows`` rows of ``features`` features pass ``max_rows`` or
        ``max_cells``."""
        if self.max_rows is not None and rows > self.max_rows:
            raise TooLargeError(
                Limit.ROWS, f"{source} has more than {self.max_rows:,} data rows, the most an upload may have"
            )
        if self.max_cells is not None and rows * features > self.max_cells:
            raise TooLargeError(
                Limit.CELLS,
                f"{source} has more than {self.max_cells:,} feature values ({rows:,} rows or more of "
                f"{features:,} "
                "features), the most an upload may have: send fewer rows or feature columns",
            )

    def check_bytes(self, source: object, size: int, what: str = "decompresses to") -> None:
        """:class:`TooLargeError` when ``size`` bytes pass ``max_bytes``."""
        if self.max_bytes is not None and size > self.max_bytes:
            raise TooLargeError(
                Limit.BYTES,
                f"{source} {what} more than {self.max_bytes:,} bytes, the most an upload may hold",
            )


class TooLargeError(InvalidDatasetError):
    """The input passes one of the :class:`ReadLimits` (``limit`` says which); the service answers 413."""

    def __init__(self, limit: Limit, message: str) -> None:
        super().__init__(message)
        self.limit = limit
