"""Audit log bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel


class AuditEventOut(BaseModel):
    id: int
    chain: str
    seq: int
    at: datetime
    type: str
    model_id: int | None
    request_id: int | None
    version_id: int | None
    payload: dict[str, Any]
    prev_hash: str
    hash: str

    # the names verification reads (service.audit.service.rehash), as of a stored event
    @property
    def chain_seq(self) -> int:
        return self.seq

    @property
    def event_type(self) -> str:
        return self.type


class AuditPage(BaseModel):
    events: list[AuditEventOut]
    next_after_id: int | None


class ChainOut(BaseModel):
    chain: str
    events: int
    head_seq: int
    head_hash: str
    ok: bool
    problem: str | None
    first_bad_seq: int | None


class VerifyOut(BaseModel):
    ok: bool
    chains: list[ChainOut]
