"""/v1/models: registration, status, versions, weights, predictions, privacy budget; /v1/methods."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Response

from service.api.deps import READS_ONLY, ModelId, RuntimeDep
from service.errors import NotFound
from service.job_limits import JobLimits
from service.ledger.schemas import BudgetOut
from service.ledger.service import budget
from service.models import retirement, retraining, service
from service.models.schemas import (
    MethodList,
    ModelIn,
    ModelList,
    ModelOut,
    PredictIn,
    PredictOut,
    RetrainIn,
    VersionList,
    VersionOut,
)
from service.schemas import MAX_DB_INT, error_responses

router = APIRouter(tags=["models"])


@router.get(
    "/v1/methods", response_model=MethodList, summary="Unlearning methods and their default hyperparameters"
)
def list_methods() -> MethodList:
    return MethodList(methods=service.list_methods())


@router.post(
    "/v1/models",
    status_code=202,
    response_model=ModelOut,
    summary="Register a model; training runs as a worker job",
    responses=error_responses(409, 422),
)
def register_model(body: ModelIn, rt: RuntimeDep) -> ModelOut:
    with rt.uow() as uow:
        model = service.register(uow, rt.cache, body, JobLimits.of(rt.settings))
        uow.commit()
        return service.model_out(uow, model)


@router.get("/v1/models", response_model=ModelList, summary="List models")
def list_models(
    rt: RuntimeDep,
    after_id: Annotated[int | None, Query(ge=0, le=MAX_DB_INT)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> ModelList:
    with rt.snapshot() as uow:
        models = uow.models.list(after_id=after_id, limit=limit)
        return ModelList(
            models=[service.model_out(uow, m) for m in models],
            next_after_id=models[-1].id if len(models) == limit else None,
        )


@router.get(
    "/v1/models/{model_id}",
    response_model=ModelOut,
    summary="Model status and configuration",
    responses=error_responses(404),
)
def get_model(model_id: ModelId, rt: RuntimeDep) -> ModelOut:
    with rt.snapshot() as uow:
        return service.model_out(uow, service.get_model(uow, model_id))


@router.delete(
    "/v1/models/{model_id}",
    response_model=ModelOut,
    summary="Delete a model: its training data, vectors and weights go; its history stays",
    description=(
        "Erases every copy of the model's data (training arrays and statistics in the artifact store and "
        "Redis, the weights of every version, its sample rows) and completes the deletion requests still "
        "waiting on it. Its versions, certificates, ledger and audit log stay readable; predictions, "
        "weights and new deletions answer 410. Deleting it again answers the same. The dataset keeps "
        "its own arrays."
    ),
    responses=error_responses(404),
)
def delete_model(model_id: ModelId, rt: RuntimeDep) -> ModelOut:
    retirement.delete_model(rt, model_id)
    with rt.uow() as uow:
        return service.model_out(uow, service.get_model(uow, model_id))


@router.post(
    "/v1/models/{model_id}/retrain",
    status_code=202,
    response_model=ModelOut,
    summary="Retrain on the remaining data now: a retrained version and a new budget epoch",
    description=(
        "Schedules the retrain the service otherwise runs when the budget runs out: the model fits again "
        "on its remaining data (without the subjects of every deletion still queued, which it completes), "
        "releases a `retrained` version and starts a new budget epoch. The reason goes to the ledger "
        "(`GET .../budget`, `retrains`) and the audit log. The model's status is `retraining` until the "
        "new version serves (the current one serves meanwhile; deletions submitted meanwhile wait for the "
        "retrain and are excluded by it). 409 while it is training, retraining or failed, or has no "
        "data left; asking again while it retrains answers 409 `already_retraining`."
    ),
    responses=error_responses(404, 409, 410),
)
def retrain_model(model_id: ModelId, rt: RuntimeDep, body: RetrainIn | None = None) -> ModelOut:
    reason = body.reason if body is not None and body.reason else retraining.DEFAULT_REASON
    with rt.uow() as uow:
        model = retraining.request_retrain(uow, model_id, reason)
        uow.commit()
        return service.model_out(uow, model)


@router.get(
    "/v1/models/{model_id}/versions",
    response_model=VersionList,
    summary="Version lineage",
    responses=error_responses(404),
)
def list_versions(
    model_id: ModelId,
    rt: RuntimeDep,
    after_seq: Annotated[int | None, Query(ge=0, le=MAX_DB_INT)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
) -> VersionList:
    with rt.snapshot() as uow:
        service.get_model(uow, model_id)
        versions = uow.models.versions(model_id, after_seq=after_seq, limit=limit)
        parents = uow.models.seqs_of(v.parent_id for v in versions if v.parent_id) if after_seq else {}
    out = service.versions_out(versions)
    if parents:  # a page that starts mid-chain still names each version's parent
        for v_out, v in zip(out, versions):
            v_out.parent_seq = parents.get(v.parent_id) if v.parent_id else None
    next_after_seq = versions[-1].seq if len(versions) == limit else None
    return VersionList(model_id=model_id, versions=out, next_after_seq=next_after_seq)


@router.get(
    "/v1/models/{model_id}/versions/{seq}",
    response_model=VersionOut,
    summary="One version and its certificate",
    responses=error_responses(404),
)
def get_version(
    model_id: ModelId, seq: Annotated[int, Path(ge=1, le=MAX_DB_INT)], rt: RuntimeDep
) -> VersionOut:
    with rt.snapshot() as uow:
        service.get_model(uow, model_id)
        version = uow.models.version_by_seq(model_id, seq)
        if version is None:
            raise NotFound(f"model {model_id} has no version {seq}")
        parent = uow.models.version(version.parent_id) if version.parent_id else None
        return service.version_out(version, parent.seq if parent else None)


@router.get(
    "/v1/models/{model_id}/weights",
    summary="Download the current version's weights (safetensors)",
    description=(
        "The `ETag` is the weights' SHA-256 (the version's `weights_sha256`). Send it back in "
        "`If-None-Match` to poll cheaply: 304 with no body while the served version's weights are the "
        "same, 200 with the new weights once a deletion or a retrain released others."
    ),
    response_class=Response,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "safetensors file"},
        304: {"description": "The served weights are the ones named in If-None-Match"},
        **error_responses(404, 409, 410),
    },
)
def download_weights(
    model_id: ModelId,
    rt: RuntimeDep,
    if_none_match: Annotated[
        str | None, Header(max_length=8192, description="ETags of weights the caller holds")
    ] = None,
) -> Response:
    with rt.snapshot() as uow:
        model = service.get_model(uow, model_id)
        version = service.current_version(uow, model)
        headers = {"X-Model-Version": str(version.seq), "ETag": f'"{version.released_sha256}"'}
        if if_none_match is not None and etag_matches(if_none_match, version.released_sha256):
            return Response(status_code=304, headers=headers)
        blob = service.released_weights(rt.artifacts, version)
    disposition = f'attachment; filename="model-{model_id}-v{version.seq}.safetensors"'
    return Response(
        content=blob,
        media_type="application/octet-stream",
        headers={**headers, "Content-Disposition": disposition},
    )


def etag_matches(if_none_match: str, digest: str) -> bool:
    """RFC 9110 section 13.1.2: ``*`` or any listed entity tag, compared weakly, names the current one."""
    tags = [tag.strip() for tag in if_none_match.split(",")]
    return any(tag == "*" or tag.removeprefix("W/") == f'"{digest}"' for tag in tags)


@router.post(
    "/v1/models/{model_id}/predictions",
    response_model=PredictOut,
    summary="Predict with the served version",
    responses=error_responses(404, 409, 410, 422),
    openapi_extra=READS_ONLY,  # changes nothing: a read token may predict
)
def predict(model_id: ModelId, body: PredictIn, rt: RuntimeDep) -> PredictOut:
    with rt.uow() as uow:
        model = service.get_model(uow, model_id)
        served = service.serving(uow, rt.hot, rt.cache, model)
        return service.predict(uow, rt.cache, model, served, body)


@router.get(
    "/v1/models/{model_id}/budget",
    response_model=BudgetOut,
    summary="Privacy budget and ledger",
    responses=error_responses(404),
)
def get_budget(model_id: ModelId, rt: RuntimeDep) -> BudgetOut:
    with rt.snapshot() as uow:
        return budget(uow, service.get_model(uow, model_id))
