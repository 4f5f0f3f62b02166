"""Where the shared real datasets live, and reading a file whose content may be gzip-compressed.

The real files live in the shared data folder (:func:`shared_data_dir`); nothing is ever downloaded.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

from unlearning.errors import InvalidDatasetError

__all__ = ["DATA_DIR_ENV", "is_gzip", "read_bytes", "require_file", "shared_data_dir"]

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
