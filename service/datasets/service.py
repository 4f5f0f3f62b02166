"""Creating datasets from uploads and from the bundled sets."""

from __future__ import annotations

import gzip
import re
import shutil
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from service.audit.service import SYSTEM_CHAIN
from service.datasets.schemas import BundledDatasetIn
from service.db.tables import ID_LENGTH
from service.db.tables import Dataset as DatasetRow
from service.db.uow import UnitOfWork
from service.errors import NotFound, PayloadTooLarge, Unprocessable, UnsupportedMediaType
from service.graphs.storage import ERASED_PREFIX
from service.jobs.state import write_training
from service.jobs.versions import dataset_holder
from service.storage.artifacts import ArtifactStore
from service.storage.buckets import digests, manifest_digest
from unlearning.data import Dataset, load_mnist_idx, load_sklearn, load_table, make_synthetic, subsample
from unlearning.errors import InvalidConfigError, InvalidDatasetError, UnlearningError

FORMATS = ("csv", "npz", "parquet")
_CONTENT_TYPES = {
    "text/csv": "csv",
    "application/csv": "csv",
    "application/x-npz": "npz",
    "application/zip": "npz",
    "application/vnd.apache.parquet": "parquet",
    "application/x-parquet": "parquet",
}
_SUFFIXES = {".csv": "csv", ".gz": "csv", ".npz": "npz", ".parquet": "parquet", ".pq": "parquet"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# An id a deletion request can name (service.schemas.SubjectId, the String(ID_LENGTH) columns), not reserved.
_USABLE_ID = re.compile(rf"[^\x00-\x1f\x7f]{{1,{ID_LENGTH}}}")
_SHOWN_ID = 80


@dataclass(frozen=True)
class UploadOptions:
    name: str | None
    format: str | None
    id_column: str
    owner_column: str
    label_column: str
    feature_columns: list[str] | None
    feature_shape: tuple[int, ...] | None
    num_classes: int | None
    label_offset: int | None


def detect_format(explicit: str | None, filename: str | None, content_type: str | None) -> str:
    """The table format, from (in order) the ``format`` parameter, the file name, the content type."""
    if explicit:
        return explicit
    if filename:
        suffix = Path(filename).suffix.lower()
        if suffix in _SUFFIXES:
            return _SUFFIXES[suffix]
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind in _CONTENT_TYPES:
        return _CONTENT_TYPES[kind]
    raise UnsupportedMediaType(
        f"cannot tell the file format from name {filename!r} and content type {content_type!r}: "
        "upload a .csv, .csv.gz, .npz or .parquet file, or pass format=csv|npz|parquet (graphs: a .json node "
        "graph, or format=tu for a TU text graph collection)"
    )


def printable(name: str) -> str:
    """``name`` without control characters: a dataset name derived from an upload's file name follows the
    rule an explicit ``?name=`` must (service.schemas.Name)."""
    return _CONTROL.sub("", name)


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a sample, owner, node or graph id (None: it can). Every uploaded id must be
    one a deletion request can name (``service.schemas.SubjectId``: 1 to ID_LENGTH characters, no control
    characters) and not the prefix of erased graph tombstones; otherwise the subject could never be
    forgotten. The same rule as graph uploads (``service.graphs.upload.check_ids``)."""
    if _USABLE_ID.fullmatch(value) and not value.startswith(ERASED_PREFIX):
        return None
    if not value:
        return "ids may not be empty"
    if len(value) > ID_LENGTH:
        return f"ids are at most {ID_LENGTH} characters, this one has {len(value)}"
    control = _CONTROL.search(value)
    if control is not None:
        return (
            f"ids may not contain control characters (tab, newline, ...), this one has "
            f"{control.group()!r} at position {control.start()}"
        )
    return f"ids may not start with {ERASED_PREFIX!r}, reserved for erased items"


def shown_id(value: str) -> str:
    """``value`` quoted for a message, cut to its first characters when long."""
    return repr(value) if len(value) <= _SHOWN_ID else f"{value[:_SHOWN_ID]!r}... ({len(value)} characters)"


def check_table_ids(dataset: Dataset, fmt: str, filename: str, options: UploadOptions) -> None:
    """422 naming the column, the row and the id when an uploaded sample or owner id is not usable
    (:func:`id_problem`)."""
    if fmt == "npz":
        columns = {"sample id": "array 'sample_ids'", "owner id": "array 'owner_ids'"}
    else:
        columns = {
            "sample id": f"column {options.id_column!r}",
            "owner id": f"column {options.owner_column!r}",
        }
    for what, ids in (("sample id", dataset.sample_ids), ("owner id", dataset.owner_ids)):
        for row, value in enumerate(ids):
            problem = id_problem(value)
            if problem is not None:
                raise Unprocessable(
                    f"{filename}: {columns[what]}, row {row} (0-based): {what} {shown_id(value)} is not usable: "
                    f"{problem}. Deletion requests name subjects by these ids: fix them in the file",
                    code="invalid_dataset",
                )


def _gunzip_capped(src: Path, limit: int) -> Path:
    """Decompress a gzip upload with a cap, so a small compressed file cannot fill the disk."""
    dst = src.with_name(src.stem + ".csv")
    written = 0
    try:
        with gzip.open(src, "rb") as fin, dst.open("wb") as fout:
            while chunk := fin.read(1 << 20):
                written += len(chunk)
                if written > limit:
                    raise PayloadTooLarge(
                        f"the file decompresses to more than {limit} bytes (LETHE_MAX_DECOMPRESSED_BYTES)"
                    )
                fout.write(chunk)
    except (OSError, EOFError, zlib.error) as exc:
        raise Unprocessable(f"the file is not a readable gzip file: {exc}", code="invalid_dataset") from exc
    return dst


def check_npz_size(path: Path, limit: int) -> None:
    """An NPZ upload must be a zip archive whose members decompress to at most ``limit`` bytes."""
    try:
        with zipfile.ZipFile(path) as archive:
            total = sum(info.file_size for info in archive.infolist())
    except zipfile.BadZipFile as exc:
        raise Unprocessable(f"the file is not an NPZ (zip) archive: {exc}", code="invalid_dataset") from exc
    if total > limit:
        raise PayloadTooLarge(
            f"the archive decompresses to {total} bytes, above {limit} (LETHE_MAX_DECOMPRESSED_BYTES)"
        )


def parse_upload(
    path: Path, fmt: str, filename: str, options: UploadOptions, max_decompressed: int
) -> Dataset:
    """Read the uploaded file at ``path`` into a validated Dataset; every input problem is a 4xx."""
    if fmt not in FORMATS:
        raise UnsupportedMediaType(f"format {fmt!r} is not supported: use csv, npz or parquet")
    with path.open("rb") as fh:
        head = fh.read(2)
    if fmt == "csv" and head == b"\x1f\x8b":
        path = _gunzip_capped(path, max_decompressed)
    target = path.with_suffix("." + fmt)
    if target != path:
        shutil.move(path, target)
    if fmt == "npz":
        check_npz_size(target, max_decompressed)
    try:
        dataset = load_table(
            target,
            id_column=options.id_column,
            owner_column=options.owner_column,
            label_column=options.label_column,
            feature_columns=options.feature_columns if fmt != "npz" else None,
            num_classes=options.num_classes,
            label_offset=options.label_offset,
            name=options.name or printable(Path(filename).stem) or "upload",
        )
    except UnlearningError as exc:
        # The loader names the temporary file; the user knows the file by the name they uploaded.
        raise Unprocessable(str(exc).replace(str(target), filename), code="invalid_dataset") from exc
    except (ValueError, TypeError, OSError) as exc:  # e.g. numpy refusing a malformed array header
        raise Unprocessable(f"{filename}: could not read the file: {exc}", code="invalid_dataset") from exc
    check_table_ids(dataset, fmt, filename, options)
    return reshape(dataset, options.feature_shape)


def reshape(dataset: Dataset, shape: tuple[int, ...] | None) -> Dataset:
    if shape is None or tuple(shape) == dataset.feature_shape:
        return dataset
    if int(np.prod(shape)) != dataset.num_features:
        raise Unprocessable(
            f"feature_shape {list(shape)} holds {int(np.prod(shape))} values but each row has "
            f"{dataset.num_features} features",
            code="invalid_dataset",
        )
    return Dataset(
        sample_ids=dataset.sample_ids,
        owner_ids=dataset.owner_ids,
        features=dataset.features.reshape(len(dataset), *shape),
        labels=dataset.labels,
        num_classes=dataset.num_classes,
        name=dataset.name,
        class_names=dataset.class_names,
    )


def load_bundled(body: BundledDatasetIn) -> Dataset:
    try:
        if body.name == "mnist":
            dataset = load_mnist_idx(samples_per_owner=body.samples_per_owner)
        elif body.name == "synthetic":
            dataset = make_synthetic(
                body.n or 1000, 20, 4, body.seed, samples_per_owner=body.samples_per_owner
            )
        else:
            dataset = _grouped(load_sklearn(body.name), body.samples_per_owner)
        if body.n is not None and body.name != "synthetic":
            dataset = subsample(dataset, min(body.n, len(dataset)), body.seed)
    except FileNotFoundError as exc:
        raise NotFound(f"the bundled dataset {body.name!r} is not available on this server: {exc}") from exc
    except (InvalidConfigError, InvalidDatasetError) as exc:
        raise Unprocessable(str(exc), code="invalid_dataset") from exc
    return dataset


def _grouped(dataset: Dataset, samples_per_owner: int) -> Dataset:
    """Give the scikit-learn sets (one owner per row) ``samples_per_owner`` rows per owner."""
    if samples_per_owner == 1:
        return dataset
    width = max(5, len(str(len(dataset) // samples_per_owner)))
    owners = tuple(f"owner-{i // samples_per_owner:0{width}d}" for i in range(len(dataset)))
    return Dataset(
        dataset.sample_ids,
        owners,
        dataset.features,
        dataset.labels,
        dataset.num_classes,
        dataset.name,
        class_names=dataset.class_names,
    )


def store(
    uow: UnitOfWork,
    artifacts: ArtifactStore,
    dataset: Dataset,
    *,
    source: str,
    fmt: str,
    name: str,
    max_buckets: int,
) -> DatasetRow:
    """Write the arrays to the artifact store and the row to the database (the caller commits)."""
    return add_dataset_row(
        uow,
        write_training(artifacts, dataset, max_buckets),
        name=name,
        source=source,
        fmt=fmt,
        num_rows=len(dataset),
        num_classes=dataset.num_classes,
        feature_shape=list(dataset.feature_shape),
        class_names=list(dataset.class_names) if dataset.class_names is not None else None,
    )


def add_dataset_row(
    uow: UnitOfWork,
    arrays: dict[str, Any],
    *,
    name: str,
    source: str,
    fmt: str,
    num_rows: int,
    num_classes: int,
    feature_shape: list[int],
    class_names: list[str] | None = None,
    **described: Any,
) -> DatasetRow:
    """The row for arrays already in the artifact store, their references and the ``dataset.created`` audit
    event (with ``described`` added to its payload); the caller commits."""
    row = uow.datasets.add(
        DatasetRow(
            name=printable(name)[:200] or "dataset",
            source=source,
            format=fmt,
            num_rows=num_rows,
            num_classes=num_classes,
            feature_shape=feature_shape,
            arrays=arrays,
            erased_rows=0,
            kind=str(arrays.get("kind", "table")),
            class_names=class_names,
        )
    )
    uow.refs.hold(dataset_holder(row.id), digests(arrays))
    uow.audit.append(
        SYSTEM_CHAIN,
        "dataset.created",
        payload={
            "dataset_id": row.id,
            "rows": num_rows,
            **described,
            "source": source,
            "format": fmt,
            "arrays_sha256": manifest_digest(arrays),
        },
    )
    return row
