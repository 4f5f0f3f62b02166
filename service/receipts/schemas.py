"""Receipt bodies: strings, integers or null (no floats), so the canonical form is the same anywhere."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

RECEIPT_TYPE: Literal["lethe.deletion-receipt"] = "lethe.deletion-receipt"


class ReceiptSubject(BaseModel):
    kind: str = Field(description="owner, sample, edge, features, graph or gnode")
    hash: str = Field(description="The subject's keyed hash, as the audit log names it")
    id: str | None = Field(
        None, description="The plain id, only when the caller named it and it matched the hash"
    )


class ReceiptVersion(BaseModel):
    seq: int
    kind: str = Field(description="unlearned or retrained")
    budget_epoch: int
    weights_sha256: str
    release_mode: str
    guarantee: str = Field(description="certified, empirical, exact or none (the version's certificate)")
    epsilon: str | None = Field(description="As text (null when the guarantee states none)")
    delta: str | None = Field(description="As text (null when the guarantee states none)")


class ReceiptAudit(BaseModel):
    chain: str
    seq: int
    event_type: str
    hash: str = Field(description="The event's hash in the chain (GET /v1/audit/verify recomputes it)")


class DeletionReceipt(BaseModel):
    """What the signature covers: the canonical form of this object."""

    type: Literal["lethe.deletion-receipt"] = RECEIPT_TYPE
    format: int = 1
    key_id: str
    issued_at: str
    request_id: int
    model_id: int
    received_at: str
    completed_at: str
    num_samples: int
    subjects: list[ReceiptSubject]
    version: ReceiptVersion | None = Field(
        description="The version that excludes the subjects; null when the model itself was deleted"
    )
    model_deleted: bool = Field(description="The request completed because the whole model was deleted")
    audit: ReceiptAudit | None = Field(description="The deletion.completed event of the audit log")


class ReceiptOut(BaseModel):
    receipt: DeletionReceipt
    algorithm: Literal["Ed25519"] = "Ed25519"
    key_id: str
    signature: str = Field(description="Ed25519 over the receipt's canonical JSON, base64url")


class ReceiptKeyOut(BaseModel):
    algorithm: Literal["Ed25519"] = "Ed25519"
    key_id: str
    public_key: str = Field(description="The raw 32-byte public key, base64url")
    public_key_pem: str
    status: Literal["current", "retired"] = Field(
        "current",
        description="`current` signs new receipts; a `retired` key signed receipts before a rotation",
    )


class ReceiptKeysOut(BaseModel):
    keys: list[ReceiptKeyOut] = Field(
        description="The current key first (if receipts are on), then retired ones"
    )
