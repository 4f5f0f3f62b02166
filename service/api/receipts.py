"""/v1/deletions/{id}/receipt and /v1/receipts/key: signed proof that a deletion was carried out."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import RequestId, RuntimeDep
from service.receipts import service
from service.receipts.schemas import ReceiptKeyOut, ReceiptKeysOut, ReceiptOut
from service.schemas import SubjectId, error_responses

router = APIRouter(tags=["receipts"])

_NAMED = 100  # plain ids a receipt may name


@router.get(
    "/v1/deletions/{request_id}/receipt",
    response_model=ReceiptOut,
    summary="A signed receipt of a completed deletion, for the data subject or an auditor",
    description=(
        "States that the request's subjects are out of the model: the version that excludes them (its "
        "weights' SHA-256 and the guarantee its certificate states), when, and the audit event that "
        "records it, signed with the service's Ed25519 key (`GET /v1/receipts/key`). Subjects appear as "
        "the keyed hashes of the audit log; name an owner or sample id the request covered (`owner_id`, "
        "`sample_id`, repeatable) and the receipt names it in plain too, so it can be handed to that "
        "person. Verify with `python -m service.receipts verify`, or any Ed25519 library over the "
        "receipt's canonical JSON (keys sorted, no whitespace, UTF-8). 409 `not_completed` before the "
        "request completes."
    ),
    responses=error_responses(404, 409, 422),
)
def deletion_receipt(
    request_id: RequestId,
    rt: RuntimeDep,
    owner_id: Annotated[list[SubjectId], Query(max_length=_NAMED, description="Owner ids to name")] = [],  # noqa: B006
    sample_id: Annotated[list[SubjectId], Query(max_length=_NAMED, description="Sample ids to name")] = [],  # noqa: B006
) -> ReceiptOut:
    with rt.snapshot() as uow:
        return service.issue(uow, rt.hasher, rt.receipts, request_id, owner_id, sample_id)


@router.get(
    "/v1/receipts/key",
    response_model=ReceiptKeyOut,
    summary="The public key that verifies deletion receipts",
    description=(
        "The key that signs new receipts. A receipt names its key (`key_id`); receipts signed before a "
        "rotation verify against a retired key of `GET /v1/receipts/keys`."
    ),
    responses=error_responses(409),
)
def receipt_key(rt: RuntimeDep) -> ReceiptKeyOut:
    return service.public_key(rt.receipts)


@router.get(
    "/v1/receipts/keys",
    response_model=ReceiptKeysOut,
    summary="Every public key a receipt of this deployment may name: the current one and retired ones",
    description=(
        "The current signing key (absent while receipts are off), then the keys that signed receipts "
        "before a rotation (`LETHE_RECEIPT_RETIRED_KEYS`), so that every receipt issued still verifies: "
        "pick the key whose `key_id` the receipt names."
    ),
)
def receipt_keys(rt: RuntimeDep) -> ReceiptKeysOut:
    return service.public_keys(rt.receipts, rt.retired_receipt_keys)
