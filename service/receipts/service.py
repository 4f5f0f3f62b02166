"""Issuing a deletion receipt: what a completed request did, the ids the caller names checked, signed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from service.db.base import utcnow
from service.db.tables import AuditEvent, DeletionRequest, ModelVersion
from service.deletions.service import get_request
from service.errors import Conflict, Unprocessable
from service.receipts.schemas import (
    DeletionReceipt,
    ReceiptAudit,
    ReceiptKeyOut,
    ReceiptKeysOut,
    ReceiptOut,
    ReceiptSubject,
    ReceiptVersion,
)
from service.signing import ReceiptSigner, b64url, key_id, public_key_pem
from service.states import RequestState
from service.subjects import SubjectHasher
from service.uow import UnitOfWork

COMPLETED_EVENT = "deletion.completed"


def require_signer(signer: ReceiptSigner | None) -> ReceiptSigner:
    if signer is None:
        raise Conflict(
            "this deployment issues no receipts: set LETHE_RECEIPT_SIGNING_KEY on every API process "
            "(`python -m service.receipts new-key` prints one)",
            code="receipts_not_configured",
        )
    return signer


def public_key(signer: ReceiptSigner | None) -> ReceiptKeyOut:
    return _key_out(require_signer(signer).public_key, "current")


def public_keys(signer: ReceiptSigner | None, retired: Sequence[bytes]) -> ReceiptKeysOut:
    """Every key a receipt may name: the current one (if receipts are on), then the retired ones."""
    current = [_key_out(signer.public_key, "current")] if signer is not None else []
    current_key = signer.public_key if signer is not None else None
    return ReceiptKeysOut(keys=current + [_key_out(k, "retired") for k in retired if k != current_key])


def _key_out(raw: bytes, status: Literal["current", "retired"]) -> ReceiptKeyOut:
    return ReceiptKeyOut(
        key_id=key_id(raw), public_key=b64url(raw), public_key_pem=public_key_pem(raw), status=status
    )


def issue(
    uow: UnitOfWork,
    hasher: SubjectHasher,
    signer: ReceiptSigner | None,
    request_id: int,
    owner_ids: Sequence[str] = (),
    sample_ids: Sequence[str] = (),
) -> ReceiptOut:
    """The signed receipt of a completed request, naming ``owner_ids``/``sample_ids`` (subjects, or 422)."""
    signer = require_signer(signer)
    request = get_request(uow, request_id)
    if request.state != RequestState.COMPLETED or request.completed_at is None:
        raise Conflict(
            f"deletion request {request_id} is {request.state}: a receipt is issued once it is completed",
            code="not_completed",
        )
    subjects = _subjects(uow, hasher, request, owner_ids, sample_ids)
    version = uow.models.version(request.version_id) if request.version_id is not None else None
    receipt = DeletionReceipt(
        key_id=signer.key_id,
        issued_at=_iso(utcnow()),
        request_id=request.id,
        model_id=request.model_id,
        received_at=_iso(request.created_at),
        completed_at=_iso(request.completed_at),
        num_samples=request.num_samples,
        subjects=subjects,
        version=_version(version) if version is not None else None,
        model_deleted=version is None,
        audit=_audit(uow, request.id),
    )
    return ReceiptOut(
        receipt=receipt, key_id=signer.key_id, signature=signer.sign(receipt.model_dump(mode="json"))
    )


def _subjects(
    uow: UnitOfWork,
    hasher: SubjectHasher,
    request: DeletionRequest,
    owner_ids: Sequence[str],
    sample_ids: Sequence[str],
) -> list[ReceiptSubject]:
    stored = {s.subject_hash: s.kind for s in uow.deletions.subjects(request.id)}
    named = {hasher.owner(o): o for o in owner_ids} | {hasher.sample(s): s for s in sample_ids}
    strangers = [plain for digest, plain in named.items() if digest not in stored]
    if strangers:
        raise Unprocessable(
            f"{', '.join(repr(s) for s in strangers[:5])} not among the subjects of deletion request "
            f"{request.id}: name only owner ids and sample ids the request named",
            code="not_a_subject",
        )
    return [
        ReceiptSubject(kind=kind, hash=digest, id=named.get(digest))
        for digest, kind in sorted(stored.items(), key=lambda item: (item[1], item[0]))
    ]


def _version(version: ModelVersion) -> ReceiptVersion:
    cert: dict[str, Any] = version.certificate
    return ReceiptVersion(
        seq=version.seq,
        kind=version.kind,
        budget_epoch=version.budget_epoch,
        weights_sha256=version.released_sha256,
        release_mode=str(cert.get("release_mode", "")),
        guarantee=str(cert.get("guarantee", "")),
        epsilon=_text(cert.get("epsilon")),
        delta=_text(cert.get("delta")),
    )


def _audit(uow: UnitOfWork, request_id: int) -> ReceiptAudit | None:
    events: list[AuditEvent] = uow.audit.query(request_id=request_id, event_type=COMPLETED_EVENT, limit=1)
    if not events:
        return None
    event = events[0]
    return ReceiptAudit(chain=event.chain, seq=event.chain_seq, event_type=event.event_type, hash=event.hash)


def _text(value: Any) -> str | None:
    return None if value is None else repr(value) if isinstance(value, float) else str(value)


def _iso(at: datetime) -> str:
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat().replace("+00:00", "Z")
