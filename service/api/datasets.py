"""/v1/datasets: uploads (streamed, size-limited) and bundled datasets."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.requests import ClientDisconnect
from starlette.types import Message, Receive

from service.api.deps import DatasetId, RuntimeDep
from service.datasets import deletion, service
from service.datasets.schemas import BUNDLED, BundledDatasetIn, BundledList, DatasetList, DatasetOut
from service.db.tables import Dataset as DatasetRow
from service.errors import BadRequest, NotFound, PayloadTooLarge, Unprocessable, UnsupportedMediaType
from service.graphs import upload as graphs
from service.runtime import Runtime
from service.schemas import MAX_DB_INT, error_responses
from service.storage.refs import rewrite_if_collected

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])

_COLUMN = r"^[^\x00-\x1f\x7f]{1,200}$"
_MULTIPART_OVERHEAD = 64 * 1024  # boundaries and part headers around the file
_RAW_TYPES = (
    "text/csv",
    "application/csv",
    "application/octet-stream",
    "application/x-npz",
    "application/zip",
    "application/vnd.apache.parquet",
    "application/x-parquet",
    "application/gzip",
)

_UPLOAD_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file"],
                "properties": {
                    "file": {"type": "string", "format": "binary", "description": "the table or graph"}
                },
            }
        },
        "text/csv": {"schema": {"type": "string", "format": "binary"}},
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
    },
}


def _out(row: DatasetRow) -> DatasetOut:
    shown = DatasetOut.model_validate(row, from_attributes=True)
    return shown.model_copy(update={**graphs.out_fields(row.arrays), "kind": row.kind})


def _limited(receive: Receive, limit: int) -> Receive:
    """``receive`` that raises 413 once the body passes ``limit`` bytes, as the upload streams."""
    seen = 0

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise PayloadTooLarge(f"the upload is larger than {limit} bytes (LETHE_MAX_UPLOAD_BYTES)")
        return message

    return wrapped


async def _receive_file(request: Request, target: Path, limit: int) -> tuple[str | None, str | None]:
    """Stream the uploaded file to ``target``; returns (file name, content type)."""
    content_type = request.headers.get("content-type", "")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit + _MULTIPART_OVERHEAD:
        raise PayloadTooLarge(
            f"the upload is {declared} bytes, above the limit of {limit} (LETHE_MAX_UPLOAD_BYTES)"
        )
    try:
        if content_type.startswith("multipart/form-data"):
            limited = Request(request.scope, _limited(request.receive, limit + _MULTIPART_OVERHEAD))
            form = await limited.form(max_files=1, max_fields=10)
            part = form.get("file")
            if not isinstance(part, UploadFile):
                raise BadRequest("the multipart body needs a file part named 'file'", code="file_missing")
            size = 0
            with target.open("wb") as out:
                while chunk := await part.read(1 << 20):
                    size += len(chunk)
                    if size > limit:
                        raise PayloadTooLarge(
                            f"the file is larger than {limit} bytes (LETHE_MAX_UPLOAD_BYTES)"
                        )
                    out.write(chunk)
            return part.filename, part.content_type
        kind = content_type.split(";")[0].strip().lower()
        if kind and kind not in _RAW_TYPES:
            raise UnsupportedMediaType(
                f"content type {kind!r} is not an upload: send multipart/form-data with a 'file' part, or the raw "
                f"file as one of {', '.join(_RAW_TYPES)}"
            )
        size = 0
        with target.open("wb") as out:
            async for chunk in Request(request.scope, _limited(request.receive, limit)).stream():
                size += len(chunk)
                out.write(chunk)
        if size == 0:
            raise BadRequest("the request body is empty: send the file", code="file_missing")
        return None, kind or None
    except ClientDisconnect:
        raise BadRequest(
            "the client disconnected before the upload finished", code="upload_incomplete"
        ) from None
    except (ValueError, KeyError) as exc:  # malformed multipart framing
        raise BadRequest(
            f"the multipart body could not be parsed: {exc}", code="malformed_multipart"
        ) from exc


def _csv_list(value: str | None, what: str) -> list[str] | None:
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise Unprocessable(f"{what} is empty: give comma-separated names", code="invalid_parameter")
    return items


def _shape(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not re.fullmatch(r"\s*\d{1,6}(\s*,\s*\d{1,6}){0,3}\s*", value) or any(
        int(v) < 1 for v in value.split(",")
    ):
        raise Unprocessable(
            f"feature_shape {value!r} must be 1 to 4 positive integers separated by commas, e.g. 1,28,28",
            code="invalid_parameter",
        )
    return tuple(int(v) for v in value.split(","))


def _store(rt: Runtime, job: str, store: Callable[..., DatasetRow], data: Any, **fields: Any) -> DatasetOut:
    """``store(uow, artifacts, data, **fields)``, committed (rewritten if its blobs were collected)."""

    def attempt() -> DatasetRow:
        with rt.uow() as uow:
            row = store(uow, rt.artifacts, data, **fields)
            uow.commit()
            return row

    return _out(rewrite_if_collected(attempt, job=job))


@router.post(
    "",
    status_code=201,
    response_model=DatasetOut,
    summary="Upload a dataset (CSV, CSV.gz, NPZ or Parquet; graphs: JSON, NPZ or TU text)",
    openapi_extra={"requestBody": _UPLOAD_BODY},
    responses=error_responses(400, 413, 415, 422),
)
async def upload_dataset(
    request: Request,
    rt: RuntimeDep,
    name: Annotated[
        str | None, Query(pattern=_COLUMN, description="Dataset name; default: the file name")
    ] = None,
    format: Annotated[
        Literal["csv", "npz", "parquet", "json", "tu"] | None,
        Query(description="Default: from the file name (.json: a node graph); tu: a graph collection"),
    ] = None,
    id_column: Annotated[str, Query(pattern=_COLUMN)] = "sample_id",
    owner_column: Annotated[str, Query(pattern=_COLUMN)] = "owner_id",
    label_column: Annotated[str, Query(pattern=_COLUMN)] = "label",
    feature_columns: Annotated[
        str | None, Query(max_length=100_000, description="Comma-separated; default: all other columns")
    ] = None,
    feature_shape: Annotated[
        str | None, Query(max_length=40, description="Per-row shape, e.g. 1,28,28")
    ] = None,
    num_classes: Annotated[int | None, Query(ge=2, le=100_000)] = None,
    label_offset: Annotated[
        int | None, Query(ge=-1_000_000, le=1_000_000, description="Subtracted from integer labels")
    ] = None,
) -> DatasetOut:
    """Columns: a sample id, an owner id, a label, and numeric features (every other column unless
    ``feature_columns`` names them). NPZ: arrays ``features``, ``labels`` and optionally ``sample_ids``,
    ``owner_ids`` (unicode), ``num_classes``; never unpickled. The body is streamed to disk and cut off at
    ``LETHE_MAX_UPLOAD_BYTES`` (413).

    Graphs (docs/service.md): ``json`` one node-classification graph (``lethe.node_graph.v1``); ``npz`` the
    arrays of ``unlearning.data.graphs.codecs.save_npz`` (told apart from a table by its ``format`` entry); ``tu`` a graph
    collection in the text format of IMDB-BINARY / PROTEINS (plain or gzip; pass ``format=tu``). The column
    parameters do not apply to graphs."""
    options = service.UploadOptions(
        name=name,
        format=format,
        id_column=id_column,
        owner_column=owner_column,
        label_column=label_column,
        feature_columns=_csv_list(feature_columns, "feature_columns"),
        feature_shape=_shape(feature_shape),
        num_classes=num_classes,
        label_offset=label_offset,
    )
    with tempfile.TemporaryDirectory(prefix="lethe-upload-") as tmp:
        path = Path(tmp) / "upload"
        filename, content_type = await _receive_file(request, path, rt.settings.max_upload_bytes)
        graph_fmt = graphs.detect(format, filename)  # graph uploads (service.graphs)
        fmt = graph_fmt or service.detect_format(format, filename, content_type)
        # the file name, the default dataset name, loses its control characters (?name= with one is a 422)
        shown = service.printable(Path(filename).name) if filename else ""
        shown = shown or f"upload.{fmt}"
        if graph_fmt or (fmt == "npz" and graphs.is_graph_npz(path)):
            limits = service.read_limits(rt.settings)
            graph = await run_in_threadpool(graphs.parse, path, fmt, shown, name, limits)
            return await run_in_threadpool(
                _store, rt, "upload_graph", graphs.store, graph, source="upload", fmt=fmt, name=graph.name
            )
        dataset = await run_in_threadpool(
            service.parse_upload, path, fmt, shown, options, service.read_limits(rt.settings)
        )
    fields = {"name": dataset.name, "max_buckets": rt.settings.max_buckets}
    return await run_in_threadpool(
        _store, rt, "upload_dataset", service.store, dataset, source="upload", fmt=fmt, **fields
    )


@router.get("/bundled", response_model=BundledList, summary="Names of the bundled datasets")
def bundled_names() -> BundledList:
    return BundledList(names=list(BUNDLED))


@router.post(
    "/bundled",
    status_code=201,
    response_model=DatasetOut,
    summary="Create a dataset from a bundled one",
    responses=error_responses(404, 422),
)
def create_bundled(body: BundledDatasetIn, rt: RuntimeDep) -> DatasetOut:
    if body.name in graphs.BUNDLED:  # cora, imdb-binary, proteins (service.graphs)
        graph = graphs.load_bundled(body.name, body.n, body.seed, body.samples_per_owner)
        name = body.display_name or graph.name
        return _store(rt, "upload_graph", graphs.store, graph, source="bundled", fmt="bundled", name=name)
    dataset = service.load_bundled(body)
    fields = {"name": body.display_name or dataset.name, "max_buckets": rt.settings.max_buckets}
    return _store(rt, "upload_dataset", service.store, dataset, source="bundled", fmt="bundled", **fields)


@router.get("", response_model=DatasetList, summary="List datasets")
def list_datasets(
    rt: RuntimeDep,
    after_id: Annotated[int | None, Query(ge=0, le=MAX_DB_INT)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> DatasetList:
    with rt.uow() as uow:
        rows = uow.datasets.list(after_id=after_id, limit=limit)
    return DatasetList(
        datasets=[_out(r) for r in rows], next_after_id=rows[-1].id if len(rows) == limit else None
    )


@router.delete(
    "/{dataset_id}",
    response_model=DatasetOut,
    summary="Delete a dataset: its rows go from the artifact store; its record stays",
    description=(
        "Only a dataset no live model uses (delete those first: DELETE /v1/models/{id}); otherwise 409. "
        "Deleting it again answers the same."
    ),
    responses=error_responses(404, 409),
)
def delete_dataset(dataset_id: DatasetId, rt: RuntimeDep) -> DatasetOut:
    deletion.delete_dataset(rt, dataset_id)
    with rt.uow() as uow:
        row = uow.datasets.get(dataset_id)
    assert row is not None
    return _out(row)


@router.get(
    "/{dataset_id}", response_model=DatasetOut, summary="Get a dataset", responses=error_responses(404)
)
def get_dataset(dataset_id: DatasetId, rt: RuntimeDep) -> DatasetOut:
    with rt.uow() as uow:
        row = uow.datasets.get(dataset_id)
    if row is None:
        raise NotFound(f"dataset {dataset_id} does not exist")
    return _out(row)
