"""The privacy budget of a model, read from the append-only ledger."""

from __future__ import annotations

from service.db.tables import Model
from service.ledger.schemas import BudgetOut, LedgerEntryOut, RetrainOut
from service.uow import UnitOfWork

_ROW_FIELDS = ("budget_epoch", "kind", "version_seq", "charge", "spent", "deletions", "reason")


def budget(uow: UnitOfWork, model: Model) -> BudgetOut:
    entries = uow.ledger.entries(model.id)
    current = entries[-1] if entries else None
    return BudgetOut(
        model_id=model.id,
        budget_epoch=model.budget_epoch,
        unit=current.budget_unit if current else None,
        cap=current.budget_cap if current else None,
        spent=current.spent if current else None,
        remaining=max(current.budget_cap - current.spent, 0.0) if current else None,
        release_mode=model.release_mode,
        charges=[
            LedgerEntryOut(**{k: getattr(e, k) for k in _ROW_FIELDS}, cap=e.budget_cap, at=e.created_at)
            for e in entries
        ],
        retrains=[
            RetrainOut(
                budget_epoch=e.budget_epoch, version_seq=e.version_seq, reason=e.reason, at=e.created_at
            )
            for e in entries
            if e.kind == "retrain"
        ],
    )
