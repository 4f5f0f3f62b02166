"""Deletion requests: submit (single and bulk, with Idempotency-Key), follow, cancel."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from service.api.deps import DatasetId, ModelId, RequestId, RuntimeDep
from service.callback_targets import literal_problem
from service.datasets import erasure
from service.deletions import service
from service.deletions.schemas import (
    BulkIn,
    BulkOut,
    DatasetDeletionOut,
    DeletionAccepted,
    DeletionIn,
    DeletionList,
    DeletionOut,
)
from service.errors import Unprocessable
from service.idempotency import service as idempotency
from service.models.service import get_model
from service.runtime import Runtime
from service.schemas import MAX_DB_INT, error_responses
from service.states import RequestState

router = APIRouter(tags=["deletions"])

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Required. A unique value per deletion (e.g. a UUID); send the same value to retry safely.",
    ),
]


def _check_callbacks(rt: Runtime, *bodies: DeletionIn) -> None:
    """422 ``callback_not_allowed`` for a callback URL callbacks may not reach (naming the bulk item)."""
    for i, body in enumerate(bodies):
        if body.callback_url is None:
            continue
        problem = literal_problem(str(body.callback_url), rt.settings.callback_networks)
        if problem is not None:
            where = f"items[{i}]: " if len(bodies) > 1 else ""
            raise Unprocessable(where + problem, code="callback_not_allowed")


def _respond(outcome: idempotency.Outcome) -> JSONResponse:
    headers = {"Idempotent-Replayed": "true"} if outcome.replayed else {}
    return JSONResponse(outcome.body, status_code=outcome.status, headers=headers)


@router.post(
    "/v1/models/{model_id}/deletions",
    status_code=202,
    response_model=DeletionAccepted,
    summary="Forget an owner (all their samples) or sample ids",
    responses=error_responses(400, 404, 409, 410, 422),
)
async def submit_deletion(
    model_id: ModelId, body: DeletionIn, rt: RuntimeDep, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    """Answers 202 with the request id and ``expected_by``. Same Idempotency-Key and body: the original
    response again (header ``Idempotent-Replayed: true``); same key with another body: 422; the first
    request with the key still in flight: 409; no key: 400. Graph models also take ``edges``,
    ``node_feature_ids``, ``graph_ids`` and ``graph_nodes``, checked against the remaining graph."""
    _check_callbacks(rt, body)
    return _respond(await rt.deletion_intake().submit(model_id, idempotency_key, body))


@router.post(
    "/v1/models/{model_id}/deletions/bulk",
    status_code=202,
    response_model=BulkOut,
    summary="Submit many deletions; success or failure is reported per item",
    responses={
        207: {"model": BulkOut, "description": "Some items were rejected"},
        **error_responses(400, 404, 409, 410, 422),
    },
)
async def submit_bulk(
    model_id: ModelId, body: BulkIn, rt: RuntimeDep, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    """Each item is accepted or rejected on its own (202 when all were accepted, 207 otherwise); one
    Idempotency-Key covers the whole submission."""
    _check_callbacks(rt, *body.items)
    return _respond(await rt.deletion_intake().submit(model_id, idempotency_key, body))


@router.post(
    "/v1/datasets/{dataset_id}/deletions",
    status_code=202,
    response_model=DatasetDeletionOut,
    summary="Forget a subject in every model trained on a dataset",
    responses={
        200: {"model": DatasetDeletionOut, "description": "No model uses the dataset: its rows were erased"},
        207: {"model": DatasetDeletionOut, "description": "Some models rejected the deletion"},
        **error_responses(400, 404, 409, 422),
    },
)
async def submit_dataset_deletion(
    dataset_id: DatasetId, body: DeletionIn, rt: RuntimeDep, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    """The same deletion submitted to every model registered on the dataset that takes deletions, one
    request per model (each applied by its model's updates, which also erase the rows from the
    dataset). Answers 202 when every model accepted it, 207 otherwise, with each model's outcome. The
    Idempotency-Key works per model: a retry with the same key and body replays each model's answer
    (and reaches a model registered on the dataset since; a model deleted since is left out). A key
    every model refuses (used before with another body: 422; first request still in flight: 409) is
    answered as such, not as a 207. No such model: the rows leave the dataset's
    stored arrays at once, and the answer is 200 with ``erased_rows`` (tables only; a graph dataset
    without a model answers 422)."""
    _check_callbacks(rt, body)
    key = idempotency.check_key(idempotency_key)

    def models() -> list[int]:
        with rt.uow() as uow:
            return service.fan_out_models(uow, dataset_id)

    targets = await run_in_threadpool(models)
    if not targets:
        return _respond(await run_in_threadpool(erasure.erase_subjects, rt, dataset_id, key, body))
    intake = rt.deletion_intake()
    answers = await asyncio.gather(
        *(intake.submit(model_id, key, body) for model_id in targets), return_exceptions=True
    )
    outcomes = [service.as_outcome(answer) for answer in answers]
    if (refused := service.key_misuse(outcomes)) is not None:
        return _respond(refused)
    status, report = service.fan_out_report(dataset_id, targets, outcomes)
    return _respond(idempotency.Outcome(status, report, replayed=all(o.replayed for o in outcomes)))


@router.get(
    "/v1/models/{model_id}/deletions",
    response_model=DeletionList,
    summary="A model's deletion requests",
    responses=error_responses(404),
)
def list_deletions(
    model_id: ModelId,
    rt: RuntimeDep,
    state: RequestState | None = None,
    after_id: Annotated[int | None, Query(ge=0, le=MAX_DB_INT)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> DeletionList:
    with rt.snapshot() as uow:
        get_model(uow, model_id)
        rows = uow.deletions.list(model_id=model_id, state=state, after_id=after_id, limit=limit)
        events = uow.deletions.events_for([r.id for r in rows])
        return DeletionList(
            deletions=[service.request_out(uow, r, events[r.id]) for r in rows],
            next_after_id=rows[-1].id if len(rows) == limit else None,
        )


@router.get(
    "/v1/deletions/{request_id}",
    response_model=DeletionOut,
    summary="A deletion request: state history, the version that excludes it and its certificate",
    responses=error_responses(404),
)
def get_deletion(request_id: RequestId, rt: RuntimeDep) -> DeletionOut:
    with rt.snapshot() as uow:
        return service.request_out(uow, service.get_request(uow, request_id))


@router.post(
    "/v1/deletions/{request_id}/cancel",
    response_model=DeletionOut,
    summary="Cancel a deletion that is still waiting",
    responses=error_responses(404, 409),
)
def cancel_deletion(request_id: RequestId, rt: RuntimeDep) -> DeletionOut:
    with rt.uow() as uow:
        request = service.cancel(uow, request_id)
        uow.commit()
        return service.request_out(uow, request)
