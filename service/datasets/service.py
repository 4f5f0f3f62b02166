"""Creating datasets from uploads and from the bundled sets."""

from __future__ import annotations

import dataclasses
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from service.audit.service import SYSTEM_CHAIN
from service.datasets.schemas import BundledDatasetIn
from service.db.tables import ID_LENGTH
from service.db.tables import Dataset as DatasetRow
from service.errors import NotFound, PayloadTooLarge, Unprocessable, UnsupportedMediaType
from service.graphs.storage import ERASED_PREFIX
from service.jobs.state import write_training
from service.jobs.versions import dataset_holder
from service.settings import Settings
from service.storage.artifacts import ArtifactStore
from service.storage.buckets import digests, manifest_digest
from service.uow import UnitOfWork
from unlearning.data import Dataset, load_mnist_idx, load_sklearn, load_table, make_synthetic, subsample
from unlearning.data.ids import InvalidIdError, normalize_id, shown_id
from unlearning.data.limits import Limit, ReadLimits, TooLargeError
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
LIMIT_SETTINGS = {  # the setting behind each read limit, named in its 413
    Limit.BYTES: "LETHE_MAX_DECOMPRESSED_BYTES",
    Limit.ROWS: "LETHE_MAX_UPLOAD_ROWS",
    Limit.CELLS: "LETHE_MAX_UPLOAD_CELLS",
}


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


def read_limits(settings: Settings) -> ReadLimits:
    """What an upload may hold once decompressed and parsed (bytes, rows, feature values, id length)."""
    return ReadLimits(
        max_bytes=settings.max_decompressed_bytes,
        max_rows=settings.max_upload_rows,
        max_cells=settings.max_upload_cells,
        max_text_chars=ID_LENGTH,
    )


def too_large(exc: TooLargeError, source: str, filename: str) -> PayloadTooLarge:
    """The 413 for a core-library :class:`TooLargeError`, naming the upload and the setting to raise."""
    return PayloadTooLarge(f"{str(exc).replace(source, filename)} ({LIMIT_SETTINGS[exc.limit]})")


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
    return _CONTROL.sub("", name)


def usable_id(value: str) -> tuple[str, str | None]:
    """``value`` as stored (NFC), and why it cannot be an uploaded id (None: it can; ``SubjectId`` rules)."""
    try:
        value = normalize_id(value)
    except InvalidIdError as exc:
        return value, exc.problem
    if not value:
        return value, "ids may not be empty"
    if len(value) > ID_LENGTH:
        return value, f"ids are at most {ID_LENGTH} characters, this one has {len(value)}"
    if value.startswith(ERASED_PREFIX):
        return value, f"ids may not start with {ERASED_PREFIX!r}, reserved for erased items"
    return value, None


def checked_id(value: str, what: str, where: str, row: int | None = None) -> str:
    """``value`` in NFC, or a 422 naming where it is (``row``: 0-based), the id and why it is unusable."""
    normalized, problem = usable_id(value)
    if problem is not None:
        at = where if row is None else f"{where}, row {row} (0-based)"
        raise Unprocessable(
            f"{at}: {what} {shown_id(value)} is not usable: {problem}. Deletion requests name subjects by "
            "these ids: fix them in the file",
            code="invalid_dataset",
        )
    return normalized


def normalized_table_ids(dataset: Dataset, fmt: str, filename: str, options: UploadOptions) -> Dataset:
    """The dataset with its ids in Unicode NFC; a 422 naming the first unusable (or duplicated) one."""
    if fmt == "npz":
        sample_col, owner_col = "array 'sample_ids'", "array 'owner_ids'"
    else:
        sample_col, owner_col = f"column {options.id_column!r}", f"column {options.owner_column!r}"
    sample_at, owner_at = f"{filename}: {sample_col}", f"{filename}: {owner_col}"
    samples = tuple(checked_id(v, "sample id", sample_at, i) for i, v in enumerate(dataset.sample_ids))
    owners = tuple(checked_id(v, "owner id", owner_at, i) for i, v in enumerate(dataset.owner_ids))
    if samples == dataset.sample_ids and owners == dataset.owner_ids:
        return dataset
    first: dict[str, int] = {}
    for row, value in enumerate(samples):
        if value in first:
            raise Unprocessable(
                f"{sample_at}, rows {first[value]} and {row} (0-based): sample ids "
                f"{shown_id(dataset.sample_ids[first[value]])} and {shown_id(dataset.sample_ids[row])} are "
                "the same id once normalised to Unicode NFC (ids are compared in that form): make them "
                "distinct",
                code="invalid_dataset",
            )
        first[value] = row
    return dataclasses.replace(dataset, sample_ids=samples, owner_ids=owners)


def parse_upload(path: Path, fmt: str, filename: str, options: UploadOptions, limits: ReadLimits) -> Dataset:
    """The uploaded file, validated, its ids normalised: a 413 past ``limits``, a 422 when malformed."""
    if fmt not in FORMATS:
        raise UnsupportedMediaType(f"format {fmt!r} is not supported: use csv, npz or parquet")
    target = path.with_suffix("." + fmt)  # the loader tells the format by the suffix, gzip by the content
    if target != path:
        shutil.move(path, target)
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
            limits=limits,
        )
    except TooLargeError as exc:
        raise too_large(exc, str(target), filename) from exc
    except UnlearningError as exc:
        raise Unprocessable(str(exc).replace(str(target), filename), code="invalid_dataset") from exc
    except (ValueError, TypeError, OSError) as exc:  # e.g. numpy refusing a malformed array
        raise Unprocessable(f"{filename}: could not read the file: {exc}", code="invalid_dataset") from exc
    return reshape(normalized_table_ids(dataset, fmt, filename, options), options.feature_shape)


def reshape(dataset: Dataset, shape: tuple[int, ...] | None) -> Dataset:
    if shape is None or tuple(shape) == dataset.feature_shape:
        return dataset
    if int(np.prod(shape)) != dataset.num_features:
        raise Unprocessable(
            f"feature_shape {list(shape)} holds {int(np.prod(shape))} values but each row has "
            f"{dataset.num_features} features",
            code="invalid_dataset",
        )
    return dataclasses.replace(dataset, features=dataset.features.reshape(len(dataset), *shape))


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
    return dataclasses.replace(dataset, owner_ids=owners)


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
    """Add the row, references and ``dataset.created`` event for stored arrays; the caller commits."""
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
