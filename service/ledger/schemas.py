"""Privacy budget bodies."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class LedgerEntryOut(BaseModel):
    budget_epoch: int
    kind: str
    version_seq: int | None
    charge: float
    spent: float
    cap: float
    deletions: int
    reason: str | None
    at: datetime


class RetrainOut(BaseModel):
    budget_epoch: int
    version_seq: int | None
    reason: str | None
    at: datetime


class BudgetOut(BaseModel):
    model_id: int
    budget_epoch: int
    unit: str | None
    cap: float | None
    spent: float | None
    remaining: float | None
    release_mode: str
    charges: list[LedgerEntryOut]
    retrains: list[RetrainOut]
