"""Where the shared real datasets live, and reading a file whose content may be gzip-compressed: whole
(:func:`read_bytes`, for the bundled files) or as a stream whose decompressed size is capped as it is read
(:func:`open_decompressed`, for uploads).

The real files live in the shared data folder (:func:`shared_data_dir`); nothing is ever downloaded.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from pathlib import Path
from typing import BinaryIO

from unlearning.data.limits import ReadLimits
from unlearning.errors import InvalidDatasetError

__all__ = ["DATA_DIR_ENV", "is_gzip", "open_decompressed", "read_bytes", "require_file", "shared_data_dir"]

DATA_DIR_ENV = "LETHE_DATA_DIR"
"""Environment variable that overrides :func:`shared_data_dir`."""

_GZIP_MAGIC = b"\x1f\x8b"


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


def require_file(path: Path, what: str) -> Path:
    """``path``, or :class:`FileNotFoundError` saying how to provide the file."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{what} not found at {path}: put the file there, pass its path explicitly, or set "
            f"{DATA_DIR_ENV} to the folder that holds the shared datasets"
        )
    return path


def is_gzip(path: Path) -> bool:
    """Whether the file starts with the gzip magic bytes."""
    # Sniff the magic bytes instead of trusting the suffix: a renamed file still loads.
    with path.open("rb") as fh:
        return fh.read(2) == _GZIP_MAGIC


def read_bytes(path: Path) -> bytes:
    """The file's content, decompressed when it is gzip; a corrupt gzip stream is an InvalidDatasetError."""
    if not is_gzip(path):
        return path.read_bytes()
    try:
        with gzip.open(path, "rb") as fh:
            return fh.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise InvalidDatasetError(f"{path} is not a readable gzip file: {exc}") from exc


class _CappedReader(io.RawIOBase):
    """The bytes of ``inner`` (a file, or a gzip stream over one), raising :class:`TooLargeError` as soon as
    more than ``limits.max_bytes`` have been read: nothing past the cap is ever decompressed or held."""

    def __init__(self, inner: io.BufferedIOBase, source: Path, limits: ReadLimits, compressed: bool) -> None:
        self._inner, self._source, self._limits, self._compressed = inner, source, limits, compressed
        self._read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._inner.read(len(buffer))
        self._read += len(data)
        self._limits.check_bytes(self._source, self._read, "decompresses to" if self._compressed else "holds")
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
        super().close()


def open_decompressed(path: Path, limits: ReadLimits) -> BinaryIO:
    """The file's content as a binary stream, decompressed on the fly when it is gzip (told from the magic
    bytes, not the name). Reading past ``limits.max_bytes`` raises :class:`TooLargeError`; a corrupt gzip
    stream raises what :mod:`gzip` raises (``OSError``, ``EOFError``, ``zlib.error``), for the format's
    reader to report. The caller closes the stream."""
    compressed = is_gzip(path)
    inner: io.BufferedIOBase = gzip.open(path, "rb") if compressed else path.open("rb")  # noqa: SIM115
    return io.BufferedReader(_CappedReader(inner, path, limits, compressed), buffer_size=1 << 20)
