"""NPZ archives: their entries' headers checked before any array is allocated, then the table's arrays.

An NPZ is a zip archive of ``.npy`` files, each a header (dtype, shape) followed by the raw values. numpy
allocates the array the header describes before it reads the values, so a forged header claiming shape
(10**9, 1000) would ask for terabytes. :func:`check_npz` reads every header first (``read_magic`` and
``read_array_header_*`` on the zip entry, without its data) and refuses an archive whose entries
decompress past ``ReadLimits.max_bytes``, an entry whose header claims more bytes than the entry holds,
and object (pickled) arrays. Archives are read with ``allow_pickle=False`` always.
"""

from __future__ import annotations

import math
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from unlearning.data.limits import MAX_CLASSES, ReadLimits
from unlearning.errors import InvalidDatasetError

__all__ = ["NpyHeader", "check_npz", "read_npz"]

_NPZ_KEYS = ("features", "labels", "sample_ids", "owner_ids", "num_classes")
_PICKLED = "is an object (pickled) array; store numbers or unicode strings instead"


@dataclass(frozen=True)
class NpyHeader:
    """What one ``.npy`` entry of an archive declares, and how many data bytes it holds."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    data_bytes: int

    @property
    def claimed_bytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def _read_header(archive: zipfile.ZipFile, info: zipfile.ZipInfo, source: Path) -> NpyHeader | None:
    """The entry's header, or None when the entry is not a ``.npy`` array (numpy reads it as bytes)."""
    with archive.open(info) as fh:
        try:
            version = np.lib.format.read_magic(fh)
        except ValueError:
            return None
        try:
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
            else:
                raise ValueError(f"format version {version} is not supported (save with numpy.savez)")
        except ValueError as exc:
            raise InvalidDatasetError(
                f"{source}: entry {info.filename!r} has an unreadable array header: {exc}"
            ) from exc
        return NpyHeader(tuple(int(s) for s in shape), np.dtype(dtype), info.file_size - fh.tell())


def check_npz(path: Path, limits: ReadLimits) -> dict[str, NpyHeader]:
    """The header of every ``.npy`` entry by array name (the entry's name without ``.npy``), checked:
    the entries decompress to at most ``limits.max_bytes`` together (:class:`TooLargeError`), each header
    claims no more bytes than its entry holds and no array holds objects (:class:`InvalidDatasetError`)."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            limits.check_bytes(path, sum(info.file_size for info in infos))
            headers = {info.filename: _read_header(archive, info, path) for info in infos}
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise InvalidDatasetError(f"{path} is not an NPZ (zip) archive: {exc}") from exc
    checked: dict[str, NpyHeader] = {}
    for entry, header in headers.items():
        if header is None:
            continue
        key = entry.removesuffix(".npy")
        if header.dtype.hasobject:
            raise InvalidDatasetError(f"{path}: array {key!r} {_PICKLED}")
        if header.claimed_bytes > header.data_bytes:
            limit = (
                f"; an upload's arrays hold at most {limits.max_bytes:,} bytes" if limits.max_bytes else ""
            )
            raise InvalidDatasetError(
                f"{path}: array {key!r} claims shape {header.shape} of {header.dtype} "
                f"({header.claimed_bytes:,} bytes) but its entry holds {header.data_bytes:,} bytes{limit}: "
                "the header is corrupt or forged; write the archive with numpy.savez"
            )
        checked[key] = header
    return checked


def _check_table_headers(path: Path, headers: dict[str, NpyHeader], limits: ReadLimits) -> None:
    """Rows and feature values within ``limits``, ids no longer than ``limits.max_text_chars``, before
    anything is loaded."""
    features = headers.get("features")
    if features is not None and len(features.shape) >= 2:
        limits.check_rows(path, features.shape[0], math.prod(features.shape[1:]))
    for key in ("sample_ids", "owner_ids"):
        header = headers.get(key)
        if header is None or header.dtype.kind != "U" or limits.max_text_chars is None:
            continue
        chars = header.dtype.itemsize // 4
        if chars > limits.max_text_chars:
            raise InvalidDatasetError(
                f"{path}: array {key!r} holds strings of up to {chars} characters (dtype {header.dtype}); "
                f"ids are at most {limits.max_text_chars} characters: store them as a shorter unicode dtype"
            )


def _npz_array(archive: Any, key: str, source: Path) -> np.ndarray:
    try:
        return np.asarray(archive[key])
    except ValueError as exc:
        # numpy raises ValueError for object arrays when allow_pickle=False: refuse, never unpickle.
        raise InvalidDatasetError(f"{source}: array {key!r} {_PICKLED}") from exc


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


def _features(archive: Any, path: Path) -> np.ndarray:
    features = _npz_array(archive, "features", path)
    if features.ndim < 2 or features.dtype.kind not in "fiub":
        raise InvalidDatasetError(
            f"{path}: 'features' has dtype {features.dtype} and shape {features.shape}; expected a numeric "
            "array of shape (n, ...) with at least 2 dimensions"
        )
    if features.shape[0] == 0:
        raise InvalidDatasetError(f"{path}: the dataset has no rows ('features' has shape {features.shape})")
    if 0 in features.shape[1:]:
        # A zero-size dimension leaves each row without features; models would divide by zero.
        raise InvalidDatasetError(
            f"{path}: 'features' has shape {features.shape}: no feature values per row; every dimension "
            "after the first (rows) must be at least 1"
        )
    return features


def read_npz(
    path: Path, limits: ReadLimits | None = None
) -> tuple[list[str] | None, list[str] | None, np.ndarray, np.ndarray, int | None]:
    """(sample ids, owner ids, features, labels, num_classes) of an NPZ archive; the optional entries
    are None when absent. The headers are checked first (:func:`check_npz`, then rows, feature values
    and id lengths against ``limits``)."""
    limits = limits or ReadLimits()
    if not zipfile.is_zipfile(path):
        with path.open("rb") as fh:
            what = "holds a single .npy array" if fh.read(6) == b"\x93NUMPY" else "is not a zip archive"
        raise InvalidDatasetError(f"{path} {what}: expected an NPZ archive of named arrays (numpy.savez)")
    headers = check_npz(path, limits)
    _check_table_headers(path, headers, limits)
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise InvalidDatasetError(f"{path} is not a readable NPZ archive: {exc}") from exc
    with archive:
        missing = [k for k in ("features", "labels") if k not in archive.files]
        if missing:
            raise InvalidDatasetError(
                f"{path}: array(s) {missing} not found; the archive has {sorted(archive.files)} "
                f"(expected features, labels and optionally {list(_NPZ_KEYS[2:])})"
            )
        features = _features(archive, path)
        n = features.shape[0]
        labels = _npz_array(archive, "labels", path)
        if labels.shape != (n,):
            raise InvalidDatasetError(f"{path}: 'labels' has shape {labels.shape}, expected ({n},)")
        ids = _npz_ids(archive, "sample_ids", path, n)
        owners = _npz_ids(archive, "owner_ids", path, n)
        return ids, owners, features, labels, _npz_num_classes(archive, path)
